"""Lenient imports that used to give silently wrong results (issue 20, item 6): flag
attributes other than 0/1, extra operands and unknown attributes, negative initializer dims,
Gemm's alpha folded into weights that overflow, and input arrays whose subclass carries
meaning the data does not (masked arrays)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontends.onnx import load_onnx
from ember.support.errors import InputError, ModelImportError

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "strict", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.mark.parametrize("op, attrs", [("ReduceSum", {"keepdims": 2}), ("TopK", {"largest": 5}),
                                       ("TopK", {"sorted": -1}), ("ReduceMax", {"keepdims": -1})])
def test_flag_attributes_must_be_0_or_1(op, attrs):
    """The spec allows 0 and 1; ONNX Runtime reads `== 1` and the reference `!= 0`, so any
    other value would be silently one or the other."""
    inputs = ["x", "k"] if op == "TopK" else ["x"]
    outputs = ["y", "i"] if op == "TopK" else ["y"]
    inits = [numpy_helper.from_array(np.array([2], np.int64), "k")] if op == "TopK" else []
    model = _model([helper.make_node(op, inputs, outputs, **attrs)], [_info("x", [3, 4])],
                   [_info(o, None, TensorProto.INT64 if o == "i" else TensorProto.FLOAT) for o in outputs], inits)
    (name, value), = attrs.items()
    with pytest.raises(ModelImportError, match=rf"\({op}\): attribute '{name}' is a flag and must be 0 or 1, "
                                               rf"got {value}"):
        load_onnx(model)


def test_extra_operands_are_refused():
    model = _model([helper.make_node("Relu", ["x", "x"], ["y"])], [_info("x", [2])], [_info("y", None)])
    with pytest.raises(ModelImportError, match=r"\(Relu\): 2 inputs given, but Relu-14 takes at most 1"):
        load_onnx(model)
    model = _model([helper.make_node("Relu", ["x"], ["y", "z"])], [_info("x", [2])], [_info("y", None)])
    with pytest.raises(ModelImportError, match=r"2 outputs given, but Relu-14 has at most 1"):
        load_onnx(model)


def test_unknown_attributes_are_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"], alpha=0.5)], [_info("x", [2])], [_info("y", None)])
    with pytest.raises(ModelImportError, match=r"\(Relu\): unknown attribute 'alpha' \(Relu-14 has: none\)"):
        load_onnx(model)
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axes=[0], axis=0)], [_info("x", [2])],
                   [_info("y", None)])
    with pytest.raises(ModelImportError, match=r"unknown attribute 'axes' \(Softmax-13 has: axis\)"):
        load_onnx(model)


def test_negative_initializer_dims_are_refused():
    weight = numpy_helper.from_array(np.ones(4, np.float32), "w")
    weight.dims[:] = [-1]  # numpy would infer 4 from the data: a shape the file never stated
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_info("x", [4])], [_info("y", None)], [weight])
    with pytest.raises(ModelImportError, match=r"initializer 'w' has a negative dimension in its shape \[-1\]"):
        load_onnx(model)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_gemm_alpha_that_overflows_the_weights(backend):
    """alpha * W overflows to +-inf: folding alpha into W would give NaN where ONNX Runtime
    gives +-inf (alpha applied after the product)."""
    w = np.array([[10.0, -10.0], [20.0, 5.0]], np.float32)
    model = _model([helper.make_node("Gemm", ["a", "w"], ["y"], alpha=1e38)], [_info("a", [2, 2])],
                   [_info("y", None)], [numpy_helper.from_array(w, "w")])
    a = np.array([[1, 1], [1, -1]], np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"a": a})[0]
    actual = ember.compile(model, backend=backend).run({"a": a})["y"]
    np.testing.assert_array_equal(actual, expected)
    assert not np.isnan(actual).any()


def test_masked_and_matrix_inputs_are_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", [2, 2])], [_info("y", None)])
    m = ember.compile(model, backend="interpreter")
    x = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
    with pytest.raises(InputError, match="input 'x' is a masked array: Ember would ignore its mask"):
        m.run({"x": np.ma.masked_array(x, mask=[[0, 1], [0, 0]])})
    with pytest.raises(InputError, match="input 'x' is an np.matrix"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            matrix = np.asmatrix(x)
        m.run({"x": matrix})
    np.testing.assert_array_equal(m.run({"x": x})["y"], np.maximum(x, 0))
