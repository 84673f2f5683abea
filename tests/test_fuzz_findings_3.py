"""Regression tests for the mutation fuzzer's findings from seed 131 on (bench/fuzz_models.py;
earlier ones are in tests/test_fuzz_findings.py and tests/test_fuzz_findings_2.py): integer
division at the type's minimum, normalising an empty axis, empty tensors whose other dimensions
cannot be indexed, and integer powers past the type's range."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.support.errors import EmberError
from tests.test_fuzz_findings import _info, _model

ort = pytest.importorskip("onnxruntime")

_SIGNED = [(np.int64, TensorProto.INT64), (np.int32, TensorProto.INT32), (np.int8, TensorProto.INT8)]


def _binary(op, elem, n):
    node = helper.make_node(op, ["a", "b"], ["y"])
    return _model([node], [_info("a", [n], elem), _info("b", [n], elem)], [_info("y", [n], elem)])


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("op", ["Div", "Mod"])
@pytest.mark.parametrize(("dtype", "elem"), _SIGNED)
def test_integer_division_at_the_type_minimum(backend, op, dtype, elem):
    """Fuzz seed 131 (CenterCropPad's expanded function with a divisor of INT64_MIN): the
    interpreter divided through |a| // |b|, and |INT64_MIN| wraps to INT64_MIN, so 10 / INT64_MIN
    gave -1 where C, ONNX Runtime and the cpu backend give 0. And the cpu backend's INT_MIN / -1
    (and % -1) killed the process with SIGFPE. Every pair of these values now matches ONNX
    Runtime, and the minimum over -1 wraps to the minimum (remainder 0) on both backends."""
    info = np.iinfo(dtype)
    values = np.array([info.min, info.min + 1, -10, -7, -1, 0, 1, 7, 10, info.max], dtype)
    a, b = (m.ravel() for m in np.meshgrid(values, values[values != 0]))
    trapping = (a == info.min) & (b == -1)
    got = ember.compile(_binary(op, elem, a.size), backend=backend).run({"a": a, "b": b})["y"]
    expected = ort.InferenceSession(_binary(op, elem, int((~trapping).sum())).SerializeToString()).run(
        None, {"a": a[~trapping], "b": b[~trapping]})[0]
    np.testing.assert_array_equal(got[~trapping], expected)
    assert got[trapping].tolist() == [info.min if op == "Div" else 0]


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_an_empty_axis_is_empty(backend, op):
    node = helper.make_node(op, ["x"], ["y"], axis=1)
    model = _model([node], [_info("x", [3, 0])], [_info("y", None)], opset=13)
    y = ember.compile(model, backend=backend).run({"x": np.zeros((3, 0), np.float32)})["y"]
    assert y.shape == (3, 0)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_softmax_cross_entropy_with_no_classes_refuses_every_label(backend):
    """Fuzz seed 131, test_sce_none_log_prob with 0 classes: NumPy's max of the empty class
    axis escaped as a ValueError. Any label is now out of range [0, 0), said at run time."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["z", "log_prob"], reduction="none")
    model = _model([node], [_info("x", [3, 0]), _info("t", [3], TensorProto.INT64)],
                   [_info("z", None), _info("log_prob", None)], opset=13)
    compiled = ember.compile(model, backend=backend)
    with pytest.raises(EmberError, match="out of range") as caught:
        compiled.run({"x": np.zeros((3, 0), np.float32), "t": np.zeros(3, np.int64)})
    assert "internal error" not in str(caught.value)


def test_an_empty_tensor_whose_other_dimensions_cannot_be_indexed_is_refused():
    """Fuzz seed 131: ConstantOfShape of a shape with a 0 among sixty dimensions whose product
    is past 2^63 bytes: no elements, so under the size limit, but NumPy cannot make the array
    ("array is too big", reported as an internal error). It is refused, naming the node."""
    dims = [0] + [1 << 20] * 4
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"])
    model = _model([node], [], [_info("y", None)], initializers=[numpy_helper.from_array(np.array(dims, np.int64),
                                                                                      "shape")])
    with pytest.raises(EmberError, match=r"ConstantOfShape.*an empty tensor whose other dimensions multiply to "
                                         r"\d+ bytes, past the 2\^63 - 1 bytes an array can index") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)
    # An empty tensor of indexable dimensions is fine.
    node_ok = helper.make_node("ConstantOfShape", ["shape"], ["y"])
    fine = _model([node_ok], [], [_info("y", None)],
                  initializers=[numpy_helper.from_array(np.array([0, 1 << 20], np.int64), "shape")])
    assert ember.compile(fine, backend="interpreter").run({})["y"].shape == (0, 1 << 20)


