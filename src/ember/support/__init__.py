"""Layer 0: errors with locations and small utilities. Imports only the standard library."""
from ember.support.errors import (
    EmberError,
    ImportError_,
    InputError,
    ParseError,
    UnsupportedError,
    VerificationError,
)

__all__ = [
    "EmberError",
    "ImportError_",
    "InputError",
    "ParseError",
    "UnsupportedError",
    "VerificationError",
]
