"""Regression tests for what the mutation fuzzer (bench/fuzz_models.py) found: each model here
is the minimal form of a fuzz finding, a non-Ember exception, an "internal error", a hang or
a result that differed from ONNX Runtime's. Each now is a clear refusal naming the node, or
the right result."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontends.onnx import load_onnx
from ember.support.errors import EmberError, ModelImportError, UnsupportedError

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "finding", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype), name)


def _refused(model, match):
    """Refused at import with an EmberError matching `match`, and not as an internal error."""
    with pytest.raises(EmberError, match=match) as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


def test_constant_of_shape_past_numpy_rank_limit():
    """A 1,048,576-element shape tensor asked NumPy for a 1,048,576-D array (internal error)."""
    model = _model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [], [_info("y", None)],
                   [_const("s", [0] * 65)])
    with pytest.raises(UnsupportedError, match=r"\(ConstantOfShape\): the result has rank 65, above 64"):
        load_onnx(model)


def test_result_past_numpy_rank_limit():
    """Reshape to 65 dimensions imported, then failed in NumPy at run time."""
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [_info("x", [1])], [_info("y", None)],
                   [_const("s", [1] * 65)])
    _refused(model, r"\(Reshape\): a result has rank 65, above 64")


def test_expand_to_negative_dims():
    model = _model([helper.make_node("Expand", ["x", "s"], ["y"])], [_info("x", [1, 6])], [_info("y", None)],
                   [_const("s", [-1000, 1, 6])])
    _refused(model, r"\(Expand\): Expand to shape \[-1000, 1, 6\]: dimensions must not be negative")


@pytest.mark.parametrize("count", [2**63 - 1, 2**31 - 1, 0, -1])
def test_split_num_outputs_that_do_not_match(count):
    """num_outputs 2**63-1 sized a tuple of that many parts (a hang), 0 divided by zero."""
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=count)
    model = _model([node], [_info("x", [4])], [_info("a", None), _info("b", None)])
    started = time.perf_counter()
    _refused(model, rf"\(Split\): num_outputs is {count}, but the node has 2 outputs")
    assert time.perf_counter() - started < 10


def _attention(q, k, v, extra=(), attrs=None, mask_dtype=TensorProto.FLOAT):
    names = ["q", "k", "v", *[name for name, _ in extra]]
    inputs = [_info("q", q), _info("k", k), _info("v", v)]
    inputs += [_info(name, shape, mask_dtype if name == "mask" else TensorProto.FLOAT) for name, shape in extra]
    node = helper.make_node("Attention", names if len(extra) != 2 else ["q", "k", "v", "", *names[3:]], ["y"],
                            **(attrs or {}))
    return _model([node], inputs, [_info("y", None)], opset=23)


@pytest.mark.parametrize("model, match", [
    # K's head size differs from Q's: QK^T cannot contract (ValueError in NumPy's matmul).
    (_attention([1, 2, 2, 8], [1, 2, 4, 6], [1, 2, 4, 8]), "do not fit together"),
    # V has other keys than K.
    (_attention([1, 2, 2, 8], [1, 2, 4, 8], [1, 2, 3, 8]), "do not fit together"),
    # 3-D: kv_num_heads 1 makes K's head 24 wide where Q's is 6.
    (_attention([2, 4, 24], [2, 6, 24], [2, 6, 24], attrs={"q_num_heads": 4, "kv_num_heads": 1}),
     "do not fit together"),
    # A 5-D mask.
    (_attention([2, 3, 4, 8], [2, 3, 6, 8], [2, 3, 6, 8], [("mask", [2, 3, 4, 6, 3])]), "attn_mask .* 1-D to 4-D"),
    # A mask that does not broadcast onto the scores.
    (_attention([2, 3, 4, 8], [2, 3, 6, 8], [2, 3, 6, 8], [("mask", [5, 4, 6])]), "does not broadcast"),
    # A mask of an integer type (neither bool nor Q's type).
    (_attention([2, 3, 4, 8], [2, 3, 6, 8], [2, 3, 6, 8], [("mask", [4, 6])], mask_dtype=TensorProto.UINT32),
     "attn_mask must be bool or f32"),
    # past_value of rank 5.
    (_attention([2, 3, 4, 8], [2, 3, 6, 8], [2, 3, 6, 8], [("past_key", [2, 3, 12, 8]),
                                                            ("past_value", [2, 3, 12, 8, 2])]), "do not fit"),
])
def test_attention_operands_that_do_not_fit(model, match):
    _refused(model, rf"\(Attention\): .*{match}")


def test_linear_attention_heads_that_do_not_fit():
    node = helper.make_node("LinearAttention", ["q", "k", "v", "", "decay"], ["y", "s"], q_num_heads=8,
                            kv_num_heads=4, update_rule="gated")
    model = _model([node], [_info(n, [2, 4, 32]) for n in "qkv"] + [_info("decay", [2, 4, 4])],
                   [_info("y", None), _info("s", None)], opset=27)
    _refused(model, r"\(LinearAttention\): LinearAttention q, k and v must share batch, time and key size")


@pytest.mark.parametrize("op, attrs", [("AveragePool", {"kernel_shape": [2, -2]}),
                                       ("MaxPool", {"kernel_shape": [0, 2]}),
                                       ("ConvTranspose", {"dilations": [2, -1]}),
                                       ("ConvTranspose", {"strides": [0, 1]})])
def test_window_attributes_must_be_positive(op, attrs):
    """A negative kernel reached NumPy's sliding_window_view at run time (ValueError)."""
    inputs, inits = ["x"], []
    if op == "ConvTranspose":
        inputs.append("w")
        inits.append(numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "w"))
    model = _model([helper.make_node(op, inputs, ["y"], **attrs)], [_info("x", [1, 1, 4, 4])], [_info("y", None)],
                   inits)
    _refused(model, rf"\({op}\): .*positive")


