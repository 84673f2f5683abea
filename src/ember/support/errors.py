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


class ModelImportError(EmberError):
    """A model that cannot be read or converted into Ember's graph IR (a missing or malformed
    file, an invalid node, an input that must be a constant...). Every failure of a frontend's
    import is one; those caused by something Ember does not support are UnsupportedOpErrors."""


class UnsupportedError(EmberError):
    """A feature Ember does not implement yet; the message says which."""


class UnsupportedOpError(ModelImportError, UnsupportedError):
    """An import refused because the model uses what Ember does not support: an op (unknown,
    in another domain or outside its supported opsets) or a form of one (an attribute value,
    a mode, an element type, an output that is used), or a model-level feature (an opset,
    sparse initializers, non-tensor inputs). Both `except ModelImportError` and
    `except UnsupportedError` catch it; the message names the node, op type and reason."""


class EmberWarning(UserWarning):
    """Something in a model that Ember tolerates and overrides, said once at import (for
    example a declared output shape that contradicts Ember's own shape inference, which is
    authoritative, as in ONNX Runtime)."""


class InputError(EmberError):
    """Wrong inputs given at run time (missing, unknown, wrong shape or dtype)."""


class QueueFullError(EmberError):
    """A run refused because the model already has as many requests running and waiting as
    its limits allow (CompiledModel.limit_queue); retry later or raise the limit."""


def node_location(name: str, op: str) -> str:
    """How errors name a node: its op type and its name."""
    return f"node '{name}' ({op})"
