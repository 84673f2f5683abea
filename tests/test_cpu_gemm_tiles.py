"""The GEMM core's tiles at the edges of their shapes (runtime/ember_gemm.c): a last panel of at
most 16 columns takes the half-width tile, others the full one; rows 1..8 per tile (1 and 2
take the split-k path); every epilogue (bias, residual, activation on registers or through
memory, Gelu's vectorized one among them) on both. FullyConnected with packed weights, MatMul
with B read in place (its tail panel packed at run time), and small convolutions whose pixel
count leaves a narrow last panel, each against the interpreter; the half tiles of every row
count called directly, C row-major and transposed."""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401
from ember.backends.cpu import CpuBackend
from ember.backends.cpu.features import has_avx512_bf16
from ember.codegen.kernels.conv import pointwise_b
from ember.driver import compile_graph
from ember.graph.ir import Graph
from ember.ops.activations import GeluAttrs
from ember.ops.nn import ConvAttrs
from ember.types import DType, TensorType
from tests.helpers import relative_error


def _run_both(build, feeds: dict[str, np.ndarray], threads: int = 1) -> tuple[dict, dict, str]:
    expected = compile_graph(build(), "interpreter").run(feeds)
    # The hand-written kernels (few-row FullyConnected would take the mapped one: test_cpu_gemm_mapped.py)
    compiled = compile_graph(build(), CpuBackend(num_threads=threads, mapped_kernels=False))
    return compiled.run(feeds), expected, compiled.executable.source


def _fc_graph(m: int, k: int, n: int, activation: str | None, residual: bool):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    w, b = rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)

    def build() -> Graph:
        g = Graph("fc")
        x = g.add_input("x", TensorType(DType.FLOAT32, (m, k)))
        y = g.add("Add", g.add("MatMul", x, g.add_constant(w, "w")), g.add_constant(b, "b"))
        if residual:
            y = g.add("Add", y, g.add_input("r", TensorType(DType.FLOAT32, (m, n))))
        if activation:
            y = g.add(activation, y, attrs=GeluAttrs("none") if activation == "Gelu" else None)
        g.set_outputs([("y", y)])
        return g
    return build


# (M, K, N): N % 32 in 1..16 takes the half-width tile for its last panel, 0 or 17..31 not.
SHAPES = [(1, 64, 10), (2, 33, 16), (3, 7, 1), (8, 64, 10), (9, 5, 42), (13, 40, 17), (16, 3, 48), (5, 70, 32),
          (7, 20, 10), (6, 9, 40), (13, 40, 12), (15, 16, 5)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("activation,residual", [("Relu", False), ("Sigmoid", True), ("Gelu", True), (None, True)])
def test_fully_connected_edges_match_interpreter(m, k, n, activation, residual):
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((m, k)).astype(np.float32)}
    if residual:
        feeds["r"] = rng.standard_normal((m, n)).astype(np.float32)
    actual, expected, source = _run_both(_fc_graph(m, k, n, activation, residual), feeds)
    assert "FullyConnected [fully_connected_gemm]" in source
    assert ("EMBER_ACT_GELU" in source) == (activation == "Gelu")  # fused, not a loop of its own
    assert relative_error(actual["y"], expected["y"]) <= 1e-5


@pytest.mark.parametrize("m,k,n", [(4, 9, 10), (8, 33, 45), (2, 16, 16)])
def test_matmul_with_computed_right_operand_matches_interpreter(m, k, n):
    def build() -> Graph:
        g = Graph("mm")
        a = g.add_input("a", TensorType(DType.FLOAT32, (m, k)))
        b = g.add_input("b", TensorType(DType.FLOAT32, (k, n)))
        g.set_outputs([("y", g.add("MatMul", a, b))])
        return g
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal((m, k)).astype(np.float32), "b": rng.standard_normal((k, n)).astype(np.float32)}
    actual, expected, source = _run_both(build, feeds, threads=2)
    assert "ember_gemm(" in source
    assert relative_error(actual["y"], expected["y"]) <= 1e-5