def test_qlinear_matmul_zero_point_of_the_wrong_length():
    inits = [numpy_helper.from_array(np.ones((2, 3), np.int8), "b"), _const("a_scale", 0.1, np.float32),
             _const("a_zero", 0, np.int8), _const("b_scale", 0.1, np.float32), _const("b_zero", 0, np.int8),
             _const("y_scale", 0.2, np.float32), _const("y_zero", [0, 1], np.int8)]
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale",
                                              "y_zero"], ["y"])
    model = _model([node], [_info("a", [2, 2], TensorProto.INT8)], [_info("y", None, TensorProto.INT8)], inits)
    _refused(model, r"\(QLinearMatMul\): QLinearMatMul y_zero_point must be a scalar or have 3 values, got i8\[2\]")


def _pad_model(pads, mode):
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)
    return _model([node], [_info("x", [5])], [_info("y", None)], [_const("p", pads)], opset=19)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_of_an_axis_cropped_empty(mode):
    """Nothing is left to reflect, repeat or wrap (ValueError in NumPy's pad)."""
    _refused(_pad_model([-5, 2], mode), rf"\(Pad\): Pad mode '{mode}' pads axis 0, which is empty after cropping")


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[-1, 1], [2, -1], [-2, 3], [3, -2], [-1, 4], [4, -3]])
def test_pad_crop_then_pad_on_cpu(mode, pads):
    """Negative pads crop first: the cpu kernel reflected and wrapped within the uncropped
    input (wrap [-1, 1] of [0..4] gave [1, 2, 3, 4, 0] where ONNX Runtime gives [.., 1])."""
    model = _pad_model(pads, mode)
    x = np.arange(5, dtype=np.float32)
    expected = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    np.testing.assert_array_equal(ember.compile(model, backend="cpu").run({"x": x})["y"], expected)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    try:
        theirs = session.run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001  (ONNX Runtime refuses reflections past the cropped range)
        return
    np.testing.assert_array_equal(expected, theirs)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2**63, 2**63 - 1, -6, 7])
def test_trilu_with_extreme_k(backend, upper, k):
    """k = -2**63 overflowed NumPy's tril (OverflowError, an internal error)."""
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    model = _model([node], [_info("x", [4, 5])], [_info("y", None)], [_const("k", k)])
    x = np.arange(1, 21, dtype=np.float32).reshape(4, 5)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(ember.compile(model, backend=backend).run({"x": x})["y"], theirs[0])


def test_the_refusals_are_model_import_errors():
    """Where these refusals surface: at import, as ModelImportErrors naming the node."""
    with pytest.raises(ModelImportError, match=r"node 'Expand_0' \(Expand\)"):
        load_onnx(_model([helper.make_node("Expand", ["x", "s"], ["y"], name="Expand_0")], [_info("x", [1])],
                         [_info("y", None)], [_const("s", [-1])]))


EXTREMES = np.array([-np.inf, -200, -104, -100, -90, -88, -87.3, -1, 0, 1, 88, 88.5, 88.72, 88.73, 89, 100, np.inf,
                     np.nan], np.float32)


