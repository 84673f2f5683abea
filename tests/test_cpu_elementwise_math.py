"""Edge cases for the cpu backend's C expressions of the math.py elementwise ops (inverse and
hyperbolic trigonometry, Mish, Selu, Celu, ThresholdedRelu, Shrink, PRelu, IsNaN, IsInf, the
bitwise family, BitShift): NaN, infinities, large magnitudes, integer extremes, broadcasting
and fused ElementwiseChain loops, each checked against the interpreter (the NumPy references).
Inputs are graph inputs, not constants, so nothing folds away before the C runs."""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401
from ember.driver import compile_graph
from ember.graph import Graph
from ember.ops.math import BitShiftAttrs, CeluAttrs, IsInfAttrs, SeluAttrs, ShrinkAttrs, ThresholdAttrs
from ember.types import DType, TensorType

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FLOATS = [DType.FLOAT32, DType.FLOAT64]
INTS = [DType.INT8, DType.INT16, DType.INT32, DType.INT64, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64]

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-5, -1e-5, 0.1, -0.1, 0.5, -0.5, 0.99, -0.99,
           1.0, -1.0, 1.5, -1.5, 3.0, -3.0, 20.0, -20.0, 88.0, -88.0, 100.0, -100.0, 710.0, -710.0,
           1e30, -1e30, 3e38, -3e38]


def _special(dtype: DType) -> np.ndarray:
    return np.array(SPECIAL, dtype=np.float64).astype(dtype.numpy)


def _extremes(dtype: DType) -> np.ndarray:
    info = np.iinfo(dtype.numpy)
    values = [info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 7, 100, info.max - 1, info.max]
    return np.array([v for v in values if info.min <= v <= info.max], dtype=dtype.numpy)


def _graph(op: str, arrays: list[np.ndarray], attrs=None) -> tuple[Graph, dict[str, np.ndarray]]:
    g = Graph(op)
    inputs, feeds = [], {}
    for i, a in enumerate(arrays):
        inputs.append(g.add_input(f"x{i}", TensorType(DType.from_numpy(a.dtype), a.shape)))
        feeds[f"x{i}"] = a
    g.set_outputs([("y", g.add(op, *inputs, attrs=attrs, name="node"))])
    return g, feeds


def _check(build, observe=None):
    from ember.backends.cpu import CpuBackend

    graph, feeds = build()
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = build()
    actual = compile_graph(graph, CpuBackend(num_threads=1), observer=observe).run(feeds)
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            # The references compute in float64 and round once, as the C does: NaN and the
            # infinities must match exactly, finite values to the last bit or two.
            rtol = 1e-6 if want.dtype == np.float32 else 1e-13
            np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True, err_msg=name)


UNARY_FLOAT = ["Acos", "Asin", "Atan", "Sinh", "Cosh", "Tan", "Asinh", "Acosh", "Atanh", "Mish", "IsNaN"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary_float_special_values(op, dtype):
    _check(lambda: _graph(op, [_special(dtype)]))


PARAMETERIZED = [
    ("Selu", SeluAttrs()),
    ("Selu", SeluAttrs(alpha=2.5, gamma=0.75)),
    ("Celu", CeluAttrs()),
    ("Celu", CeluAttrs(2.0)),
    ("Celu", CeluAttrs(0.3)),
    ("ThresholdedRelu", ThresholdAttrs()),
    ("ThresholdedRelu", ThresholdAttrs(0.1)),  # float32(0.1) > 0.1 in float64, as the reference compares
    ("ThresholdedRelu", ThresholdAttrs(-1.5)),
    ("Shrink", ShrinkAttrs()),
    ("Shrink", ShrinkAttrs(bias=0.3, lambd=0.1)),
    ("Shrink", ShrinkAttrs(bias=2.0, lambd=1.0)),
    ("IsInf", IsInfAttrs()),
    ("IsInf", IsInfAttrs(detect_negative=False, detect_positive=True)),
    ("IsInf", IsInfAttrs(detect_negative=True, detect_positive=False)),
    ("IsInf", IsInfAttrs(detect_negative=False, detect_positive=False)),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op,attrs", PARAMETERIZED, ids=[f"{op}-{i}" for i, (op, _) in enumerate(PARAMETERIZED)])
def test_parameterized_special_values(op, attrs, dtype):
    _check(lambda: _graph(op, [_special(dtype)], attrs))


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("attrs", [ShrinkAttrs(), ShrinkAttrs(bias=0.5, lambd=1.5), ShrinkAttrs(bias=-1.25, lambd=0.0)])
def test_shrink_integers(attrs, dtype):
    # The reference computes in float64 and truncates toward zero; stay clear of the values
    # whose float64 result falls outside the type (undefined in C and NumPy alike).
    x = _extremes(dtype)
    if dtype.itemsize < 8:
        info = np.iinfo(dtype.numpy)
        x = x[(x.astype(np.float64) > info.min + 2) & (x.astype(np.float64) < info.max - 2)]
    else:
        x = x[np.abs(x.astype(np.float64)) < 2.0**52]
    _check(lambda: _graph("Shrink", [x], attrs))


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (5,), (1,), (2, 3, 4, 5), (1, 4, 1)])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_prelu_broadcasting_floats(slope_shape, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5)).astype(dtype.numpy) * 10
    x.flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e30, -1e30]
    slope = rng.standard_normal(slope_shape).astype(dtype.numpy)
    if slope.size > 3:
        slope.flat[:3] = [np.nan, np.inf, 0.0]
    _check(lambda: _graph("PRelu", [x, slope]))


