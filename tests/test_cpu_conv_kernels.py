"""Convolution kernels of the cpu backend against the interpreter over the geometries that pick
different code paths: depthwise rows narrower and wider than one vector, with and without
vectors that lie wholly inside the row, strides 1, 2 and 3, kernels the library specializes on
(3x3, 5x5) and others, asymmetric padding, dilation, with and without bias, activations in
registers and after a residual. On x86-64 every case also runs built for AVX2, where the
library takes its portable GEMM tile and 8-lane depthwise vectors."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from ember.backends.cpu import CpuBackend
from ember.driver import compile_graph
from ember.graph import Graph
from ember.ops.fused import FusedConvAttrs
from ember.types import DType, TensorType
from tests.helpers import relative_error

# Each build: (threads, -march level or None for the host's).
BUILDS = [(1, None), (2, None)]
if platform.machine().lower() in ("x86_64", "amd64"):
    BUILDS.append((2, "x86-64-v3"))


def _check_case(build_graph, seed: int, tolerance: float = 1e-5) -> None:
    """Random x (and residual r, when the graph takes one) through every build."""
    rng = np.random.default_rng(seed)
    inputs = build_graph().inputs
    feeds = {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in inputs}
    _run_builds(build_graph, feeds, tolerance)


def _run_builds(build_graph, feeds, tolerance: float = 1e-5):
    expected = compile_graph(build_graph(), "interpreter").run(feeds)["y"]
    for threads, march in BUILDS:
        actual = compile_graph(build_graph(), CpuBackend(num_threads=threads, march=march)).run(feeds)["y"]
        assert actual.shape == expected.shape
        assert relative_error(actual, expected) < tolerance, (threads, march)


def _depthwise_graph(channels, hw, kernel, stride, pads, dilation, activation, residual) -> Graph:
    rng = np.random.default_rng(channels * 1000 + hw[1])
    g = Graph("dw")
    x = g.add_input("x", TensorType(DType.FLOAT32, (1, channels, *hw)))
    w = g.add_constant(rng.standard_normal((channels, 1, *kernel)).astype(np.float32), "w")
    b = g.add_constant(rng.standard_normal(channels).astype(np.float32), "b") if activation != "none" else None
    sh, sw = stride if isinstance(stride, tuple) else (stride, stride)
    oh = (hw[0] + pads[0] + pads[2] - dilation * (kernel[0] - 1) - 1) // sh + 1
    ow = (hw[1] + pads[1] + pads[3] - dilation * (kernel[1] - 1) - 1) // sw + 1
    r = g.add_input("r", TensorType(DType.FLOAT32, (1, channels, oh, ow))) if residual else None
    alpha, beta = ACTIVATION_PARAMS.get(activation, (0.0, 0.0))
    attrs = FusedConvAttrs((sh, sw), pads, (dilation, dilation), channels, activation, alpha, beta)
    g.set_outputs([("y", g.add("FusedConv", x, w, b, r, attrs=attrs, name="conv"))])
    return g


# The epilogue's (alpha, beta) where an activation has them: clip's bounds; hard_swish's scale
# and shift of its result; leaky_relu's slope.
ACTIVATION_PARAMS = {"clip": (-0.5, 0.75), "hard_swish": (0.6, -0.2), "leaky_relu": (0.1, 0.0)}

DEPTHWISE = [
    # channels, (H, W), kernel, stride, pads, dilation, activation, residual
    (5, (7, 7), (3, 3), 1, (1, 1, 1, 1), 1, "clip", False),
    (17, (14, 14), (3, 3), 2, (1, 1, 1, 1), 1, "relu", False),
    (3, (9, 40), (3, 3), 1, (1, 1, 1, 1), 1, "none", True),
    (3, (11, 67), (3, 3), 2, (1, 1, 1, 1), 1, "clip", False),
    (2, (6, 70), (3, 3), 2, (0, 0, 1, 1), 1, "relu", False),
    (4, (12, 48), (5, 5), 1, (2, 2, 2, 2), 1, "sigmoid", False),
    (3, (13, 81), (5, 5), 2, (2, 2, 2, 2), 1, "clip", True),
    (2, (10, 36), (7, 7), 1, (3, 1, 3, 2), 1, "none", False),
    (2, (9, 35), (2, 4), 2, (0, 1, 1, 2), 1, "relu", False),
    (3, (9, 9), (3, 3), 3, (1, 1, 1, 1), 1, "none", False),
    (3, (12, 20), (3, 3), 1, (2, 2, 2, 2), 2, "relu", False),
    (2, (3, 33), (3, 3), 1, (1, 1, 1, 1), 1, "none", False),
    (2, (1, 17), (1, 3), 1, (0, 1, 0, 1), 1, "none", False),
    # Padding wider than eight vectors of columns: more masked columns than the direct path
    # plans for, so the general path runs.
    (2, (5, 20), (3, 3), 1, (1, 70, 1, 70), 1, "relu", False),
    # Output rows of 8 or fewer take the channel-blocked path on AVX-512 (16 channels a
    # block, transposed in and out): whole and partial blocks, strides 1 and 2, the generic
    # taps (5x5, dilation, asymmetric pads) and a residual.
    (40, (7, 7), (3, 3), 1, (1, 1, 1, 1), 1, "clip", False),
    (33, (14, 14), (3, 3), 2, (1, 1, 1, 1), 1, "relu", True),
    (16, (8, 6), (5, 5), 1, (2, 2, 2, 2), 1, "sigmoid", False),
    (18, (9, 9), (3, 3), 1, (2, 2, 2, 2), 2, "none", True),
    (17, (5, 6), (3, 2), 2, (0, 1, 1, 0), 1, "relu", False),
    # Unequal strides (text recognisers: 2x1 and 1x2), straight from the input and blocked.
    (6, (12, 40), (3, 3), (2, 1), (1, 1, 1, 1), 1, "relu", False),
    (4, (9, 50), (3, 3), (1, 2), (1, 1, 1, 1), 1, "none", True),
    (5, (10, 41), (5, 5), (2, 1), (2, 2, 2, 2), 1, "clip", True),
    (3, (7, 67), (5, 5), (1, 2), (2, 2, 2, 2), 1, "sigmoid", False),
    (20, (8, 8), (3, 3), (2, 1), (1, 1, 1, 1), 1, "relu", False),
    # hard_swish in registers (straight and blocked), and after a residual.
    (6, (12, 40), (3, 3), 1, (1, 1, 1, 1), 1, "hard_swish", False),
    (24, (6, 7), (5, 5), 1, (2, 2, 2, 2), 1, "hard_swish", False),
    (5, (9, 21), (3, 3), 2, (1, 1, 1, 1), 1, "hard_swish", True),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: f"{c[0]}x{c[1][0]}x{c[1][1]}k{c[2][0]}{c[2][1]}s{c[3]}")
def test_depthwise_matches_interpreter(case):
    _check_case(lambda: _depthwise_graph(*case), seed=7)


def _conv_graph(channels, out_channels, hw, kernel, stride, pads, activation, residual) -> Graph:
    rng = np.random.default_rng(out_channels * 100 + hw[1])
    g = Graph("conv")
    x = g.add_input("x", TensorType(DType.FLOAT32, (1, channels, *hw)))
    w = g.add_constant(rng.standard_normal((out_channels, channels, *kernel)).astype(np.float32), "w")
    b = g.add_constant(rng.standard_normal(out_channels).astype(np.float32), "b") if activation != "none" else None
    oh = (hw[0] + pads[0] + pads[2] - kernel[0]) // stride + 1
    ow = (hw[1] + pads[1] + pads[3] - kernel[1]) // stride + 1
    r = g.add_input("r", TensorType(DType.FLOAT32, (1, out_channels, oh, ow))) if residual else None
    alpha, beta = ACTIVATION_PARAMS.get(activation, (0.0, 0.0))
    attrs = FusedConvAttrs((stride, stride), pads, (1, 1), 1, activation, alpha, beta)
    g.set_outputs([("y", g.add("FusedConv", x, w, b, r, attrs=attrs, name="conv"))])
    return g


DIRECT = [
    # in channels, out channels, (H, W), kernel, stride, pads, activation, residual
    (3, 10, (11, 9), (3, 3), 1, (1, 1, 1, 1), "relu", True),
    (3, 16, (20, 20), (3, 3), 2, (1, 1, 1, 1), "clip", False),
    (4, 9, (7, 5), (3, 3), 1, (1, 1, 1, 1), "sigmoid", True),
    (5, 17, (16, 40), (5, 5), 2, (2, 1, 2, 2), "none", True),
    (5, 8, (13, 70), (3, 3), 1, (1, 1, 1, 1), "clip", True),
    (3, 12, (10, 12), (7, 7), 3, (3, 3, 3, 3), "relu", False),
    (6, 33, (5, 3), (3, 3), 1, (1, 1, 1, 1), "none", False),  # (conv_pixel_rows takes this one)
    (4, 20, (9, 13), (3, 3), 1, (1, 1, 1, 1), "hard_swish", True),
    (3, 18, (8, 10), (3, 3), 2, (1, 1, 1, 1), "silu", False),
]


@pytest.mark.parametrize("case", DIRECT, ids=lambda c: f"{c[0]}to{c[1]}x{c[2][0]}x{c[2][1]}k{c[3][0]}s{c[4]}")
def test_direct_convolution_matches_interpreter(case):
    source = compile_graph(_conv_graph(*case), CpuBackend(num_threads=1))._executable.source
    assert "ember_conv_direct(" in source or "ember_conv_rows(" in source
    _check_case(lambda: _conv_graph(*case), seed=11)


SHALLOW = [
    # in channels, out channels, (H, W), kernel, stride, pads, activation, residual: a spatial
    # kernel over at most 4 input channels and output rows of 16+ pixels, which conv_shallow
    # takes (checked below): whole and partial tiles of 4 output channels, rows of whole and
    # partial vectors, activations in registers and in a pass after the residual.
    (3, 32, (30, 40), (3, 3), 2, (1, 1, 1, 1), "clip", False),          # MobileNet's first layer
    (3, 18, (17, 70), (3, 3), 1, (1, 1, 1, 1), "relu", True),           # 18 = 4 x 4 + 2 channels
    (1, 7, (9, 100), (5, 5), 3, (2, 2, 2, 2), "hard_swish", False),     # stride 3, one channel
    (4, 9, (12, 130), (2, 4), 2, (0, 1, 1, 2), "none", False),          # uneven pads, no bias
    (2, 5, (6, 18), (3, 3), 1, (0, 0, 0, 0), "leaky_relu", True),       # one row vector, no padding
    (3, 8, (5, 97), (1, 3), 1, (0, 1, 0, 1), "sigmoid", False),         # a row kernel, 97 columns
]


@pytest.mark.parametrize("case", SHALLOW, ids=lambda c: f"{c[0]}to{c[1]}x{c[2][0]}x{c[2][1]}k{c[3][0]}{c[3][1]}s{c[4]}")
def test_shallow_convolution_matches_interpreter(case):
    assert "ember_conv_shallow(" in compile_graph(_conv_graph(*case), CpuBackend(num_threads=1))._executable.source
    _check_case(lambda: _conv_graph(*case), seed=19)


def test_shallow_convolution_runs_deep_reductions_a_measured_search_picks():
    """ResNet's 7x7 stem (K = 147) stays on conv_direct by default, but a measured search
    (tune=True) times conv_shallow there too: the round that runs it matches the interpreter."""
    graph = lambda: _conv_graph(3, 64, (20, 38), (7, 7), 2, (3, 3, 3, 3), "relu", False)  # noqa: E731
    _check_searched_round(graph, "ember_conv_shallow(", seed=23, thread_counts=(1, 2))


def _check_searched_round(graph, call: str, seed: int, thread_counts) -> None:
    """The one-thread default program of `graph` does not make `call`, some variant round of a
    measured search does, and that round matches the interpreter at each thread count."""
    assert call not in compile_graph(graph(), CpuBackend(num_threads=1))._executable.source
    rounds = [r for r in range(8) if call in
              compile_graph(graph(), CpuBackend(num_threads=1, variant_round=r))._executable.source]
    assert rounds, f"no variant round makes {call}"
    rng = np.random.default_rng(seed)
    feeds = {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in graph().inputs}
    expected = compile_graph(graph(), "interpreter").run(feeds)["y"]
    for threads in thread_counts:
        actual = compile_graph(graph(), CpuBackend(num_threads=threads, variant_round=rounds[0])).run(feeds)["y"]
        assert relative_error(actual, expected) < 1e-5, threads


WINOGRAD = [
    # in channels, out channels, (H, W), pads, activation, residual: 3x3 stride 1, 32+ channels
    # and 32+ 2x2 tiles on a map narrower than 12 one way, so ember_winograd (F(2x2, 3x3)) runs
    # them (checked below).
    (32, 32, (16, 11), (1, 1, 1, 1), "relu", True),       # two blocks of tiles
    (33, 40, (13, 11), (1, 1, 1, 1), "clip", False),      # odd output sizes, a short last block
    (32, 35, (13, 18), (0, 0, 0, 0), "none", True),       # no padding, no bias
    (36, 32, (10, 15), (2, 1, 0, 1), "sigmoid", False),   # asymmetric padding
]

WINOGRAD4 = [
    # The same on maps of 12x12 and up, where ember_winograd4 (F(4x4, 3x3), channel-last) runs.
    (32, 32, (16, 16), (1, 1, 1, 1), "relu", True),       # whole 4x4 tiles
    (33, 40, (13, 14), (1, 1, 1, 1), "clip", False),      # partial edge tiles, channels off 16
    (32, 35, (17, 18), (0, 0, 0, 0), "none", True),       # no padding, no bias
    (36, 32, (12, 15), (2, 1, 0, 1), "sigmoid", False),   # asymmetric padding
    (64, 48, (58, 58), (0, 0, 0, 0), "relu", True),       # 196 tiles: blocks of tiles, a short last one
    (32, 32, (14, 14), (1, 1, 1, 1), "hard_swish", False),  # an activation with a scale and shift
    (40, 33, (30, 27), (1, 1, 1, 1), "relu", True),       # 2 threads split the 56 tiles (thin U)
]


def _winograd_graph(channels, out_channels, hw, pads, activation, residual) -> Graph:
    return _conv_graph(channels, out_channels, hw, (3, 3), 1, pads, activation, residual)


def _winograd_id(c) -> str:
    return f"{c[0]}to{c[1]}x{c[2][0]}x{c[2][1]}p{''.join(map(str, c[3]))}"


@pytest.mark.parametrize("case", WINOGRAD, ids=_winograd_id)
def test_winograd_convolution_matches_interpreter(case):
    assert "ember_winograd(" in compile_graph(_winograd_graph(*case), CpuBackend(num_threads=1))._executable.source
    _check_case(lambda: _winograd_graph(*case), seed=13)


@pytest.mark.parametrize("case", WINOGRAD4, ids=_winograd_id)
def test_winograd4_convolution_matches_interpreter(case):
    assert "ember_winograd4(" in compile_graph(_winograd_graph(*case), CpuBackend(num_threads=1))._executable.source
    # F(4x4, 3x3) rounds more than direct convolution (its transforms scale by up to 8 and
    # 1/24): about 1e-6 of the sums before the activation, which are ~17 here (sqrt of 9C
    # unit products), so up to ~1e-4 of an output clipped to 0.75. The interpreter's scale.
    _check_case(lambda: _winograd_graph(*case), seed=13, tolerance=2e-4)


def test_winograd_is_chosen_only_where_it_applies():
    def source(graph, winograd=True):
        return compile_graph(graph, CpuBackend(num_threads=1, winograd=winograd))._executable.source

    assert "ember_winograd(" in source(_winograd_graph(*WINOGRAD[0]))
    assert "ember_winograd(" not in source(_winograd_graph(*WINOGRAD[0]), winograd=False)
    assert "ember_winograd4(" not in source(_winograd_graph(*WINOGRAD4[0]), winograd=False)
    # Too few channels, or too few tiles (a 7x7 map), stay on the direct kernel.
    assert "ember_winograd(" not in source(_winograd_graph(16, 32, (16, 16), (1, 1, 1, 1), "relu", False))
    assert "ember_winograd(" not in source(_winograd_graph(64, 64, (7, 7), (1, 1, 1, 1), "relu", False))


PIXEL_ROWS = [
    # in channels, out channels, (H, W), kernel, stride, pads, activation, residual: small maps
    # with many output channels, where conv_pixel_rows' cost model beats the columns kernels
    # (checked below); pixel and channel counts on and off the transpose's 16 x 16 blocks.
    (96, 320, (7, 7), (1, 1), 1, (0, 0, 0, 0), "clip", False),     # MobileNetV2's tail: 3 pixel blocks + 1 row
    (37, 70, (3, 5), (1, 1), 1, (0, 0, 0, 0), "relu", True),       # fewer pixels than one block, odd channels
    (256, 96, (6, 8), (1, 1), 1, (0, 0, 0, 0), "sigmoid", True),   # 48 pixels: whole blocks both ways
    (160, 64, (1, 33), (1, 1), 1, (0, 0, 0, 0), "none", False),    # no bias, a 1-D-like map
    (48, 128, (7, 7), (3, 3), 1, (1, 1, 1, 1), "relu", True),      # ResNet's last stage: 3x3 on 7x7
    (24, 96, (14, 14), (3, 3), 2, (1, 1, 1, 1), "relu", False),    # its stride-2 entry
    (128, 512, (14, 14), (1, 1), 2, (0, 0, 0, 0), "none", False),  # the 1x1 stride-2 shortcut
    (17, 64, (6, 9), (3, 2), 1, (2, 0, 1, 1), "clip", True),        # uneven pads, a rectangular kernel
    (96, 320, (5, 7), (1, 1), 1, (0, 0, 0, 0), "hard_swish", True),  # an activation with a scale and shift
]


def _pixel_rows_graph(channels, out_channels, hw, kernel, stride, pads, activation, residual) -> Graph:
    return _conv_graph(channels, out_channels, hw, kernel, stride, pads, activation, residual)


@pytest.mark.parametrize("case", PIXEL_ROWS, ids=lambda c: f"{c[0]}to{c[1]}x{c[2][0]}x{c[2][1]}k{c[3][0]}s{c[4]}{c[6]}")
def test_pixel_rows_matches_interpreter(case):
    program = compile_graph(_pixel_rows_graph(*case), CpuBackend(num_threads=1))._executable.source
    assert "ember_conv_rows(" in program
    _check_case(lambda: _pixel_rows_graph(*case), seed=17)


def _conv1d_graph(channels, out_channels, width, kernel, stride, pad) -> Graph:
    rng = np.random.default_rng(out_channels + width)
    g = Graph("conv1d")
    x = g.add_input("x", TensorType(DType.FLOAT32, (1, channels, width)))
    w = g.add_constant(rng.standard_normal((out_channels, channels, kernel)).astype(np.float32), "w")
    b = g.add_constant(rng.standard_normal(out_channels).astype(np.float32), "b")
    attrs = FusedConvAttrs((stride,), (pad, pad), (1,), 1, "relu", 0.0, 0.0)
    g.set_outputs([("y", g.add("FusedConv", x, w, b, None, attrs=attrs, name="conv"))])
    return g


def test_pixel_rows_takes_one_dimensional_convolutions():
    """A 1-D convolution's weights are [M][C][K]: packed as the 2-D [M][C][1][K] (a real
    voice-activity model's 1-D convolutions over 4 frames reach this kernel)."""
    graph = lambda: _conv1d_graph(258, 128, 4, 3, 1, 1)  # noqa: E731
    assert "ember_conv_rows(" in compile_graph(graph(), CpuBackend(num_threads=1))._executable.source
    _check_case(graph, seed=5)


