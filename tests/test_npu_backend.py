"""The NPU backend (ember.backends.npu): a described systolic accelerator as a backend of
the partitioner. Convolutions and matrix products it maps exactly run through the fold
simulator and match the interpreter; everything else, and what has no exact mapping, runs on
the cpu with the reason in m.stats; per node the mapping, schedule, cycles and utilisation
are reported. ResNet-18 and MobileNetV2 run when EMBER_NPU_MODELS=1 (about 40 s here)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import ember
from ember.backends import automatic_backends, available_backends, get_backend
from ember.backends.npu import NpuBackend, accelerator_targets, plan_node
from ember.driver import compile_graph
from ember.graph import Graph
from ember.heterogeneous import compile_partitioned
from ember.isa.describe import TARGETS_DIR
from ember.isa.fold_sim import count_cycles
from ember.ops.fused import FullyConnectedAttrs, FusedConvAttrs
from ember.ops.nn import ConvAttrs, GemmAttrs
from ember.ops.tensor import ReshapeAttrs
from ember.support.errors import UnsupportedError
from ember.types import TensorType
from tests.conftest import require_shared_models
from tests.helpers import relative_error

NPU = "npu-systolic16"


def small_model() -> Graph:
    """Strided padded conv (bias) -> Relu -> depthwise conv -> pointwise conv -> Gemm
    (transB, alpha, beta, bias) -> MatMul."""
    rng = np.random.default_rng(0)
    graph = Graph("small")

    def weight(shape, name):
        return graph.add_constant(rng.standard_normal(shape).astype(np.float32), name)

    x = graph.add_input("x", TensorType.of(np.zeros((1, 3, 13, 13), np.float32)))
    y = graph.add("Conv", x, weight((8, 3, 3, 3), "w1"), weight((8,), "b1"),
                  attrs=ConvAttrs((2, 2), (1, 1, 0, 0), (1, 1), 1), name="conv")
    y = graph.add("Relu", y, name="relu")
    y = graph.add("Conv", y, weight((8, 1, 3, 3), "dw"), attrs=ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 8),
                  name="depthwise")
    y = graph.add("Conv", y, weight((20, 8, 1, 1), "pw"), weight((20,), "pb"),
                  attrs=ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1), name="pointwise")
    flat = graph.add("Reshape", y, attrs=ReshapeAttrs((1, 20 * 6 * 6)), name="flatten")
    z = graph.add("Gemm", flat, weight((10, 20 * 6 * 6), "fc"), weight((10,), "fcb"),
                  attrs=GemmAttrs(alpha=0.5, beta=2.0, transB=True), name="fc")
    graph.set_outputs([("z", graph.add("MatMul", z, weight((10, 4), "proj"), name="proj"))])
    return graph


def _feeds(model):
    rng = np.random.default_rng(1)
    return {s.name: rng.standard_normal(s.type.shape).astype(np.float32) for s in model.inputs}


def test_the_npu_is_a_backend_named_by_its_description_and_only_when_asked_for():
    assert {NPU, "npu"} <= set(available_backends())
    assert NPU not in automatic_backends() and "npu" not in automatic_backends()
    assert get_backend("npu").target.name == NPU and get_backend("npu").name == "npu"
    assert get_backend(NPU).name == NPU
    # the registry reads the description files without the mapper; the loader agrees on which are accelerators
    described = {"aarch64-neon", "riscv-rvv", "x86-avx512", *accelerator_targets()}
    assert {name for name in available_backends() if name in described} == set(accelerator_targets())
    assert {"npu-systolic16", "npu-systolic32"} <= set(accelerator_targets())


def test_a_small_model_splits_between_npu_and_cpu_and_matches_the_interpreter():
    expected = compile_graph(small_model(), "interpreter")
    model = compile_partitioned(small_model(), [get_backend(NPU), get_backend("cpu")])
    feeds = _feeds(model)
    want, got = expected.run(feeds), model.run(feeds)
    assert relative_error(got["z"], want["z"]) <= 1e-4
    # the weights' blocks are gathered once and kept: a second run on other inputs is right too
    other = {name: value[..., ::-1].copy() for name, value in feeds.items()}
    assert relative_error(model.run(other)["z"], expected.run(other)["z"]) <= 1e-4
    partition = model.stats["partition"]
    assert "Conv conv\n" in partition and "Relu relu  # npu-systolic16: Relu is not a matrix product" in partition
    report = model.stats["backend_stats"][NPU]
    assert set(report["nodes"]) == {"conv", "depthwise", "pointwise", "fc", "proj"}
    conv = report["nodes"]["conv"]
    assert conv["mapping"].startswith("systolic.ws.f32 ") and "LOSSY" not in conv["mapping"]
    assert any("im2col" in change for change in conv["layout"])
    assert conv["schedule"][0].startswith("predicted ")
    for node in report["nodes"].values():
        assert 0 < node["array_utilisation"] <= node["mapping_utilisation"] <= 1
        assert node["simulated_cycles"] <= node["scheduled_cycles"]
        assert node["macs"] > 0 and node["folds"] > 0
    # a depthwise convolution is a matrix-vector product per channel: it barely fills the array
    assert report["nodes"]["depthwise"]["array_utilisation"] < 0.05 < report["nodes"]["pointwise"]["array_utilisation"]
    assert report["simulated_cycles"] == sum(n["simulated_cycles"] for n in report["nodes"].values())


def test_reported_cycles_are_the_descriptions_fold_by_fold():
    graph = small_model()
    backend = NpuBackend(NPU)
    node = next(n for n in graph.nodes if n.name == "pointwise")
    plan = plan_node(node, backend.target)
    assert not isinstance(plan, str)
    folds, cycles = count_cycles(plan.schedule.mapping, plan.stream)
    stats = plan.stats("Conv")
    assert (stats["folds"], stats["simulated_cycles"]) == (folds, cycles)
    # 20 output channels x 42 pixels x 8 input channels: one 16-row fold over 8 channels...
    mapping = plan.schedule.mapping
    extents = {a.dim: a for a in mapping.axes}
    per_fold = 46 + (extents["t"].extent if plan.stream is None else min(plan.stream, extents["t"].extent))
    assert cycles == folds * per_fold  # the description's t + 46 per fold (one stream tile each)


def test_what_it_cannot_map_exactly_goes_to_the_cpu_with_the_reason(tmp_path):
    # The same NPU without its float32 mode: only lossy (quantizing) mappings remain.
    text = (TARGETS_DIR / f"{NPU}.toml").read_text()
    i8_only = text[:text.index("# The array's float32 mode")].replace(f'target = "{NPU}"', 'target = "npu-i8"')
    path = tmp_path / "npu-i8.toml"
    path.write_text(i8_only)
    backend = NpuBackend(str(path))
    model = compile_partitioned(small_model(), [backend, get_backend("cpu")])
    partition = model.stats["partition"]
    assert "npu-i8" not in model.stats.get("backend_stats", {})
    assert "Conv conv  # npu-i8: no exact mapping onto npu-i8: systolic.ws: " in partition
    assert "(only a lossy fix-up)" in partition
    expected = compile_graph(small_model(), "interpreter")
    feeds = _feeds(model)
    assert relative_error(model.run(feeds)["z"], expected.run(feeds)["z"]) <= 1e-4


def test_alone_it_refuses_a_model_with_other_ops_naming_them():
    with pytest.raises(UnsupportedError, match=r"Relu \(nodes: relu\): Relu is not a matrix product"):
        compile_graph(small_model(), get_backend("npu"))


def test_float64_and_integer_products_are_refused():
    graph = Graph("f64")
    a = graph.add_input("a", TensorType.of(np.zeros((4, 8), np.float64)))
    b = graph.add_constant(np.ones((8, 16)), "b")
    graph.set_outputs([("y", graph.add("MatMul", a, b, name="mm"))])
    reason = get_backend(NPU).refusal(graph.nodes[0])
    assert reason == "the NPU backend runs float32 MatMul only, not f64"


def test_dump_partition_shows_the_split(capsys):
    from ember.cli import main

    folder = require_shared_models()
    assert main(["dump", str(folder / "mlp.onnx"), "--stage", "partition", "--backend", f"{NPU},cpu"]) == 0
    out = capsys.readouterr().out
    assert f"on {NPU}" in out and "on cpu" in out


def test_mlp_runs_through_the_npu_and_matches_its_reference():
    folder = require_shared_models()
    _check(folder, "mlp")


def _check(folder, name):
    model = ember.compile(str(folder / f"{name}.onnx"), backend=[NPU, "cpu"])
    ref = np.load(folder / f"{name}.ref.npz")
    outputs = model.run({n: ref[f"in_{n}"] for n in model.input_names})
    for index, out in enumerate(model.output_names):
        assert relative_error(outputs[out], ref[f"out_{index}"]) <= 1e-4
    assert model.stats["backend_stats"][NPU]["nodes"]
    return model


@pytest.mark.skipif(os.environ.get("EMBER_NPU_MODELS") != "1", reason="set EMBER_NPU_MODELS=1 (about 40 s)")
@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2"])
def test_big_models_run_through_the_npu_and_match_the_interpreter(name):
    folder = require_shared_models()
    model = _check(folder, name)
    nodes = model.stats["backend_stats"][NPU]["nodes"]
    graph_model = ember.compile(str(folder / f"{name}.onnx"), backend="interpreter")
    ref = np.load(folder / f"{name}.ref.npz")
    feeds = {n: ref[f"in_{n}"] for n in model.input_names}
    want, got = graph_model.run(feeds), model.run(feeds)
    for out in model.output_names:
        assert relative_error(got[out], want[out]) <= 1e-4
    assert sum(1 for n in nodes.values() if n["op"] == "Conv") >= 20


def test_a_new_description_file_is_a_new_backend_with_its_own_schedules():
    """npu-systolic32.toml (a 32 x 32 array, 256 KB scratchpads, a wider DMA) was added as one
    file: it is a backend by name, and its schedules use its array and scratchpads."""
    from ember.isa.expr import parse_expr
    from ember.isa.kernels import Kernel

    assert "npu-systolic32" in available_backends()
    small, big = get_backend(NPU), get_backend("npu-systolic32")
    gemm = Kernel("gemm", parse_expr("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:1024, j:512, k:1024"),
                  constants=frozenset({"B"}))
    graph = Graph("gemm")
    a = graph.add_input("a", TensorType.of(np.zeros((1024, 1024), np.float32)))
    product = graph.add("MatMul", a, graph.add_constant(np.ones((1024, 512), np.float32), "b"), name="mm")
    graph.set_outputs([("y", product)])
    plans = [plan_node(graph.nodes[0], backend.target) for backend in (small, big)]
    assert not isinstance(plans[0], str) and not isinstance(plans[1], str)
    assert plans[0].kernel.expr == plans[1].kernel.expr == gemm.expr
    sixteen, thirty_two = (p.schedule for p in plans)
    assert thirty_two.compute_cycles < sixteen.compute_cycles / 3  # 4x the MACs per fold, a longer fill
    assert thirty_two.cycles < sixteen.cycles / 2
    assert dict(sixteen.levels[0].tile)["r'"] == 16 and dict(thirty_two.levels[0].tile)["r'"] == 32
    assert dict(sixteen.levels[1].tile) != dict(thirty_two.levels[1].tile)  # tiles sized to each scratchpad
    # and it runs models, matching the interpreter
    model = compile_partitioned(small_model(), [big, get_backend("cpu")])
    feeds = _feeds(model)
    expected = compile_graph(small_model(), "interpreter").run(feeds)
    assert relative_error(model.run(feeds)["z"], expected["z"]) <= 1e-4
    report = model.stats["backend_stats"]["npu-systolic32"]["nodes"]
    assert report["conv"]["mapping"].startswith("systolic.ws.f32 ")
    assert report["pointwise"]["folds"] < plan_node(next(n for n in small_model().nodes if n.name == "pointwise"),
                                                     small.target).stats("Conv")["folds"]


def _one_node(build):
    def make() -> Graph:
        graph = Graph("one")
        rng = np.random.default_rng(0)

        def weight(shape, name):
            return graph.add_constant(rng.standard_normal(shape).astype(np.float32), name)

        def value(shape, name):
            return graph.add_input(name, TensorType.of(np.zeros(shape, np.float32)))

        graph.set_outputs([("y", build(graph, weight, value))])
        return graph

    return make


FORMS = {
    "conv-dilated-asymmetric-groups": _one_node(lambda g, w, v: g.add(
        "Conv", v((2, 4, 11, 9), "x"), w((6, 2, 3, 2), "w"), w((6,), "b"),
        attrs=ConvAttrs((1, 2), (2, 0, 1, 1), (2, 1), 2), name="n")),
    "conv-1d": _one_node(lambda g, w, v: g.add("Conv", v((1, 3, 20), "x"), w((5, 3, 4), "w"),
                                               attrs=ConvAttrs((3,), (1, 2), (1,), 1), name="n")),
    "conv-3d": _one_node(lambda g, w, v: g.add("Conv", v((1, 2, 5, 6, 7), "x"), w((3, 2, 2, 3, 2), "w"),
                                               attrs=ConvAttrs((1, 1, 2), (0, 1, 0, 1, 0, 1), (1, 1, 1), 1),
                                               name="n")),
    "matmul-broadcast-batch": _one_node(lambda g, w, v: g.add("MatMul", v((2, 3, 5, 7), "x"), w((3, 7, 9), "w"),
                                                              name="n")),
    "matmul-vector": _one_node(lambda g, w, v: g.add("MatMul", v((7,), "x"), w((7, 9), "w"), name="n")),
    "matmul-run-time-operands": _one_node(lambda g, w, v: g.add("MatMul", v((4, 6), "x"), v((6, 3), "z"), name="n")),
    "gemm-transA-alpha-beta": _one_node(lambda g, w, v: g.add(
        "Gemm", v((7, 5), "x"), w((7, 9), "w"), w((5, 1), "c"), attrs=GemmAttrs(alpha=1.5, beta=-1.0, transA=True),
        name="n")),
    "fully-connected-relu-residual": _one_node(lambda g, w, v: g.add(
        "FullyConnected", v((2, 3, 8), "x"), w((8, 5), "w"), w((5,), "b"), v((2, 3, 5), "r"),
        attrs=FullyConnectedAttrs("relu"), name="n")),
    "fused-conv-clip-residual": _one_node(lambda g, w, v: g.add(
        "FusedConv", v((1, 3, 8, 8), "x"), w((4, 3, 3, 3), "w"), w((4,), "b"), v((1, 4, 6, 6), "r"),
        attrs=FusedConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "clip", 0.0, 0.5), name="n")),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_of_its_ops_runs_on_the_npu_and_matches_the_interpreter(form):
    make = FORMS[form]
    model = compile_partitioned(make(), [get_backend("npu"), get_backend("cpu")])
    assert model.stats["partition"].splitlines()[1].startswith("segment0 on npu (1 nodes)")
    assert model.stats["backend_stats"]["npu"]["nodes"]["n"]["simulated_cycles"] > 0
    feeds = _feeds(model)
    assert relative_error(model.run(feeds)["y"], compile_graph(make(), "interpreter").run(feeds)["y"]) <= 1e-4


def test_a_saved_model_loads_back_onto_the_npu(tmp_path):
    from ember.backends.npu import NpuProgram

    model = compile_partitioned(small_model(), [get_backend(NPU), get_backend("cpu")])
    loaded = ember.load(model.save(tmp_path / "small.ember"))
    segments = loaded.executable.steps
    assert any(isinstance(step.model.executable, NpuProgram) for step in segments)
    feeds = _feeds(model)
    assert relative_error(loaded.run(feeds)["z"], model.run(feeds)["z"]) == 0.0
