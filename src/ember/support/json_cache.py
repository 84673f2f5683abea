"""Small JSON files of measurements in the user cache folder (the ISA Mapper's and the
kernels' tuning caches): read whole, written whole by an atomic rename, so two processes
tuning at once each leave a readable file."""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def load_json_cache(path: Path) -> dict:
    """The file's object; empty where there is none yet or it cannot be read (then whatever
    it held is measured again)."""
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def update_json_cache(path: Path, update: Callable[[dict], None]) -> None:
    """Reads the file, lets `update` change the object in place, writes it back whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load_json_cache(path)
    update(data)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(temporary, path)  # whole or not at all, if two processes tune at once