@pytest.mark.parametrize("size,kernel,stride", [(5, 3, 1), (7, 3, 2), (4, 1, 1), (6, 3, 1)])
def test_small_convolutions_match_interpreter(size, kernel, stride):
    """Output grids of 9, 16, 9 and 36 pixels: the last panel of pixels is narrow."""
    rng = np.random.default_rng(size)
    w = rng.standard_normal((12, 5, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(12).astype(np.float32)

    def build() -> Graph:
        g = Graph("conv")
        x = g.add_input("x", TensorType(DType.FLOAT32, (1, 5, size, size)))
        attrs = ConvAttrs(strides=(stride, stride), pads=(0, 0, 0, 0), dilations=(1, 1))
        y = g.add("Conv", x, g.add_constant(w, "w"), g.add_constant(bias, "b"), attrs=attrs)
        g.set_outputs([("y", g.add("Relu", y))])
        return g
    feeds = {"x": rng.standard_normal((1, 5, size, size)).astype(np.float32)}
    actual, expected, _ = _run_both(build, feeds)
    assert relative_error(actual["y"], expected["y"]) <= 1e-5


@pytest.mark.skipif(not has_avx512_bf16(), reason="the host has no AVX512-BF16")
@pytest.mark.parametrize("m,k,n", [(13, 40, 45), (8, 64, 10), (16, 33, 64)])
def test_bf16_fully_connected_with_gelu_matches_float32(m, k, n):
    """The bf16 GEMM's Gelu epilogue (a vector loop after the tile): against the float32 cpu
    model, whose own Gelu epilogue the tests above check, within bf16 rounding."""
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((m, k)).astype(np.float32), "r": rng.standard_normal((m, n)).astype(np.float32)}
    build = _fc_graph(m, k, n, "Gelu", True)
    bf16 = compile_graph(build(), CpuBackend(num_threads=1, precision="bf16"))
    assert "EMBER_ACT_GELU" in bf16.executable.source and "ember_gemm_bf16(" in bf16.executable.source
    expected = compile_graph(build(), CpuBackend(num_threads=1)).run(feeds)["y"]
    assert relative_error(bf16.run(feeds)["y"], expected) <= 2e-2


@pytest.mark.parametrize("out_channels,channels,hw", [
    (24, 144, (56, 56)),  # 98 panels of pixels, 3 row blocks: threads take runs of whole chunks of panels
    (144, 24, (28, 28)),  # 25 panels in 2 chunks, 18 row blocks, A smaller than B: still a chunk each
    (256, 256, (8, 8)),   # 2 panels, 32 row blocks, A bigger than B: threads take runs of row blocks
    (24, 1024, (6, 7)),   # 2 panels (one partial), 3 row blocks: one panel each
    (40, 96, (32, 32)),   # rows 4 KB apart: B copied into panels (b="panels")
])
def test_pointwise_convolution_on_two_threads_matches_interpreter(out_channels, channels, hw):
    """A 1x1 convolution reads its input in place as B (conv_gemm, b="direct"), or copies it
    into panels where the map's rows alias in the caches, with a residual: each of ember_gemm's
    splits of those cases between two threads."""
    rng = np.random.default_rng(out_channels + channels)
    w = rng.standard_normal((out_channels, channels, 1, 1)).astype(np.float32)

    def build() -> Graph:
        g = Graph("pointwise")
        x = g.add_input("x", TensorType(DType.FLOAT32, (1, channels, *hw)))
        r = g.add_input("r", TensorType(DType.FLOAT32, (1, out_channels, *hw)))
        attrs = ConvAttrs(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1))
        y = g.add("Conv", x, g.add_constant(w, "w"), attrs=attrs)
        g.set_outputs([("y", g.add("Add", y, r))])
        return g
    feeds = {"x": rng.standard_normal((1, channels, *hw)).astype(np.float32),
             "r": rng.standard_normal((1, out_channels, *hw)).astype(np.float32)}
    actual, expected, source = _run_both(build, feeds, threads=2)
    in_place = pointwise_b(hw[0] * hw[1], channels) == "direct"
    assert ("/*b_direct*/ xg" in source) == in_place and "/*nthreads*/ 2" in source
    assert relative_error(actual["y"], expected["y"]) <= 1e-5


def test_pointwise_b_is_copied_only_where_rows_alias_and_panels_are_deep():
    assert pointwise_b(32 * 32, 96) == "panels" and pointwise_b(48 * 64, 480) == "panels"
    assert pointwise_b(32 * 32, 32) == "direct"  # shallow panels fit the sets they share
    assert pointwise_b(56 * 56, 144) == pointwise_b(12 * 40, 480) == pointwise_b(8 * 32, 480) == "direct"


HALF_TILES = r"""
#include "ember_gemm.h"
/* C = A B + bias + residual, relu; A row-major M x K, B row-major K x N read in place. */
void run(long M, long N, long K, const float *a, const float *b, const float *bias, int per_row,
         const float *residual, int transposed, float *c, float *scratch)
{
    ember_epilogue ep = { .bias = bias, .bias_per_row = per_row, .residual = residual,
                          .ld_residual = transposed ? M : N, .act = EMBER_ACT_RELU, .transposed = transposed };
    ember_gemm(M, N, K, a, K, 1, EMBER_MR * K, NULL, NULL, NULL, b, N, NULL, c, transposed ? M : N, &ep, scratch, 1);
}
"""


@pytest.mark.parametrize("transposed", [False, True])
def test_half_tiles_of_every_row_count_store_where_their_rows_go(transposed):
    """Every edge row count against a last panel of at most 16 columns: bias per row or per
    column, a residual, C row-major or transposed (where each tile's rows land in C)."""
    import ctypes

    from ember.backends.cpu.build import build_library

    library = ctypes.CDLL(str(build_library(HALF_TILES)))
    pointer = ctypes.POINTER(ctypes.c_float)
    rng = np.random.default_rng(3)
    for m in range(1, 17):
        n, k = 42, 19  # a full panel, then 10 columns
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        per_row = not transposed and m % 2 == 1
        bias = rng.standard_normal(m if per_row else n).astype(np.float32)
        residual = rng.standard_normal((m, n)).astype(np.float32)
        expected = np.maximum(a @ b + (bias[:, None] if per_row else bias) + residual, 0)
        stored = np.ascontiguousarray(residual.T) if transposed else residual
        c = np.full((n, m) if transposed else (m, n), np.nan, np.float32)
        scratch = np.zeros(1 << 16, np.float32)
        library.run(ctypes.c_long(m), ctypes.c_long(n), ctypes.c_long(k),
                    *(x.ctypes.data_as(pointer) for x in (a, b, bias)), ctypes.c_int(per_row),
                    stored.ctypes.data_as(pointer), ctypes.c_int(transposed), c.ctypes.data_as(pointer),
                    scratch.ctypes.data_as(pointer))
        got = c.T if transposed else c
        assert relative_error(got, expected) <= 1e-5, m
