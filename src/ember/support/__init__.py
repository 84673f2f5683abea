"""Layer 0: errors with locations and small utilities. Imports only the standard library."""
from ember.support.errors import (
    EmberError,
    InputError,
    ModelImportError,
    ParseError,
    UnsupportedError,
    UnsupportedOpError,
    VerificationError,
)

__all__ = [
    "EmberError",
    "InputError",
    "ModelImportError",
    "ParseError",
    "UnsupportedError",
    "UnsupportedOpError",
    "VerificationError",
]
