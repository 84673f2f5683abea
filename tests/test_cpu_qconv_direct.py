"""The int8 convolution kernels over phase planes (codegen/kernels/qconv_direct.py: qconv_direct,
pixels in vector lanes; qconv_rows, pixels as GEMM rows) and the 8-bit MaxPool
(codegen/kernels/maxpool_rows.py) against the interpreter, bit for bit: strides 1 to 3, asymmetric
pads, channel counts that are not multiples of 4, output channels not of 6 or 64, uint8 and
int8 inputs and outputs, per-tensor and per-channel weight scales, with and without bias,
batches, 2 threads and the portable build (x86-64-v3: no VNNI); each case checks which kernel
was selected, so a change of the selection rule cannot hide a kernel from its test."""
from __future__ import annotations

import numpy as np
import pytest

from ember.codegen.kernels.qconv_direct import QDC_MR, executed_macs, pack_qdc_weights, pack_rows_weights
from ember.driver import compile_graph, prepare_program
from ember.ops.nn import ConvAttrs, PoolAttrs
from tests.helpers import single_node_graph

U8, I8, I32, F32 = np.uint8, np.int8, np.int32, np.float32
_BACKENDS: dict = {}


def _backend(threads: int = 1, march: str | None = None):
    from ember.backends.cpu import CpuBackend

    if (threads, march) not in _BACKENDS:
        _BACKENDS[threads, march] = CpuBackend(num_threads=threads, march=march)
    return _BACKENDS[threads, march]


def _ints(shape, dtype, seed, low=None, high=None):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min if low is None else low, info.max if high is None else high, shape,
                        endpoint=True).astype(dtype)


def _kernel(op, arrays, attrs, constant, backend) -> str:
    graph, _ = single_node_graph(op, arrays, attrs, constant)
    program, _, _ = prepare_program(graph, backend)
    return next(i.kernel.name for i in program.instrs if i.name == op)


def check(op, arrays, attrs, constant=(), threads=1, march=None) -> tuple[str, np.ndarray]:
    graph, feeds = single_node_graph(op, arrays, attrs, constant)
    expected = compile_graph(graph, "interpreter").run(feeds)["y0"]
    backend = _backend(threads, march)
    graph, _ = single_node_graph(op, arrays, attrs, constant)
    actual = compile_graph(graph, backend).run(feeds)["y0"]
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)
    return _kernel(op, arrays, attrs, constant, backend), expected


CONST = (1, 2, 3, 4, 5, 6, 7, 8)  # everything but x known at compile time, as fold-qdq writes it


def _qconv(xs, ws, x_t, y_t, per_channel, bias, seed, y_scale=0.02):
    rng = np.random.default_rng(seed)
    m = ws[0]
    w_scale = (rng.random(m if per_channel else 1) * 0.02 + 0.002).astype(F32).reshape(-1 if per_channel else ())
    return [_ints(xs, x_t, seed + 1), np.array(0.03, F32), np.array(7 if x_t == U8 else -9, x_t),
            _ints(ws, I8, seed + 2), w_scale, np.zeros(w_scale.shape, I8), np.array(y_scale, F32),
            np.array(11 if y_t == U8 else -4, y_t), _ints((m,), I32, seed + 3, -20000, 20000) if bias else None]


CASES = [  # x shape, w shape, strides, pads, x type, y type, per-channel, bias
    ((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), U8, U8, True, True),  # pixels in lanes
    ((2, 3, 19, 17), (13, 3, 7, 7), (2, 2), (3, 3, 3, 3), U8, U8, True, True),  # conv1-like, C = 3
    ((1, 6, 11, 9), (7, 6, 3, 2), (3, 2), (0, 1, 2, 0), I8, I8, False, False),  # odd strides and pads
    ((1, 64, 7, 7), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), U8, I8, True, True),  # small map: GEMM rows
    ((1, 128, 14, 14), (64, 128, 3, 3), (2, 2), (1, 1, 1, 1), I8, U8, True, False),  # stride 2 onto 7x7
    ((1, 16, 14, 14), (64, 16, 1, 1), (2, 2), (0, 0, 0, 0), I8, U8, True, False),  # 1x1: stores dominate
    ((2, 5, 6, 6), (9, 5, 2, 2), (1, 1), (0, 0, 1, 1), U8, U8, False, True),
]


KERNELS = ["qconv_direct", "qconv_direct", "qconv_direct", "qconv_rows", "qconv_rows", "qconv_direct",
           "qconv_direct"]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_qlinear_conv_kernels_match_interpreter(case):
    xs, ws, strides, pads, x_t, y_t, per_channel, bias = CASES[case]
    attrs = ConvAttrs(strides, pads, (1, 1), 1)
    arrays = _qconv(xs, ws, x_t, y_t, per_channel, bias, 10 * case)
    kernel, y = check("QLinearConv", arrays, attrs, CONST)
    assert kernel == KERNELS[case]
    info = np.iinfo(y_t)
    assert len(np.unique(y)) > 20 and (y == info.min).any() and (y == info.max).any()  # saturates both ways