def test_the_fuzzer_calls_an_integer_power_past_the_range_undefined(tmp_path):
    """Fuzz seed 131, test_pow_types_int32_float32 with a larger power: ONNX Runtime and ONNX's
    reference convert the double power to int32 (x86 gives INT_MIN for anything out of range);
    Ember wraps, as integer multiplication does. ONNX says nothing of it: not a finding."""
    from bench.fuzz_compare import undefined_in_onnx_runtime

    node = helper.make_node("Pow", ["x", "e"], ["y"])
    path = tmp_path / "model.onnx"
    onnx.save(_model([node], [_info("x", [3], TensorProto.INT32), _info("e", [3])],
                     [_info("y", None, TensorProto.INT32)]), path)
    feeds = {"x": np.array([1, 2, 3], np.int32), "e": np.array([1, 2, 3], np.float32)}
    assert undefined_in_onnx_runtime(path, feeds) is None
    feeds["e"][2] = 30  # 3^30 is past int32
    assert "raises int32 integers past their range" in undefined_in_onnx_runtime(path, feeds)


def test_a_scan_body_whose_state_is_its_own_identity_is_refused_not_a_hang():
    """Fuzz seed 141, test_scan9_multi_state with an Identity renamed onto the state output it
    reads (sum_out = Identity(sum_out)): following Identities back to the state input looped
    forever. The body is now refused: a value defined twice."""
    add = helper.make_node("Add", ["sum_in", "next"], ["sum_out"])
    again = helper.make_node("Identity", ["sum_out"], ["sum_out"], name="// x")
    scan_out = helper.make_node("Identity", ["next"], ["scan_out"])
    body = helper.make_graph([add, again, scan_out], "body", [_info("sum_in", [2]), _info("next", [2])],
                             [_info("sum_out", [2]), _info("scan_out", [2])])
    node = helper.make_node("Scan", ["init", "x"], ["y", "z"], num_scan_inputs=1, body=body)
    model = _model([node], [_info("init", [2]), _info("x", [3, 2])], [_info("y", None), _info("z", None)], opset=9)
    with pytest.raises(EmberError, match="'sum_out' is already defined"):
        ember.compile(model, backend="interpreter")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_resize_of_an_empty_axis_to_a_non_empty_one_is_refused_by_the_op(backend):
    """Fuzz seed 151, test_resize_upsample_sizes_nearest_floor_align_corners with an input dim
    of 0: the cpu kernel refused it, the interpreter's NumPy take escaped as an IndexError. The
    op definition now refuses it, for every backend."""
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest")
    model = _model([node], [_info("x", [1, 1, 0, 4])], [_info("y", None)],
                   initializers=[numpy_helper.from_array(np.array([1, 1, 8, 8], np.int64), "sizes")])
    with pytest.raises(EmberError, match="an empty input axis resized to a non-empty one has no input to sample"):
        ember.compile(model, backend=backend)


def test_causal_conv_with_an_empty_kernel_is_refused():
    """Fuzz seed 161: a weight of kernel size 0 made a zero state of length -1 (NumPy's
    ValueError, reported as an internal error)."""
    node = helper.make_node("CausalConvWithState", ["x", "w"], ["y", "state"], activation="silu")
    model = _model([node], [_info("x", [2, 4, 8]), _info("w", [4, 1, 0])], [_info("y", None), _info("state", None)],
                   opset=27)
    with pytest.raises(EmberError, match=r"weight f32\[4,1,0\] has an empty kernel") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


def test_training_batch_norm_of_an_input_without_channels_is_refused():
    """Fuzz seed 161: training-mode BatchNormalization of a 1-D X indexed its channel axis
    (an IndexError, reported as an internal error)."""
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean", "var"], training_mode=1)
    model = _model([node], [_info(n, [3]) for n in ("x", "s", "b", "m", "v")],
                   [_info("y", None), _info("mean", None), _info("var", None)], opset=15)
    with pytest.raises(EmberError, match=r"X f32\[3\] has no channel axis") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


@pytest.mark.parametrize(("shape", "axes", "pads"), [
    ((1, 3, 4, 5, 2), [1, 3], [0, 3, 0, 3]),   # fuzz seed 171 (cpu): garbage in 72 of 264 elements
    ((2, 5, 3), [1], [2, 2]), ((4, 6), [0, 1], [1, 2, 3, 1]), ((3, 7, 2), [1, 2], [-1, 1, 2, 0]),
    ((3, 4), [0, 1], [-3, 0, 0, -4]), ((), [], []),
])
def test_constant_pad_on_cpu_matches_the_interpreter(shape, axes, pads):
    """Constant Pad was one loop nest choosing per element between a load of the input and the
    value; GCC 12.2's loop vectorizer miscompiled it at -O3 with AVX2 or AVX-512 (reproduced in
    plain C outside Ember). The kernel now fills the result and copies the kept input in a
    contiguous run at a time; negative pads crop, a fully cropped input leaves the fill."""
    inputs = ["x", "pads", "value"] + (["axes"] if axes else [])
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads"),
             numpy_helper.from_array(np.array(1.5, np.float32), "value")]
    if axes:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    model = _model([helper.make_node("Pad", inputs, ["y"], mode="constant")], [_info("x", list(shape))],
                   [_info("y", None)], initializers=inits)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    np.testing.assert_array_equal(ember.compile(model, backend="cpu").run({"x": x})["y"], expected)
