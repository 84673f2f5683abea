"""Ember's error types. Every error a user can trigger is an EmberError that names where it
happened (node name, op type, input name) and why. Imports only the standard library."""
from __future__ import annotations


class EmberError(Exception):
    """Base of every error Ember raises on purpose."""


class ParseError(EmberError):
    """Text IR that does not parse; carries the line number."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


class VerificationError(EmberError):
    """An IR that breaks an invariant (types, operands, ordering)."""


class ImportError_(EmberError):
    """A model file that cannot be read or converted (named with a trailing underscore so it
    does not shadow the builtin ImportError)."""


class UnsupportedError(EmberError):
    """A feature Ember does not implement yet; the message says which."""


class InputError(EmberError):
    """Wrong inputs given at run time (missing, unknown, wrong shape or dtype)."""


def node_location(name: str, op: str) -> str:
    """How errors name a node: its op type and its name."""
    return f"node '{name}' ({op})"
