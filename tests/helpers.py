"""Test helpers: small graph builders and a direct graph evaluator built on the op table."""
from __future__ import annotations

import numpy as np

from ember.graph import Constant, Graph, Value
from ember.types import DType, TensorType


def evaluate_graph(graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs a graph node by node through the op table's reference semantics (no lowering, no
    low-level IR): the yardstick for passes and for the interpreter backend."""
    env = {p: inputs[p.name] for p in graph.inputs}
    env.update({c: c.data for c in graph.constants.values()})
    for node in graph.nodes:
        results = node.opdef.evaluate(node.attrs, [None if v is None else env[v] for v in node.inputs])
        env.update(zip(node.outputs, results, strict=True))
    return {o.name: env[o.value] for o in graph.outputs}


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for p in graph.inputs:
        if p.type.dtype.is_float:
            out[p.name] = rng.standard_normal(p.type.shape).astype(p.type.dtype.numpy)
        else:
            out[p.name] = rng.integers(0, 3, p.type.shape).astype(p.type.dtype.numpy)
    return out


def weights_of(graph: Graph) -> dict[str, np.ndarray]:
    return {name: c.data for name, c in graph.constants.items() if isinstance(c, Constant)}


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    if actual.size == 0:
        return 0.0
    error = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
    return error / max(1.0, float(np.max(np.abs(expected))))


def single_node_graph(op: str, arrays: list[np.ndarray | None], attrs=None,
                      constant: tuple[int, ...] = ()) -> tuple[Graph, dict[str, np.ndarray]]:
    """One node named 'node' with results y0, y1, ...; operand i is a graph constant when i is
    in `constant`, absent when arrays[i] is None (an optional operand left out), else a graph
    input x<i> fed with arrays[i] (so it arrives at run time)."""
    g = Graph(op)
    values: list[Value | None] = []
    feeds: dict[str, np.ndarray] = {}
    for i, a in enumerate(arrays):
        if a is None:
            values.append(None)
            continue
        if i in constant:
            values.append(g.add_constant(a, f"c{i}"))
            continue
        p = g.add_input(f"x{i}", TensorType(DType.from_numpy(a.dtype), a.shape))
        values.append(p)
        feeds[p.name] = a
    outs = g.add_node(op, values, attrs, name="node")
    g.set_outputs([(f"y{i}", v) for i, v in enumerate(outs)])
    return g, feeds
