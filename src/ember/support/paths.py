"""Where Ember keeps files between runs: one user cache folder for compiled libraries and
generated test data ($EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else ~/.cache/ember, else
(no usable home) a folder of this user's in the temporary directory)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("EMBER_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "ember"
    home = os.environ.get("HOME", "")
    if not home:  # HOME="" or unset: not "/.cache", which would be shared
        try:
            home = str(Path.home())
        except RuntimeError:
            home = ""
    if not home or not os.path.isabs(home) or home == "/":
        user = os.getuid() if hasattr(os, "getuid") else "user"
        return Path(tempfile.gettempdir()) / f"ember-cache-{user}"
    return Path(home) / ".cache" / "ember"