def test_pixel_rows_cost_model_keeps_large_maps_on_columns():
    """A 28x28 map fills its pixel panels (784 of 800 columns): the direct kernel stays."""
    program = compile_graph(_conv_graph(24, 128, (28, 28), (3, 3), 1, (1, 1, 1, 1), "none", False),
                            CpuBackend(num_threads=1))._executable.source
    assert "ember_conv_direct(" in program and "ember_conv_rows(" not in program


TAPS = [
    # in channels, out channels, (H, W), kernel, stride, pads, activation, residual: strided
    # convolutions with K >= 256 onto rows of 16+ pixels, which conv_taps takes (checked below):
    # whole and partial 8-pixel blocks and 32-channel panels, activations with and without a
    # residual (all applied in the transposed store), uneven pads, stride 3, no bias.
    (64, 128, (34, 34), (3, 3), 2, (1, 1, 1, 1), "relu", False),        # ResNet's 3x3 stride 2; 17 = 8 + 8 + 1 pixels
    (32, 64, (40, 36), (3, 3), 2, (1, 1, 1, 1), "sigmoid", True),       # an activation in memory, after the residual
    (48, 96, (37, 40), (3, 3), 2, (0, 1, 1, 0), "none", False),          # uneven pads, no bias, 3 panels
    (40, 64, (50, 61), (3, 3), 3, (1, 1, 1, 1), "relu", True),          # stride 3
    (16, 64, (40, 42), (5, 5), 2, (2, 1, 2, 2), "leaky_relu", True),    # 5x5, K = 400
    (30, 120, (21, 64), (3, 3), 2, (1, 1, 1, 1), "hard_swish", False),  # 120 channels: a partial last panel
]


