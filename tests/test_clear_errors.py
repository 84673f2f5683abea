"""Hostile models that used to end in unclear errors (issue 20, item 7): each is now either
compiled correctly or refused with an EmberError that names what is wrong, never a TypeError,
a NumPy ValueError, "internal error" or a C compiler failure blamed on Ember."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontends.onnx import load_onnx
from ember.support.errors import EmberError, ModelImportError

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("epsilon", [float("nan"), float("inf")])
def test_layer_norm_epsilon_that_is_not_finite_compiles(epsilon):
    """The epsilon went into C as `nanf`/`inff` and the compiler failed; C literals now spell
    NaN and infinity as the macros."""
    rng = np.random.default_rng(0)
    scale = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "scale")
    model = _model([helper.make_node("LayerNormalization", ["x", "scale"], ["y"], epsilon=epsilon, axis=-1)],
                   [_info("x", [3, 4])], [_info("y", [3, 4])], [scale])
    x = rng.standard_normal((3, 4)).astype(np.float32)
    expected = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    actual = ember.compile(model, backend="cpu", num_threads=1).run({"x": x})["y"]
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)  # NaN where NaN
    np.testing.assert_allclose(actual, _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_layer_norm_scale_that_does_not_broadcast_is_refused_by_name():
    scale = numpy_helper.from_array(np.ones(3, np.float32), "scale")
    model = _model([helper.make_node("LayerNormalization", ["x", "scale"], ["y"], name="ln", axis=-1)],
                   [_info("x", [2, 4])], [_info("y", [2, 4])], [scale])
    with pytest.raises(EmberError, match=r"'ln'.*scale .* does not broadcast onto the normalized axes \[4\]"):
        ember.compile(model, backend="cpu")


def test_layer_norm_scale_broadcasting_from_size_one_runs():
    """ONNX allows a scale broadcast onto the normalized axes; the check must not refuse it."""
    scale = numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "scale")
    model = _model([helper.make_node("LayerNormalization", ["x", "scale"], ["y"], axis=1)],
                   [_info("x", [2, 3, 4])], [_info("y", [2, 3, 4])], [scale])
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    actual = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(actual, _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def _with_raw_bytes(model, marker: bytes, raw: bytes):
    """The serialized model with `marker` replaced by bytes that are not UTF-8 (protobuf's
    Python API refuses to set such strings, but files carry them)."""
    assert len(marker) == len(raw)
    data = model.SerializeToString()
    assert data.count(marker) == 1
    return data.replace(marker, raw)


def test_node_name_that_is_not_utf8_is_decoded_with_escapes(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="nodeXY")], [_info("x", [2])], [_info("y", [2])])
    path = tmp_path / "m.onnx"
    path.write_bytes(_with_raw_bytes(model, b"nodeXY", b"node\xff\xfe"))
    x = np.array([-1.0, 2.0], np.float32)
    for backend in ("interpreter", "cpu"):
        np.testing.assert_array_equal(ember.compile(path, backend=backend).run({"x": x})["y"], [0.0, 2.0])


def test_tensor_name_that_is_not_utf8_is_refused(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["midXY"]), helper.make_node("Relu", ["midXY"], ["y"])],
                   [_info("x", [2])], [_info("y", [2])])
    data = model.SerializeToString().replace(b"midXY", b"mid\xff\xfe")
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelImportError, match=r"name b'mid\\xff\\xfe' is not valid UTF-8 text"):
        load_onnx(path)


def test_string_attribute_that_is_not_utf8_is_refused():
    pads = numpy_helper.from_array(np.array([1, 1], np.int64), "pads")
    model = _model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode=b"\xffconstant")],
                   [_info("x", [2])], [_info("y", [4])], [pads])
    with pytest.raises(ModelImportError, match=r"'pad' \(Pad\): attribute 'mode' is not valid UTF-8 text"):
        load_onnx(model)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_weights_of_the_wrong_rank_are_refused(op):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    w = numpy_helper.from_array(np.array(0.5, np.float32), "W")
    r = numpy_helper.from_array(np.ones((1, gates * 2, 2), np.float32), "R")
    model = _model([helper.make_node(op, ["x", "W", "R"], ["y"], name="cell", hidden_size=2)],
                   [_info("x", [3, 1, 2])], [_info("y", None)], [w, r])
    with pytest.raises(ModelImportError, match=rf"'cell' \({op}\): X .*, W .* and R .* must have rank 3"):
        load_onnx(model)


def test_non_zero_of_a_scalar_constant_matches_onnx_runtime():
    """NumPy refuses nonzero on 0-d arrays; ONNX Runtime treats the scalar as one element."""
    for value in (0.0, 3.0):
        model = _model([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                            np.array(value, np.float32))),
                        helper.make_node("NonZero", ["c"], ["y"])], [], [_info("y", None, TensorProto.INT64)])
        (expected,) = _ort(model, {})
        actual = ember.compile(model, backend="interpreter").run({})["y"]
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("count", [3, 40, 2000])
def test_concat_of_many_inputs_compiles_and_matches(count):
    """Above a few inputs the C copies through tables in one loop: one statement per input
    made gcc superlinear (a 100k-input Concat crashed it)."""
    rng = np.random.default_rng(count)
    widths = [int(w) for w in rng.integers(0, 3, count)]
    inputs = [_info(f"x{i}", [2, w]) for i, w in enumerate(widths)]
    model = _model([helper.make_node("Concat", [f"x{i}" for i in range(count)], ["y"], axis=1)],
                   inputs, [_info("y", [2, sum(widths)])])
    feeds = {f"x{i}": rng.standard_normal((2, w)).astype(np.float32) for i, w in enumerate(widths)}
    expected = np.concatenate(list(feeds.values()), axis=1)
    actual = ember.compile(model, backend="cpu", num_threads=1).run(feeds)["y"]
    np.testing.assert_array_equal(actual, expected)
