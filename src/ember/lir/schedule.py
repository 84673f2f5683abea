"""Scheduling before irgen: pick the topological order of the graph's nodes that needs the
least activation memory at its peak.

The candidate besides the graph's own order is Glow's child-memory-size order: a post-order
walk from the outputs that, at every node, visits first the operand subtree whose
evaluation needs the most memory beyond the result it leaves behind (Sethi-Ullman: sorting
children by need - result, descending, minimizes the peak of a tree). On DAGs that is a
heuristic, so the driver keeps whichever order has the lower simulated peak.
Imports graph/ and below."""
from __future__ import annotations

from collections.abc import Sequence

from ember.graph import Graph, Node, Value


def peak_live_bytes(graph: Graph, order: Sequence[Node]) -> int:
    """Simulated activation peak of running `order`: a node's results are allocated while its
    operands are still live, an operand is freed after its last reader, values that are
    graph outputs live in the caller's buffers and do not count."""
    outputs = graph.output_values()
    last: dict[Value, int] = {}
    for index, node in enumerate(order):
        for value in node.inputs:
            if value is not None and value.producer is not None:
                last[value] = index
    live = peak = 0
    for index, node in enumerate(order):
        results = [v for v in node.outputs if v not in outputs]
        live += sum(v.type.nbytes for v in results)
        peak = max(peak, live)
        for value in results:
            if value not in last:
                live -= value.type.nbytes  # nobody reads it
        for value in dict.fromkeys(v for v in node.inputs if v is not None and v.producer is not None):
            if last[value] == index and value not in outputs:
                live -= value.type.nbytes
    return peak


def child_mem_size_order(graph: Graph) -> list[Node]:
    """Glow's ChildMemSizeBased schedule. `graph.nodes` must be in a topological order."""
    result: dict[Node, int] = {}
    need: dict[Node, int] = {}
    children: dict[Node, list[Node]] = {}
    for node in graph.nodes:
        result[node] = sum(v.type.nbytes for v in node.outputs)
        kids = list(dict.fromkeys(v.producer for v in node.inputs if v is not None and v.producer is not None))
        kids.sort(key=lambda k: need[k] - result[k], reverse=True)
        held = peak = 0
        for kid in kids:
            peak = max(peak, held + need[kid])
            held += result[kid]
        need[node] = max(peak, held + result[node])
        children[node] = kids

    roots = list(dict.fromkeys(o.value.producer for o in graph.outputs if o.value.producer is not None))
    roots.sort(key=lambda k: need[k] - result[k], reverse=True)
    order: list[Node] = []
    done: set[Node] = set()
    for root in roots + graph.nodes:  # then anything no output depends on, in graph order
        # Iterative post-order walk: deep unrolled graphs would overflow recursion.
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, next_child = stack.pop()
            if node in done:
                continue
            kids = children[node]
            while next_child < len(kids) and kids[next_child] in done:
                next_child += 1
            if next_child < len(kids):
                stack.append((node, next_child + 1))
                stack.append((kids[next_child], 0))
            else:
                done.add(node)
                order.append(node)
    return order


def schedule_graph(graph: Graph) -> str:
    """Reorders graph.nodes for a low memory peak; returns the name of the order kept."""
    candidates = {"graph-order": list(graph.nodes), "child-mem-size": child_mem_size_order(graph)}
    peaks = {name: peak_live_bytes(graph, order) for name, order in candidates.items()}
    best = min(candidates, key=lambda name: peaks[name])  # ties keep the graph's own order
    graph.nodes = candidates[best]
    return best
