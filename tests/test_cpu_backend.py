"""The cpu backend end to end: shared models and the example against their references,
deterministic and sanitized C, run-time checks that fail cleanly, the build cache."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ember
from ember.backends.cpu import CpuBackend
from ember.support.paths import cache_dir
from ember.codegen import generate_c
from ember.driver import compile_graph, compile_model
from ember.graph import Graph
from ember.support.errors import EmberError
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
    interp = ember.compile(EXAMPLES / "lenet.onnx").run(feeds)["probabilities"]
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
    sources = []
    for _ in range(2):
        captured = {}
        compile_model(_hostile_model(), observer=lambda stage, art: captured.setdefault(stage, art))
        sources.append(generate_c(captured["lir"], 2).source)
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
    source = generate_c(captured["lir"], 1).source
    if keep_intermediate:
        # The Mul result is read again later, so the chain stops there.
        assert ": Sigmoid+Mul from node" in source and ": Tanh+Sub from node" in source
    else:
        assert ": Sigmoid+Mul+Tanh+Sub from node" in source
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((4, 37)).astype(np.float32), "b": rng.standard_normal(37).astype(np.float32)}
    expected = compile_graph(_chain_graph(keep_intermediate), "interpreter").run(feeds)
    actual = compiled.run(feeds)
    for name in expected:
        assert relative_error(actual[name], expected[name]) < 1e-5