@pytest.mark.parametrize("nodes", [[("Exp", "x", "y")], [("Sigmoid", "x", "y")],
                                   [("Sigmoid", "x", "s"), ("Mul", "x s", "y")], [("Softplus", "x", "y")],
                                   [("Tanh", "x", "y")], [("Elu", "x", "y")]])
def test_exp_based_ops_at_the_extremes_on_cpu(nodes):
    """The C exp clamped its input: e^100 and e^inf were 2.4e38, not inf, and e^-inf was
    1.2e-38, not 0, so x * sigmoid(x) (recognized as Silu) gave -inf at x = -inf where ONNX
    Runtime gives NaN (-inf * 0)."""
    model = _model([helper.make_node(op, inputs.split(), [out]) for op, inputs, out in nodes],
                   [_info("x", [EXTREMES.size])], [_info("y", None)])
    mine = ember.compile(model, backend="cpu").run({"x": EXTREMES})["y"]
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": EXTREMES})[0]
    np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
    np.testing.assert_array_equal(np.isinf(mine) * np.sign(mine), np.isinf(theirs) * np.sign(theirs))
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-30)


def test_matmul_integer_zero_point_of_the_wrong_shape():
    """a_zero_point of shape [1, 3] broadcast wrongly in NumPy at run time (ValueError)."""
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
    model = _model([node], [_info("a", [4, 3], TensorProto.UINT8)], [_info("y", None, TensorProto.INT32)],
                   [numpy_helper.from_array(np.ones((3, 2), np.uint8), "b"), _const("az", [[1, 2, 3]], np.uint8)])
    _refused(model, r"\(MatMulInteger\): MatMulInteger a_zero_point u8\[1,3\] must be per tensor or per row of A")


def test_conv_integer_weight_zero_point_of_the_wrong_length():
    node = helper.make_node("ConvInteger", ["x", "w", "", "wz"], ["y"])
    model = _model([node], [_info("x", [1, 1, 4, 4], TensorProto.UINT8)], [_info("y", None, TensorProto.INT32)],
                   [numpy_helper.from_array(np.ones((2, 1, 2, 2), np.uint8), "w"), _const("wz", [1, 2, 3], np.uint8)])
    _refused(model, r"\(ConvInteger\): ConvInteger w_zero_point must be a scalar or have 2 values")


def test_max_unpool_with_a_negative_stride():
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[-2**31, 2])
    model = _model([node], [_info("x", [1, 1, 2, 2]), _info("i", [1, 1, 2, 2], TensorProto.INT64)],
                   [_info("y", None)])
    _refused(model, r"\(MaxUnpool\): MaxUnpool needs a positive kernel and strides")


@pytest.mark.parametrize("scales", [[1, 1, np.inf, 3], [1, 1, 0, 2], [1, 1, -2, 2], [1, 1, np.nan, 2]])
def test_resize_scales_that_are_not_positive_and_finite(scales):
    """inf scales were an internal error (OverflowError converting inf to a size)."""
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
    model = _model([node], [_info("x", [1, 1, 2, 2])], [_info("y", None)], [_const("s", scales, np.float32)])
    _refused(model, r"\(Resize\): scales .* must be positive and finite")


def test_resize_negative_sizes():
    node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode="nearest")
    model = _model([node], [_info("x", [1, 1, 2, 2])], [_info("y", None)], [_const("s", [1, 1, -4, 4])])
    _refused(model, r"\(Resize\): sizes \[1, 1, -4, 4\] must not be negative")


def test_same_padding_with_a_zero_stride():
    """auto_pad SAME divided by the stride before anything checked it (ZeroDivisionError)."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 0], auto_pad="SAME_UPPER")
    model = _model([node], [_info("x", [1, 1, 5, 5])], [_info("y", None)])
    _refused(model, r"\(AveragePool\): kernel \[3, 3\], strides \[2, 0\] and dilations \[1, 1\] must be positive")


def test_same_padding_around_a_huge_kernel():
    """A 2**63-1 kernel with auto_pad SAME asked for pads that large; NumPy's pad failed at run time."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2**63 - 1, 2], auto_pad="SAME_UPPER")
    model = _model([node], [_info("x", [1, 1, 5, 5])], [_info("y", None)])
    _refused(model, r"\(AveragePool\): the padded input of AveragePool needs \d+ bytes, more than the tensor size")


@pytest.mark.parametrize("source, target", [(TensorProto.UINT4, TensorProto.INT4),
                                            (TensorProto.INT4, TensorProto.UINT4),
                                            (TensorProto.UINT2, TensorProto.INT2),
                                            (TensorProto.INT4, TensorProto.UINT2)])
