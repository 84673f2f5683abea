"""Element types in C: type names, literals, and libm function names per float width."""
from __future__ import annotations

import math

import numpy as np

from ember.support.errors import UnsupportedError
from ember.types import DType

C_TYPES = {
    DType.FLOAT32: "float",
    DType.FLOAT64: "double",
    DType.INT8: "int8_t",
    DType.INT16: "int16_t",
    DType.INT32: "int32_t",
    DType.INT64: "int64_t",
    DType.UINT8: "uint8_t",
    DType.UINT16: "uint16_t",
    DType.UINT32: "uint32_t",
    DType.UINT64: "uint64_t",
    DType.BOOL: "uint8_t",  # NumPy stores bool as one byte holding 0 or 1
    # 16-bit floats are stored as their bits and computed in float: only Cast and byte copies
    # see them (codegen/kernels/table.py), the graph pass compute-halves-in-float32 widens the rest.
    DType.FLOAT16: "uint16_t",
    DType.BFLOAT16: "uint16_t",
    # The narrow types likewise, one element per byte (as ml_dtypes stores them): only Cast,
    # BitCast and byte copies see them.
    **dict.fromkeys((DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ,
                     DType.FLOAT4E2M1, DType.INT4, DType.UINT4, DType.INT2, DType.UINT2), "uint8_t"),
}

# The narrow float formats for ember_math.h's converters: exponent bits, mantissa bits, bias
# and kind (which codes are infinities and NaNs).
NARROW_FLOATS = {
    DType.FLOAT8E4M3FN: (4, 3, 7, "EMBER_NARROW_FN"),
    DType.FLOAT8E4M3FNUZ: (4, 3, 8, "EMBER_NARROW_FNUZ"),
    DType.FLOAT8E5M2: (5, 2, 15, "EMBER_NARROW_IEEE"),
    DType.FLOAT8E5M2FNUZ: (5, 2, 16, "EMBER_NARROW_FNUZ"),
    DType.FLOAT4E2M1: (2, 1, 1, "EMBER_NARROW_E2M1"),
}
# The narrow integers: value bits and signedness.
NARROW_INTS = {DType.INT4: (4, True), DType.UINT4: (4, False), DType.INT2: (2, True), DType.UINT2: (2, False)}


def c_type(dtype: DType) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise UnsupportedError(f"the C backend does not support element type {dtype} yet") from None


def c_literal(value: float | int | bool, dtype: DType) -> str:
    """A C literal of `dtype` for `value` (exact for floats: hex float notation)."""
    if dtype is DType.BOOL:
        return "1" if value else "0"
    if dtype in (DType.FLOAT16, DType.BFLOAT16):  # stored as bits
        bits = np.asarray(value).astype(dtype.numpy).reshape(1).view(np.uint16)[0]
        return f"((uint16_t)0x{int(bits):04x})"
    if dtype.is_float:
        x = float(np.asarray(value).astype(dtype.numpy))
        if math.isnan(x):
            return "NAN" if dtype is DType.FLOAT64 else "((float)NAN)"
        if math.isinf(x):
            sign = "-" if x < 0 else ""
            return f"({sign}INFINITY)" if dtype is DType.FLOAT32 else f"({sign}(double)INFINITY)"
        return f"{x.hex()}f" if dtype is DType.FLOAT32 else x.hex()
    x = int(value)
    if dtype is DType.INT64:
        return f"INT64_C({x})" if x != -(2**63) else "INT64_MIN"
    if dtype is DType.UINT64:
        return f"UINT64_C({x})"
    return f"(({c_type(dtype)}){x})"


def libm(name: str, dtype: DType) -> str:
    """The libm function for `dtype`: expf for float, exp for double."""
    return f"{name}f" if dtype is DType.FLOAT32 else name


def lowest(dtype: DType) -> str:
    if dtype.is_float:
        return "(-INFINITY)"
    info = np.iinfo(dtype.numpy)
    return c_literal(int(info.min), dtype)
