"""The portable kernel library shipped in codegen/runtime/: its file names and texts, and the
manifest of what each .c file exports.

The cpu backend compiles these once per machine (in pieces, see PIECES), and links into a
model's library only the files its C names; bundles copy them. All are files of
codegen/runtime/ except `ember_config.h`, which is generated from codegen/c_constants.py
(the constants Python and C share).

The manifest is declared, not parsed: `EXPORTS` names every function with external linkage
the library defines and the .c file defining it, `CALLS` the other .c files each .c file
calls into. Bundles rename the exports with their prefix and copy only the .c files a model
needs (codegen/bundle/library.py). tests/test_runtime_manifest.py compiles each .c file and
checks the manifest against its symbol table (`nm`): a new, renamed or removed external
function fails it until the manifest says so."""
from __future__ import annotations

import re
from importlib import resources

from ember.codegen.c_constants import config_header

CONFIG_HEADER = "ember_config.h"
RUNTIME_SOURCES = (CONFIG_HEADER, "ember_gemm.h", "ember_math.h", "ember_simd.h", "ember_gemm_tiles.h", "ember_gemm.c",
                   "ember_transpose.c", "ember_conv.c", "ember_conv_shallow.c", "ember_depthwise.c", "ember_winograd.c",
                   "ember_winograd4.c", "ember_gemm_bf16.c", "ember_winograd_bf16.c")

# Every external function of the library -> the .c file defining it (all are declared in
# ember_gemm.h; the headers' own functions are `static inline`).
EXPORTS: dict[str, str] = {
    # GEMM: panels, epilogue and the driver
    "ember_activate": "ember_gemm.c",
    "ember_finish_span": "ember_gemm.c",
    "ember_pack_panel": "ember_gemm.c",
    "ember_gemm_scratch_bytes": "ember_gemm.c",
    "ember_gemm": "ember_gemm.c",
    "ember_gemm_taps": "ember_gemm.c",
    "ember_gemm_chunk_panels": "ember_gemm.c",
    # im2col packing and direct convolution; shallow convolution (a network's first layer)
    "ember_pack_im2col": "ember_conv.c",
    "ember_pack_im2col3d": "ember_conv.c",
    "ember_conv_direct_scratch_bytes": "ember_conv.c",
    "ember_conv_direct_offsets": "ember_conv.c",
    "ember_conv_direct": "ember_conv.c",
    "ember_conv_rows_scratch_floats": "ember_conv.c",
    "ember_conv_rows": "ember_conv.c",
    "ember_conv_shallow_scratch_bytes": "ember_conv_shallow.c",
    "ember_conv_shallow": "ember_conv_shallow.c",
    "ember_conv_taps_scratch_bytes": "ember_conv.c",
    "ember_conv_taps": "ember_conv.c",
    # depthwise convolution
    "ember_depthwise_scratch_bytes": "ember_depthwise.c",
    "ember_depthwise": "ember_depthwise.c",
    # its kernels specialised to taps and strides (the caller passes one: OPTIONAL_PIECES)
    **{f"ember_dw_{taps}_s{strides}": "ember_depthwise.c" for taps in ("3x3", "5x5", "any")
       for strides in ("11", "22", "21", "12")},
    # blocked transposes between NCHW and channel-last
    "ember_transpose_f32": "ember_transpose.c",
    "ember_transpose_f32_threads": "ember_transpose.c",
    "ember_finish_span_threads": "ember_transpose.c",
    # Winograd F(2x2, 3x3)
    "ember_winograd_scratch_bytes": "ember_winograd.c",
    "ember_winograd": "ember_winograd.c",
    "ember_winograd_with_scratch_bytes": "ember_winograd.c",
    "ember_winograd_with": "ember_winograd.c",
    # Winograd F(4x4, 3x3), channel-last
    "ember_winograd4_block_tiles": "ember_winograd4.c",
    "ember_winograd4_tile_split": "ember_winograd4.c",
    "ember_winograd4_scratch_bytes": "ember_winograd4.c",
    "ember_winograd4": "ember_winograd4.c",
    # the bf16 GEMM (precision="bf16")
    "ember_gemm_bf16": "ember_gemm_bf16.c",
    "ember_gemm_bf16_scratch_bytes": "ember_gemm_bf16.c",
    "ember_bf16_pack_a": "ember_gemm_bf16.c",
    "ember_bf16_pack_panel": "ember_gemm_bf16.c",
    "ember_bf16_native": "ember_gemm_bf16.c",
    "ember_winograd_bf16_scratch_bytes": "ember_winograd_bf16.c",
    "ember_winograd_bf16": "ember_winograd_bf16.c",
}

