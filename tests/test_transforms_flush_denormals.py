"""flush-denormal-weights: subnormal weights and biases of contractions become signed zeros
(renamed `.flushed`); normal constants, constants of other ops and 16-bit weights stay. The
speed it buys is measured where it matters (Intel cores take a microcode assist per subnormal
operand; bench/compare.py's rapidocr_rec), not here."""
from __future__ import annotations

import numpy as np

from ember.passes.match import constant_data
from tests.filecheck import check_pass

TINY = np.finfo(np.float32).tiny


def _with_subnormals(shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape).astype(np.float32)
    data.reshape(-1)[::3] = (TINY * rng.uniform(-0.9, 0.9, data.size)[::3]).astype(np.float32)
    assert ((data != 0) & (np.abs(data) < TINY)).sum() > data.size // 4
    return data


def test_subnormal_conv_and_gemm_weights_are_flushed_and_others_stay():
    weights = {"w": _with_subnormals((3, 2, 3, 3), 1), "b": _with_subnormals((3,), 2),
               "m": _with_subnormals((4, 5), 3), "k": _with_subnormals((1, 3, 5, 5), 4),
               "n": np.random.default_rng(5).standard_normal((5, 2)).astype(np.float32)}
    after = check_pass("""graph "g" {
      input %x: f32[1,2,5,5]
      input %v: f32[2,4]
      const @w: f32[3,2,3,3]
      const @b: f32[3]
      const @m: f32[4,5]
      const @k: f32[1,3,5,5]
      const @n: f32[5,2]
      %c: f32[1,3,5,5] = Conv(%x, @w, @b) {strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1]} name="c"
      %a: f32[1,3,5,5] = Add(%c, @k) name="a"
      %p: f32[2,5] = MatMul(%v, @m) name="p"
      %q: f32[2,2] = MatMul(%p, @n) name="q"
      output "a" = %a
      output "q" = %q
    }""", "flush-denormal-weights", """
      CHECK: %c: f32[1,3,5,5] = Conv(%x, @w.flushed, @b.flushed)
      CHECK: Add(%c, @k)
      CHECK: MatMul(%v, @m.flushed)
      CHECK: MatMul(%p, @n)""", weights=weights)
    flushed = {c.name: constant_data(c) for c in after.constants.values()}
    for name in ("w", "b", "m"):
        data, original = flushed[f"{name}.flushed"], weights[name]
        tiny = (original != 0) & (np.abs(original) < TINY)
        assert np.all(data[tiny] == 0) and np.array_equal(np.signbit(data[tiny]), np.signbit(original[tiny]))
        assert np.array_equal(data[~tiny], original[~tiny])
