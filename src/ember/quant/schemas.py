"""Quantization schemas: how a calibrated range becomes a scale and zero point (activations)
and how a constant weight becomes int8 with one scale per output channel. Glow's four schemas,
in the integer types ONNX's QuantizeLinear / DequantizeLinear and the cpu backend's integer
kernels take (uint8 or int8 activations, int8 weights, int32 biases):

    asymmetric       uint8 activations, zero point anywhere in [0, 255], range [min(lo, 0),
                     max(hi, 0)] (zero exactly representable); the default (ONNX Runtime's U8S8)
    symmetric        int8 activations, zero point 0, scale max|x| / 127
    symmetric-uint8  uint8 activations, symmetric: a range that is never negative (after Relu)
                     gets zero point 0 and scale hi / 255 (all 256 levels); a signed one zero
                     point 128 and scale max|x| / 127 (Glow's SymmetricWithUnsigned)
    power2           int8 activations and weights, zero point 0, every scale a power of two
                     2^-k (rounded up, so nothing saturates): requantizing is a shift, for MCUs

Weights are always symmetric int8 per output channel ([-127, 127], scale max|w| / 127, a power
of two in `power2`); biases int32 at scale x_scale * w_scale (a power of two again in `power2`).
A degenerate range or channel (constant zero) gets scale 1, never a division by zero.

May import types and support/ (layer 5 package quant/)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.support.errors import EmberError
from ember.types import DType

_TINY = float(np.finfo(np.float32).tiny)


def power2_ceil(scale: np.ndarray) -> np.ndarray:
    """The least power of two >= each (positive, finite) scale, exactly (frexp: no log2 rounding)."""
    mantissa, exponent = np.frexp(np.asarray(scale, np.float64))
    exponent = np.where(mantissa == 0.5, exponent - 1, exponent)
    return np.ldexp(1.0, exponent).astype(np.float32)


def _safe_scale(scale: np.ndarray | float) -> np.ndarray:
    """float32 scales with the degenerate ones (zero, subnormal, not finite) replaced by 1."""
    s = np.atleast_1d(np.asarray(scale, np.float64)).astype(np.float32)
    bad = ~np.isfinite(s) | (s <= _TINY)
    s[bad] = 1.0
    return s


@dataclass(frozen=True)
class Schema:
    name: str
    activation_dtype: DType  # the type of a signed range (asymmetric and symmetric-uint8: uint8 either way)
    symmetric: bool
    power2: bool = False

    def activation(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """(scale float32 scalar, zero point scalar of the activation type) for the range [lo, hi]."""
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        if not self.symmetric:
            scale = _safe_scale((hi - lo) / 255.0)[0]
            zero = np.clip(np.rint(-lo / float(scale)), 0, 255)
            return np.asarray(scale, np.float32), np.asarray(zero, np.uint8)
        amax = max(-lo, hi)
        if self.activation_dtype is DType.UINT8:
            if lo == 0.0:
                return np.asarray(_safe_scale(hi / 255.0)[0], np.float32), np.asarray(0, np.uint8)
            return np.asarray(_safe_scale(amax / 127.0)[0], np.float32), np.asarray(128, np.uint8)
        scale = _safe_scale(amax / 127.0)
        if self.power2:
            scale = power2_ceil(scale)
        return np.asarray(scale[0], np.float32), np.asarray(0, np.int8)

    def weights(self, w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        """Symmetric int8 weights per channel on `axis`: (quantized, float32 scales)."""
        moved = np.moveaxis(np.asarray(w, np.float64), axis, 0)
        count = moved.shape[0]
        amax = np.max(np.abs(moved.reshape(count, -1)), axis=1) if moved.size else np.zeros(count)
        scale = _safe_scale(amax / 127.0)
        if self.power2:
            scale = power2_ceil(scale)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.rint(w / scale.reshape(shape).astype(np.float64)), -127, 127).astype(np.int8)
        return q, scale

    def bias_scale(self, x_scale: np.ndarray, w_scale: np.ndarray) -> np.ndarray:
        """The int32 bias scale, x_scale * w_scale per channel (a power of two times a power of
        two is one, exactly, in `power2`)."""
        return (np.float32(x_scale) * np.asarray(w_scale, np.float32)).astype(np.float32)

    def levels(self, lo: float) -> int:
        """Quantization levels on the |x| side of a range starting at `lo`: what the entropy
        calibration merges the histogram into (256 for a never-negative range in uint8, else 128)."""
        return 256 if lo >= 0.0 and self.activation_dtype is DType.UINT8 else 128


SCHEMAS: dict[str, Schema] = {
    "asymmetric": Schema("asymmetric", DType.UINT8, symmetric=False),
    "symmetric": Schema("symmetric", DType.INT8, symmetric=True),
    "symmetric-uint8": Schema("symmetric-uint8", DType.UINT8, symmetric=True),
    "power2": Schema("power2", DType.INT8, symmetric=True, power2=True),
}


def get_schema(name: str | Schema) -> Schema:
    if isinstance(name, Schema):
        return name
    schema = SCHEMAS.get(name)
    if schema is None:
        raise EmberError(f"unknown quantization schema '{name}' (known: {', '.join(SCHEMAS)})")
    return schema
