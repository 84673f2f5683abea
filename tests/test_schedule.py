"""Scheduling before irgen: the child-memory-size order lowers the activation peak of a badly
ordered graph, keeps a good order as it is, stays topological and does not recurse."""
from __future__ import annotations

import numpy as np

import ember  # noqa: F401  (registers passes and lowerings)
from ember import driver
from ember.driver import compile_graph
from ember.graph import Graph
from ember.lir.schedule import child_mem_size_order, peak_live_bytes, schedule_graph
from ember.ops.reduce import ReduceAttrs
from ember.types import DType, TensorType
from tests.helpers import evaluate_graph, random_inputs

F32 = DType.FLOAT32
BRANCHES = 4
WIDE = 4096


def fan_out_graph() -> Graph:
    """Four branches, each a wide product reduced to one number, summed at the end; nodes
    are added breadth first, so every wide tensor is live at once in the graph's order."""
    rng = np.random.default_rng(0)
    g = Graph("fan")
    x = g.add_input("x", TensorType(F32, (1, WIDE)))
    wide = []
    for k in range(BRANCHES):
        w = g.add_constant(rng.standard_normal((1, WIDE)).astype(np.float32), f"w{k}")
        wide.append(g.add("Mul", x, w, name=f"wide{k}"))
    sums = [g.add("ReduceSum", v, attrs=ReduceAttrs((1,)), name=f"sum{k}") for k, v in enumerate(wide)]
    total = sums[0]
    for k, s in enumerate(sums[1:]):
        total = g.add("Add", total, s, name=f"add{k}")
    g.set_outputs([("y", total)])
    return g


def assert_topological(graph: Graph) -> None:
    seen = set(graph.inputs) | set(graph.constants.values())
    for node in graph.nodes:
        assert all(v is None or v in seen for v in node.inputs), node
        seen.update(node.outputs)


def test_child_mem_size_order_lowers_the_peak_of_a_breadth_first_graph():
    graph = fan_out_graph()
    before = peak_live_bytes(graph, graph.nodes)
    assert before >= BRANCHES * WIDE * 4
    assert schedule_graph(graph) == "child-mem-size"
    assert_topological(graph)
    after = peak_live_bytes(graph, graph.nodes)
    assert after < 2 * WIDE * 4 < before
    # Each wide result is reduced before the next branch starts.
    names = [n.name for n in graph.nodes]
    assert names.index("sum0") < names.index("wide1") or names.index("sum1") < names.index("wide0")


def test_scheduled_graph_compiles_to_a_smaller_arena_with_the_same_results(monkeypatch):
    inputs = random_inputs(fan_out_graph())
    expected = evaluate_graph(fan_out_graph(), inputs)
    compiled = compile_graph(fan_out_graph())
    np.testing.assert_allclose(compiled.run(inputs)["y"], expected["y"], rtol=1e-4)
    assert compiled.stats["arena_bytes"] < 2 * WIDE * 4
    monkeypatch.setattr(driver, "schedule_graph", lambda graph: "off")
    assert compile_graph(fan_out_graph()).stats["arena_bytes"] >= BRANCHES * WIDE * 4


def test_a_good_order_is_kept():
    g = Graph("chain")
    x = g.add_input("x", TensorType(F32, (8,)))
    a = g.add("Exp", x, name="a")
    b = g.add("Relu", x, name="b")
    c = g.add("Add", a, b, name="c")
    g.set_outputs([("c", c)])
    nodes = list(g.nodes)
    assert schedule_graph(g) == "graph-order"
    assert g.nodes == nodes


def test_deep_chains_do_not_recurse_and_unused_nodes_are_kept():
    g = Graph("deep")
    v = g.add_input("x", TensorType(F32, (4,)))
    for i in range(5000):
        v = g.add("Relu", v, name=f"r{i}")
    g.add("Exp", g.inputs[0], name="unused")
    g.set_outputs([("y", v)])
    order = child_mem_size_order(g)
    assert len(order) == len(g.nodes) == 5001
    assert [n.name for n in order[:5000]] == [f"r{i}" for i in range(5000)]
