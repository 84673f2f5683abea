"""The partitioner and the segmented runtime (partition/, heterogeneous.py,
runtime/segmented.py): random DAGs over backends that each run a random subset of ops never
give a cyclic segment graph and always compute what the interpreter computes; pattern matches
stay whole; plugins that refuse by raising, fail to compile or return garbage fall back or
fail by name; memory capacity cuts segments."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.backends.interpreter import InterpreterBackend
from ember.driver import compile_graph
from ember.graph import Graph
from ember.heterogeneous import BackendTarget, compile_partitioned
from ember.partition import Pattern, partition_graph, verify_partition
from ember.support.errors import EmberError, UnsupportedError
from ember.types import DType, TensorType

UNARY = ("Relu", "Neg", "Tanh", "Sigmoid", "Abs")
BINARY = ("Add", "Mul", "Sub", "Max")
SHAPE = (3, 5)


class Restricted(InterpreterBackend):
    """An interpreter that claims only some op types: a stand-in for a device backend."""

    def __init__(self, name: str, ops: set[str], capacity: int | None = None) -> None:
        super().__init__()
        self.name = name
        self.ops = ops
        self.memory_capacity = capacity

    def refusal(self, node):
        return None if node.op in self.ops else f"{node.op} is not among {sorted(self.ops)}"

    def supports(self, node):
        return self.refusal(node) is None


def random_graph(draw_ops: list[tuple[str, int, int]], outputs: list[int]) -> Graph:
    """Nodes from (op, operand index, operand index) triples; operand indices pick among the
    input and the earlier nodes (so it is a DAG by construction)."""
    g = Graph("random")
    values = [g.add_input("x", TensorType(DType.FLOAT32, SHAPE)), g.add_input("w", TensorType(DType.FLOAT32, SHAPE))]
    for op, a, b in draw_ops:
        first, second = values[a % len(values)], values[b % len(values)]
        values.append(g.add(op, first) if op in UNARY else g.add(op, first, second))
    chosen = sorted({values[2 + i % len(draw_ops)] for i in outputs}, key=lambda v: v.name)
    g.set_outputs([(f"out{i}", v) for i, v in enumerate(chosen)])
    g.remove_unused()
    return g


node_triples = st.lists(st.tuples(st.sampled_from(UNARY + BINARY), st.integers(0, 50), st.integers(0, 50)),
                        min_size=1, max_size=14)
op_subsets = st.lists(st.sets(st.sampled_from(UNARY + BINARY), min_size=1), min_size=1, max_size=3)
FEEDS = {"x": np.linspace(-2, 2, 15, dtype=np.float32).reshape(SHAPE),
         "w": np.linspace(1, -1, 15, dtype=np.float32).reshape(SHAPE)}


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_triples, st.lists(st.integers(0, 50), min_size=1, max_size=3), op_subsets)
def test_random_dags_partition_acyclic_and_compute_like_the_interpreter(triples, outputs, subsets):
    backends = [Restricted(f"dev{i}", ops) for i, ops in enumerate(subsets)]
    backends.append(InterpreterBackend())  # the universal fallback
    expected = compile_graph(random_graph(triples, outputs), "interpreter").run(FEEDS)
    graph = random_graph(triples, outputs)
    partition = partition_graph(graph, [BackendTarget(b) for b in backends])
    verify_partition(partition)  # acyclic, complete, borders exact
    for segment in partition.segments:  # each node on the first backend that runs it
        for node in segment.nodes:
            first = next(b.name for b in backends if b.refusal(node) is None or b.name == "interpreter")
            assert segment.backend == first
    compiled = compile_partitioned(random_graph(triples, outputs), backends)
    actual = compiled.run(FEEDS)
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


def _chain_graph() -> Graph:
    g = Graph("chain")
    x = g.add_input("x", TensorType(DType.FLOAT32, SHAPE))
    a = g.add("Mul", x, x, name="mul")
    b = g.add("Add", a, x, name="add")
    c = g.add("Relu", b, name="relu")
    d = g.add("Tanh", c, name="tanh")
    g.set_outputs([("y", d)])
    return g


class Fusing(Restricted):
    def patterns(self):
        return [Pattern("mul_add_relu", ("Mul", "Add", "Relu"))]


def test_a_pattern_match_stays_whole_on_its_backend():
    # 'vendor' comes second in priority, but its pattern claims the chain before priority
    # decides, so the three nodes stay together on it.
    backends = [Restricted("first", {"Mul", "Tanh"}), Fusing("vendor", {"Mul", "Add", "Relu"}), InterpreterBackend()]
    partition = partition_graph(_chain_graph(), [BackendTarget(b) for b in backends])
    (fused,) = [s for s in partition.segments if s.backend == "vendor"]
    assert [n.name for n in fused.nodes] == ["mul", "add", "relu"]
    assert fused.patterns == ["mul_add_relu"]
    assert "# pattern mul_add_relu" in partition.to_text()


def test_a_pattern_does_not_match_through_a_value_read_elsewhere():
    g = _chain_graph()
    add = next(n for n in g.nodes if n.name == "add")
    g.set_outputs([("y", g.outputs[0].value), ("side", add.outputs[0])])
    backends = [Fusing("vendor", {"Mul", "Add", "Relu"}), InterpreterBackend()]
    partition = partition_graph(g, [BackendTarget(b) for b in backends])
    assert all(not s.patterns for s in partition.segments)


def test_text_form_names_segments_borders_and_reasons():
    backends = [Restricted("dev", {"Mul", "Add"}), InterpreterBackend()]
    text = partition_graph(_chain_graph(), [BackendTarget(b) for b in backends]).to_text()
    assert text.splitlines()[0] == "partition of chain (priority): 2 segments (dev 1, interpreter 1)"
    assert "segment0 on dev (2 nodes)" in text
    assert "segment1 on interpreter (2 nodes) after segment0" in text
    assert "  Relu relu  # dev: Relu is not among ['Add', 'Mul']" in text


def test_dot_form_draws_the_segment_dag():
    backends = [Restricted("dev", {"Mul", "Add"}), InterpreterBackend()]
    dot = partition_graph(_chain_graph(), [BackendTarget(b) for b in backends]).to_dot()
    assert dot.startswith('digraph "partition chain" {')
    assert "segment0 -> segment1;" in dot


def test_no_backend_for_a_node_is_refused_naming_it():
    with pytest.raises(UnsupportedError, match=r"no backend can run 1 node\(s\): node 'tanh' \(Tanh\): dev: Tanh"):
        partition_graph(_chain_graph(), [BackendTarget(Restricted("dev", {"Mul", "Add", "Relu"}))])


class Raising(Restricted):
    def refusal(self, node):
        raise RuntimeError("plugin bug")


class FailsToCompile(Restricted):
    def compile(self, program):
        raise RuntimeError("vendor compiler crashed")


class ReturnsGarbage(Restricted):
    def compile(self, program):
        class Bad:
            def run(self, inputs):
                return [np.zeros((1,), np.float64) for _ in program.outputs]

        return Bad()


def test_a_backend_that_raises_in_refusal_is_skipped_with_the_reason():
    backends = [Raising("flaky", {"Mul"}), InterpreterBackend()]
    partition = partition_graph(_chain_graph(), [BackendTarget(b) for b in backends])
    assert partition.backends() == ["interpreter"]
    assert "flaky: the backend raised RuntimeError: plugin bug" in partition.to_text()


def test_a_backend_that_fails_to_compile_falls_back_and_says_why():
    expected = compile_graph(_chain_graph(), "interpreter").run({"x": FEEDS["x"]})
    model = compile_partitioned(_chain_graph(), [FailsToCompile("vendor", {"Mul", "Add"}), InterpreterBackend()])
    np.testing.assert_array_equal(model.run({"x": FEEDS["x"]})["y"], expected["y"])
    assert model.backend == "interpreter"
    (fallback,) = model.stats["fallbacks"]
    assert "vendor: compiling segment0 failed: RuntimeError: vendor compiler crashed" in fallback


def test_a_segment_returning_the_wrong_arrays_fails_naming_its_backend():
    model = compile_partitioned(_chain_graph(), [ReturnsGarbage("vendor", {"Mul", "Add"}), InterpreterBackend()])
    with pytest.raises(EmberError, match=r"segment0 on backend 'vendor' returned float64\[1\] for %add, expected f32"):
        model.run({"x": FEEDS["x"]})


def test_memory_capacity_cuts_segments_and_refuses_what_never_fits():
    g = _chain_graph()
    # Each node makes 60 bytes (3x5 float32): 130 bytes hold two nodes, not three.
    backends = [Restricted("small", {"Mul", "Add", "Relu", "Tanh"}, capacity=130), InterpreterBackend()]
    partition = partition_graph(g, [BackendTarget(b) for b in backends])
    assert [len(s.nodes) for s in partition.segments] == [2, 2]
    assert partition.backends() == ["small"]
    expected = compile_graph(_chain_graph(), "interpreter").run({"x": FEEDS["x"]})
    model = compile_partitioned(_chain_graph(), backends)
    np.testing.assert_array_equal(model.run({"x": FEEDS["x"]})["y"], expected["y"])
    tiny = [Restricted("tiny", {"Mul", "Add", "Relu", "Tanh"}, capacity=32), InterpreterBackend()]
    text = partition_graph(_chain_graph(), [BackendTarget(b) for b in tiny]).to_text()
    assert "tiny: needs 60 bytes, more than the 32 its device holds" in text


def test_independent_segments_run_concurrently_and_agree():
    g = Graph("fork")
    x = g.add_input("x", TensorType(DType.FLOAT32, SHAPE))
    left = g.add("Tanh", g.add("Relu", x))
    right = g.add("Sigmoid", g.add("Neg", x))
    g.set_outputs([("y", g.add("Add", left, right))])
    backends = [Restricted("a", {"Relu", "Tanh", "Add"}), Restricted("b", {"Neg", "Sigmoid"})]
    expected = compile_graph(_copy_of(g), "interpreter").run({"x": FEEDS["x"]})
    model = compile_partitioned(g, backends)
    assert model.executable.concurrent
    for _ in range(3):
        np.testing.assert_array_equal(model.run({"x": FEEDS["x"]})["y"], expected["y"])


def _copy_of(graph: Graph) -> Graph:
    from ember.graph.text import parse_graph, print_graph

    return parse_graph(print_graph(graph))


class Priced(Restricted):
    """Seconds per node by op type: a backend with a cost model of its own."""

    def __init__(self, name: str, prices: dict[str, float]) -> None:
        super().__init__(name, set(prices))
        self.prices = prices

    def cost(self, graph):
        return sum(self.prices[n.op] for n in graph.nodes)


def _costed(graph: Graph, backends):
    from ember.partition.cost import assign_by_cost

    targets = [BackendTarget(b) for b in backends]
    return partition_graph(graph, targets, assign=assign_by_cost(targets), strategy="cost")


def test_cost_assignment_takes_each_node_where_it_is_cheapest_when_that_pays_for_the_hop():
    # 'slow' comes first in priority; 'fast' is cheaper by far more than a hop for Mul/Add.
    backends = [Priced("slow", {"Mul": 1e-2, "Add": 1e-2, "Relu": 1e-6, "Tanh": 1e-6}),
                Priced("fast", {"Mul": 1e-4, "Add": 1e-4, "Relu": 1e-3, "Tanh": 1e-3})]
    partition = _costed(_chain_graph(), backends)
    assert [(s.backend, [n.name for n in s.nodes]) for s in partition.segments] == [
        ("fast", ["mul", "add"]), ("slow", ["relu", "tanh"])]
    assert "# cheaper than slow" in partition.to_text()


def test_cost_assignment_does_not_split_for_gains_smaller_than_a_hop():
    # 'fast' saves 1 us on Add alone: not worth two crossings of ~30 us each.
    backends = [Priced("main", {"Mul": 1e-5, "Add": 2e-6, "Relu": 1e-5, "Tanh": 1e-5}),
                Priced("fast", {"Mul": 1e-3, "Add": 1e-6, "Relu": 1e-3, "Tanh": 1e-3})]
    assert partition_graph(_chain_graph(), [BackendTarget(b) for b in backends]).backends() == ["main"]
    assert _costed(_chain_graph(), backends).backends() == ["main"]


def test_cost_assignment_runs_everything_on_the_backend_cheaper_for_every_node():
    # b is cheaper for every node although a comes first in priority.
    backends = [Priced("a", {"Mul": 3e-5, "Add": 3e-5, "Relu": 3e-5, "Tanh": 3e-5}),
                Priced("b", {"Mul": 1e-5, "Add": 1e-5, "Relu": 1e-5, "Tanh": 1e-5})]
    assert _costed(_chain_graph(), backends).backends() == ["b"]


def test_cost_partition_computes_like_the_interpreter():
    backends = [Priced("slow", {"Mul": 1e-2, "Add": 1e-2, "Relu": 1e-6, "Tanh": 1e-6}),
                Priced("fast", {"Mul": 1e-4, "Add": 1e-4, "Relu": 1e-3, "Tanh": 1e-3})]
    expected = compile_graph(_chain_graph(), "interpreter").run({"x": FEEDS["x"]})
    model = compile_partitioned(_chain_graph(), backends, strategy="cost")
    assert model.backend == "fast+slow"
    np.testing.assert_array_equal(model.run({"x": FEEDS["x"]})["y"], expected["y"])


def test_cli_dumps_the_partition_and_runs_a_backend_list(capsys):
    from pathlib import Path

    from ember.cli import main

    lenet = str(Path(__file__).resolve().parents[1] / "examples" / "lenet.onnx")
    assert main(["dump", lenet, "--stage", "partition", "--backend", "cpu,interpreter"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("partition of lenet (priority): 1 segments (cpu 1)")
    assert main(["dump", lenet, "--stage", "partition", "--backend", "auto", "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith('digraph "partition lenet" {')
    reference = str(Path(lenet).with_suffix(".ref.npz"))
    assert main(["run", lenet, "--backend", "cpu,interpreter", "--reference", reference]) == 0
    assert "check probabilities: ok" in capsys.readouterr().out


def test_a_plugin_that_fails_to_load_is_named_and_auto_leaves_it_out(monkeypatch):
    from importlib import metadata

    import ember
    from ember.backends import registry

    broken = metadata.EntryPoint("broken", "no_such_module_for_ember:Backend", "ember.backends")
    monkeypatch.setattr(registry, "_plugins", lambda: {"broken": broken})
    with pytest.raises(EmberError, match=r"backend plugin 'broken' \(no_such_module_for_ember:Backend\) failed to "
                                         r"load: ModuleNotFoundError"):
        registry.get_backend("broken")
    lenet = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "lenet.onnx")
    model = ember.compile(lenet, backend="auto")
    assert model.backend == "cpu"
    assert "backend plugin 'broken'" in model.stats["skipped_backends"][0]


def test_measured_costs_time_each_unit_on_this_machine():
    from ember.backends.cpu import CpuBackend
    from ember.heterogeneous import measure_on
    from ember.partition.cost import assign_by_cost

    for backend in (CpuBackend(num_threads=1), InterpreterBackend()):
        seconds = measure_on(backend)(_chain_graph())
        assert seconds is not None and 0 < seconds < 1
    # Measurements, not estimates, drive the choice: a stand-in measurement that makes 'b'
    # cheap wins although 'a' comes first and estimates the same.
    backends = [Restricted("a", {"Mul", "Add", "Relu", "Tanh"}), Restricted("b", {"Mul", "Add", "Relu", "Tanh"})]
    targets = [BackendTarget(b, measure=lambda g, cost=cost: cost * len(g.nodes))
               for b, cost in zip(backends, (1e-3, 1e-5), strict=True)]
    partition = partition_graph(_chain_graph(), targets, assign=assign_by_cost(targets), strategy="cost")
    assert partition.backends() == ["b"]
    expected = compile_graph(_chain_graph(), "interpreter").run({"x": FEEDS["x"]})
    model = compile_partitioned(_chain_graph(), [CpuBackend(num_threads=1), InterpreterBackend()], strategy="cost",
                                measure=True)
    np.testing.assert_allclose(model.run({"x": FEEDS["x"]})["y"], expected["y"], rtol=1e-6)


@pytest.mark.parametrize("name", __import__("tests.conftest", fromlist=["x"]).shared_model_names())
def test_auto_compiles_every_shared_model_and_matches_the_interpreter(name):
    import ember
    from tests.conftest import require_shared_models

    folder = require_shared_models()
    reference = np.load(folder / f"{name}.ref.npz")
    feeds = {key[3:]: reference[key] for key in reference.files if key.startswith("in_")}
    auto = ember.compile(str(folder / f"{name}.onnx"), backend="auto")
    oracle = ember.compile(str(folder / f"{name}.onnx"), backend="interpreter")
    expected, actual = oracle.run(feeds), auto.run(feeds)
    for key, value in expected.items():
        scale = max(1.0, float(np.max(np.abs(value))))
        assert float(np.max(np.abs(actual[key] - value))) / scale < 1e-4, key