def test_selection_counts_the_products_each_layout_wastes():
    """7x7 outputs on a 9-column grid fill 64 lanes with 49 pixels (and 18 of them padding
    columns): rows win; a 56x56 map of 64 channels keeps pixels in lanes (rows would compute
    7% fewer products but store each output transposed, a byte at a time)."""
    kernels = [check("QLinearConv", _qconv(xs, ws, U8, U8, True, True, 1), ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1),
                     CONST)[0] for xs, ws in (((1, 64, 56, 56), (64, 64, 3, 3)), ((1, 64, 7, 7), (64, 64, 3, 3)))]
    assert kernels == ["qconv_direct", "qconv_rows"]
    from ember.codegen.kernels.qconv_direct import _dims
    from ember.types import DType, TensorType

    def dims(c, hw, m):
        t = lambda *s: TensorType(DType.UINT8, s)  # noqa: E731
        return _dims((t(1, c, hw, hw), t(m, c, 3, 3), t(1, m, hw, hw), ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)))
    direct, rows = executed_macs(dims(512, 7, 512))
    assert direct == 512 * 64 * 4608 and rows == 49 * 512 * 4608


@pytest.mark.parametrize("threads,march", [(2, None), (1, "x86-64-v3")])
def test_threads_and_portable_build_match_interpreter(threads, march):
    for xs, ws in (((2, 20, 15, 15), (40, 20, 3, 3)), ((1, 24, 7, 7), (70, 24, 3, 3))):
        arrays = _qconv(xs, ws, U8, U8, True, True, 3, y_scale=0.05)
        check("QLinearConv", arrays, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1), CONST, threads, march)


def test_other_forms_keep_the_im2col_kernel():
    """A nonzero weight zero point, weights at run time, groups: the general kernel."""
    xs, ws = (1, 8, 9, 9), (8, 8, 3, 3)
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)
    arrays = _qconv(xs, ws, U8, U8, True, True, 5)
    arrays[5] = np.full(arrays[5].shape, 3, I8)
    assert check("QLinearConv", arrays, attrs, CONST)[0] == "qconv_im2col"
    arrays = _qconv(xs, ws, U8, U8, True, True, 5)
    assert check("QLinearConv", arrays, attrs, (1, 2, 4, 5, 6, 7, 8))[0] == "qconv_im2col"
    grouped = _qconv(xs, (8, 4, 3, 3), U8, U8, True, True, 5)
    assert check("QLinearConv", grouped, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 2), CONST)[0] == "qconv_im2col"


def test_a_bias_past_int32_headroom_keeps_the_float64_kernel():
    """The plane kernels add the bias to the int32 sum; a bias that could overflow it with
    some input (|bias| + 255 sum |w| >= 2^31) goes to qconv_im2col, which adds it in float64."""
    xs, ws = (1, 8, 9, 9), (6, 8, 3, 3)
    arrays = _qconv(xs, ws, U8, U8, True, True, 6, y_scale=1e6)
    arrays[8] = np.array([2 ** 31 - 1, -2 ** 31, 5, 2 ** 31 - 40000, 0, -7], I32)
    assert check("QLinearConv", arrays, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1), CONST)[0] == "qconv_im2col"
    depthwise = _qconv(xs, (8, 1, 3, 3), U8, U8, True, True, 6, y_scale=1e6)
    depthwise[8] = np.full(8, 2 ** 31 - 100, I32)
    assert check("QLinearConv", depthwise, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 8), CONST)[0] == "qconv_im2col"
    arrays[8] = np.array([2 ** 31 - 10 ** 7, -2 ** 31 + 10 ** 7, 5, 0, 0, -7], I32)  # room left: folded, exact
    assert check("QLinearConv", arrays, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1), CONST)[0] == "qconv_direct"