@pytest.mark.parametrize("case", TAPS, ids=lambda c: f"{c[0]}to{c[1]}x{c[2][0]}x{c[2][1]}k{c[3][0]}s{c[4]}{c[6]}")
def test_taps_convolution_matches_interpreter(case):
    assert "ember_conv_taps(" in compile_graph(_conv_graph(*case), CpuBackend(num_threads=2))._executable.source
    _check_case(lambda: _conv_graph(*case), seed=29)


def test_taps_takes_one_dimensional_convolutions():
    """A strided 1-D convolution is a 2-D one with a unit row: one padded map row."""
    graph = lambda: _conv1d_graph(96, 64, 41, 3, 2, 1)  # noqa: E731
    assert "ember_conv_taps(" in compile_graph(graph(), CpuBackend(num_threads=2))._executable.source
    _check_case(graph, seed=31)


@pytest.mark.parametrize("case, reason", [
    ((3, 64, (64, 64), (7, 7), 2, (3, 3, 3, 3), "relu", False), "ResNet's stem: K = 147"),
    ((64, 128, (64, 64), (1, 1), 2, (0, 0, 0, 0), "none", False), "a 1x1 shortcut: K = 64"),
    ((64, 128, (40, 40), (3, 3), 1, (1, 1, 1, 1), "relu", False), "stride 1"),
    ((128, 256, (28, 28), (3, 3), 2, (1, 1, 1, 1), "relu", False), "a 14-pixel row"),
    ((512, 512, (40, 40), (3, 3), 2, (1, 1, 1, 1), "relu", False), "9.4 MB of weights"),
    ((64, 40, (40, 40), (3, 3), 2, (1, 1, 1, 1), "relu", False), "40 channels fill 40 of 64 columns"),
])
def test_taps_is_chosen_only_where_it_applies(case, reason):
    program = compile_graph(_conv_graph(*case), CpuBackend(num_threads=2))._executable.source
    assert "ember_conv_taps(" not in program, reason