@pytest.mark.parametrize("dtype", [DType.INT8, DType.INT32, DType.INT64, DType.UINT8, DType.UINT64], ids=str)
def test_prelu_integers_wrap_like_numpy(dtype):
    x = np.tile(_extremes(dtype), (3, 1))
    slope = np.array([[3], [-1], [2]]).astype(dtype.numpy)  # int8 -128 * -1 wraps to -128
    _check(lambda: _graph("PRelu", [x, slope]))


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary_extremes_broadcast(op, dtype):
    e = _extremes(dtype)
    _check(lambda: _graph(op, [e.reshape(-1, 1), e.reshape(1, -1)]))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_bitwise_not_extremes(dtype):
    _check(lambda: _graph("BitwiseNot", [_extremes(dtype)]))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_bitshift_amounts_and_extremes(dtype, direction):
    bits = dtype.itemsize * 8
    amounts = [0, 1, 3, bits - 1, bits, bits + 1, 100]
    if np.dtype(dtype.numpy).kind == "i":
        amounts += [-1, -bits]
    amounts = [a for a in amounts if a <= np.iinfo(dtype.numpy).max]
    x = _extremes(dtype).reshape(-1, 1)
    y = np.array(amounts, dtype=dtype.numpy).reshape(1, -1)
    _check(lambda: _graph("BitShift", [x, y], BitShiftAttrs(direction)))


def _chain_lir_steps(build):
    captured = {}
    _check(build, observe=lambda stage, art: captured.setdefault(stage, art))
    return [list(i.attrs.steps) for i in captured["lir"].instrs if i.name == "ElementwiseChain"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_selu_after_add_fuses_into_a_chain(dtype):
    def build():
        g = Graph("chain")
        x = g.add_input("x", TensorType(dtype, (3, 11)))
        b = g.add_input("b", TensorType(dtype, (11,)))
        s = g.add("Selu", g.add("Add", x, b, name="add"), attrs=SeluAttrs(), name="selu")
        m = g.add("Mish", s, name="mish")
        c = g.add("Celu", g.add("Sub", m, x, name="sub"), attrs=CeluAttrs(0.5), name="celu")
        g.set_outputs([("y", g.add("IsInf", c, attrs=IsInfAttrs(), name="inf")),
                       ("z", g.add("Atan", x, name="atan"))])
        rng = np.random.default_rng(1)
        feeds = {"x": (rng.standard_normal((3, 11)) * 5).astype(dtype.numpy),
                 "b": rng.standard_normal(11).astype(dtype.numpy)}
        feeds["x"].flat[:4] = [np.nan, np.inf, -np.inf, 1e30]
        return g, feeds

    steps = _chain_lir_steps(build)
    assert any(any(s.startswith("Selu(") for s in chain) for chain in steps), steps
    assert any(["Add(x0, x1)", "Selu(v0)"] == chain[:2] for chain in steps), steps


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_chain_values(dtype):
    def build():
        g = Graph("chain")
        x = g.add_input("x", TensorType(dtype, (4, 9)))
        b = g.add_input("b", TensorType(dtype, (9,)))
        v = g.add("Add", x, b, name="add")
        v = g.add("Selu", v, attrs=SeluAttrs(), name="selu")
        v = g.add("Shrink", v, attrs=ShrinkAttrs(0.25, 0.5), name="shrink")
        v = g.add("Tan", v, name="tan")
        v = g.add("ThresholdedRelu", v, attrs=ThresholdAttrs(0.2), name="thr")
        g.set_outputs([("y", g.add("PRelu", v, b, name="prelu"))])
        rng = np.random.default_rng(2)
        feeds = {"x": (rng.standard_normal((4, 9)) * 3).astype(dtype.numpy),
                 "b": rng.standard_normal(9).astype(dtype.numpy)}
        feeds["x"].flat[:3] = [np.nan, np.inf, -np.inf]
        return g, feeds

    steps = _chain_lir_steps(build)
    assert steps and steps[0][:2] == ["Add(x0, x1)", "Selu(v0)"], steps
    assert len(steps) == 1 and len(steps[0]) == 6, steps


@pytest.mark.parametrize("dtype", [DType.INT8, DType.UINT16, DType.INT32, DType.UINT64], ids=str)
def test_integer_chain(dtype):
    def build():
        g = Graph("chain")
        x = g.add_input("x", TensorType(dtype, (5, 12)))
        s = g.add_input("s", TensorType(dtype, (12,)))
        v = g.add("BitwiseXor", x, s, name="xor")
        v = g.add("BitShift", v, s, attrs=BitShiftAttrs("LEFT"), name="shl")
        v = g.add("BitwiseNot", v, name="not")
        v = g.add("BitShift", v, s, attrs=BitShiftAttrs("RIGHT"), name="shr")
        g.set_outputs([("y", g.add("BitwiseOr", g.add("BitwiseAnd", v, x, name="and"), s, name="or"))])
        rng = np.random.default_rng(3)
        info = np.iinfo(dtype.numpy)
        xs = rng.integers(info.min, info.max, (5, 12), dtype=dtype.numpy, endpoint=True)
        xs.flat[:len(_extremes(dtype))] = _extremes(dtype)
        bits = dtype.itemsize * 8
        shifts = np.array([0, 1, 2, 3, bits - 1, bits, bits + 1, 5, 7, 0, 1, min(100, info.max)], dtype=dtype.numpy)
        return g, {"x": xs, "s": shifts}

    steps = _chain_lir_steps(build)
    assert len(steps) == 1 and [s.split("(")[0] for s in steps[0]] == [
        "BitwiseXor", "BitShift", "BitwiseNot", "BitShift", "BitwiseAnd", "BitwiseOr"], steps