def test_cast_between_sub_byte_integer_types(source, target):
    """ml_dtypes casts no sub-byte integer type to another (TypeError in the interpreter)."""
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=source), helper.make_node("Cast", ["a"], ["b"], to=target),
             helper.make_node("Cast", ["b"], ["y"], to=TensorProto.INT8)]
    model = _model(nodes, [_info("x", [6], TensorProto.INT8)], [_info("y", None, TensorProto.INT8)], opset=21)
    x = np.array([0, 1, 3, 7, -1, -8], np.int8)
    mine = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    try:
        theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]
    except Exception:  # noqa: BLE001  (2-bit types need a newer ONNX Runtime)
        # wraparound, as ONNX Runtime's 4-bit casts: to the target's bits, then sign-extended
        bits = 4 if target in (TensorProto.INT4, TensorProto.UINT4) else 2
        source_bits = 4 if source in (TensorProto.INT4, TensorProto.UINT4) else 2
        wrapped = x.astype(np.int64) % (1 << source_bits) % (1 << bits)
        if target in (TensorProto.INT4, TensorProto.INT2):
            wrapped = np.where(wrapped >= 1 << (bits - 1), wrapped - (1 << bits), wrapped)
        theirs = wrapped.astype(np.int8)
    np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_attention_scores_that_overflow_to_minus_inf(backend):
    """scale = inf makes whole rows of scores -inf: softmax is NaN there (ONNX Runtime, ONNX's
    reference, the cpu lowering); the interpreter gave 0, as it does for rows its masks remove."""
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], scale=float("inf"))
    model = _model([node], [_info("q", [1, 1, 2, 4]), _info("k", [1, 1, 3, 4]), _info("v", [1, 1, 3, 4])],
                   [_info("y", None)], opset=23)
    q = np.array([[[[1, 1, 1, 1], [-1, -1, -1, -1]]]], np.float32)
    k = np.abs(np.random.default_rng(0).standard_normal((1, 1, 3, 4))).astype(np.float32)
    v = np.random.default_rng(1).standard_normal((1, 1, 3, 4)).astype(np.float32)
    feeds = {"q": q, "k": k, "v": v}
    mine = ember.compile(model, backend=backend).run(feeds)["y"]
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
    assert np.isnan(mine[0, 0, 1]).all()  # the row whose scores are all -inf


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("base_type, exponent, values", [
    (TensorProto.INT64, TensorProto.FLOAT, [-0.04, -0.25, 2.5, 3.0, 0.5]),
    (TensorProto.INT32, TensorProto.INT64, [-2, -1, 2, 3, 30]),
])
def test_integer_base_to_fractional_or_negative_powers(backend, base_type, exponent, values):
    """The interpreter truncated the exponent first (2 ** -0.25 gave 1, not 0) and raised
    NumPy's ValueError on negative integer exponents."""
    node = helper.make_node("Pow", ["b", "e"], ["y"])
    model = _model([node], [_info("b", [5], base_type), _info("e", [5], exponent)], [_info("y", None, base_type)])
    feeds = {"b": np.array([1, 2, 3, -2, 2], helper.tensor_dtype_to_np_dtype(base_type)),
             "e": np.array(values, helper.tensor_dtype_to_np_dtype(exponent))}
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(ember.compile(model, backend=backend).run(feeds)["y"], theirs)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_gelu_tanh_of_huge_negative_inputs(backend):
    """The C tanh stopped at tanh(9) = 1 - 3e-8, so 0.5 x (1 + tanh(..)) at x = -1e30 was -3e22."""
    model = _model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [_info("x", [6])],
                   [_info("y", None)], opset=20)
    x = np.array([-1e30, -1e10, -100, 100, 1e10, 1e30], np.float32)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ember.compile(model, backend=backend).run({"x": x})["y"], theirs)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_nearest_resize_does_not_read_the_pixels_it_skips(backend):
    """The interpreter resampled nearest as a weighted sum with weights 0 and 1: a NaN in a
    pixel not taken spread as 0 * NaN over a quarter of the output."""
    node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode="nearest")
    model = _model([node], [_info("x", [1, 1, 2, 2])], [_info("y", None)], [_const("s", [1, 1, 7, 7])])
    x = np.array([[[[1, 2], [np.nan, 4]]]], np.float32)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mine = ember.compile(model, backend=backend).run({"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
    np.testing.assert_array_equal(mine, theirs)


def test_batch_norm_training_mode_is_a_flag():
    """training_mode = 5 trained (ONNX's reference reads != 0) where ONNX Runtime ran inference."""
    inits = [_const(n, np.ones(3) if n in ("s", "v") else np.zeros(3), np.float32) for n in ("s", "b", "m", "v")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], training_mode=5)
    model = _model([node], [_info("x", [2, 3, 4])], [_info("y", None)], inits, opset=15)
    _refused(model, r"\(BatchNormalization\): attribute 'training_mode' is a flag and must be 0 or 1, got 5")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_fmod_by_an_infinite_divisor(backend):
    """fmod(a, +-inf) is a: Ember's floored remainder is +-inf there, and its fmod correction
    r - b gave inf - inf = NaN."""
    node = helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)
    model = _model([node], [_info("a", [8]), _info("b", [8])], [_info("y", None)], opset=13)
    feeds = {"a": np.array([-2.5, 2.5, -2.5, 2.5, 0, np.inf, -np.inf, 7], np.float32),
             "b": np.array([np.inf, np.inf, -np.inf, -np.inf, np.inf, np.inf, np.inf, -3], np.float32)}
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    mine = ember.compile(model, backend=backend).run(feeds)["y"]
    np.testing.assert_array_equal(mine, theirs)


