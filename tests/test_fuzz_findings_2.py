"""Regression tests for the mutation fuzzer's later findings (bench/fuzz_models.py; the first
ones are in tests/test_fuzz_findings.py): results that differed from ONNX's reference and ONNX
Runtime, or between Ember's own backends, where a float32 computation overflows; and the
fuzzer's own judgement of cases ONNX leaves undefined."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.support.errors import EmberError
from tests.test_fuzz_findings import _info, _model

ort = pytest.importorskip("onnxruntime")


def _reference(model, feeds):
    from onnx.reference import ReferenceEvaluator

    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, feeds)


def _attention(scale):
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], scale=scale)
    return _model([node], [_info("q", [1, 2, 3, 8]), _info("k", [1, 2, 5, 8]), _info("v", [1, 2, 5, 8])],
                  [_info("y", None)], opset=23)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_attention_with_a_huge_scale_overflows_where_float32_does(backend):
    """Seed test_attention_4d_gqa_scaled, scale 1e38: the cpu lowering's float32 scores
    overflowed to inf (softmax: NaN) where the interpreter's float64 ones did not. Both now
    scale Q and K by sqrt(scale) as ONNX defines it, the interpreter rounding what float32
    stores, and agree with ONNX's reference. (Q and K positive: a sum of positive terms
    overflows in any order iff its total does; mixed signs make overflow depend on the
    summation order, which the fuzzer calls undefined.)"""
    rng = np.random.default_rng(0)
    feeds = {name: np.abs(rng.standard_normal(shape)).astype(np.float32)
             for name, shape in (("q", (1, 2, 3, 8)), ("k", (1, 2, 5, 8)), ("v", (1, 2, 5, 8)))}
    feeds["q"][0, 0, 0] /= 100  # a row whose scores stay finite
    model = _attention(1e38)
    expected = _reference(model, feeds)[0]
    got = ember.compile(model, backend=backend).run(feeds)["y"]
    assert np.isnan(expected).any() and not np.isnan(expected).all()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)  # NaN where the reference has NaN
    # An ordinary scale is unchanged in meaning: the reference to 1e-4.
    ordinary = _attention(0.3)
    np.testing.assert_allclose(ember.compile(ordinary, backend=backend).run(feeds)["y"],
                               _reference(ordinary, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scale", [-1e38, -0.5, float("nan")])
def test_attention_with_a_negative_or_nan_scale_is_refused(scale):
    """ONNX takes sqrt(scale): every output NaN. The cpu backend gave numbers, the interpreter
    others; now the node is refused, saying why."""
    with pytest.raises(EmberError, match=r"Attention scale .*: ONNX scales Q and K by sqrt\(scale\)") as caught:
        ember.compile(_attention(scale), backend="interpreter")
    assert "internal error" not in str(caught.value)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("a", [-1e38, -0.5])
def test_resize_cubic_weights_are_float32_as_in_onnx(backend, a):
    """Seed test_resize_downsample_scales_cubic_A_n0p5_exclude_outside, cubic_coeff_a -1e38:
    Ember's float64 weights stayed finite (outputs near 1e28), ONNX Runtime's and the
    reference's float32 ones overflow to NaN."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic", cubic_coeff_a=a, exclude_outside=1)
    scales = numpy_helper.from_array(np.array([1, 1, 0.8, 0.8], np.float32), "scales")
    model = _model([node], [_info("x", [1, 1, 4, 4])], [_info("y", None)], [scales])
    x = np.random.default_rng(1).standard_normal((1, 1, 4, 4)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    got = ember.compile(model, backend=backend).run({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, _reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert np.isnan(got).all() == (a == -1e38)


def _case(tmp_path, nodes, inputs, outputs, initializers=(), opset=18):
    import onnx

    path = tmp_path / "model.onnx"
    onnx.save(_model(nodes, inputs, outputs, initializers, opset), path)
    return path


def test_the_fuzzer_calls_nan_in_a_max_pool_window_undefined(tmp_path):
    """ONNX says nothing of NaN in MaxPool; its reference skips NaN cells on its padded path and
    propagates them on its unpadded one, and ONNX Runtime's result depends on where the NaN
    sits: no answer to hold Ember (which propagates, as ReduceMax and PyTorch do) to."""
    from bench.fuzz_compare import undefined_in_onnx_runtime

    path = _case(tmp_path, [helper.make_node("Relu", ["x"], ["r"]),
                            helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2])],
                 [_info("x", [1, 1, 4, 4])], [_info("y", None)])
    x = np.ones((1, 1, 4, 4), np.float32)
    assert undefined_in_onnx_runtime(path, {"x": x}) is None
    x[0, 0, 1, 1] = np.nan  # found in the MaxPool's operand, computed by the reference (Relu keeps NaN)
    assert "pools an input holding NaN" in undefined_in_onnx_runtime(path, {"x": x})


def test_the_fuzzer_calls_a_fourier_transform_of_infinities_undefined(tmp_path):
    from bench.fuzz_compare import undefined_in_onnx_runtime

    path = _case(tmp_path, [helper.make_node("DFT", ["x", ""], ["y"], axis=1)],
                 [_info("x", [1, 8, 1])], [_info("y", None)], opset=19)
    x = np.arange(8, dtype=np.float32).reshape(1, 8, 1)
    assert undefined_in_onnx_runtime(path, {"x": x}) is None
    x[0, 3, 0] = np.inf
    assert "transforms a signal holding infinities" in undefined_in_onnx_runtime(path, {"x": x})


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_rotary_position_ids_past_the_cache_are_an_ember_error(backend):
    """Seed test_rotary_embedding_interleaved, position_ids holding 1000 for a 50-row cache:
    the interpreter raised NumPy's IndexError."""
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=1)
    model = _model([node], [_info("x", [1, 2, 3, 8]), _info("cos", [50, 4]), _info("sin", [50, 4]),
                            _info("pos", [1, 3], TensorProto.INT64)], [_info("y", None)], opset=23)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 2, 3, 8)).astype(np.float32),
             "cos": rng.standard_normal((50, 4)).astype(np.float32),
             "sin": rng.standard_normal((50, 4)).astype(np.float32), "pos": np.array([[0, 1, 1000]], np.int64)}
    compiled = ember.compile(model, backend=backend)
    with pytest.raises(EmberError, match="out of range"):
        compiled.run(feeds)
    feeds["pos"] = np.array([[0, 1, 49]], np.int64)
    assert np.isfinite(compiled.run(feeds)["y"]).all()