# Each .c file -> the other .c files whose exports it calls (its undefined ember_ symbols).
CALLS: dict[str, tuple[str, ...]] = {
    "ember_gemm.c": (),
    "ember_transpose.c": ("ember_gemm.c",),
    "ember_conv.c": ("ember_gemm.c", "ember_transpose.c"),
    "ember_conv_shallow.c": ("ember_gemm.c",),
    "ember_depthwise.c": ("ember_gemm.c",),
    "ember_winograd.c": ("ember_gemm.c",),
    "ember_winograd4.c": ("ember_gemm.c", "ember_transpose.c"),
    "ember_gemm_bf16.c": ("ember_gemm.c",),
    "ember_winograd_bf16.c": ("ember_winograd.c", "ember_gemm_bf16.c"),
}


# How the cpu backend compiles the .c files: each into objects of its own, cached one by one and
# built in parallel, a model linking only the files it needs. A file listed here is compiled
# in pieces, each with its own -D flags (the file says what each piece holds), the slowest
# first; any other in one piece. Bundles and tests compile every file whole.
PIECES: dict[str, tuple[tuple[str, ...], ...]] = {
    "ember_gemm.c": (("-DEMBER_GEMM_PIECE=2",), ("-DEMBER_GEMM_PIECE=1",), ("-DEMBER_GEMM_PIECE=3",),
                     ("-DEMBER_GEMM_PIECE=4",), ("-DEMBER_GEMM_PIECE=0",)),
    "ember_depthwise.c": (("-DEMBER_DEPTHWISE_PIECE=4",), ("-DEMBER_DEPTHWISE_PIECE=5",),
                          ("-DEMBER_DEPTHWISE_PIECE=1",), ("-DEMBER_DEPTHWISE_PIECE=2",),
                          ("-DEMBER_DEPTHWISE_PIECE=3",), ("-DEMBER_DEPTHWISE_PIECE=0",)),
}

# Pieces a model links only where its C names one of their functions (a specialised kernel it
# passes to the file's entry point), function -> its piece's -D flags; a file's other pieces
# are linked wherever the file is.
OPTIONAL_PIECES: dict[str, dict[str, tuple[str, ...]]] = {
    "ember_depthwise.c": {
        **{f"ember_dw_3x3_s{s}": ("-DEMBER_DEPTHWISE_PIECE=1",) for s in ("11", "22", "21", "12")},
        **{f"ember_dw_5x5_s{s}": ("-DEMBER_DEPTHWISE_PIECE=2",) for s in ("11", "22")},
        **{f"ember_dw_5x5_s{s}": ("-DEMBER_DEPTHWISE_PIECE=3",) for s in ("21", "12")},
        **{f"ember_dw_any_s{s}": ("-DEMBER_DEPTHWISE_PIECE=4",) for s in ("11", "22")},
        **{f"ember_dw_any_s{s}": ("-DEMBER_DEPTHWISE_PIECE=5",) for s in ("21", "12")},
    },
}

_IDENTIFIER = re.compile(r"\bember_\w+\b")


def pieces(name: str) -> tuple[tuple[str, ...], ...]:
    """The -D flags of each piece the cpu backend compiles the library file `name` in."""
    return PIECES.get(name, ((),))


def runtime_source(name: str) -> str:
    """The text of one file of the portable kernel library."""
    if name == CONFIG_HEADER:
        return config_header()
    return resources.files("ember.codegen.runtime").joinpath(name).read_text()


def sources_for(functions: set[str] | frozenset[str]) -> list[str]:
    """The library .c files defining `functions` (names not exported are ignored) and the
    ones those call into, in library order."""
    needed: set[str] = set()
    pending = [EXPORTS[f] for f in functions if f in EXPORTS]
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending.extend(CALLS[name])
    return [name for name in RUNTIME_SOURCES if name in needed]


def pieces_named_by(c_text: str) -> list[tuple[str, tuple[str, ...]]]:
    """The pieces of the library a C source needs, (file, -D flags) in library order: those of
    each file sources_named_by gives, an optional piece only where the text names one of its
    functions."""
    names = set(_IDENTIFIER.findall(c_text))
    needed = []
    for name in sources_for(names):
        optional = OPTIONAL_PIECES.get(name, {})
        for defines in pieces(name):
            owners = [function for function, flags in optional.items() if flags == defines]
            if not owners or names.intersection(owners):
                needed.append((name, defines))
    return needed


def sources_named_by(c_text: str) -> list[str]:
    """The library .c files a C source needs: those defining the exported functions it names
    (calls, or takes as a packer function pointer) and the ones those call into, in library
    order."""
    return sources_for(set(_IDENTIFIER.findall(c_text)))
