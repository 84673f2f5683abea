"""Measured kernel selection (ember/tuning.py, compile(tune=True)): every variant a search may
time computes what the interpreter does, pins override the cost model only where they name a
feasible kernel, and a second tuned compile takes its choices from the cache."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.codegen.kernels import C_KERNELS
from ember.codegen.kernels.registry import KernelOptions, instr_signature
from ember.driver import compile_model
from ember.support.errors import EmberError
from ember.tuning import MARGIN, _Capturing, _decide, _Tunable, compile_tuned, tune_kernels
from tests.helpers import relative_error


def conv_model(channels, out_channels, hw, kernel, stride, pads, group=1, dilation=1, act=None, residual=False,
               bias=True) -> onnx.ModelProto:
    """One Conv (and an Add of a second input, an activation), as the fusion passes see it."""
    rng = np.random.default_rng(1)
    taps = (kernel,) * len(hw)
    inits = [numpy_helper.from_array((rng.standard_normal((out_channels, channels // group, *taps)) * 0.3)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b")]
    out_hw = [(size + pads[i] + pads[i + len(hw)] - dilation * (kernel - 1) - 1) // stride + 1
              for i, size in enumerate(hw)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], group=group, pads=pads,
                              strides=[stride] * len(hw), dilations=[dilation] * len(hw))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, *hw])]
    last = "c"
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, out_channels, *out_hw]))
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
        last = "a"
    nodes.append(helper.make_node(act or "Identity", [last], ["y"]))
    graph = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = {
    "3x3-residual": dict(channels=8, out_channels=16, hw=(12, 12), kernel=3, stride=1, pads=[1] * 4, act="Relu",
                         residual=True),
    "3x3-stride2": dict(channels=3, out_channels=32, hw=(17, 17), kernel=3, stride=2, pads=[1] * 4),
    "1x1": dict(channels=24, out_channels=40, hw=(7, 7), kernel=1, stride=1, pads=[0] * 4, act="Relu"),
    "1x1-stride2": dict(channels=16, out_channels=32, hw=(9, 9), kernel=1, stride=2, pads=[0] * 4, bias=False),
    "depthwise": dict(channels=16, out_channels=16, hw=(10, 10), kernel=3, stride=1, pads=[1] * 4, group=16,
                      act="Relu"),
    "depthwise-5x5-stride2": dict(channels=32, out_channels=32, hw=(11, 13), kernel=5, stride=2, pads=[2] * 4,
                                  group=32),
    "grouped": dict(channels=16, out_channels=32, hw=(9, 9), kernel=3, stride=1, pads=[1] * 4, group=4),
    "channel-multiplier": dict(channels=8, out_channels=16, hw=(9, 9), kernel=3, stride=1, pads=[1] * 4, group=8),
    "dilated": dict(channels=8, out_channels=8, hw=(12, 12), kernel=3, stride=1, pads=[2] * 4, dilation=2),
    "1-d": dict(channels=8, out_channels=16, hw=(20,), kernel=3, stride=1, pads=[1, 1]),
    "asymmetric-pads": dict(channels=36, out_channels=32, hw=(10, 15), kernel=3, stride=1, pads=[2, 1, 0, 1],
                            act="Sigmoid"),
}


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _conv_kernels(backend: _Capturing) -> list[str]:
    assert backend.program is not None
    return [i.kernel.name for i in backend.program.instrs if i.kernel is not None and i.name in ("Conv", "FusedConv")]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_every_feasible_variant_matches_the_interpreter(case, threads):
    # A search runs kernels where the cost model would not (conv_gemm on a depthwise layer):
    # each must still compute the layer, in bounds.
    model = conv_model(**CASES[case])
    feeds = _feeds(model)
    expected = compile_model(model, "interpreter").run(feeds)["y"]
    default = _Capturing(num_threads=threads)
    compile_model(model, default)
    options = default.kernel_options()
    conv = next(i for i in default.program.instrs if i.kernel is not None and i.name in ("Conv", "FusedConv"))
    variants = [k.name for k in C_KERNELS.candidates(conv, options)]
    assert len(variants) >= (1 if case == "dilated" else 2), variants  # dilation: only the im2col GEMM
    seen = []
    for round_index in range(len(variants)):
        backend = _Capturing(num_threads=threads, variant_round=round_index)
        got = compile_model(model, backend).run(feeds)["y"]
        seen += _conv_kernels(backend)
        assert relative_error(got, expected) < 2e-5, (case, variants[round_index])
    assert seen == variants


def test_candidates_of_a_3x3_convolution_and_pins():
    model = conv_model(**CASES["asymmetric-pads"])
    backend = _Capturing(num_threads=1)
    compile_model(model, backend)
    options = backend.kernel_options()
    conv = next(i for i in backend.program.instrs if i.name == "FusedConv")
    assert [k.name for k in C_KERNELS.candidates(conv, options)] == [
        "conv_winograd4", "conv_winograd", "conv_taps", "conv_pixel_rows", "conv_direct", "conv_gemm"]
    default = C_KERNELS.default_variant(conv, options).name
    signature = instr_signature(conv, options)
    assert "FusedConv(FLOAT32[1, 36, 10, 15]" in signature and "threads=1" in signature

    def chosen(pins: dict[str, str]) -> tuple[str, dict]:
        kernel, plan = C_KERNELS.select(conv, KernelOptions(num_threads=1, pinned=tuple(pins.items())))
        return kernel.name, plan.params

    pinned = "conv_gemm" if default != "conv_gemm" else "conv_direct"
    assert chosen({signature: pinned})[0] == pinned
    assert chosen({signature: pinned})[1]["tuned"] is True
    assert chosen({signature: "conv_depthwise"})[0] == default  # not feasible here: the cost model's choice
    assert chosen({signature.replace("threads=1", "threads=2"): pinned})[0] == default  # another signature


def test_decisions_need_the_margin():
    close = _Tunable("n", "conv_direct", {"conv_direct": 1.0, "conv_gemm": 1.0 - MARGIN / 2})
    clear = _Tunable("n", "conv_direct", {"conv_direct": 1.0, "conv_gemm": 1.0 - 2 * MARGIN})
    assert _decide(close) == "conv_direct"
    assert _decide(clear) == "conv_gemm"
    assert _decide(_Tunable("n", "conv_direct")) == "conv_direct"


def test_tuned_compile_measures_once_then_reads_the_cache(tmp_path):
    model = conv_model(channels=32, out_channels=32, hw=(14, 14), kernel=3, stride=1, pads=[1] * 4, act="Relu")
    feeds = _feeds(model)
    expected = compile_model(model, "interpreter").run(feeds)["y"]
    cache = tmp_path / "kernel-tuning.json"
    first = compile_tuned(model, num_threads=1, cache=cache)
    report = first.stats["tuning"]
    assert report["measured"] == 1 and report["from_cache"] == 0 and report["rounds"] >= 5
    (timings,) = report["timings_us"].values()
    assert {"conv_winograd4", "conv_winograd", "conv_direct", "conv_gemm"} <= set(timings)
    entries = next(iter(json.loads(cache.read_text()).values()))
    (entry,) = entries.values()
    assert entry["kernel"] in timings and entry["us"] == timings
    second = tune_kernels(model, num_threads=1, cache=cache)
    assert second.report["measured"] == 0 and second.report["from_cache"] == 1 and second.report["rounds"] == 0
    assert second.report["tuned"] == report["tuned"]
    assert relative_error(first.run(feeds)["y"], expected) < 2e-5
    # A cached choice that differs from the cost model's is what the compile pins.
    (signature,) = entries
    default = entry["default"]
    other = next(k for k in timings if k != default)
    entries[signature]["kernel"] = other
    cache.write_text(json.dumps({key: entries for key in json.loads(cache.read_text())}))
    pinned = compile_tuned(model, num_threads=1, cache=cache)
    assert list(pinned.stats["tuning"]["tuned"].values()) == [other]
    assert relative_error(pinned.run(feeds)["y"], expected) < 2e-5


def test_tune_needs_the_cpu_backend_in_float32():
    model = conv_model(**CASES["1x1"])
    with pytest.raises(EmberError, match="tune=True measures the cpu backend"):
        ember.compile(model, backend="interpreter", tune=True)


def test_tune_needs_static_shapes():
    model = conv_model(**CASES["1x1"])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(EmberError, match="tune=True measures kernels on static shapes"):
        ember.compile(model, backend="cpu", tune=True)
