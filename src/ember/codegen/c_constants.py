"""The constants the kernel library (codegen/runtime/) and Ember's Python side share, in one
place: the Python code reads them here, and the C code reads them from `ember_config.h`,
which `config_header()` renders from them (runtime_files.runtime_source("ember_config.h")
returns it, so the cpu backend's build and bundles ship it with the library sources).
tests/test_c_formulas.py checks that C sees these values."""
from __future__ import annotations

from ember.ops.fused import ACTIVATION_TABLE, get_activation

# The GEMM tile: MR rows of A by NR columns of B; B is consumed in NR-column panels
# ([ceil(N / NR)][K][NR], zero-padded).
NR = 32
MR = 8
# Bytes of B panels in one chunk (ember_gemm.c chunk_panels): sized to stay in L2 while every
# MR-row block of A sweeps it; each thread packs at most one chunk at a time into scratch.
GEMM_CHUNK_BYTES = 384 * 1024
# Winograd F(2x2, 3x3): 2x2 output tiles per block (one block per thread at a time).
WINOGRAD_BLOCK = 32
# Winograd F(4x4, 3x3) (ember_winograd4.c): a map whose transformed input and output (V and O,
# 36 planes each) fit in this many bytes goes in one block of tiles, so each transformed weight
# is read once; larger maps go in blocks whose V and O fit in EMBER_WINO4_BLOCK_BYTES (L2).
WINOGRAD4_WHOLE_BYTES = 2 * 1024 * 1024
WINOGRAD4_BLOCK_BYTES = 768 * 1024
# Transposes and epilogue passes over at least this many floats split across threads (a
# parallel region of Ember's pool costs about a microsecond; 16K floats take a few to copy).
PARALLEL_COPY_FLOATS = 16 * 1024
# Floats in a 64-byte cache line: the Winograd planes' padding and row rounding.
LINE_FLOATS = 16
# The widest native vector the library uses (ember_simd.h EMBER_VN_LANES: 16 on AVX-512),
# which bounds per-vector padding such as the depthwise kernel's row of zeros.
MAX_VECTOR_LANES = 16
# The deepest reduction (C * KH * KW) conv_shallow takes: a 7x7 kernel over 3 channels (147).
SHALLOW_MAX_K = 160

HEADER_NAME = "ember_config.h"


def c_activation(name: str) -> str:
    """The C enum identifier of a fused activation (ember_epilogue.act): "relu" ->
    "EMBER_ACT_RELU". Raises OpError for a name outside the table."""
    return get_activation(name).c_enum


def activation_codes() -> dict[str, int]:
    """Each fused activation's name -> its value in the C enum."""
    return {a.name: a.code for a in ACTIVATION_TABLE}


def _bytes_literal(n: int) -> str:
    return f"({n // 1024}L * 1024)" if n % 1024 == 0 else f"{n}L"


def config_header() -> str:
    """The text of ember_config.h (deterministic: the same constants give the same text)."""
    width = max(len(f"{a.c_enum} = {a.code},") for a in ACTIVATION_TABLE)
    enum = [f"    {f'{a.c_enum} = {a.code},':<{width}}  /* activation=\"{a.name}\" */" for a in ACTIVATION_TABLE]
    return "\n".join([
        f"/* {HEADER_NAME}: constants the Ember kernel library shares with the compiler.",
        " * Generated from src/ember/codegen/c_constants.py (do not edit; change them there). */",
        "#ifndef EMBER_CONFIG_H",
        "#define EMBER_CONFIG_H",
        "",
        "/* The GEMM tile: EMBER_MR rows of A by EMBER_NR columns of B (packed in EMBER_NR-column panels). */",
        f"#define EMBER_NR {NR}",
        f"#define EMBER_MR {MR}",
        "/* Bytes of B panels per chunk, kept in L2 while A's row blocks sweep it (ember_gemm.c). */",
        f"#define EMBER_CHUNK_BYTES {_bytes_literal(GEMM_CHUNK_BYTES)}",
        "/* Winograd F(2x2, 3x3): output tiles per block, one block per thread at a time. */",
        f"#define EMBER_WINO_TB {WINOGRAD_BLOCK}",
        "/* Winograd F(4x4, 3x3): one block of tiles up to this many bytes of V and O, else blocks of this. */",
        f"#define EMBER_WINO4_WHOLE_BYTES {_bytes_literal(WINOGRAD4_WHOLE_BYTES)}",
        f"#define EMBER_WINO4_BLOCK_BYTES {_bytes_literal(WINOGRAD4_BLOCK_BYTES)}",
        "/* Transposes and epilogue passes over at least this many floats split across threads. */",
        f"#define EMBER_PARALLEL_COPY_FLOATS {PARALLEL_COPY_FLOATS}",
        "/* Floats in a 64-byte cache line. */",
        f"#define EMBER_LINE_FLOATS {LINE_FLOATS}",
        "/* The widest native vector (ember_simd.h EMBER_VN_LANES never exceeds it). */",
        f"#define EMBER_MAX_VN_LANES {MAX_VECTOR_LANES}",
        "/* The deepest reduction C * KH * KW of a shallow convolution (ember_conv_shallow). */",
        f"#define EMBER_SHALLOW_MAX_K {SHALLOW_MAX_K}",
        "",
        "/* The fused activations (ember_epilogue.act); ops/fused.py ACTIVATION_TABLE. */",
        "enum {",
        *enum,
        "};",
        "",
        "#endif",
        "",
    ])
