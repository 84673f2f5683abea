"""Layer 1: element types, static shapes, tensor types and quantization parameters.

Imports only NumPy, ml_dtypes (for bfloat16, a dependency of onnx) and support/."""
from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    """Element types. The value is the short name used in the text IRs."""

    FLOAT32 = "f32"
    FLOAT16 = "f16"
    BFLOAT16 = "bf16"
    FLOAT64 = "f64"
    INT8 = "i8"
    INT16 = "i16"
    INT32 = "i32"
    INT64 = "i64"
    UINT8 = "u8"
    UINT16 = "u16"
    UINT32 = "u32"
    UINT64 = "u64"
    BOOL = "bool"
    # Narrow types (ONNX opsets 19 and later): stored one element per byte, as ml_dtypes does.
    FLOAT8E4M3FN = "f8e4m3fn"
    FLOAT8E4M3FNUZ = "f8e4m3fnuz"
    FLOAT8E5M2 = "f8e5m2"
    FLOAT8E5M2FNUZ = "f8e5m2fnuz"
    FLOAT4E2M1 = "f4e2m1"
    INT4 = "i4"
    UINT4 = "u4"
    INT2 = "i2"
    UINT2 = "u2"

    @property
    def numpy(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64)

    @property
    def is_int(self) -> bool:
        return not self.is_float and self is not DType.BOOL and not self.is_narrow_float

    @property
    def is_narrow_float(self) -> bool:
        """float8 and float4: storage types that ops convert from and to, never compute in."""
        return self in _NARROW_FLOATS

    @property
    def is_narrow(self) -> bool:
        """The sub-byte and 8-bit float types (one element per byte in memory)."""
        return self in _NARROW_FLOATS or self in (DType.INT4, DType.UINT4, DType.INT2, DType.UINT2)

    @staticmethod
    def from_numpy(dtype: np.dtype | type) -> DType:
        dt = np.dtype(dtype)
        for member, npdt in _TO_NUMPY.items():
            if npdt == dt:
                return member
        raise TypeError(f"no Ember element type for NumPy dtype {dt}")

    @staticmethod
    def from_name(name: str) -> DType:
        try:
            return DType(name)
        except ValueError:
            raise ValueError(f"unknown element type '{name}'") from None

    def __str__(self) -> str:
        return self.value


_TO_NUMPY: dict[DType, np.dtype] = {
    DType.FLOAT32: np.dtype(np.float32),
    DType.FLOAT16: np.dtype(np.float16),
    DType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DType.FLOAT64: np.dtype(np.float64),
    DType.INT8: np.dtype(np.int8),
    DType.INT16: np.dtype(np.int16),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.UINT8: np.dtype(np.uint8),
    DType.UINT16: np.dtype(np.uint16),
    DType.UINT32: np.dtype(np.uint32),
    DType.UINT64: np.dtype(np.uint64),
    DType.BOOL: np.dtype(np.bool_),
    DType.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DType.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    DType.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DType.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
    DType.INT4: np.dtype(ml_dtypes.int4),
    DType.UINT4: np.dtype(ml_dtypes.uint4),
    DType.INT2: np.dtype(ml_dtypes.int2),
    DType.UINT2: np.dtype(ml_dtypes.uint2),
}
_ITEMSIZE = {member: dtype.itemsize for member, dtype in _TO_NUMPY.items()}
_NARROW_FLOATS = frozenset({DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ,
                            DType.FLOAT4E2M1})

Shape = tuple[int, ...]


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization: real = scale * (stored - zero_point). Per-tensor when `axis` is
    None, else `scale` and `zero_point` hold one entry per slice along `axis`."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self) -> None:
        if len(self.scale) != len(self.zero_point):
            raise ValueError("quantization scale and zero point differ in length")
        if self.axis is None and len(self.scale) != 1:
            raise ValueError("per-tensor quantization takes exactly one scale")
        if any(not (s > 0 and math.isfinite(s)) for s in self.scale):
            raise ValueError("quantization scales must be positive and finite")

    def __str__(self) -> str:
        if self.axis is None:
            return f"q({self.scale[0]!r},{self.zero_point[0]})"
        scales = ",".join(repr(s) for s in self.scale)
        zps = ",".join(str(z) for z in self.zero_point)
        return f"q(axis={self.axis},[{scales}],[{zps}])"


@dataclass(frozen=True)
class TensorType:
    """The type of every value in both IRs: element type, static shape, optional quantization."""

    dtype: DType
    shape: Shape
    quant: QuantParams | None = None

    def __post_init__(self) -> None:
        if any((not isinstance(d, int)) or d < 0 for d in self.shape):
            raise ValueError(f"shape dimensions must be non-negative integers, got {self.shape}")
        if self.quant is not None and self.dtype not in (DType.INT8, DType.UINT8, DType.INT32):
            raise ValueError(f"quantized types must be i8, u8 or i32, got {self.dtype}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    # Computed once per type (frozen, so they cannot go stale): passes ask them millions of
    # times on large graphs.
    @functools.cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @functools.cached_property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_shape(self, shape: Shape) -> TensorType:
        return TensorType(self.dtype, tuple(shape), self.quant)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.shape)

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(DType.from_numpy(array.dtype), tuple(int(d) for d in array.shape))

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        text = f"{self.dtype.value}[{dims}]"
        if self.quant is not None:
            text += str(self.quant)
        return text
