"""Common subexpression elimination over constants and nodes."""
from __future__ import annotations

from collections.abc import Hashable

from ember.graph import Constant, Graph, Node
from ember.passes import GraphPass, register_pass

# Constants are bucketed by type and their first elements before whole arrays are compared.
_PREFIX_ELEMENTS = 16


def _node_key(node: Node) -> Hashable | None:
    operands = list(node.inputs)
    if "commutative" in node.opdef.traits and len(operands) == 2:
        # Only equality of keys matters, so any fixed order of the two operands will do.
        operands.sort(key=id)
    key = (node.op, node.attrs, tuple(id(v) if v is not None else None for v in operands))
    try:
        hash(key)
    except TypeError:
        # Attributes holding something unhashable: never merge rather than guess.
        return None
    return key


@register_pass
class CommonSubexpressionElimination(GraphPass):
    """Preconditions: ops have no side effects (true of every op in the table), so equal
    inputs give equal results.
    Rules:
    1. Constants of equal type and identical bytes become one (the first in the table).
    2. A node with the same op, equal attributes and the same operands as an earlier node
       (operands in either order for commutative binary ops) is replaced by that node.
    Nodes are visited in topological order, so chains of duplicates collapse in one run."""

    name = "cse"

    def run(self, graph: Graph) -> bool:
        changed = self._merge_constants(graph)
        seen: dict[Hashable, Node] = {}
        for node in list(graph.nodes):
            key = _node_key(node)
            if key is None:
                continue
            first = seen.setdefault(key, node)
            if first is node:
                continue
            for old, new in zip(node.outputs, first.outputs, strict=True):
                graph.replace_all_uses(old, new)
            changed = True
        if changed:
            graph.remove_unused()
        return changed

    @staticmethod
    def _merge_constants(graph: Graph) -> bool:
        # Comparing every weight would dominate the pass on big models: bucket by type and the
        # first elements, and compare whole arrays only within a bucket.
        buckets: dict[Hashable, list[Constant]] = {}
        changed = False
        for const in list(graph.constants.values()):
            prefix = const.data.reshape(-1)[:_PREFIX_ELEMENTS].tobytes()
            bucket = buckets.setdefault((const.type, prefix), [])
            first = next((c for c in bucket if _same_bytes(c, const)), None)
            if first is None:
                bucket.append(const)
                continue
            graph.replace_all_uses(const, first)
            del graph.constants[const.name]
            changed = True
        return changed


def _same_bytes(a: Constant, b: Constant) -> bool:
    # Bytes, not values: 0.0 and -0.0 (or two NaN payloads) stay distinct, so merging is exact.
    return a.data.tobytes() == b.data.tobytes()
