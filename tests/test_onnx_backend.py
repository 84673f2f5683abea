"""ember.onnx_backend: the onnx.backend.base API (prepare / run / run_model / run_node /
supports_device), backend selection by keyword and by EMBER_ONNX_BACKEND, and specialization
of inputs that must be constants (compiled per value at run time, refusable)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.backend.base import Backend, BackendRep

import ember.onnx_backend as backend
from ember.frontends.onnx import ConstantRequired
from ember.support.errors import InputError, ModelImportError


def _model(nodes, inputs, outputs, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _add_relu():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("Neg", ["s"], ["z"])]
    return _model(nodes, [_info("a", TensorProto.FLOAT, [2, 3]), _info("b", TensorProto.FLOAT, [3])],
                  [_info("y", TensorProto.FLOAT, [2, 3]), _info("z", TensorProto.FLOAT, [2, 3])])


def _reshape_by_input():
    """Reshape whose target shape is a graph input: it must be specialized."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Abs", ["r"], ["y"])]
    return _model(nodes, [_info("x", TensorProto.FLOAT, [2, 6]), _info("shape", TensorProto.INT64, [2])],
                  [_info("y", TensorProto.FLOAT, None)])


def test_is_an_onnx_backend():
    assert issubclass(backend.EmberBackend, Backend)
    rep = backend.prepare(_add_relu(), "CPU")
    assert isinstance(rep, BackendRep)
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")


def test_run_returns_outputs_in_model_order():
    a = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    b = np.array([1.0, -2.0, 0.5], np.float32)
    y, z = backend.prepare(_add_relu()).run([a, b])
    np.testing.assert_allclose(y, np.maximum(a + b, 0))
    np.testing.assert_allclose(z, -(a + b))
    y2, _ = backend.prepare(_add_relu()).run({"a": a, "b": b})
    np.testing.assert_array_equal(y, y2)
    y3, _ = backend.run_model(_add_relu(), [a, b])
    np.testing.assert_array_equal(y, y3)


def test_backend_selection(monkeypatch):
    assert backend.prepare(_add_relu()).compiled.backend == "interpreter"
    monkeypatch.setenv(backend.ENV_BACKEND, "cpu")
    assert backend.prepare(_add_relu()).compiled.backend == "cpu"
    assert backend.prepare(_add_relu(), backend="interpreter").compiled.backend == "interpreter"


def test_wrong_device_and_inputs_are_ember_errors():
    with pytest.raises(InputError, match="CPU only"):
        backend.prepare(_add_relu(), "CUDA:0")
    with pytest.raises(InputError, match="takes 2 inputs"):
        backend.prepare(_add_relu()).run([np.zeros((2, 3), np.float32)])


def test_run_node():
    node = helper.make_node("Mul", ["x", "y"], ["z"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (z,) = backend.run_node(node, [x, x])
    np.testing.assert_array_equal(z, x * x)


def test_specialization_compiles_per_value():
    rep = backend.prepare(_reshape_by_input())
    assert rep.compiled is None and rep.bound == ("shape",)
    x = -np.arange(12, dtype=np.float32).reshape(2, 6)
    (y,) = rep.run([x, np.array([3, 4], np.int64)])
    np.testing.assert_array_equal(y, np.abs(x).reshape(3, 4))
    (y,) = rep.run([x, np.array([4, -1], np.int64)])
    assert y.shape == (4, 3)
    (y,) = rep.run([x, np.array([3, 4], np.int64)])  # cached
    assert len(rep.specializations) == 2


def test_specialization_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(backend.ENV_SPECIALIZE, "0")
    pattern = r"input 1 \('shape'.*node 'Reshape_0' \(Reshape\) must be a constant"
    with pytest.raises(ConstantRequired, match=pattern) as info:
        backend.prepare(_reshape_by_input())
    assert info.value.inputs == ("shape",)


def test_data_dependent_shapes_are_refused_not_specialized():
    model = _model([helper.make_node("NonZero", ["x"], ["y"])], [_info("x", TensorProto.FLOAT, [4])],
                   [_info("y", TensorProto.INT64, None)], opset=13)
    with pytest.raises(ModelImportError, match=r"NonZero.*depends on the values of input 0.*static shapes"):
        backend.prepare(model)