def test_the_fuzzer_calls_dynamic_quantization_of_an_empty_tensor_undefined(tmp_path):
    from bench.fuzz_compare import undefined_in_onnx_runtime

    outputs = [_info("y", None, TensorProto.UINT8), _info("s", None), _info("z", None, TensorProto.UINT8)]
    path = _case(tmp_path, [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                 [_info("x", [None])], outputs)
    assert undefined_in_onnx_runtime(path, {"x": np.zeros(3, np.float32)}) is None
    assert "quantizes an empty tensor" in undefined_in_onnx_runtime(path, {"x": np.zeros(0, np.float32)})


@pytest.mark.parametrize("attr, value", [("strides", [0, 1]), ("dilations", [1, -2]), ("pads", [0, -1, 0, 0])])
def test_col2im_window_attributes_are_checked(attr, value):
    """Seed test_col2im_dilations, strides [0, 1]: a ZeroDivisionError reported as an internal error."""
    shapes = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("image", [6, 6]), ("block", [2, 2]))]
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **{attr: value})
    model = _model([node], [_info("x", [1, 8, 25])], [_info("y", None)], shapes)
    with pytest.raises(EmberError, match="Col2Im needs positive strides, dilations") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ignored_loss_elements_count_zero_even_over_an_infinity(backend, reduction):
    """Seed test_sce_mean_no_weight_ii_4d_log_prob_expanded with an inf score: the row's
    log-probabilities are NaN, and Ember multiplied an ignored element's NaN by its weight 0."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "y"], ["z"], reduction=reduction, ignore_index=2)
    model = _model([node], [_info("x", [2, 3, 4]), _info("y", [2, 4], TensorProto.INT64)], [_info("z", None)],
                   opset=13)
    x = np.random.default_rng(0).random((2, 3, 4)).astype(np.float32)
    x[0, 1, 1] = np.inf  # element (0, 1): every class's log-probability is NaN (or -inf)
    y = np.array([[0, 2, 1, 0], [1, 1, 2, 0]], np.int64)  # ... and its target is ignored
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x, "y": y})[0]
    got = ember.compile(model, backend=backend).run({"x": x, "y": y})["z"]
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_upsample_scales_of_the_wrong_length_are_refused():
    """Seed test_upsample_nearest with 0-d scales: an IndexError called an internal error."""
    scales = numpy_helper.from_array(np.array(2.0, np.float32), "scales")
    model = _model([helper.make_node("Upsample", ["x", "scales"], ["y"])], [_info("x", [1, 1, 2, 2])],
                   [_info("y", None)], [scales], opset=9)
    with pytest.raises(EmberError, match=r"scales \[2.0\] must have one value per axis resized \(4") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


def test_per_axis_dequantize_scale_of_a_scalar_input_is_refused():
    """Seed test_dequantizelinear_e4m3fn_float16, x made 0-d: an IndexError called an internal error."""
    scale = numpy_helper.from_array(np.ones(3, np.float16), "s")
    model = _model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=0)],
                   [_info("x", [], TensorProto.UINT8)], [_info("y", None, TensorProto.FLOAT16)], [scale], opset=21)
    with pytest.raises(EmberError, match=r"scale \[3\] is per-axis, but the input is a scalar") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


def test_linear_attention_scale_multiplies_the_product():
    """Seed test_linear_attention_explicit_scale, scale -inf: the cpu lowering scaled q first, so
    +inf and -inf terms met in q S (NaN) where the reference, ONNX Runtime and the interpreter
    scale the finite product (+inf or -inf)."""
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y", "state"], q_num_heads=2, kv_num_heads=2,
                            update_rule="linear", scale=float("-inf"))
    model = _model([node], [_info(n, [1, 3, 8]) for n in "qkv"], [_info("y", None), _info("state", None)], opset=27)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((1, 3, 8)).astype(np.float32) for n in "qkv"}
    oracle = ember.compile(model, backend="interpreter").run(feeds)["y"]
    assert np.isinf(oracle).all()
    np.testing.assert_array_equal(ember.compile(model, backend="cpu").run(feeds)["y"], oracle)


@pytest.mark.parametrize("count", [-(2 ** 63), -1, 4])
def test_scan_num_scan_inputs_out_of_range_is_refused(count):
    """Seed test_linear_attention_linear_t1_no_past_expanded, num_scan_inputs = -2^63: an
    OverflowError (a tuple of that many axes) called an internal error."""
    body = helper.make_graph([helper.make_node("Add", ["s", "a"], ["s2"]), helper.make_node("Identity", ["a"], ["o"])],
                             "body", [_info("s", [2]), _info("a", [2])], [_info("s2", [2]), _info("o", [2])])
    node = helper.make_node("Scan", ["s0", "y"], ["sN", "ys"], body=body, num_scan_inputs=count)
    model = _model([node], [_info("s0", [2]), _info("y", [3, 2])], [_info("sN", None), _info("ys", None)])
    with pytest.raises(EmberError, match=f"num_scan_inputs = {count} are scanned") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


def test_rotary_caches_without_position_ids_must_be_per_batch_and_step():
    """Seed test_rotary_embedding_with_rotary_dim, position_ids dropped: the [50, 2] caches
    reached NumPy's broadcasting (a ValueError escaped)."""
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])
    model = _model([node], [_info("x", [2, 2, 3, 4]), _info("cos", [50, 2]), _info("sin", [50, 2])],
                   [_info("y", None)], opset=23)
    with pytest.raises(EmberError, match=r"caches without position_ids must be \[batch, sequence, rotary dim / 2\]"):
        ember.compile(model, backend="interpreter")


