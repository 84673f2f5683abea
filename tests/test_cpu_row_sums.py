"""The cpu LayerNormalization kernel sums each row in SUM_LANES partial sums (so that the
compiler vectorizes the sum): rows shorter than the lanes, whole blocks of lanes, and blocks
plus a tail, checked against a float64 NumPy layer norm, with a large mean that a poor
variance sum would lose."""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401
from ember.backends.cpu import CpuBackend
from ember.codegen.kernels.normalization import SUM_LANES
from ember.driver import compile_graph
from ember.ops.normalization import LayerNormAttrs
from tests.helpers import single_node_graph


def _layer_norm64(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps) * scale + bias


@pytest.mark.parametrize("size", [5, SUM_LANES, 40, 256, 2 * SUM_LANES + 1])
def test_layer_norm_rows_match_float64(size):
    rng = np.random.default_rng(size)
    x = (rng.standard_normal((6, size)) * 3.0 + 100.0).astype(np.float32)
    scale = rng.standard_normal(size).astype(np.float32)
    bias = rng.standard_normal(size).astype(np.float32)
    graph, feeds = single_node_graph("LayerNormalization", [x, scale, bias], LayerNormAttrs(-1, 1e-5),
                                     constant=(1, 2))
    compiled = compile_graph(graph, CpuBackend(num_threads=1))
    actual = compiled.run(feeds)["y0"]
    expected = _layer_norm64(x, scale, bias, 1e-5)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=2e-4 * float(np.abs(expected).max()))
    lanes = f"float sum_lanes[{SUM_LANES}]" in compiled.executable.source
    assert lanes == (size >= SUM_LANES)