def test_one_hot_depth_that_is_not_a_number():
    """int(NaN) in the converter (an internal error)."""
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"])
    model = _model([node], [_info("i", [2, 2])], [_info("y", None)],
                   [_const("d", np.nan, np.float32), _const("v", [1, 3], np.float32)], opset=11)
    _refused(model, r"\(OneHot\): depth must be a finite number, got nan")


def test_qlinear_conv_x_zero_point_per_channel():
    """QLinearConv's x zero point is per tensor; a vector broadcast wrongly in NumPy (ValueError)."""
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    inits = [_const("xs", 0.1, np.float32), _const("xz", [1, 2, 3], np.uint8),
             numpy_helper.from_array(np.ones((2, 1, 2, 2), np.uint8), "w"), _const("ws", 0.1, np.float32),
             _const("wz", 0, np.uint8), _const("ys", 0.2, np.float32), _const("yz", 0, np.uint8)]
    model = _model([helper.make_node("QLinearConv", inputs, ["y"])], [_info("x", [1, 1, 4, 4], TensorProto.UINT8)],
                   [_info("y", None, TensorProto.UINT8)], inits)
    _refused(model, r"\(QLinearConv\): QLinearConv x_zero_point must be a scalar, got u8\[3\]")


@pytest.mark.parametrize("lambd", [-0.0, -1.5, 0.5])
def test_shrink_with_a_negative_lambda_on_cpu(lambd):
    """lambd = -0.0 printed 'd < --0x0.0p+0' (the C compiler failed on generated code)."""
    model = _model([helper.make_node("Shrink", ["x"], ["y"], lambd=lambd, bias=1.5)], [_info("x", [5])],
                   [_info("y", None)])
    x = np.array([-2, -0.5, 0, 0.5, 2], np.float32)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ember.compile(model, backend="cpu").run({"x": x})["y"], theirs)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_mean_variance_normalization_of_an_infinity(backend):
    """E[x^2] - E[x]^2 is inf - inf = NaN; the cpu kernel's clamp at 0 turned it into 0, so the
    channel became (x - inf) / 1e-9 = -inf where ONNX Runtime gives NaN."""
    model = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], [_info("x", [2, 2, 3, 1])],
                   [_info("y", None)], opset=13)
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3, 1)
    x[0, 0, 1, 0] = np.inf
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mine = ember.compile(model, backend=backend).run({"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_a_commit_in_progress_is_never_seen_half_done(tmp_path, monkeypatch):
    """Two processes committing different builds of one library (sanitized builds embed their
    build folder's name) could leave one's library beside the other's record for an instant;
    a reader then took the entry for tampered, discarded it, and the other process's dlopen
    failed with OSError (bench/sanitize_conformance.py, two workers, one model)."""
    import threading

    from ember.backends.cpu import cache

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    folder = cache.cache_folder("cpu")
    entry = folder / "model.so"
    first = folder / "first.tmp"
    first.write_bytes(b"A" * 100)
    cache.commit(first, entry)
    second = folder / "second.tmp"
    second.write_bytes(b"B" * 100)
    real_replace = os.replace
    paused, resume = threading.Event(), threading.Event()

    def replace_then_pause(src, dst):
        real_replace(src, dst)
        if Path(dst) == entry:  # the library is in place, its record not yet
            paused.set()
            resume.wait(10)

    monkeypatch.setattr(os, "replace", replace_then_pause)
    committer = threading.Thread(target=cache.commit, args=(second, entry))
    committer.start()
    assert paused.wait(10)
    seen: list[bool] = []
    reader = threading.Thread(target=lambda: seen.append(cache.intact(entry)))
    reader.start()
    reader.join(0.5)
    resume.set()
    committer.join(10)
    reader.join(10)
    assert seen == [True]
    assert entry.read_bytes() == b"B" * 100


def test_fused_ops_round_each_result_on_cpu():
    """E[x^2] - E[x]^2 over 1e30: the Mul overflows to inf and inf - inf is NaN (ONNX Runtime and
    the interpreter). The cpu chain fusing the Mul and the Sub was contracted by the C compiler
    into one FMA, which skips the product's rounding: inf, and a LayerNorm of 0 instead of NaN."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1]),
             helper.make_node("Mul", ["x", "x"], ["xx"]),
             helper.make_node("ReduceMean", ["xx"], ["mxx"], axes=[1]),
             helper.make_node("Mul", ["m", "m"], ["mm"]),
             helper.make_node("Sub", ["mxx", "mm"], ["var"]),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Sqrt", ["var"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["y"])]
    model = _model(nodes, [_info("x", [2, 8])], [_info("y", [2, 8])], opset=17)
    x = np.full((2, 8), 1e30, np.float32)
    x[0, 0] = 2e30
    compiled = ember.compile(model, backend="cpu")
    assert "EMBER_STEP_ROUNDED" in compiled.executable.source
    got = compiled.run({"x": x})["y"]
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert np.isnan(expected).all() and np.isnan(got).all()


def _unary(node, opset=18):
    return _model([node], [_info("x", [2])], [_info("y", None)], opset=opset)


def test_attribute_of_the_wrong_type_is_refused():
    """Elu's alpha written as an INT (ONNX Runtime: "Mismatched attribute type") was read as a float."""
    node = helper.make_node("Elu", ["x"], ["y"])
    node.attribute.append(helper.make_attribute("alpha", 1))
    _refused(_unary(node), r"\(Elu\): attribute 'alpha' is INT, but Elu-6 takes FLOAT")
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2])
    pool.attribute.append(helper.make_attribute("storage_order", 1.5))
    _refused(_model([pool], [_info("x", [1, 1, 4])], [_info("y", None)]),
             r"attribute 'storage_order' is FLOAT, but MaxPool-12 takes INT")


