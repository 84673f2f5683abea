"""The portable kernel library shipped in codegen/runtime/: its file names and texts.

The cpu backend compiles these once per machine; bundles copy them. Imports nothing from
Ember."""
from __future__ import annotations

from importlib import resources

RUNTIME_SOURCES = ("ember_gemm.h", "ember_math.h", "ember_simd.h", "ember_gemm.c", "ember_conv.c", "ember_depthwise.c",
                   "ember_winograd.c")


def runtime_source(name: str) -> str:
    """The text of one file of the portable kernel library."""
    return resources.files("ember.codegen.runtime").joinpath(name).read_text()