def test_stft_window_must_be_one_dimensional():
    """Seed test_stft_with_window, a 0-d window: an IndexError called an internal error."""
    step = numpy_helper.from_array(np.array(8, np.int64), "step")
    model = _model([helper.make_node("STFT", ["signal", "step", "window"], ["y"])],
                   [_info("signal", [1, 64, 1]), _info("window", [])], [_info("y", None)], [step], opset=17)
    with pytest.raises(EmberError, match=r"window f32\[\] must be 1-D") as caught:
        ember.compile(model, backend="interpreter")
    assert "internal error" not in str(caught.value)


def test_grid_sample_of_an_image_without_pixels_is_refused():
    """Seed test_gridsample_reflection_padding with an axis of size 0: NumPy's IndexError escaped."""
    model = _model([helper.make_node("GridSample", ["x", "grid"], ["y"], padding_mode="reflection")],
                   [_info("x", [1, 1, 3, 0]), _info("grid", [1, 2, 4, 2])], [_info("y", None)], opset=19)
    with pytest.raises(EmberError, match="has an empty spatial axis: no pixel to sample"):
        ember.compile(model, backend="interpreter")


@pytest.mark.parametrize("attr", ["alpha", "beta", "bias"])
def test_lrn_attributes_must_be_finite(attr):
    """Seed test_lrn, alpha -inf: the base is -inf, where C's pow(-inf, 0.5) is +inf (cpu: 0)
    and NumPy's -inf ** 0.5 NaN (the oracle, ONNX's reference); ONNX Runtime refuses alpha <= 0."""
    node = helper.make_node("LRN", ["x"], ["y"], size=3, **{attr: float("-inf")})
    model = _model([node], [_info("x", [1, 4, 2, 2])], [_info("y", None)], opset=13)
    with pytest.raises(EmberError, match=r"LRN alpha .* must be finite"):
        ember.compile(model, backend="interpreter")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.int32])