def test_op_newer_than_the_model_opset_is_refused():
    """Mish in an opset-13 model: no such op there (ONNX Runtime refuses; Ember ran opset 18's)."""
    _refused(_unary(helper.make_node("Mish", ["x"], ["y"]), opset=13),
             r"Mish does not exist in opset 13: ONNX added it in opset 18")


def test_default_domain_imported_twice_is_refused():
    model = _unary(helper.make_node("Relu", ["x"], ["y"]), opset=18)
    model.opset_import.append(helper.make_opsetid("", 9))
    _refused(model, r"imports the default ONNX domain more than once, at opsets 9, 18")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_attention_bool_mask_is_added_not_selected(backend):
    """A boolean attn_mask is an additive 0 / -inf bias (ONNX and its reference implementation):
    a NaN score under a masked key stays NaN. The cpu lowering selected -inf there."""
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node("Attention", ["Q", "K", "V", "attn_mask"], ["Y", "", "", "qk"], qk_matmul_output_mode=1)
    shape = [1, 2, 2, 4]
    model = _model([node], [_info(n, shape) for n in "QKV"] + [_info("attn_mask", [2, 2], TensorProto.BOOL)],
                   [_info("Y", None), _info("qk", None)], opset=24)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "QKV"}
    feeds["Q"][0, 1, 0, 0] = np.nan
    feeds["attn_mask"] = np.array([[True, False], [True, True]])
    got = ember.compile(model, backend=backend).run(feeds)["qk"]
    expected = ReferenceEvaluator(model).run(None, feeds)[1]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert np.isnan(got[0, 1, 0, 1])


