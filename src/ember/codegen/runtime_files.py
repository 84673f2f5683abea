"""The portable kernel library shipped in codegen/runtime/: its file names and texts.

The cpu backend compiles these once per machine; bundles copy them. All are files of
codegen/runtime/ except `ember_config.h`, which is generated from codegen/c_constants.py
(the constants Python and C share)."""
from __future__ import annotations

from importlib import resources

from ember.codegen.c_constants import config_header

CONFIG_HEADER = "ember_config.h"
RUNTIME_SOURCES = (CONFIG_HEADER, "ember_gemm.h", "ember_math.h", "ember_simd.h", "ember_gemm.c", "ember_conv.c",
                   "ember_depthwise.c", "ember_winograd.c")


def runtime_source(name: str) -> str:
    """The text of one file of the portable kernel library."""
    if name == CONFIG_HEADER:
        return config_header()
    return resources.files("ember.codegen.runtime").joinpath(name).read_text()