def test_integer_pow_wraps_exactly_on_every_backend(backend, dtype):
    """Fuzz seed 101 (BitwiseXor made Pow, uint64): the cpu computed in double and converted
    (UINT64_MAX), the interpreter wrapped modulo 2^64. Both now wrap exactly; a negative
    exponent still truncates the double result."""
    kind = {np.uint64: TensorProto.UINT64, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32}[dtype]
    model = _model([helper.make_node("Pow", ["x", "y"], ["z"])], [_info("x", [6], kind), _info("y", [6], kind)],
                   [_info("z", None, kind)], opset=15)
    x = np.array([3, 7, 2, 5, 1, 2], dtype)
    y = np.array([50, 40, 63, 0, 99, 10], dtype)
    if dtype != np.uint64:
        y[5] = -1  # 2 ** -1 = 0.5: truncated to 0
    got = ember.compile(model, backend=backend).run({"x": x, "y": y})["z"]
    exact = [pow(int(a), int(b), 2 ** 64) if b >= 0 else int(float(a) ** float(b)) for a, b in zip(x, y, strict=True)]
    expected = np.array([v % 2 ** 64 for v in exact], np.uint64).astype(dtype)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("kind", [TensorProto.INT4, TensorProto.INT8, TensorProto.UINT8])
def test_quantize_of_nan_is_zero_on_every_backend(backend, kind):
    """Fuzz seed 101 (test_quantizelinear_int4 with a NaN input): the cpu clamped NaN to the
    lowest value (-8), the interpreter gave 0. A NaN quantizes to 0, as a saturating Cast does;
    alone and inside a fused Q/DQ chain."""
    zero = numpy_helper.from_array(np.zeros((), helper.tensor_dtype_to_np_dtype(kind)), "z")
    if kind == TensorProto.INT4:
        zero = helper.make_tensor("z", kind, [], [0])
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    model = _model(nodes, [_info("x", [2, 8])], [_info("q", None, kind), _info("y", None)], [scale, zero], opset=21)
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    x[0, ::3] = np.nan
    got = ember.compile(model, backend=backend).run({"x": x})
    assert (got["q"].astype(np.int32)[0, ::3] == 0).all() and (got["y"][0, ::3] == 0).all()
    np.testing.assert_array_equal(got["y"][1], np.maximum(np.round(x[1] / 0.5) * 0.5, 0))


