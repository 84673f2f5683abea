"""Turning arbitrary strings (names from model files) into safe identifiers."""
from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def sanitize_identifier(name: str, prefix: str = "v") -> str:
    """A C/Python-safe identifier derived from `name`: unsafe characters become '_', and a
    leading digit or an empty result gets `prefix`. Not injective; callers that need unique
    names must deduplicate (see UniqueNamer)."""
    cleaned = _UNSAFE.sub("_", name)
    if not cleaned or cleaned[0].isdigit():
        cleaned = f"{prefix}_{cleaned}"
    return cleaned


class UniqueNamer:
    """Hands out names that are unique within one scope, deterministically."""

    def __init__(self) -> None:
        self._taken: set[str] = set()
        # base -> the suffix to try first: every smaller one is taken (names are never
        # released), so the answer is the same as counting from 1, in constant time.
        self._next: dict[str, int] = {}

    def reserve(self, name: str) -> None:
        self._taken.add(name)

    def is_taken(self, name: str) -> bool:
        return name in self._taken

    def unique(self, base: str) -> str:
        if base not in self._taken:
            self._taken.add(base)
            return base
        i = self._next.get(base, 1)
        while f"{base}_{i}" in self._taken:
            i += 1
        name = f"{base}_{i}"
        self._taken.add(name)
        self._next[base] = i + 1
        return name
