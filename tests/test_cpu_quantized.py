"""The quantization kernels on the cpu backend (codegen/kernels/quantized.py) against the
interpreter, with exact equality (every output is an integer, or a float computed in the
same order): QuantizeLinear / DequantizeLinear per tensor, per axis (negative axes) and
blocked, saturating at both ends and rounding ties to even; DynamicQuantizeLinear; the
integer GEMM behind MatMulInteger / QLinearMatMul / ConvInteger / QLinearConv over every
uint8/int8 pairing, zero points per tensor, row and column, odd sizes (K not a multiple of 4,
M not of 6, N not of 64), batches, constant and run-time B, 1 and 2 threads and the AVX2
build (portable inner loop instead of VNNI); and the forms refused with a reason."""
from __future__ import annotations

import numpy as np
import pytest

from ember.codegen.kernels import C_KERNELS, OpView
from ember.driver import compile_graph
from ember.ops.nn import ConvAttrs
from ember.ops.quant import QuantizeAttrs
from ember.support.errors import EmberError
from ember.types import DType, TensorType
from tests.helpers import single_node_graph

U8, I8, U16, I16, I32, F32, F64 = np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64
_BACKENDS: dict = {}


def _backend(threads: int, march: str | None):
    from ember.backends.cpu import CpuBackend

    key = (threads, march)
    if key not in _BACKENDS:
        _BACKENDS[key] = CpuBackend(num_threads=threads, march=march)
    return _BACKENDS[key]


def _ints(shape, dtype, seed=0, low=None, high=None) -> np.ndarray:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    lo = info.min if low is None else low
    hi = info.max if high is None else high
    return np.asarray(rng.integers(lo, hi, shape, endpoint=True)).astype(dtype)


def _floats(shape, seed=0, scale=1.0, dtype=F32) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def check(op: str, arrays: list, attrs=None, constant: tuple[int, ...] = (), threads: int = 1,
          march: str | None = None) -> dict:
    """Runs `op` on cpu and on the interpreter and requires identical results."""
    graph, feeds = single_node_graph(op, arrays, attrs, constant)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs, constant)
    actual = compile_graph(graph, _backend(threads, march)).run(feeds)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        np.testing.assert_array_equal(actual[name], value, err_msg=name)
    return expected


def refusal(op: str, arrays: list, attrs=None) -> str:
    graph, _ = single_node_graph(op, arrays, attrs)
    with pytest.raises(EmberError) as info:
        compile_graph(graph, _backend(1, None))
    return str(info.value)


# QuantizeLinear / DequantizeLinear --------------------------------------------------------