def test_average_pool_window_wholly_in_padding_is_nan_on_cpu():
    """0 / 0 for a window that covers no input cell: NaN in the interpreter and ONNX's
    reference; the 2-D cpu kernel gave 0 (ONNX Runtime refuses pads this large)."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[3, 3], pads=[0, 0, 3, 3])
    model = _model([node], [_info("x", [1, 1, 2, 2])], [_info("y", None)])
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    got = ember.compile(model, backend="cpu").run({"x": x})["y"].ravel()
    assert got[0] == 1.5 and np.isnan(got[1:]).all()


def test_scan_body_returning_fewer_values_than_its_states():
    """num_scan_inputs lowered to 1 made three of four inputs carried states, more than the body
    returns: an internal error (zip of unequal lengths) instead of a refusal."""
    body = helper.make_graph([helper.make_node("Add", ["s", "a"], ["s2"])], "body",
                             [_info("s", [2]), _info("t", [2]), _info("a", [2])], [_info("s2", [2])])
    node = helper.make_node("Scan", ["s0", "t0", "y"], ["sN"], body=body, num_scan_inputs=1)
    model = _model([node], [_info("s0", [2]), _info("t0", [2]), _info("y", [3, 2])], [_info("sN", None)])
    _refused(model, r"\(Scan\): the body returns 1 values, fewer than the node's 2 carried states")


def test_log_sum_exp_of_infinities():
    """log(sum(exp(x))) over a slice holding +inf is +inf, over an all -inf slice -inf (ONNX
    Runtime and the reference); subtracting the max first made inf - inf = NaN."""
    node = helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)
    model = _model([node], [_info("x", [3, 2], TensorProto.DOUBLE)], [_info("y", None, TensorProto.DOUBLE)],
                   [_const("axes", [1])])
    x = np.array([[np.inf, 1.0], [-np.inf, -np.inf], [0.0, 0.0]])
    for backend in ("interpreter", "cpu"):
        got = ember.compile(model, backend=backend).run({"x": x})["y"]
        np.testing.assert_allclose(got, [np.inf, -np.inf, np.log(2.0)])


def test_rotary_position_ids_must_be_batch_by_sequence():
    """position_ids of [sequence] instead of [batch, sequence]: the cpu lowering and the
    interpreter broadcast it differently (results 1.15 apart); ONNX Runtime refuses it."""
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=1)
    model = _model([node], [_info("x", [2, 4, 3, 8]), _info("cos", [50, 4]), _info("sin", [50, 4]),
                            _info("pos", [3], TensorProto.INT64)], [_info("y", None)], opset=23)
    _refused(model, r"position_ids must be \[batch, sequence\] = \[2, 3\]")


def test_max_unpool_input_rank_must_fit_the_kernel():
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    model = _model([node], [_info("x", [1, 1, 2, 2, 1]), _info("i", [1, 1, 2, 2], TensorProto.INT64)],
                   [_info("y", None)])
    _refused(model, r"\(MaxUnpool\): X is .*, but kernel_shape \[2, 2\] asks for a 4-D input")


def test_conv_transpose_output_shape_of_the_wrong_length():
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[0])
    model = _model([node], [_info("x", [1, 1, 3, 3])], [_info("y", None)],
                   [numpy_helper.from_array(np.ones((1, 2, 3, 3), np.float32), "w")])
    _refused(model, r"\(ConvTranspose\): output_shape \[0\] must give 2 positive spatial sizes")


def test_non_max_suppression_boxes_of_the_wrong_shape():
    """An NMS node taking a 1-D tensor as its boxes unpacked it as [..., 4] (internal error)."""
    node = helper.make_node("NonMaxSuppression", ["b", "s"], ["y"])
    model = _model([node], [], [_info("y", None, TensorProto.INT64)],
                   [numpy_helper.from_array(np.ones(8, np.float32), "b"),
                    numpy_helper.from_array(np.ones((1, 1, 2), np.float32), "s")])
    _refused(model, r"\(NonMaxSuppression\): boxes \[8\] must be \[batch, boxes, 4\]")


def test_affine_grid_of_a_negative_size():
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"])
    model = _model([node], [_info("theta", [2, 3, 4])], [_info("y", None)], [_const("size", [2, 3, 4, 5, -2**63])],
                   opset=20)
    _refused(model, r"\(AffineGrid\): AffineGrid size \[2, 3, 4, 5, -9223372036854775808\] has a negative dimension")


@pytest.mark.parametrize("to", ["INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64"])
@pytest.mark.parametrize("source", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_float_to_integer_cast_saturates_on_every_backend(to, source):
    """ONNX leaves NaN and out-of-range float -> integer casts undefined; the cpu backend's
    plain C cast was undefined behaviour (uint32 of -inf: 0 on cpu, 2147483648 in NumPy).
    Ember defines it once: NaN gives 0, the rest saturates (ops/elementwise.py CastAttrs)."""
    target = getattr(TensorProto, to)
    node = helper.make_node("Cast", ["x"], ["y"], to=target)
    model = _model([node], [_info("x", [14], source)], [_info("y", None, target)])
    x = np.array([np.nan, np.inf, -np.inf, 300.7, -300.7, 70000.5, -70000.5, 5e9, -5e9, 1e19, -1e19, 2.0**63,
                  -(2.0**63), 3e9], helper.tensor_dtype_to_np_dtype(source))
    info = np.iinfo(helper.tensor_dtype_to_np_dtype(target))
    wide = x.astype(np.float64)
    expected = [0 if np.isnan(v) else (info.max if v > 0 else info.min) if np.isinf(v) else
                max(int(info.min), min(int(info.max), int(v))) for v in wide.tolist()]
    for backend in ("interpreter", "cpu"):
        got = ember.compile(model, backend=backend).run({"x": x})["y"]
        assert got.tolist() == expected, backend


@pytest.mark.parametrize("alpha", [-0.0, -1.5, 1.0])
def test_celu_divides_x_itself(alpha):
    """Celu = max(0, x) + min(0, alpha * (exp(x / alpha) - 1)). Ember divided min(x, 0) instead
    of x (the same for alpha > 0), which made 0 / -0 = NaN for every positive x at alpha = -0."""
    from onnx.reference import ReferenceEvaluator
    model = _unary(helper.make_node("Celu", ["x"], ["y"], alpha=alpha))
    x = np.array([-100.0, -1.0, 0.5, 100.0], np.float32)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    with np.errstate(all="ignore"):
        expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for backend in ("interpreter", "cpu"):
        got = ember.compile(model, backend=backend).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5)  # Ember computes in float64


def test_qlinear_matmul_zero_point_of_another_type():
    """a_zero_point in bfloat16 (ONNX Runtime refuses: T1 binds A and a_zero_point) was read by
    the two backends differently (38 against 39)."""
    def const(name, value, dtype):
        return numpy_helper.from_array(np.array(value, dtype), name)
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    inits = [const("sa", 0.1, np.float32), helper.make_tensor("za", TensorProto.BFLOAT16, [], [1.0]),
             const("b", [[1, 2], [3, 4]], np.int8), const("sb", 0.1, np.float32), const("zb", 0, np.int8),
             const("sy", 0.1, np.float32), const("zy", 0, np.int8)]
    model = _model([node], [_info("a", [2, 2], TensorProto.INT8)], [_info("y", None, TensorProto.INT8)], inits)
    _refused(model, r"QLinearMatMul a_zero_point is bf16, but a is i8")


def test_strided_float32_sum_of_a_million_values_on_cpu():
    """A sum over N, H, W keeping C (a BatchNormalization's training statistics) walks memory
    adding to each output in turn; in float32 it drifted ~1e-3 from the interpreter's pairwise
    sum over 10^6 values (fuzz: BatchNormalization training_mode at 65536 wide)."""
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    model = _model([node], [_info("x", [64, 3, 16384])], [_info("y", None)], [_const("axes", [0, 2])])
    x = np.random.default_rng(0).uniform(0.0, 1.0, (64, 3, 16384)).astype(np.float32)
    got = ember.compile(model, backend="cpu").run({"x": x})["y"]
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=(0, 2)), rtol=1e-6)


def test_mel_weight_matrix_edges_outside_the_spectrum():
    """A negative lower_edge_hertz put a filter edge on bin -1 (an internal error slicing it)."""
    node = helper.make_node("MelWeightMatrix", ["n", "d", "r", "lo", "hi"], ["y"])
    inits = [_const("n", 8, np.int32), _const("d", 16, np.int32), _const("r", 8192, np.int32),
             _const("lo", -1.25, np.float32), _const("hi", 4096.0, np.float32)]
    model = _model([node], [], [_info("y", None)], inits, opset=17)
    _refused(model, r"\(MelWeightMatrix\): the filters' edges fall on bins -1 to 6, outside the 9 bins")


def test_float8_to_integer_cast_saturates_on_every_backend():
    """float8e5m2fnuz -> uint8: the interpreter converted with ml_dtypes (NaN gave 255), the cpu
    through float32 with Ember's saturating rule (NaN gives 0)."""
    import ml_dtypes

    model = _unary(helper.make_node("Cast", ["x"], ["y"], to=TensorProto.UINT8))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT8E5M2FNUZ
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.UINT8
    x = np.array([np.nan, 300.0], np.float32).astype(ml_dtypes.float8_e5m2fnuz)
    for backend in ("interpreter", "cpu"):
        assert ember.compile(model, backend=backend).run({"x": x})["y"].tolist() == [0, 255], backend
