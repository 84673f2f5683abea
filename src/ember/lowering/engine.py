"""The lowering driver and the rule table.

A rule takes (graph, node), adds primitive (or simpler) nodes computing the same results and
returns one value per result of `node`. The driver redirects uses, drops the node and repeats
until no rule applies, because a rule may emit ops that are themselves lowered (LayerNorm
emits ReduceMean)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember.graph import Graph, Node, Value
from ember.passes import GraphPass, register_pass
from ember.support.errors import UnsupportedError, VerificationError
from ember.types import DType

LoweringRule = Callable[[Graph, Node], list[Value]]
LOWERINGS: dict[str, LoweringRule] = {}


def lowering(op: str) -> Callable[[LoweringRule], LoweringRule]:
    def register(rule: LoweringRule) -> LoweringRule:
        if op in LOWERINGS:
            raise ValueError(f"two lowerings for {op}")
        LOWERINGS[op] = rule
        return rule

    return register


def scalar(graph: Graph, value: float, dtype: DType, name: str = "scalar") -> Value:
    return graph.add_constant(np.asarray(value, dtype=dtype.numpy), name)


def lower_graph(graph: Graph, should_lower: Callable[[Node], bool] = lambda node: True) -> bool:
    """Lowers every non-primitive node `should_lower` accepts. Raises if a node must be
    lowered (the backend wants it lowered) but no rule exists."""
    changed_any = False
    while True:
        changed = False
        for node in list(graph.nodes):
            if node.opdef.primitive or not should_lower(node):
                continue
            rule = LOWERINGS.get(node.op)
            if rule is None:
                raise UnsupportedError(f"{node.location}: no lowering rule for {node.op}")
            replacements = rule(graph, node)
            for old, new in zip(node.outputs, replacements, strict=True):
                if old.type != new.type:
                    raise VerificationError(
                        f"{node.location}: lowering produced {new.type} for result typed {old.type}"
                    )
                graph.replace_all_uses(old, new)
            graph.nodes.remove(node)
            # Unlinked from its operands: a removed node sits in a reference cycle with its
            # results, and would keep its weights alive (beside their folded copies) until
            # the collector's next pass.
            node.inputs = [None] * len(node.inputs)
            changed = True
        if not changed:
            break
        changed_any = True
        graph.sort()
        graph.remove_unused()
    return changed_any


@register_pass
class LowerAll(GraphPass):
    """Lowers every non-primitive op to primitives through LOWERINGS (used by pipelines that
    target a backend executing primitives only)."""

    name = "lower"

    def run(self, graph: Graph) -> bool:
        return lower_graph(graph)
