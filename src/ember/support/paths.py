"""Where Ember keeps files between runs: one user cache folder for compiled libraries and
generated test data ($EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else ~/.cache/ember)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("EMBER_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ember"
