"""quant/schemas.py and quant/calibrate.py: the four schemas' scales and zero points (degenerate
ranges included), power-of-two scales, the entropy (KL) calibration against known
distributions, and every schema x method end to end on the interpreter and the cpu backend's
integer kernels (int8 and uint8 activations), the cpu result against the interpreter's."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph import parse_graph, print_graph
from ember.quant import SCHEMAS, activation_range, entropy_bins, get_schema, profile_graph, quantize_graph
from ember.quant.profile import BINS, TensorStats
from ember.quant.schemas import power2_ceil
from ember.types import DType
from tests.helpers import evaluate_graph
from tests.test_quant_ort import _small_model


def test_asymmetric_uint8_widens_to_hold_zero():
    s = get_schema("asymmetric")
    scale, zero = s.activation(-1.0, 3.0)
    assert scale.dtype == np.float32 and zero.dtype == np.uint8
    assert np.isclose(scale, 4 / 255) and zero == 64
    scale, zero = s.activation(0.5, 2.0)
    assert zero == 0 and np.isclose(scale, 2 / 255)


def test_symmetric_int8_has_zero_point_zero():
    scale, zero = get_schema("symmetric").activation(-0.5, 2.54)
    assert zero.dtype == np.int8 and zero == 0 and np.isclose(scale, 0.02)


def test_symmetric_uint8_uses_all_levels_for_a_never_negative_range():
    s = get_schema("symmetric-uint8")
    scale, zero = s.activation(0.0, 5.1)
    assert zero.dtype == np.uint8 and zero == 0 and np.isclose(scale, 0.02)
    scale, zero = s.activation(-1.27, 0.5)
    assert zero == 128 and np.isclose(scale, 0.01)


def test_power2_scales_are_powers_of_two_that_saturate_nothing():
    assert power2_ceil(np.array([0.25, 0.3, 1.0, 3e-5])).tolist() == [0.25, 0.5, 1.0, 2.0**-15]
    s = get_schema("power2")
    scale, zero = s.activation(-3.0, 1.0)
    assert zero.dtype == np.int8 and zero == 0
    assert scale == 2.0**-5 and 127 * scale >= 3.0  # 3/127 = 0.0236 -> 1/32
    w = np.array([[1.0, -0.1], [0.003, 0.002], [0.0, 0.0]], np.float32)
    q, ws = s.weights(w, axis=0)
    assert np.all(np.log2(ws) == np.round(np.log2(ws))) and ws[2] == 1.0
    assert np.abs(q).max() <= 127 and np.allclose(q * ws[:, None], w, atol=ws[:, None] / 2 + 1e-9)
    b = s.bias_scale(scale, ws)
    assert np.all(np.log2(b) == np.round(np.log2(b)))


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_a_degenerate_range_gets_a_valid_scale(name):
    s = get_schema(name)
    for lo, hi in [(0.0, 0.0), (0.0, 1e-45), (-1e-45, 0.0)]:
        scale, zero = s.activation(lo, hi)
        assert np.isfinite(scale) and scale > 0, (name, lo, hi, scale)
        x = np.zeros(4, np.float32)
        assert np.all(np.rint(x / scale) + zero.astype(np.int32) == zero.astype(np.int32))
    q, ws = s.weights(np.zeros((3, 4), np.float32), axis=0)
    assert np.all(ws == 1.0) and not q.any()


def test_an_unknown_schema_or_method_is_refused():
    with pytest.raises(ember.EmberError, match="unknown quantization schema 'int4'.*asymmetric"):
        get_schema("int4")
    with pytest.raises(ember.EmberError, match="unknown calibration method 'mse'"):
        activation_range(TensorStats(), "mse")
    with pytest.raises(ember.EmberError, match="percentile 0"):
        activation_range(_stats(np.linspace(-1, 1, 100)), "percentile", 0.0)


def _stats(values) -> TensorStats:
    stats = TensorStats()
    stats.update(np.asarray(values, np.float32))
    return stats


def test_entropy_clips_a_far_outlier_and_keeps_a_uniform_range():
    r = np.random.default_rng(0)
    gauss = _stats(np.concatenate([r.standard_normal(200_000), [60.0]]))
    lo, hi = activation_range(gauss, "entropy")
    assert 3.0 < hi < 8.0 and lo == -hi, (lo, hi)  # the outlier at 60 is dropped, the bulk kept
    uniform = _stats(r.uniform(-2, 2, 200_000))
    lo, hi = activation_range(uniform, "entropy")
    assert hi > 1.9 and lo < -1.9  # nothing to gain by clipping a uniform distribution


def test_entropy_is_not_pulled_to_zero_by_the_relu_spike():
    r = np.random.default_rng(1)
    relu = _stats(np.maximum(r.standard_normal(200_000), 0.0))
    lo, hi = activation_range(relu, "entropy", levels=get_schema("asymmetric").levels(relu.min))
    assert lo == 0.0 and hi > 2.5, hi


def test_entropy_does_not_clip_most_of_a_few_discrete_values():
    """An image input of 17 grey levels: the threshold folding everything beyond 1/16 onto that
    spike matches Q exactly (KL 0); it would clip 40% of the pixels, so it is not a candidate."""
    r = np.random.default_rng(2)
    pixels = r.choice(np.arange(17) / 16, size=50_000, p=np.r_[0.5, np.full(15, 0.1 / 15), 0.4])
    for levels in (128, 256):
        lo, hi = activation_range(_stats(pixels), "entropy", levels=levels)
        assert (lo, hi) == (0.0, 1.0), (levels, hi)


def test_entropy_bins_hand_checked():
    counts = np.zeros(BINS // 2, np.int64)
    counts[:16] = 100  # everything in the first 16 bins: at 16 levels, keeping 16 bins is exact
    assert entropy_bins(counts, levels=16) == 16
    assert entropy_bins(np.zeros(64, np.int64), levels=16) == 64  # empty: the whole range
    assert entropy_bins(np.ones(8, np.int64), levels=16) == 8  # fewer bins than levels


def _reference_kl(c: np.ndarray, i: int, levels: int) -> float:
    """KL(P || Q) for keeping i bins, bin by bin: the definition _kl_per_candidate sums in closed form."""
    kept = c[:i]
    p = kept.copy()
    p[-1] += c[i:].sum()
    groups = np.arange(i) * levels // i
    occupied = kept > 0
    count = np.bincount(groups, weights=kept, minlength=levels)
    members = np.bincount(groups, weights=occupied, minlength=levels)
    q = np.where(occupied, count[groups] / np.maximum(members[groups], 1), 0.0)
    if q.sum() == 0:
        return float("inf")
    p, q = p / p.sum(), q / q.sum()
    if (q == 0).any():
        q = (1 - 1e-4) * q + 1e-4 * (q == 0) / (q == 0).sum()
    return float(np.sum(p[p > 0] * np.log(p[p > 0] / q[p > 0])))


@pytest.mark.parametrize("seed", range(6))
def test_the_closed_form_kl_matches_the_bin_by_bin_definition(seed):
    from ember.quant.calibrate import _kl_per_candidate

    r = np.random.default_rng(seed)
    n, levels = [(300, 16), (600, 128), (2048, 128)][seed % 3]
    shapes = [np.histogram(np.abs(r.standard_normal(20_000)), n, (0, 5))[0].astype(np.float64),
              (r.integers(0, 3, n) * (r.random(n) < 0.3)).astype(np.float64)]
    for c in shapes:
        candidates = np.arange(levels, n + 1, 7)
        actual = _kl_per_candidate(c, candidates, levels)
        expected = np.array([_reference_kl(c, int(i), levels) for i in candidates])
        assert np.array_equal(np.isinf(actual), np.isinf(expected))
        finite = np.isfinite(expected)
        assert np.allclose(actual[finite], expected[finite], rtol=1e-9, atol=1e-12)


def test_percentile_and_minmax_ranges():
    stats = _stats(np.concatenate([np.linspace(-1, 1, 100_000), [1000.0]]))
    assert activation_range(stats, "minmax") == (-1.0, 1000.0)
    lo, hi = activation_range(stats, "percentile", 99.9)
    assert lo == -1.0 and hi < 2.0


def test_stats_skip_infinities_and_nans():
    stats = _stats([1.0, -2.0, np.inf, -np.inf, np.nan])
    assert (stats.min, stats.max, stats.nonfinite, int(stats.hist.sum())) == (-2.0, 1.0, 3, 2)


MLP = """graph "g" {
  input %x: f32[2,4]
  const @w: f32[4,3] = [0.5, -1, 2, 0.25, 0, 1, -0.5, 0.75, 1.5, 1, -2, 0.1]
  const @b: f32[3] = [0.1, -0.2, 0.3]
  %m: f32[2,3] = MatMul(%x, @w) name="m"
  %a: f32[2,3] = Add(%m, @b) name="a"
  %r: f32[2,3] = Relu(%a) name="r"
  output "y" = %r
}"""


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_each_schema_writes_its_activation_type_into_the_graph(name):
    graph = parse_graph(MLP)
    r = np.random.default_rng(0)
    feeds = [{"x": r.standard_normal((2, 4)).astype(np.float32)} for _ in range(4)]
    expected = evaluate_graph(graph, feeds[0])["y"]
    assert quantize_graph(graph, profile_graph(graph, feeds), schema=name) == 1
    schema = get_schema(name)
    for node in graph.nodes:
        if node.op == "QuantizeLinear":
            assert node.attrs.to is schema.activation_dtype
            if schema.power2:
                scale = float(node.inputs[1].data)
                assert np.log2(scale) == np.round(np.log2(scale))
    actual = evaluate_graph(graph, feeds[0])["y"]
    assert np.abs(actual - expected).max() < 0.06


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("schemas") / "m.onnx"
    _small_model(path)
    r = np.random.default_rng(1)
    feeds = [{"x": r.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
    return path, feeds, ember.profile(path, feeds), ember.compile(path, backend="interpreter").run(feeds[0])["y"]


@pytest.mark.parametrize("method", ["minmax", "entropy"])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_schema_runs_on_integer_ops_on_interpreter_and_cpu(small, name, method):
    path, feeds, profile, expected = small
    options = {"schema": name, "method": method}
    results = {}
    for backend in ("interpreter", "cpu"):
        compiled = ember.compile(path, backend=backend, quantize=profile, quantize_options=options)
        ops = compiled.stats["ops"]["optimized"]
        assert ops.get("QLinearConv") == 2 and ops.get("MatMulInteger") == 2, (backend, ops)
        assert not {"Conv", "Gemm", "MatMul", "FullyConnected"} & set(ops), (backend, ops)
        results[backend] = compiled.run(feeds[0])["y"]
    assert np.abs(results["interpreter"] - expected).max() <= 0.06 * np.abs(expected).max()
    # The output is a DequantizeLinear of the last Q: the two backends agree to one step of it.
    step = 2 * np.abs(expected).max() / 127
    assert np.abs(results["cpu"] - results["interpreter"]).max() <= step, name


MLP2 = """graph "g" {
  input %x: f32[2,4]
  const @w: f32[4,3] = [0.5, -1, 2, 0.25, 0, 1, -0.5, 0.75, 1.5, 1, -2, 0.1]
  const @b: f32[3] = [0.1, -0.2, 0.3]
  const @w2: f32[3,2] = [1, -1, 0.5, 2, -0.25, 1]
  %m: f32[2,3] = MatMul(%x, @w) name="m"
  %a: f32[2,3] = Add(%m, @b) name="a"
  %r: f32[2,3] = Relu(%a) name="r"
  %m2: f32[2,2] = MatMul(%r, @w2) name="m2"
  %s: f32[2,2] = Softmax(%m2) {axis=-1} name="s"
  output "y" = %s
}"""


def _mlp2_feeds():
    r = np.random.default_rng(0)
    return [{"x": r.standard_normal((2, 4)).astype(np.float32)} for _ in range(4)]


def test_int8_activations_after_a_biased_dense_relu_stay_integer():
    """fold-qdq folds an activation after a dense bias only where it clamps nothing: with int8
    activations the quantizer stops before the Relu, whose float reader makes the dense result
    float (MatMulInteger, dequantized, plus the bias), so the MatMul still runs as integers."""
    graph = parse_graph(MLP2)
    quantize_graph(graph, profile_graph(graph, _mlp2_feeds()), schema="symmetric")
    relu = next(n for n in graph.nodes if n.op == "Relu")
    bias = relu.input(0).producer
    assert bias.op == "Add" and bias.input(0).producer.op == "DequantizeLinear"
    assert bias.input(0).producer.input(0).producer.op == "MatMulInteger"
    graph = parse_graph(MLP2)
    quantize_graph(graph, profile_graph(graph, _mlp2_feeds()), schema="asymmetric")
    relu = next(n for n in graph.nodes if n.op == "Relu")
    (q, _), = graph.users()[relu.outputs[0]]
    assert q.op == "QuantizeLinear" and q.attrs.to is DType.UINT8


def test_a_dense_result_read_in_float_stays_float():
    """Only where every reader takes integers is a dense result requantized; a result read in
    float (Softmax here, a residual Add or an attention reshape in a transformer, a graph
    output) comes from MatMulInteger dequantized per column: no rounding of the result, which
    keeps a transformer's outlier features exact."""
    graph = parse_graph(MLP2)
    feeds = _mlp2_feeds()
    expected = evaluate_graph(graph, feeds[0])["y"]
    assert quantize_graph(graph, profile_graph(graph, feeds)) == 2
    text = print_graph(graph)
    m2 = next(n for n in graph.nodes if n.op == "MatMulInteger" and n.name == "m2.int")
    dq = graph.users()[m2.outputs[0]][0][0]
    assert dq.op == "DequantizeLinear" and dq.attrs.axis == -1, text
    assert graph.users()[dq.outputs[0]][0][0].op == "Softmax", text
    assert graph.op_counts()["QuantizeLinear"] == 2, text  # x, and r (read by m2)
    assert np.abs(evaluate_graph(graph, feeds[0])["y"] - expected).max() < 0.03
    compiled = ember.compile(_onnx_of_mlp2(), backend="cpu", quantize=ember.profile(_onnx_of_mlp2(), feeds))
    decisions = sorted(compiled.stats["quantization"].values())
    assert decisions == ["int8 (asymmetric), result float (read in float)", "int8 (asymmetric), result requantized"]
    ops = compiled.stats["ops"]["optimized"]
    assert ops.get("MatMulInteger") == 2 and "MatMul" not in ops and "FullyConnected" not in ops, ops
    assert np.abs(compiled.run(feeds[0])["y"] - expected).max() < 0.03


def _onnx_of_mlp2():
    from onnx import TensorProto, helper, numpy_helper

    graph = parse_graph(MLP2)
    inits = [numpy_helper.from_array(graph.constants[n].data, n) for n in ("w", "b", "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["m2"]),
             helper.make_node("Softmax", ["m2"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "mlp2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