def test_center_crop_pad_to_a_negative_size_is_refused():
    """Fuzz seed 111: shape [20, -2^63, 3] cropped axis 1 to nothing where ONNX Runtime kept it."""
    shape = numpy_helper.from_array(np.array([20, -(2 ** 63), 3], np.int64), "shape")
    model = _model([helper.make_node("CenterCropPad", ["x", "shape"], ["y"])], [_info("x", [10, 7, 3])],
                   [_info("y", None)], [shape])
    with pytest.raises(EmberError, match=r"shape \[20, -9223372036854775808, 3\] must not be negative"):
        ember.compile(model, backend="interpreter")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_hardmax_of_an_empty_tensor(backend):
    """Fuzz seed 111: an empty input was NumPy's 'argmax of an empty sequence', an internal error."""
    model = _model([helper.make_node("Hardmax", ["x"], ["y"])], [_info("x", [3, 0])], [_info("y", None)], opset=13)
    got = ember.compile(model, backend=backend).run({"x": np.zeros((3, 0), np.float32)})["y"]
    assert got.shape == (3, 0)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_antialiased_resize_ignores_pixels_beyond_the_filter(backend, dtype, layout):
    """Seed test_resize_downsample_sizes_linear_antialias, an -inf pixel (fuzz seed 111): the
    antialiasing window is as wide as the widest footprint, so some taps have weight 0; Ember
    multiplied them (0 * -inf = NaN in 5 of 9 outputs) where ONNX Runtime's window stops at the
    filter's support. A tap of weight 0 now contributes nothing, on both backends, in float32
    and float64 (the latter through the exact pairwise path), along the contiguous and an outer
    axis."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    sizes = [1, 1, 3, 3] if layout == "rows" else [1, 3, 3, 1]
    shape = [1, 1, 4, 4] if layout == "rows" else [1, 4, 4, 1]
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", antialias=1)
    model = _model([node], [helper.make_tensor_value_info("x", elem, shape)],
                   [helper.make_tensor_value_info("y", elem, None)], opset=18,
                   initializers=[numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    x = np.arange(1, 17, dtype=dtype).reshape(shape)
    x[(0, 0, 1, 1) if layout == "rows" else (0, 1, 1, 0)] = -np.inf
    finite = np.arange(1, 17, dtype=dtype).reshape(shape)
    compiled = ember.compile(model, backend=backend)
    # ONNX Runtime resizes float32 only: its results for the same (small integer) pixels.
    reference = _model([node], [_info("x", shape)], [_info("y", None)], opset=18,
                       initializers=[numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    session = ort.InferenceSession(reference.SerializeToString())
    for image in (x, finite):  # without an infinity the weights are as before: matches too
        expected = session.run(None, {"x": image.astype(np.float32)})[0]
        if image is x:
            assert np.isneginf(expected).sum() == 4 and not np.isnan(expected).any()
        np.testing.assert_allclose(compiled.run({"x": image})["y"], expected, rtol=1e-5)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_linear_attention_state_overflows_where_float32_does(backend):
    """Seed test_linear_attention_gated_delta_gqa with a key of 1e30 (fuzz seed 111): the
    delta-rule state overflows float32 within four steps. The interpreter kept it in float64,
    so its outputs were +-inf where ONNX's reference and ONNX Runtime, whose float32 state is
    inf, read inf - inf = NaN (16 of 512). The oracle now rounds the state where a float32
    computation stores it."""
    node = helper.make_node("LinearAttention", ["q", "k", "v", "", "decay", "beta"], ["y", "state"],
                            q_num_heads=8, kv_num_heads=4)
    model = _model([node], [_info("q", [2, 4, 64]), _info("k", [2, 4, 32]), _info("v", [2, 4, 32]),
                            _info("decay", [2, 4, 32]), _info("beta", [2, 4, 4])],
                   [_info("y", None), _info("state", None)], opset=27)
    rng = np.random.default_rng(3)
    feeds = {"q": rng.standard_normal((2, 4, 64)), "k": rng.standard_normal((2, 4, 32)),
             "v": rng.standard_normal((2, 4, 32)), "decay": -rng.uniform(0.001, 0.3, (2, 4, 32)),
             "beta": rng.standard_normal((2, 4, 4))}
    feeds = {name: value.astype(np.float32) for name, value in feeds.items()}
    feeds["k"][1, 2, 12] = 1e30  # at the third of four steps
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert np.isnan(expected[0]).any() and np.isfinite(expected[0]).any()
    got = ember.compile(model, backend=backend).run(feeds)
    for mine, theirs in zip(got.values(), expected, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-3, atol=1e-5)  # NaN where ONNX Runtime has NaN


def test_the_fuzzer_widens_group_normalization_statistics(tmp_path):
    """Fuzz seed 91, GroupNormalization of 1e30: ONNX's function body computes the statistics in
    its stash_type (float32 when absent), where E[x^2] - E[x]^2 is inf - inf = NaN; Ember's are
    float64 and finite. The fuzzer's float64 run of the reference kept the float32 stash type,
    so it called Ember wrong; widening now widens the statistics too, and the float64 reference
    agrees with Ember (an ONNX Runtime rounding difference, not a finding)."""
    from bench.fuzz_compare import run_reference

    path = _case(tmp_path, [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=2,
                                             epsilon=0.01)],
                 [_info("x", [3, 4, 2, 2]), _info("scale", [4]), _info("bias", [4])], [_info("y", None)], opset=21)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 4, 2, 2)).astype(np.float32),
             "scale": rng.standard_normal(4).astype(np.float32), "bias": rng.standard_normal(4).astype(np.float32)}
    feeds["x"][2, 0, 0, 0] = 1e30
    narrow, wide = run_reference(path, feeds)[0], run_reference(path, feeds, widen=True)[0]
    assert np.isnan(narrow).sum() == 8 and np.isfinite(wide).all()
    got = ember.compile(str(path), backend="interpreter").run(feeds)["y"]
    np.testing.assert_allclose(got, wide.astype(np.float32), rtol=1e-4, atol=1e-5)