def test_taps_runs_on_one_thread_where_a_measured_search_picks_it():
    """One thread keeps conv_direct on ResNet's stride-2 entry by default (conv.py says why); a
    measured search (tune=True) times conv_taps there too, and that round matches the
    interpreter."""
    graph = lambda: _conv_graph(64, 128, (34, 34), (3, 3), 2, (1, 1, 1, 1), "relu", False)  # noqa: E731
    _check_searched_round(graph, "ember_conv_taps(", seed=37, thread_counts=(1,))


def test_pixel_rows_leaves_weights_past_the_l2_to_the_columns_kernels():
    """ResNet's last stage streams 9.4 MB of weights a layer: they go through the columns
    kernels (conv_direct here), which streamed them faster; the same map with weights that fit
    in a core's L2 takes pixel rows."""
    large = compile_graph(_conv_graph(512, 512, (7, 7), (3, 3), 1, (1, 1, 1, 1), "relu", False),
                          CpuBackend(num_threads=1))._executable.source
    assert "ember_conv_direct(" in large and "ember_conv_rows(" not in large
    small = compile_graph(_conv_graph(48, 128, (7, 7), (3, 3), 1, (1, 1, 1, 1), "relu", False),
                          CpuBackend(num_threads=1))._executable.source
    assert "ember_conv_rows(" in small


def test_winograd4_weights_by_panel_equal_the_whole_transform():
    """U = G g G^T a panel of 32 output channels at a time (bounded temporaries, BLAS
    contractions) is the whole-tensor einsum to float32 rounding, zero-padded past C and M."""
    from ember.codegen.kernels.layouts import Winograd4Layout, pack_panels

    rng = np.random.default_rng(0)
    for channels, out_channels in ((33, 40), (64, 64), (32, 70)):
        layout = Winograd4Layout(channels, out_channels, (16, 16))
        w = rng.standard_normal((out_channels, channels, 3, 3)).astype(np.float32)
        u = np.einsum("ai,mcij,bj->abcm", layout.G, w.astype(np.float64), layout.G).reshape(36, channels, -1)
        padded = np.zeros((36, layout.cp, out_channels), np.float32)
        padded[:, :channels] = u
        expected = np.stack([pack_panels(plane) for plane in padded])
        actual = layout.transformed_weights(w)
        assert np.array_equal(actual == 0, expected == 0)  # the padding, and nothing else, is zero
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=0)  # float64 sums in another order
