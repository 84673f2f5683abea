"""The ember-dnnl plugin (plugins/ember-dnnl): oneDNN behind Ember's plugin API, found through
the `ember.backends` entry point. Every form its kernels take (convolutions with bias,
residual and activation post-ops; FullyConnected and MatMul; pooling) against the
interpreter, the forms they refuse falling through to Ember's cpu kernels, the shared models,
oneDNN really running, determinism, concurrent first runs and partitioning with it.
Skips when the plugin or oneDNN is not installed (`pip install -e plugins/ember-dnnl`)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from importlib import metadata

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.backends import available_backends, get_backend
from ember.driver import compile_model
from ember.lir.text import print_program
from ember.support.errors import EmberError
from tests.conftest import require_shared_models
from tests.helpers import relative_error


def _plugin():
    entry = {ep.name: ep for ep in metadata.entry_points(group="ember.backends")}.get("dnnl")
    if entry is None:
        pytest.skip("the ember-dnnl plugin is not installed: pip install -e plugins/ember-dnnl")
    try:
        module = __import__("ember_dnnl")
        module.find_onednn()
    except (ImportError, EmberError) as err:
        pytest.skip(f"the ember-dnnl plugin cannot run here: {err}")
    return entry, module


@pytest.fixture(scope="module", autouse=True)
def plugin():
    return _plugin()


RNG = np.random.default_rng(0)


def _model(nodes, inputs, weights, outputs=("y",), opset=17):
    graph = helper.make_graph(
        nodes, "case", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(model):
    return {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _check(model, kernel: str | None, backend="dnnl", **options):
    """Compiles `model` on dnnl, checks it against the interpreter (1e-4 relative) and that
    `kernel` was selected (None: that no dnnl kernel was); returns the LIR text."""
    captured = {}
    compiled = compile_model(model, backend, observer=lambda stage, art: captured.setdefault(stage, art),
                             backend_options=options)
    lir = print_program(captured["lir"])
    if kernel is None:
        assert "kernel dnnl_" not in lir, lir
    else:
        assert f"kernel {kernel}(" in lir, lir
    feeds = _feeds(model)
    expected = ember.compile(model, backend="interpreter").run(feeds)
    actual = compiled.run(feeds)
    for name in expected:
        assert relative_error(actual[name], expected[name]) <= 1e-4, name
    return lir


def _conv(c=8, o=16, hw=(12, 10), k=3, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1, bias=True,
          after=(), residual=False):
    """Conv, then Add(x) when residual, then the `after` ops: (op, attributes[, constant inputs])."""
    weights = {"W": RNG.standard_normal((o, c // group, k, k)) * 0.3, "lo": 0.0, "hi": 6.0}
    if bias:
        weights["B"] = RNG.standard_normal(o)
    nodes = [helper.make_node("Conv", ["x", "W", *(["B"] if bias else [])], ["t0"], strides=list(strides),
                              pads=list(pads), dilations=list(dilations), group=group)]
    if residual:
        nodes.append(helper.make_node("Add", ["t0", "x"], ["t1"]))
    for i, (op, attrs, *constants) in enumerate(after):
        nodes.append(helper.make_node(op, [nodes[-1].output[0], *(constants[0] if constants else [])], [f"a{i}"],
                                      **attrs))
    nodes[-1].output[0] = "y"
    return _model(nodes, [("x", [2, c, *hw])], weights)


CONVS = {
    "pad_bias_relu": _conv(after=[("Relu", {})]),
    "stride_dilation_asymmetric_pads": _conv(k=3, strides=(2, 1), pads=(0, 1, 2, 1), dilations=(2, 2),
                                             after=[("Relu", {})]),
    "pointwise_no_bias": _conv(k=1, pads=(0, 0, 0, 0), bias=False),
    "grouped_clip": _conv(c=8, o=12, group=4, after=[("Clip", {}, ["lo", "hi"])]),
    "depthwise_leaky_relu": _conv(c=16, o=16, group=16, k=5, pads=(2, 2, 2, 2), after=[("LeakyRelu", {"alpha": 0.1})]),
    "residual_relu": _conv(c=8, o=8, residual=True, after=[("Relu", {})]),
    "sigmoid": _conv(after=[("Sigmoid", {})]),
    "hard_sigmoid_stride3": _conv(k=3, strides=(3, 3), after=[("HardSigmoid", {"alpha": 0.3, "beta": 0.4})]),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_convolution_matches_the_interpreter(case):
    lir = _check(CONVS[case], "dnnl_conv")
    if case == "residual_relu":
        assert 'activation="relu"' in lir and "FusedConv" in lir


def _dense(m, k, n, bias=True, relu=True):
    weights = {"W": RNG.standard_normal((k, n)) * 0.2}
    inputs = ["x", "W"]
    if bias:
        weights["C"] = RNG.standard_normal(n)
        inputs.append("C")
    nodes = [helper.make_node("Gemm", inputs, ["y0" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["y0"], ["y"]))
    return _model(nodes, [("x", [m, k])], weights)


def _matmul(a, b, constant_b=False):
    weights = {"b": RNG.standard_normal(b)} if constant_b else {}
    inputs = [("a", list(a))] + ([] if constant_b else [("b", list(b))])
    return _model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, weights)


MATMULS = {
    "gemm_bias_relu": (_dense(7, 33, 20), "dnnl_fully_connected"),
    "gemm_no_bias": (_dense(1, 64, 48, bias=False, relu=False), "dnnl_fully_connected"),
    "matmul_activations": (_matmul((9, 17), (17, 6)), "dnnl_matmul"),
    "matmul_batched_broadcast": (_matmul((2, 1, 5, 8), (3, 8, 4)), "dnnl_matmul"),
    "matmul_constant_batched_b": (_matmul((3, 5, 8), (3, 8, 4), constant_b=True), "dnnl_matmul"),
    "matmul_3d_by_2d_constant": (_matmul((4, 6, 16), (16, 12), constant_b=True), "dnnl_fully_connected"),
}


@pytest.mark.parametrize("case", list(MATMULS))
def test_matrix_products_match_the_interpreter(case):
    model, kernel = MATMULS[case]
    _check(model, kernel)


def _pool(op, hw=(13, 11), **attrs):
    return _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [2, 5, *hw])], {})


POOLS = {
    "max_pads_stride": _pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "max_ceil_mode": _pool("MaxPool", kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1),
    "max_dilated": _pool("MaxPool", kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 0, 1, 0]),
    "average_excluding_pads": _pool("AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    "average_including_pads": _pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                    count_include_pad=1),
    "average_ceil_mode": _pool("AveragePool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    "max_windows_short_of_the_edge": _pool("MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
    "average_including_pads_short_of_the_edge": _pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2],
                                                      pads=[1, 1, 1, 1], count_include_pad=1, hw=(12, 12)),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_pooling_matches_the_interpreter(case):
    _check(POOLS[case], "dnnl_maxpool" if case.startswith("max") else "dnnl_avgpool")


def test_forms_it_refuses_say_why_and_run_on_the_cpu_kernels(plugin):
    from ember.codegen.kernels import OpView
    from ember.types import DType, TensorType

    kernels = plugin[1].KERNELS
    view = OpView("MatMul", None, (TensorType(DType.FLOAT64, (2, 2)),),
                  (TensorType(DType.FLOAT64, (2, 3)), TensorType(DType.FLOAT64, (3, 2))), (False, False))
    assert "float32" in kernels["dnnl_matmul"].accepts(view)
    vector = OpView("MatMul", None, (TensorType(DType.FLOAT32, (2,)),),
                    (TensorType(DType.FLOAT32, (3,)), TensorType(DType.FLOAT32, (3, 2))), (False, False))
    assert "rank 2 to 6" in kernels["dnnl_matmul"].accepts(vector)
    assert "kernel matmul_gemm(" in _check(_matmul((8,), (8, 5)), None)
    # Counting pads in an average with ceil-mode overhang: oneDNN would count the overhang.
    overhang = _pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                     count_include_pad=1, hw=(8, 8))
    assert "kernel avgpool_loops(" in _check(overhang, None)
    # A model with nothing for oneDNN runs on dnnl all the same, on Ember's kernels.
    softmax = _model([helper.make_node("Softmax", ["x"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])],
                     [("x", [3, 7])], {})
    assert "kernel softmax_rows(" in _check(softmax, None)


MODELS = ["resnet18", "mobilenetv2", "mlp", "bert_synthetic"]
MODEL_KERNELS = {"resnet18": ("dnnl_conv", "dnnl_maxpool", "dnnl_fully_connected"), "mobilenetv2": ("dnnl_conv",),
                 "mlp": ("dnnl_fully_connected",), "bert_synthetic": ("dnnl_fully_connected", "dnnl_matmul")}


@pytest.mark.parametrize("name", MODELS)
def test_shared_model_matches_its_reference(name):
    path = require_shared_models() / f"{name}.onnx"
    captured = {}
    model = compile_model(path, "dnnl", observer=lambda stage, art: captured.setdefault(stage, art))
    lir = print_program(captured["lir"])
    for kernel in MODEL_KERNELS[name]:
        assert f"kernel {kernel}(" in lir
    assert "edn_run(&state" in model.executable.source
    reference = np.load(path.with_suffix(".ref.npz"))
    outputs = model.run({n: reference[f"in_{n}"] for n in model.input_names})
    for index, output in enumerate(model.output_names):
        assert relative_error(outputs[output], reference[f"out_{index}"]) <= 1e-4, output


def test_discovered_through_the_entry_point(plugin):
    from ember.backends import registry

    entry, module = plugin
    assert entry.value == "ember_dnnl:DnnlBackend"
    assert "dnnl" in available_backends() and "dnnl" not in registry._BUILTIN
    backend = get_backend("dnnl", num_threads=1)
    assert type(backend) is module.DnnlBackend and backend.name == "dnnl" and backend.num_threads == 1
    assert "-ldnnl" in backend.link_flags


def test_ember_dump_shows_the_dnnl_kernels(tmp_path, capsys):
    from ember.cli import main

    path = tmp_path / "conv.onnx"
    path.write_bytes(CONVS["pad_bias_relu"].SerializeToString())
    assert main(["dump", str(path), "--stage", "lir", "--backend", "dnnl"]) == 0
    assert "kernel dnnl_conv(" in capsys.readouterr().out


def test_onednn_really_executes_the_primitives(tmp_path):
    path = tmp_path / "conv.onnx"
    path.write_bytes(CONVS["pad_bias_relu"].SerializeToString())
    code = ("import sys, numpy as np, ember; m = ember.compile(sys.argv[1], backend='dnnl'); "
            "m.run({'x': np.ones((2, 8, 12, 10), np.float32)})")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                            env=dict(os.environ, ONEDNN_VERBOSE="1"))
    assert "onednn_verbose,exec,cpu,convolution" in result.stdout, result.stdout[-2000:]


def test_same_model_same_c_and_other_weights_other_state():
    """The C names the digest of the weights its oneDNN state is built from: the same model
    gives the same C; a model differing only in weights gets a library (and state) of its own,
    and both run correctly in one process."""
    first, second = _conv(after=[("Relu", {})]), _conv(after=[("Relu", {})])
    sources = [ember.compile(m, backend="dnnl").executable.source for m in (first, first, second)]
    assert sources[0] == sources[1] and sources[0] != sources[2]
    compiled = [ember.compile(m, backend="dnnl") for m in (first, second)]
    feeds = _feeds(first)
    for model, native in zip((first, second), compiled, strict=True):
        expected = ember.compile(model, backend="interpreter").run(feeds)["y"]
        assert relative_error(native.run(feeds)["y"], expected) <= 1e-4


def test_threads_racing_on_the_first_run_build_once_and_agree():
    model = _conv(c=16, o=32, hw=(28, 28), after=[("Relu", {})])
    compiled = ember.compile(model, backend="dnnl", num_threads=2)
    feeds = _feeds(model)
    expected = ember.compile(model, backend="interpreter").run(feeds)["y"]
    results, barrier = [None] * 6, threading.Barrier(6)

    def work(i):
        barrier.wait()
        results[i] = compiled.run(feeds)["y"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(relative_error(r, expected) <= 1e-4 for r in results)


def test_saved_and_loaded(tmp_path):
    model = _dense(4, 32, 16)
    compiled = ember.compile(model, backend="dnnl")
    compiled.save(tmp_path / "m.ember")
    feeds = _feeds(model)
    np.testing.assert_array_equal(ember.load(tmp_path / "m.ember").run(feeds)["y"], compiled.run(feeds)["y"])


def test_partitioned_with_it_in_priority_order_and_by_cost(plugin):
    from ember.heterogeneous import compile_partitioned, resolve_backends

    model = _model([helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["c"], ["r"]),
                    helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[5, 5], pads=[2, 2, 2, 2])],
                   [("x", [1, 8, 16, 16])], {"W": RNG.standard_normal((8, 8, 3, 3))})
    feeds = _feeds(model)
    expected = ember.compile(model, backend="interpreter").run(feeds)["y"]
    listed = ember.compile(model, backend=["dnnl", "cpu", "interpreter"])
    assert listed.stats["segments"] and {s["backend"] for s in listed.stats["segments"]} == {"dnnl"}
    assert relative_error(listed.run(feeds)["y"], expected) <= 1e-4
    assert "dnnl" in [b.name for b in resolve_backends("auto")[0]]
    automatic = ember.compile(model, backend="auto")
    assert relative_error(automatic.run(feeds)["y"], expected) <= 1e-4
    # Its own estimate: oneDNN's rates for what its kernels take, finite and positive.
    from ember.driver import load_model as load

    graph = load(model)
    backend = get_backend("dnnl", num_threads=1)
    assert 0 < backend.cost(graph) < 1
    # Measured costs: every unit compiled and timed on dnnl and cpu.
    measured = compile_partitioned(load(model), [backend, get_backend("cpu", num_threads=1)], strategy="cost",
                                   measure=True)
    assert relative_error(measured.run(feeds)["y"], expected) <= 1e-4
