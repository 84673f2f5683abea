"""The cpu backend end to end: shared models and the example against their references,
deterministic and sanitized C, run-time checks that fail cleanly, the build cache."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember
from ember.backends.cpu import CpuBackend
from ember.driver import compile_graph, compile_model
from ember.graph import Graph
from ember.support.errors import EmberError
from ember.support.paths import cache_dir
from ember.types import DType, TensorType
from tests.conftest import EXAMPLES, require_shared_models, shared_model_names
from tests.helpers import relative_error

MODELS = shared_model_names() or ["(shared models absent)"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", MODELS)
def test_shared_model_matches_reference_on_cpu(name, threads):
    folder = require_shared_models()
    model = ember.compile(folder / f"{name}.onnx", backend="cpu", num_threads=threads)
    ref = np.load(folder / f"{name}.ref.npz")
    outputs = model.run({n: ref[f"in_{n}"] for n in model.input_names})
    for index, out_name in enumerate(model.output_names):
        error = relative_error(outputs[out_name], ref[f"out_{index}"])
        assert error <= 1e-4, f"{name} output {out_name}: relative error {error:.3g}"


def test_example_on_cpu_matches_interpreter():
    ref = np.load(EXAMPLES / "lenet.ref.npz")
    feeds = {"image": ref["in_image"]}
    cpu = ember.compile(EXAMPLES / "lenet.onnx", backend="cpu").run(feeds)["probabilities"]
    interp = ember.compile(EXAMPLES / "lenet.onnx", backend="interpreter").run(feeds)["probabilities"]
    assert relative_error(cpu, interp) < 1e-5
    assert relative_error(cpu, ref["out_0"]) < 1e-5


def _hostile_model() -> onnx.ModelProto:
    name = 'x*/ #include <evil.h> /*"\\n'
    nodes = [helper.make_node("Relu", [name], ["y*/"], name="*/ system(\"rm -rf /\"); /*")]
    graph = helper.make_graph(nodes, "g*/",
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y*/", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_generated_c_is_deterministic_and_sanitized():
    sources = [compile_model(_hostile_model(), backend=CpuBackend(num_threads=2)).executable.source
               for _ in range(2)]
    assert sources[0] == sources[1]
    # Names appear only as sanitized identifiers in comments: no quote, slash or star survives.
    for raw in ("#include <evil", 'system("', "rm -rf", "*/ system", "y*/"):
        assert raw not in sources[0]
    model = ember.compile(_hostile_model(), backend="cpu")
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(model.run({model.input_names[0]: x})["y*/"], np.maximum(x, 0))


def test_gather_out_of_range_is_a_clean_error():
    g = Graph("gather")
    idx = g.add_input("idx", TensorType(DType.INT64, (2,)))
    table = g.add_constant(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    from ember.ops.tensor import AxisAttrs

    g.set_outputs([("y", g.add("Gather", table, idx, attrs=AxisAttrs(0), name="lookup"))])
    model = compile_graph(g, CpuBackend(num_threads=1))
    np.testing.assert_array_equal(model.run({"idx": np.array([3, -4])})["y"], [[9, 10, 11], [0, 1, 2]])
    with pytest.raises(EmberError, match=r"node 'lookup' \(Gather\): index out of range"):
        model.run({"idx": np.array([0, 4])})


def test_library_is_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    ember.compile(EXAMPLES / "lenet.onnx", backend="cpu", num_threads=1)
    libraries = sorted((tmp_path / "cpu").glob("*.so"))
    assert len(libraries) == 1
    stamp = libraries[0].stat().st_mtime_ns
    ember.compile(EXAMPLES / "lenet.onnx", backend="cpu", num_threads=1)
    assert sorted((tmp_path / "cpu").glob("*.so")) == libraries
    assert libraries[0].stat().st_mtime_ns == stamp
    assert cache_dir() == tmp_path


def test_missing_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler-anywhere")
    with pytest.raises(EmberError, match="no C compiler found"):
        ember.compile(EXAMPLES / "lenet.onnx", backend="cpu")


def _chain_graph(keep_intermediate: bool) -> Graph:
    g = Graph("chain")
    x = g.add_input("x", TensorType(DType.FLOAT32, (4, 37)))
    b = g.add_input("b", TensorType(DType.FLOAT32, (37,)))
    t = g.add("Sigmoid", x, name="gate")
    u = g.add("Mul", t, b, name="scale")
    v = g.add("Tanh", u, name="squash")
    outputs = [("y", g.add("Sub", v, x, name="diff"))]
    if keep_intermediate:
        outputs.append(("u", g.add("Exp", u, name="reuse")))
    g.set_outputs(outputs)
    return g


@pytest.mark.parametrize("keep_intermediate", [False, True])
def test_elementwise_chains_fuse_into_one_loop(keep_intermediate):
    captured = {}
    compiled = compile_graph(_chain_graph(keep_intermediate), CpuBackend(num_threads=1),
                             observer=lambda stage, art: captured.setdefault(stage, art))
    chains = [i for i in captured["lir"].instrs if i.name == "ElementwiseChain"]
    steps = [list(i.attrs.steps) for i in chains]
    if keep_intermediate:
        # The Mul result is read again later, so the chain stops there.
        assert steps == [["Sigmoid(x0)", "Mul(v0, x1)"], ["Tanh(x0)", "Sub(v0, x1)"]]
    else:
        assert steps == [["Sigmoid(x0)", "Mul(v0, x1)", "Tanh(v1)", "Sub(v2, x0)"]]
    assert all(i.kernel.name == "elementwise_chain" for i in chains)
    assert compiled.executable.source.count("[elementwise_chain]") == len(chains)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((4, 37)).astype(np.float32), "b": rng.standard_normal(37).astype(np.float32)}
    expected = compile_graph(_chain_graph(keep_intermediate), "interpreter").run(feeds)
    actual = compiled.run(feeds)
    for name in expected:
        assert relative_error(actual[name], expected[name]) < 1e-5


def _random_elementwise_graph(seed: int) -> Graph:
    """A random DAG of elementwise ops with broadcasting and reductions in between, so the
    memory planner reuses freed regions right next to fused chains."""
    from ember.ops.elementwise import CastAttrs
    from ember.ops.reduce import ReduceAttrs

    rng = np.random.default_rng(seed)
    g = Graph(f"random{seed}")
    shape = (2, 3, 8)
    values = [g.add_input("a", TensorType(DType.FLOAT32, shape)),
              g.add_input("b", TensorType(DType.FLOAT32, (3, 1))),
              g.add_input("c", TensorType(DType.FLOAT32, (8,)))]
    for step in range(12):
        kind = rng.integers(4)
        x = values[rng.integers(len(values))]
        y = values[rng.integers(len(values))]
        if kind == 0:
            values.append(g.add(["Tanh", "Sigmoid", "Neg", "Abs"][rng.integers(4)], x, name=f"u{step}"))
        elif kind == 1:
            values.append(g.add(["Add", "Sub", "Mul", "Max"][rng.integers(4)], x, y, name=f"b{step}"))
        elif kind == 2 and x.type.shape == shape:
            r = g.add("ReduceSum", x, attrs=ReduceAttrs((2,), True), name=f"r{step}")
            normalized = g.add("Div", x, g.add("Add", g.add("Abs", r), g.add_constant(np.float32(1.0), "one")),
                               name=f"n{step}")
            # A change of element type forces a fresh buffer, which the planner may place over
            # the reduction that just died: fused loops must not read it after writing there.
            wide = g.add("Cast", normalized, attrs=CastAttrs(DType.FLOAT64), name=f"w{step}")
            values.append(g.add("Cast", g.add("Sqrt", g.add("Abs", wide)), attrs=CastAttrs(DType.FLOAT32),
                                name=f"c{step}"))
        else:
            values.append(g.add("Exp", g.add("Neg", g.add("Abs", x)), name=f"e{step}"))
    full = [v for v in values[3:] if v.type.shape == shape] or [values[0]]
    g.set_outputs([("y", full[-1]), ("z", values[-1])] if values[-1] is not full[-1] else [("y", full[-1])])
    return g


@pytest.mark.parametrize("seed", range(25))
def test_random_elementwise_graphs_match_interpreter(seed):
    feeds = {"a": np.random.default_rng(seed).standard_normal((2, 3, 8)).astype(np.float32),
             "b": np.random.default_rng(seed + 1).standard_normal((3, 1)).astype(np.float32),
             "c": np.random.default_rng(seed + 2).standard_normal(8).astype(np.float32)}
    expected = compile_graph(_random_elementwise_graph(seed), "interpreter").run(feeds)
    actual = compile_graph(_random_elementwise_graph(seed), CpuBackend(num_threads=1)).run(feeds)
    for name in expected:
        assert relative_error(actual[name], expected[name]) < 1e-5, name


def test_fused_chain_never_reads_memory_its_result_was_placed_over():
    """Softmax in float64 then a cast back, as attention exports do: the float32 result is
    planned over the row sums that the division reads, so Div and Cast must not share a loop
    that writes the result while later rows still need their sums."""
    from ember.ops.elementwise import CastAttrs
    from ember.ops.reduce import ReduceAttrs
    from ember.ops.tensor import TransposeAttrs

    def build() -> Graph:
        g = Graph("softmax64")
        x = g.add_input("x", TensorType(DType.FLOAT32, (2, 4, 4, 6)))
        wide = g.add("Cast", x, attrs=CastAttrs(DType.FLOAT64), name="widen")
        e = g.add("Exp", wide, name="exp")
        total = g.add("ReduceSum", e, attrs=ReduceAttrs((3,), True), name="sum")
        probs = g.add("Div", e, total, name="div")
        narrow = g.add("Cast", probs, attrs=CastAttrs(DType.FLOAT32), name="narrow")
        # A non-elementwise reader keeps the cast's result an arena activation.
        g.set_outputs([("y", g.add("Transpose", narrow, attrs=TransposeAttrs((0, 1, 3, 2)), name="t"))])
        return g

    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4, 4, 6)).astype(np.float32)}
    expected = compile_graph(build(), "interpreter").run(feeds)["y"]
    actual = compile_graph(build(), CpuBackend(num_threads=1)).run(feeds)["y"]
    assert relative_error(actual, expected) < 1e-6


@pytest.mark.parametrize("constant", [(), (1,), (1, 2)])
def test_matmul_and_gemm_with_an_empty_inner_dimension_give_the_epilogue_of_zeros(constant):
    # A sum over nothing is 0: C kernels once divided by K here and killed the process.
    from ember.ops.nn import GemmAttrs
    from tests.helpers import single_node_graph

    rng = np.random.default_rng(0)
    a, b, bias = np.zeros((3, 0), np.float32), np.zeros((0, 5), np.float32), rng.standard_normal(5).astype(np.float32)
    for op, arrays, attrs in [("MatMul", [a, b], None), ("Gemm", [a, b, bias], GemmAttrs())]:
        graph, feeds = single_node_graph(op, arrays[:3], attrs, constant=constant)
        got = compile_graph(graph, CpuBackend(num_threads=2)).run(feeds)["y0"]
        expected = np.zeros((3, 5), np.float32) + (bias if op == "Gemm" else 0)
        np.testing.assert_array_equal(got, expected)
