"""The resource budget (ember/support/limits.py): small model files that ask for huge
allocations are refused before anything is allocated, naming the node or tensor, the size and
the limit; results too large to fold at compile time stay run-time nodes."""
from __future__ import annotations

import resource

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontends.onnx import load_onnx
from ember.support.errors import EmberError
from ember.support.limits import ResourceLimitError, current


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "limits", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _constant_of_shape(dims):
    shape = numpy_helper.from_array(np.array(dims, np.int64), "shape")
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"],
                            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5]))
    return _model([node], [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_a_tiny_file_cannot_make_a_huge_constant():
    """1 GiB asked for by a ~100-byte model: not folded (the node computes at run time)."""
    model = _constant_of_shape([1 << 28])
    assert len(model.SerializeToString()) < 200
    before = _peak_rss_bytes()
    graph = load_onnx(model)
    assert _peak_rss_bytes() - before < 256 << 20
    assert graph.op_counts() == {"Expand": 1}
    assert max(c.data.nbytes for c in graph.constants.values()) <= 4
    assert graph.outputs[0].value.type.shape == (1 << 28,)


def test_small_results_still_fold():
    graph = load_onnx(_constant_of_shape([2, 3]))
    assert graph.op_counts() == {}
    (constant,) = graph.constants.values()
    np.testing.assert_array_equal(constant.data, np.full((2, 3), 1.5, np.float32))


def test_folded_result_runs_the_same():
    m = ember.compile(_constant_of_shape([3, 5]), backend="interpreter")
    np.testing.assert_array_equal(m.run({})["y"], np.full((3, 5), 1.5, np.float32))


@pytest.mark.parametrize("dims, size", [([10**12], 4 * 10**12), ([1 << 40, 1 << 30], 4 << 70)])
def test_oversized_tensors_are_refused_with_node_size_and_limit(dims, size):
    """2**70-element shapes do not overflow: sizes are Python integers."""
    with pytest.raises(ResourceLimitError, match=rf"ConstantOfShape.*needs {size} bytes, more than the tensor size "
                                                 rf"limit of {current().max_tensor_bytes} bytes"):
        load_onnx(_constant_of_shape(dims))


def test_expand_of_a_constant_past_the_fold_limit_stays_a_node(monkeypatch):
    monkeypatch.setenv("EMBER_MAX_FOLD_BYTES", "4096")
    x = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(4, 1), "x")
    shape = numpy_helper.from_array(np.array([4, 2048], np.int64), "shape")
    model = _model([helper.make_node("Expand", ["x", "shape"], ["y"])], [],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [x, shape])
    graph = load_onnx(model)
    assert graph.op_counts() == {"Expand": 1}
    y = ember.compile(model, backend="interpreter").run({})["y"]
    np.testing.assert_array_equal(y, np.broadcast_to(np.arange(4, dtype=np.float32)[:, None], (4, 2048)))


def test_declared_input_too_large():
    model = _model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000000, 1000000])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(ResourceLimitError, match=r"input 'x'.*4000000000000 bytes.*tensor size limit"):
        ember.compile(model, backend="interpreter")


def test_range_too_long(monkeypatch):
    monkeypatch.setenv("EMBER_MAX_TENSOR_BYTES", "1000000")
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("a", 0), ("b", 10**9), ("d", 1))]
    model = _model([helper.make_node("Range", ["a", "b", "d"], ["y"])], [],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, None)], inits)
    with pytest.raises(ResourceLimitError, match=r"Range of 1000000000 elements.*8000000000 bytes"):
        load_onnx(model)


def test_arena_limit(monkeypatch):
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    monkeypatch.setenv("EMBER_MAX_ARENA_BYTES", "4096")
    with pytest.raises(ResourceLimitError, match=r"bytes of activation memory, more than the arena limit of 4096"):
        ember.compile(model, backend="interpreter")
    monkeypatch.delenv("EMBER_MAX_ARENA_BYTES")
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    np.testing.assert_array_equal(ember.compile(model, backend="interpreter").run({"x": x})["y"], -np.maximum(x, 0))


@pytest.mark.parametrize("text", ["lots", "-5", "0"])
def test_bad_limit_settings_are_clear(monkeypatch, text):
    monkeypatch.setenv("EMBER_MAX_TENSOR_BYTES", text)
    with pytest.raises(EmberError, match="EMBER_MAX_TENSOR_BYTES"):
        current()


def test_node_limit(monkeypatch):
    """Unrolling (or a huge file) cannot grow a graph past the node limit."""
    monkeypatch.setenv("EMBER_MAX_GRAPH_NODES", "50")
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(60)]
    model = _model(nodes, [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("v60", TensorProto.FLOAT, None)])
    with pytest.raises(ResourceLimitError, match=r"more than 50 nodes, the node limit"):
        load_onnx(model)
    monkeypatch.delenv("EMBER_MAX_GRAPH_NODES")
    assert load_onnx(model).op_counts() == {"Relu": 60}