@pytest.mark.parametrize("hw,c,m,y_t", [(12, 16, 20, U8), (7, 64, 64, I8)])
def test_products_past_int32_clamp_before_rounding(hw, c, m, y_t):
    """A tiny y_scale makes acc * x_scale * w_scale / y_scale pass 2^31: the kernels clamp in
    float64 first (EMBER_QDC_WIDE) instead of leaving it to the pack's saturation."""
    from ember.codegen.kernels.qconv_direct import requant_mode

    arrays = _qconv((1, c, hw, hw), (m, c, 3, 3), U8, y_t, True, True, 9, y_scale=1e-9)
    arrays[0][0, :, 2:5, 2:5] = arrays[2]  # some windows of zero point only: bias alone, small
    arrays[8][:4] = 0
    kernel, y = check("QLinearConv", arrays, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1), CONST)
    assert kernel == ("qconv_direct" if hw == 12 else "qconv_rows")
    info = np.iinfo(y_t)
    assert (y == info.min).any() and (y == info.max).any()
    graph, _ = single_node_graph("QLinearConv", arrays, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1), CONST)
    program, _, _ = prepare_program(graph, _backend())
    conv = next(i for i in program.instrs if i.name == "QLinearConv")
    assert "EMBER_QDC_WIDE" in requant_mode(conv)
    normal = _qconv((1, c, hw, hw), (m, c, 3, 3), U8, y_t, True, True, 9)
    graph, _ = single_node_graph("QLinearConv", normal, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1), CONST)
    program, _, _ = prepare_program(graph, _backend())
    conv = next(i for i in program.instrs if i.name == "QLinearConv")
    assert requant_mode(conv) == ("EMBER_QDC_SIGNED" if y_t == I8 else "0")


def test_weight_layouts():
    w = np.arange(7 * 5 * 2 * 3).reshape(7, 5, 2, 3).astype(I8)
    packed = pack_qdc_weights(w).reshape(2, 2, 3, 2, QDC_MR, 4)  # [M/6][kh][kw][C/4][6][4]
    assert packed[1, 1, 2, 0, 0, 3] == w[6, 3, 1, 2] and packed[0, 0, 1, 1, 5, 0] == w[5, 4, 0, 1]
    assert packed[1, 0, 0, 1, 1, 0] == 0 and packed[0, 0, 0, 1, 0, 1] == 0  # padded cout 7, channel 5
    panels, colsum = pack_rows_weights(w)
    assert colsum.tolist() == w.astype(np.int64).sum(axis=(1, 2, 3)).tolist()


POOLS = [  # x shape, kernel, strides, pads, ceil_mode
    ((1, 3, 12, 12), (3, 3), (2, 2), (1, 1, 1, 1), False),
    ((2, 2, 7, 9), (2, 3), (1, 2), (0, 1, 1, 0), True),
    ((1, 4, 5, 5), (5, 5), (1, 1), (2, 2, 2, 2), False),
    ((1, 32, 75, 57), (3, 3), (2, 2), (1, 1, 1, 1), True),  # 2 threads: each a run of rows, unequal
]


@pytest.mark.parametrize("case", range(len(POOLS)))
@pytest.mark.parametrize("dtype", [U8, I8])
def test_maxpool_rows_matches_interpreter_on_bytes(case, dtype):
    xs, kernel, strides, pads, ceil = POOLS[case]
    attrs = PoolAttrs(kernel, strides, pads, (1, 1), ceil)
    selected, _ = check("MaxPool", [_ints(xs, dtype, case)], attrs)
    assert selected == "maxpool_rows"
    check("MaxPool", [_ints(xs, dtype, case)], attrs, threads=2)


@pytest.mark.parametrize("case", range(len(POOLS)))
def test_maxpool_rows_matches_interpreter_on_float32_with_nans_and_infinities(case):
    """float32 pools take the same kernel: a NaN in a window gives NaN wherever it sits in
    the window (the first cell, a later one, the column maxima), -inf counts as a value."""
    xs, kernel, strides, pads, ceil = POOLS[case]
    x = np.random.default_rng(case).standard_normal(xs).astype(F32)
    flat = x.reshape(-1)
    flat[::7] = -np.inf
    flat[3::29] = np.nan
    attrs = PoolAttrs(kernel, strides, pads, (1, 1), ceil)
    selected, expected = check("MaxPool", [x], attrs)
    assert selected == "maxpool_rows" and np.isnan(expected).any() and np.isfinite(expected).any()
    check("MaxPool", [x], attrs, threads=2)


DEPTHWISE = [  # x shape, kernel, strides, pads, x type, y type, per-channel, bias
    ((1, 8, 13, 11), (3, 3), (1, 1), (1, 1, 1, 1), U8, U8, True, True),
    ((2, 5, 12, 12), (3, 3), (2, 2), (1, 1, 1, 1), I8, I8, False, True),
    ((1, 3, 9, 10), (5, 3), (2, 3), (2, 0, 1, 1), U8, I8, True, False),
]


@pytest.mark.parametrize("case", range(len(DEPTHWISE)))
@pytest.mark.parametrize("threads", [1, 2])
def test_qconv_depthwise_matches_interpreter(case, threads):
    xs, kernel, strides, pads, x_t, y_t, per_channel, bias = DEPTHWISE[case]
    c = xs[1]
    arrays = _qconv(xs, (c, 1) + kernel, x_t, y_t, per_channel, bias, 40 + case, y_scale=0.3)
    selected, y = check("QLinearConv", arrays, ConvAttrs(strides, pads, (1, 1), c), CONST, threads)
    assert selected == "qconv_depthwise"
    assert len(np.unique(y)) > 10
