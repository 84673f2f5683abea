"""quant/: profiling on calibration inputs, the profile file and its graph hash, calibration
(min/max, percentile, degenerate ranges), the quantize rewrite and compile(quantize=...), and
the bad inputs refused before any work."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph import parse_graph
from ember.quant import (
    CalibrationError,
    Profile,
    ProfileError,
    activation_range,
    int8_per_channel,
    profile_graph,
    quantize_graph,
    uint8_params,
)
from ember.quant.profile import TensorStats
from tests.helpers import evaluate_graph
from tests.test_quant_ort import _small_model

MLP = """graph "g" {
  input %x: f32[2,4]
  const @w: f32[4,3] = [0.5, -1, 2, 0.25, 0, 1, -0.5, 0.75, 1.5, 1, -2, 0.1]
  const @b: f32[3] = [0.1, -0.2, 0.3]
  %m: f32[2,3] = MatMul(%x, @w) name="m"
  %a: f32[2,3] = Add(%m, @b) name="a"
  %r: f32[2,3] = Relu(%a) name="r"
  %s: f32[2,3] = Softmax(%r) {axis=-1} name="s"
  output "y" = %s
}"""


def _feeds(n=6, seed=0):
    r = np.random.default_rng(seed)
    return [{"x": r.standard_normal((2, 4)).astype(np.float32)} for _ in range(n)]


def test_profile_records_every_float_value_and_round_trips_through_json(tmp_path):
    graph = parse_graph(MLP)
    profile = profile_graph(graph, _feeds())
    assert {"x", "m", "a", "r", "s"} <= set(profile.tensors) and profile.samples == 6
    assert profile.tensors["r"].min == 0.0 and profile.tensors["x"].hist.sum() == 6 * 8
    profile.save(tmp_path / "p.json")
    loaded = Profile.load(tmp_path / "p.json")
    assert loaded.graph_hash == profile.graph_hash
    assert np.array_equal(loaded.tensors["a"].hist, profile.tensors["a"].hist)
    assert loaded.tensors["a"].max == profile.tensors["a"].max


def test_quantize_inserts_qdq_around_the_matmul_and_keeps_softmax_float():
    graph = parse_graph(MLP)
    profile = profile_graph(graph, _feeds())
    expected = evaluate_graph(graph, _feeds(1, seed=5)[0])["y"]
    assert quantize_graph(graph, profile) == 1
    ops = graph.op_counts()
    # The result is read in float (by Softmax): MatMulInteger of Q(x), dequantized per column.
    assert ops["QuantizeLinear"] == 1 and ops["MatMulInteger"] == 1 and ops["DequantizeLinear"] == 1
    softmax = next(n for n in graph.nodes if n.op == "Softmax")
    assert softmax.input(0).producer.op == "Relu" and ops["Softmax"] == 1
    actual = evaluate_graph(graph, _feeds(1, seed=5)[0])["y"]
    assert np.abs(actual - expected).max() < 0.05


def test_keep_float_by_op_type_and_by_node_name():
    for keep in (["MatMul"], ["m"]):
        graph = parse_graph(MLP)
        decisions: dict[str, str] = {}
        assert quantize_graph(graph, profile_graph(graph, _feeds()), keep_float=keep, decisions=decisions) == 0
        assert "QuantizeLinear" not in graph.op_counts() and decisions == {"m": "float: kept float (keep_float)"}
    graph = parse_graph(MLP)
    assert quantize_graph(graph, profile_graph(graph, _feeds()), keep_float=["Conv"]) == 1  # an op type, absent here
    graph = parse_graph(MLP)
    with pytest.raises(ember.EmberError, match=r"keep_float \['Matmul', 'mm'\]: neither op types nor node names"):
        quantize_graph(graph, profile_graph(graph, _feeds()), keep_float=["mm", "Matmul", "m"])


def test_calibration_schemas_and_degenerate_ranges():
    scale, zero = uint8_params(0.0, 0.0)  # a constant-zero tensor
    assert scale == 1.0 and zero == 0
    scale, zero = uint8_params(-1.0, 3.0)
    assert np.isclose(scale, 4 / 255) and zero == 64
    scale, zero = uint8_params(0.5, 2.0)  # widened to hold 0
    assert zero == 0 and np.isclose(scale, 2 / 255)
    q, s = int8_per_channel(np.array([[0.0, 0.0], [1.27, -0.635]], np.float32), axis=0)
    assert s[0] == 1.0 and np.isclose(s[1], 0.01) and q.tolist() == [[0, 0], [127, -64]]
    stats = TensorStats()
    stats.update(np.concatenate([np.linspace(-1, 1, 100000), [1000.0]]).astype(np.float32))
    assert activation_range(stats, "minmax") == (-1.0, 1000.0)
    lo, hi = activation_range(stats, "percentile", 99.9)
    assert lo == -1.0 and hi < 2.0


def test_bad_calibration_data_is_refused_before_any_work():
    graph = parse_graph(MLP)
    with pytest.raises(CalibrationError, match="empty"):
        profile_graph(graph, [])
    with pytest.raises(CalibrationError, match=r"unknown inputs \['y'\].*missing inputs \['x'\]"):
        profile_graph(graph, [{"y": np.zeros((2, 4), np.float32)}])
    with pytest.raises(CalibrationError, match=r"input 'x': shape \[4\], the model takes \[2, 4\]"):
        profile_graph(graph, [{"x": np.zeros(4, np.float32)}])
    with pytest.raises(CalibrationError, match="input 'x': dtype float64"):
        profile_graph(graph, [{"x": np.zeros((2, 4))}])
    bad = np.zeros((2, 4), np.float32)
    bad[0, 1], bad[1, 2] = np.nan, np.inf
    with pytest.raises(CalibrationError, match="sample 1, input 'x': 2 NaN/Inf"):
        profile_graph(graph, _feeds(1) + [{"x": bad}])
    assert issubclass(CalibrationError, ember.EmberError) and issubclass(ProfileError, ember.EmberError)


def test_a_profile_of_another_graph_or_no_profile_is_refused(tmp_path):
    profile = profile_graph(parse_graph(MLP), _feeds())
    other = parse_graph(MLP.replace("0.25", "0.3"))  # same structure, another weight
    with pytest.raises(ProfileError, match="taken on another graph"):
        quantize_graph(other, profile)
    (tmp_path / "x.json").write_text('{"format": "something"}')
    with pytest.raises(ProfileError, match="not an Ember quantization profile"):
        Profile.load(tmp_path / "x.json")
    with pytest.raises(ProfileError, match="cannot read"):
        Profile.load(tmp_path / "absent.json")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_compile_with_a_profile_runs_integer_ops_close_to_float(tmp_path, backend):
    _small_model(tmp_path / "m.onnx")
    r = np.random.default_rng(1)
    feeds = [{"x": r.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
    ember.profile(tmp_path / "m.onnx", feeds).save(tmp_path / "p.json")
    floating = ember.compile(tmp_path / "m.onnx", backend=backend)
    quantized = ember.compile(tmp_path / "m.onnx", backend=backend, quantize=tmp_path / "p.json")
    ops = quantized.stats["ops"]["optimized"]
    assert ops["QLinearConv"] == 2 and ops["MatMulInteger"] == 2 and "Conv" not in ops, ops
    for feed in feeds[:3]:
        a, b = floating.run(feed)["y"], quantized.run(feed)["y"]
        assert np.abs(a - b).max() <= 0.05 * np.abs(a).max()
    with pytest.raises(ProfileError, match="another graph"):
        ember.compile(tmp_path / "m.onnx", backend=backend, quantize=profile_graph(parse_graph(MLP), _feeds()))


def test_a_profile_of_another_version_or_malformed_is_refused(tmp_path):
    profile = profile_graph(parse_graph(MLP), _feeds())
    profile.save(tmp_path / "p.json")
    import json

    data = json.loads((tmp_path / "p.json").read_text())
    (tmp_path / "v1.json").write_text(json.dumps({**data, "version": 1}))
    with pytest.raises(ProfileError, match="version 1 quantization profile; this Ember reads version 2"):
        Profile.load(tmp_path / "v1.json")
    first = next(iter(data["tensors"]))
    for broken in ({**data, "tensors": {first: {"min": 0}}},
                   {**data, "tensors": {first: {**data["tensors"][first], "hist": {"-1": 5}}}},
                   {**data, "samples": "many"}):
        (tmp_path / "bad.json").write_text(json.dumps(broken))
        with pytest.raises(ProfileError, match="malformed"):
            Profile.load(tmp_path / "bad.json")


def test_a_constant_zero_tensor_quantizes_with_a_valid_scale():
    graph = parse_graph(MLP)
    zeros = [{"x": np.zeros((2, 4), np.float32)} for _ in range(3)]
    profile = profile_graph(graph, zeros)
    assert profile.tensors["x"].amax == 0.0 and profile.tensors["x"].hist.sum() == 24
    assert quantize_graph(graph, profile) == 1
    for node in graph.nodes:
        if node.op == "QuantizeLinear":
            scale = float(node.inputs[1].data)
            assert np.isfinite(scale) and scale > 0
    with np.errstate(all="raise"):
        y = evaluate_graph(graph, zeros[0])["y"]
    assert np.allclose(y, evaluate_graph(parse_graph(MLP), zeros[0])["y"], atol=0.02)


def test_unknown_or_mistyped_quantize_options_are_refused(tmp_path):
    _small_model(tmp_path / "m.onnx")
    profile = ember.profile(tmp_path / "m.onnx", [{"x": np.zeros((2, 3, 8, 8), np.float32)}])
    for options, message in [({"scheme": "symmetric"}, "option scheme='symmetric'"),
                             ({"percentile": "high"}, "option percentile='high'"),
                             ({"keep_float": "Conv"}, "option keep_float='Conv'"),
                             ({"schema": "int4"}, "unknown quantization schema 'int4'"),
                             ({"method": "mse"}, "unknown calibration method 'mse'")]:
        with pytest.raises(ember.EmberError, match=message):
            ember.compile(tmp_path / "m.onnx", quantize=profile, quantize_options=options, backend="interpreter")