def _params(x_shape, axis, block, out, seed, scale_dtype=F32):
    """A scale and zero point for the form: per tensor (axis None), per axis or blocked."""
    if axis is None:
        shape: tuple[int, ...] = ()
    elif block:
        a = axis % len(x_shape)
        shape = x_shape[:a] + (-(-x_shape[a] // block),) + x_shape[a + 1:]
    else:
        shape = (x_shape[axis],)
    scale = np.asarray(np.random.default_rng(seed).random(shape) * 0.1 + 0.01).astype(scale_dtype)
    wide = np.dtype(out).itemsize > 1  # 16-bit zero points stay near 0 so both ends saturate
    low, high = (-300 if np.dtype(out).kind == "i" else 0, 300) if wide else (None, None)
    return scale, _ints(shape, out, seed + 1, low, high)


FORMS = [(None, 0), (1, 0), (-1, 0), (0, 0), (1, 2), (-1, 3), (0, 4)]  # (axis, block_size)


@pytest.mark.parametrize("out", [U8, I8, U16, I16])
@pytest.mark.parametrize("axis,block", FORMS)
def test_quantize_matches_interpreter(out, axis, block):
    shape = (3, 5, 7)
    scale, zero = _params(shape, axis, block, out, 3)
    x = _floats(shape, 1, scale=20.0 if np.dtype(out).itemsize == 1 else 2000.0)  # saturates both ends
    attrs = QuantizeAttrs(DType.from_numpy(out), 0 if axis is None else axis, block)
    y = check("QuantizeLinear", [x, scale, zero], attrs)["y0"]
    info = np.iinfo(out)
    assert (y == info.min).any() and (y == info.max).any()  # both saturation ends were exercised


def test_quantize_rounds_ties_to_even_and_saturates():
    scale = np.array(0.5, F32)  # x / 0.5 = exact halves
    x = np.array([-0.25, 0.25, 0.75, 1.25, -1.25, 63.25, 63.75, 200.0, -200.0, np.inf, -np.inf, 0.0], F32)
    y = check("QuantizeLinear", [x, scale, np.array(3, U8)], QuantizeAttrs(DType.UINT8))["y0"]
    assert y.tolist() == [3, 3, 5, 5, 1, 129, 131, 255, 0, 255, 0, 3]
    y = check("QuantizeLinear", [x, scale, None], QuantizeAttrs(DType.INT8))["y0"]
    assert y.tolist() == [0, 0, 2, 2, -2, 126, 127, 127, -128, 127, -128, 0]


@pytest.mark.parametrize("x_dtype", [F64, I32])
def test_quantize_other_inputs_matches_interpreter(x_dtype):
    shape = (4, 9)
    x = _floats(shape, 2, 30.0).astype(x_dtype) if x_dtype == F64 else _ints(shape, I32, 2, -5000, 5000)
    scale = np.array([0.3, 7.0, 0.125, 1.5], F64 if x_dtype == F64 else F32)
    check("QuantizeLinear", [x, scale, _ints((4,), I8, 5)], QuantizeAttrs(DType.INT8, 0))


@pytest.mark.parametrize("threads,march", [(2, None), (1, "x86-64-v3")])
def test_quantize_threads_and_avx2_matches_interpreter(threads, march):
    shape = (64, 33, 70)  # large enough to split across threads
    scale, zero = _params(shape, 1, 4, U8, 7)
    check("QuantizeLinear", [_floats(shape, 8, 10.0), scale, zero], QuantizeAttrs(DType.UINT8, 1, 4),
          threads=threads, march=march)
    check("QuantizeLinear", [_floats(shape, 9, 10.0), np.array(0.07, F32), np.array(-3, I8)],
          QuantizeAttrs(DType.INT8), threads=threads, march=march)


@pytest.mark.parametrize("x_dtype", [U8, I8, U16, I16, I32])
@pytest.mark.parametrize("axis,block", FORMS)
def test_dequantize_matches_interpreter(x_dtype, axis, block):
    shape = (4, 6, 5)
    zdtype = x_dtype
    scale, zero = _params(shape, axis, block, I16 if x_dtype == I32 else zdtype, 11)
    zero = zero.astype(zdtype) if x_dtype != I32 else np.zeros_like(zero, I32)
    x = _ints(shape, x_dtype, 12) if x_dtype != I32 else _ints(shape, I32, 12, -2**30, 2**30)
    attrs = QuantizeAttrs(DType.FLOAT32, 0 if axis is None else axis, block)
    check("DequantizeLinear", [x, scale, zero], attrs)


def test_dequantize_to_double_without_zero_point_matches_interpreter():
    x = _ints((2, 3, 1), I8, 4)
    check("DequantizeLinear", [x, np.array([0.5, 3.25, 1e-3], F64), None], QuantizeAttrs(DType.FLOAT64, -2),
          threads=2)


@pytest.mark.parametrize("shape,scale,offset", [((6,), 3.0, 0.0), ((3, 4), 2.0, 5.0), ((2, 5, 7), 1.0, -9.0),
                                                ((1,), 1.0, 0.0), ((0, 3), 1.0, 0.0), ((4,), 0.0, 0.0)])
def test_dynamic_quantize_matches_interpreter(shape, scale, offset):
    x = _floats(shape, 13, scale) + np.float32(offset)  # mixed signs, all positive, all negative
    check("DynamicQuantizeLinear", [x])


def test_dynamic_quantize_ties_and_nan():
    x = np.array([0.0, 2.55, -2.55, 1.275, 0.005, -0.015], F32)  # scale 0.02: halves in x / scale
    check("DynamicQuantizeLinear", [x], march="x86-64-v3")
    x[2] = np.nan  # the interpreter's range becomes [0, 0]
    y, s, z = check("DynamicQuantizeLinear", [x]).values()
    assert s == np.float32(1 / 255) and z == 0


# MatMulInteger / QLinearMatMul -------------------------------------------------------------


def _zero(kind, dtype, size, seed):
    """A zero point: absent (None), per tensor ('t') or per row/column ('v')."""
    if kind is None:
        return None
    return _ints((size,) if kind == "v" else (), dtype, seed)


PAIRS = [(U8, I8), (U8, U8), (I8, I8), (I8, U8)]


@pytest.mark.parametrize("a_t,b_t", PAIRS)
@pytest.mark.parametrize("m,k,n,za,zb,const_b", [
    (1, 1, 1, None, None, False), (7, 13, 70, "t", "t", True), (12, 8, 64, "v", "v", False),
    (5, 31, 3, "t", "v", True), (13, 4, 129, "v", None, True), (2, 0, 3, "t", "t", False)])
def test_matmul_integer_matches_interpreter(a_t, b_t, m, k, n, za, zb, const_b):
    a, b = _ints((m, k), a_t, 1), _ints((k, n), b_t, 2)
    arrays = [a, b, _zero(za, a_t, m, 3), _zero(zb, b_t, n, 4)]
    check("MatMulInteger", arrays, constant=(1,) if const_b else ())


@pytest.mark.parametrize("threads,march", [(2, None), (1, "x86-64-v3"), (2, "x86-64-v3")])
@pytest.mark.parametrize("const_b", [True, False])
def test_matmul_integer_threads_and_avx2_matches_interpreter(threads, march, const_b):
    a, b = _ints((45, 130), U8, 5), _ints((130, 200), I8, 6)  # 2**18+ products: split across threads
    check("MatMulInteger", [a, b, np.array(131, U8), _ints((200,), I8, 7)], constant=(1,) if const_b else (),
          threads=threads, march=march)


@pytest.mark.parametrize("a_shape,b_shape,const_b", [
    ((2, 3, 5, 9), (9, 6), True), ((2, 3, 5, 9), (9, 6), False), ((3, 4, 10), (3, 10, 7), False),
    ((1, 4, 10), (3, 10, 7), False), ((3, 4, 10), (1, 10, 7), False), ((10,), (10, 3), True), ((4, 10), (10,), False)])
def test_matmul_integer_batches_matches_interpreter(a_shape, b_shape, const_b):
    a, b = _ints(a_shape, I8, 8), _ints(b_shape, U8, 9)
    check("MatMulInteger", [a, b, np.array(-5, I8), np.array(200, U8)], constant=(1,) if const_b else (), threads=2)


def test_matmul_integer_per_row_zero_point_with_batches_matches_interpreter():
    a, b = _ints((2, 6, 11), U8, 10), _ints((11, 5), U8, 11)
    check("MatMulInteger", [a, b, _ints((6,), U8, 12), _ints((5,), U8, 13)], constant=(1,))


def _qlinear(a, b, per_row_a, per_col_b, y_dtype, seed, y_scale=None):
    m, n = a.shape[-2], b.shape[-1]
    rng = np.random.default_rng(seed)
    sa = (rng.random(m if per_row_a else 1) * 0.05 + 0.01).astype(F32)
    sb = (rng.random(n if per_col_b else 1) * 0.05 + 0.01).astype(F32)
    sy = np.array([y_scale if y_scale is not None else 0.02 * a.shape[-1] ** 0.5], F32)
    za = _ints(sa.shape, a.dtype, seed + 1, *((0, 255) if a.dtype == U8 else (-128, 127)))
    zb = _ints(sb.shape, b.dtype, seed + 2)
    return [a, sa, za, b, sb, zb, sy, _ints((1,), y_dtype, seed + 3, -20 if y_dtype == I8 else 100, 20 if
                                            y_dtype == I8 else 150)]


@pytest.mark.parametrize("a_t,b_t", PAIRS)
@pytest.mark.parametrize("m,k,n,per_row,per_col,const_b", [
    (1, 1, 1, False, False, False), (7, 13, 70, False, True, True), (12, 33, 65, True, True, False),
    (6, 64, 64, True, False, True), (2, 3, 5, False, False, True)])
def test_qlinear_matmul_matches_interpreter(a_t, b_t, m, k, n, per_row, per_col, const_b):
    arrays = _qlinear(_ints((m, k), a_t, 20), _ints((k, n), b_t, 21), per_row, per_col, a_t, 22)
    check("QLinearMatMul", arrays, constant=(3,) if const_b else ())


@pytest.mark.parametrize("threads,march", [(2, None), (1, "x86-64-v3")])
def test_qlinear_matmul_saturates_and_batches_matches_interpreter(threads, march):
    arrays = _qlinear(_ints((3, 20, 70), U8, 30), _ints((70, 90), I8, 31), False, True, U8, 32, y_scale=0.05)
    y = check("QLinearMatMul", arrays, constant=(3,), threads=threads, march=march)["y0"]
    assert (y == 0).any() and (y == 255).any()
    arrays = _qlinear(_ints((2, 20, 70), I8, 33), _ints((2, 70, 9), I8, 34), True, False, I8, 35, y_scale=0.04)
    y = check("QLinearMatMul", arrays, threads=threads, march=march)["y0"]
    assert (y == -128).any() and (y == 127).any()


def test_qlinear_matmul_rounds_ties_to_even():
    a, b = np.array([[1], [3], [5], [2]], U8), np.array([[1]], U8)
    arrays = [a, np.array([0.5], F32), np.array([0], U8), b, np.array([1.0], F32), np.array([0], U8),
              np.array([1.0], F32), np.array([10], U8)]
    assert check("QLinearMatMul", arrays)["y0"].ravel().tolist() == [10, 12, 12, 11]


# ConvInteger / QLinearConv -----------------------------------------------------------------


CONVS = [  # x shape, w shape, strides, pads, dilations, group
    ((1, 1, 3, 3), (1, 1, 2, 2), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 3, 9, 8), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 4, 10, 11), (6, 2, 3, 2), (2, 3), (1, 0, 2, 1), (1, 2), 2),
    ((1, 8, 5, 5), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),
    ((1, 16, 6, 6), (70, 16, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("x_t,w_t", PAIRS)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv_integer_matches_interpreter(x_t, w_t, case):
    xs, ws, strides, pads, dilations, group = CONVS[case]
    attrs = ConvAttrs(strides, pads, dilations, group)
    zw = _ints((ws[0],), w_t, 3) if case % 2 else np.array(7, w_t)  # per output channel, per tensor
    const_w = (case + PAIRS.index((x_t, w_t))) % 2 == 0  # weights packed at compile time or at run time
    check("ConvInteger", [_ints(xs, x_t, 1), _ints(ws, w_t, 2), np.array(100, x_t), zw], attrs,
          constant=(1,) if const_w else ())


def test_conv_integer_without_zero_points_threads_matches_interpreter():
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)
    for threads, march in ((2, None), (1, "x86-64-v3")):
        check("ConvInteger", [_ints((1, 32, 16, 16), U8, 4), _ints((48, 32, 3, 3), I8, 5), None, None], attrs,
              constant=(1,), threads=threads, march=march)


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("y_t", [U8, I8])
def test_qlinear_conv_matches_interpreter(case, y_t):
    xs, ws, strides, pads, dilations, group = CONVS[case]
    attrs = ConvAttrs(strides, pads, dilations, group)
    rng = np.random.default_rng(case)
    m = ws[0]
    w_scale = (rng.random(m if case % 2 else 1) * 0.05 + 0.01).astype(F32)
    w_zero = _ints(w_scale.shape, I8, 6)
    bias = _ints((m,), I32, 7, -3000, 3000) if case != 1 else None
    x_t = U8 if y_t == U8 else I8
    arrays = [_ints(xs, x_t, 8), np.array(0.04, F32), np.array(3, x_t), _ints(ws, I8, 9), w_scale, w_zero,
              np.array(0.5, F32), np.array(5, y_t), bias]
    y = check("QLinearConv", arrays, attrs, constant=(3, 4, 5, 8) if case % 2 else (), threads=2)["y0"]
    info = np.iinfo(y_t)
    if case == 1:
        assert (y == info.min).any() and (y == info.max).any()


# Refusals ----------------------------------------------------------------------------------


def _view(op, results, operands, attrs=None) -> OpView:
    return OpView(op, attrs, tuple(results), tuple(operands), (False,) * len(operands), "node")


def test_refused_forms_name_the_form():
    f32 = TensorType(DType.FLOAT32, (4,))
    scale = TensorType(DType.FLOAT32, ())
    from_i8 = _view("QuantizeLinear", [TensorType(DType.UINT8, (4,))], [TensorType(DType.INT8, (4,)), scale, None],
                    QuantizeAttrs(DType.UINT8))
    assert C_KERNELS["quantize_linear"].accepts(from_i8) == "QuantizeLinear from int8 has no C kernel"
    from_i64 = _view("DequantizeLinear", [f32], [TensorType(DType.INT64, (4,)), scale, None],
                     QuantizeAttrs(DType.FLOAT32))
    assert C_KERNELS["dequantize_linear"].accepts(from_i64) == "DequantizeLinear from int64 has no C kernel"
    # The narrow and 16-bit forms convert element by element (tests/test_cpu_halves.py runs them).
    to_f8 = _view("QuantizeLinear", [TensorType(DType.FLOAT8E4M3FN, (4,))], [f32, scale, None],
                  QuantizeAttrs(DType.FLOAT8E4M3FN))
    assert C_KERNELS["quantize_linear"].accepts(to_f8) is None
    to_f16 = _view("DequantizeLinear", [TensorType(DType.FLOAT16, (4,))],
                   [TensorType(DType.INT4, (4,)), TensorType(DType.FLOAT16, ()), None], QuantizeAttrs(DType.FLOAT16))
    assert C_KERNELS["dequantize_linear"].accepts(to_f16) is None
    u8 = TensorType(DType.UINT8, (2, 2))
    f16 = TensorType(DType.FLOAT16, (1,))
    qmm = _view("QLinearMatMul", [u8], [u8, f16, TensorType(DType.UINT8, (1,)), u8, f16,
                                        TensorType(DType.UINT8, (1,)), f16, TensorType(DType.UINT8, (1,))])
    assert C_KERNELS["qgemm"].accepts(qmm) == "QLinearMatMul with float16 scales has no C kernel"


def test_refusals_at_compile_time():
    big = refusal("MatMulInteger", [np.zeros((1, 33026), U8), np.zeros((33026, 1), U8), None, None])
    assert "MatMulInteger with K = 33026 > 33025 could overflow" in big
    zb = refusal("MatMulInteger", [np.zeros((2, 3), U8), np.zeros((3, 4), U8), None, np.zeros((1, 4), U8)])
    assert "B zero point of shape [1, 4] has no C kernel" in zb
    conv = refusal("ConvInteger", [np.zeros((1, 2, 5), U8), np.zeros((3, 2, 2), U8), None, None],
                   ConvAttrs((1,), (0, 0), (1,), 1))
    assert "only 2-D (NCHW) ConvInteger has a C kernel" in conv
