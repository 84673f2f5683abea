"""qchain_avx512 (codegen/kernels/quantized_chain.py): the fused loops of fold-qdq's expanded
Q/DQ arithmetic in AVX-512 vectors, bit for bit against the interpreter: uint8 and int8
sources and results, a float32 operand carrying NaN, the infinities, signed zeros and values
past the 8-bit range, scales as constants and as one-element inputs, sizes that leave a
scalar tail, chains ending in float32 (a lone dequantize), and the portable build (no AVX-512)
on the same steps."""
from __future__ import annotations

import numpy as np
import pytest

from ember.driver import compile_graph, prepare_program
from ember.graph import Graph
from ember.ops.elementwise import CastAttrs, ClipAttrs
from ember.types import DType, TensorType

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 3e38, -3e38, 0.5, -0.5, 1.5, 2.5, -2.5, 127.5, 128.0,
           -128.5, -129.0, 255.5, 256.0, 1e-30]
_BACKENDS: dict = {}


def _backend(march: str | None = None):
    from ember.backends.cpu import CpuBackend

    if march not in _BACKENDS:
        _BACKENDS[march] = CpuBackend(num_threads=1, march=march)
    return _BACKENDS[march]


def _residual(shape, x_type, y_type, relu: bool, scale_input: bool, seed: int):
    """y = Q(act(DQ(a) + f)) written as fold-qdq expands it, f a float32 tensor holding the
    special values; the output scale a constant or a one-element input."""
    def build():
        rng = np.random.default_rng(seed)
        g = Graph("qchain")
        a = g.add_input("a", TensorType(x_type, shape))
        f = g.add_input("f", TensorType(DType.FLOAT32, shape))
        sy = g.add_input("sy", TensorType(DType.FLOAT32, (1,))) if scale_input else \
            g.add_constant(np.array(0.037, np.float32), "sy")
        v = g.add("Cast", a, attrs=CastAttrs(DType.FLOAT32), name="a.f")
        v = g.add("Sub", v, g.add_constant(np.array(3.0, np.float32), "za"), name="a.c")
        v = g.add("Mul", v, g.add_constant(np.array(0.021, np.float32), "sa"), name="a.dq")
        v = g.add("Add", v, f, name="add")
        if relu:
            v = g.add("Relu", v, name="relu")
        v = g.add("Round", g.add("Div", v, sy, name="q.d"), name="q.r")
        info = np.iinfo(y_type.numpy)
        v = g.add("Clip", v, attrs=ClipAttrs(float(info.min), float(info.max)), name="q.c")
        g.set_outputs([("y", g.add("Cast", v, attrs=CastAttrs(y_type), name="q"))])
        info_x = np.iinfo(x_type.numpy)
        size = int(np.prod(shape))
        floats = (rng.standard_normal(size) * 4).astype(np.float32)
        floats[:len(SPECIAL)] = SPECIAL
        floats[-len(SPECIAL):] = SPECIAL  # in the scalar tail too
        feeds = {"a": rng.integers(info_x.min, info_x.max, shape, endpoint=True).astype(x_type.numpy),
                 "f": floats.reshape(shape)}
        if scale_input:
            feeds["sy"] = np.array([0.037], np.float32)
        return g, feeds
    return build


def _run(build, march=None):
    graph, feeds = build()
    expected = compile_graph(graph, "interpreter").run(feeds)["y"]
    graph, _ = build()
    program, _, _ = prepare_program(graph, _backend(march))
    kernels = [i.kernel.name for i in program.instrs if i.name == "ElementwiseChain"]
    graph, _ = build()
    actual = compile_graph(graph, _backend(march)).run(feeds)["y"]
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)
    return kernels, expected


CASES = [  # shape, x type, y type, relu, scale as an input
    ((2, 3, 7, 9), DType.UINT8, DType.UINT8, True, False),
    ((1, 5, 13), DType.INT8, DType.INT8, False, False),
    ((4, 16), DType.UINT8, DType.INT8, False, True),
    ((3, 37), DType.INT8, DType.UINT8, True, True),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_residual_requantize_matches_interpreter(case):
    shape, x_type, y_type, relu, scale_input = CASES[case]
    kernels, y = _run(_residual(shape, x_type, y_type, relu, scale_input, case))
    assert kernels == ["qchain_avx512"]
    info = np.iinfo(y_type.numpy)
    assert (y == info.min).any() and (y == info.max).any() and len(np.unique(y)) > 20
    if not relu:  # NaN reaches the cast: 0
        assert y.reshape(-1)[0] == 0


def test_portable_build_runs_the_same_steps():
    kernels, _ = _run(_residual((2, 3, 7, 9), DType.INT8, DType.UINT8, False, True, 7), march="x86-64-v3")
    assert kernels == ["qchain_avx512"]


def test_a_float_result_and_float_models_keep_the_generic_loop():
    def dequantize():
        g = Graph("dq")
        a = g.add_input("a", TensorType(DType.INT8, (5, 19)))
        v = g.add("Cast", a, attrs=CastAttrs(DType.FLOAT32), name="a.f")
        v = g.add("Mul", g.add("Sub", v, g.add_constant(np.array(-7.0, np.float32), "z"), name="c"),
                  g.add_constant(np.array(0.5, np.float32), "s"), name="dq")
        g.set_outputs([("y", g.add("Relu", v, name="relu"))])
        return g, {"a": np.arange(-128, -128 + 95).astype(np.int8).reshape(5, 19)}

    kernels, y = _run(dequantize)
    assert kernels == ["qchain_avx512"] and y.dtype == np.float32

    def float_only():
        g = Graph("float")
        x = g.add_input("x", TensorType(DType.FLOAT32, (4, 32)))
        g.set_outputs([("y", g.add("Relu", g.add("Add", x, x, name="add"), name="relu"))])
        return g, {"x": np.linspace(-3, 3, 128, dtype=np.float32).reshape(4, 32)}

    assert _run(float_only)[0] == ["elementwise_chain"]
