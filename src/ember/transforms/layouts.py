"""Layout assignment: chains of nodes that a backend runs channels last inside keep their
activations channels last (NHWC) between them, instead of each node transposing its input
and output.

A node the target's backend `prefers_channels_last` becomes its channels-last form (its
attrs' `channels_last`) between Transposes: NCHW -> NHWC on each activation operand, NHWC ->
NCHW on its result. optimize-transposes, which runs next in the pipeline, merges each
Transpose(NHWC -> NCHW) feeding a Transpose(NCHW -> NHWC) into nothing, so inside a chain
the tensors stay NHWC and only the chain's ends convert, as explicit Transpose steps.

Only chains of two or more such nodes change: a lone node is faster converting inside its
kernel, where the transposes ride in the kernel's own parallel chunks, than as two steps of
their own. Without a backend in the pass context (tests, `ember opt`), nothing changes."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ember.graph import Graph, Node, Value
from ember.ops.inverted_residual import TO_NCHW, TO_NHWC
from ember.ops.tensor import TransposeAttrs
from ember.passes import GraphPass, register_pass

# The ops with a channels-last form (a `channels_last` attribute) -> the operand indices that
# are NCHW activations in the default form (the others, weights and biases, keep theirs).
CHANNELS_LAST_OPERANDS: dict[str, tuple[int, ...]] = {
    "InvertedResidual": (0, 7),  # x, residual
}
# The fewest connected nodes worth converting (see the module's docstring).
MIN_CHAIN = 2


def _candidate(node: Node, backend: Any) -> bool:
    return (backend is not None and node.op in CHANNELS_LAST_OPERANDS and not node.attrs.channels_last
            and backend.prefers_channels_last(node))


def _chains(graph: Graph, candidates: list[Node]) -> list[list[Node]]:
    """The candidates in connected groups: a candidate reading another's result (as one of its
    activation operands) joins its group. Groups and their nodes in graph order."""
    index = {id(node): i for i, node in enumerate(candidates)}
    parent = list(range(len(candidates)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for node in candidates:
        for operand in CHANNELS_LAST_OPERANDS[node.op]:
            value = node.inputs[operand] if operand < len(node.inputs) else None
            if value is not None and value.producer is not None and id(value.producer) in index:
                parent[root(index[id(node)])] = root(index[id(value.producer)])
    groups: dict[int, list[Node]] = {}
    for i, node in enumerate(candidates):
        groups.setdefault(root(i), []).append(node)
    return list(groups.values())


def _convert(graph: Graph, node: Node) -> Node:
    """`node` -> Transpose(its channels-last form(Transpose(x), ...)) in its place; returns
    the channels-last node."""
    inputs: list[Value | None] = list(node.inputs)
    for operand in CHANNELS_LAST_OPERANDS[node.op]:
        value = inputs[operand] if operand < len(inputs) else None
        if value is not None:
            inputs[operand] = graph.add("Transpose", value, attrs=TransposeAttrs(TO_NHWC),
                                        name=f"{node.name}.to_nhwc")
    (y,) = graph.add_node(node.op, inputs, replace(node.attrs, channels_last=True), name=node.name,
                          result_names=[f"{node.outputs[0].name}.nhwc"])
    back = graph.add("Transpose", y, attrs=TransposeAttrs(TO_NCHW), name=f"{node.name}.to_nchw")
    graph.replace_all_uses(node.outputs[0], back)
    assert y.producer is not None
    return y.producer


@register_pass
class AssignLayouts(GraphPass):
    """Preconditions: the backend's fused ops are formed (fuse-inverted-residual has run).
    Rules:
    1. Nodes the context's backend prefers channels last, connected through their activation
       operands in groups of at least MIN_CHAIN: each -> Transpose(NHWC -> NCHW) of its
       channels-last form of Transpose(NCHW -> NHWC) of each activation operand.
    optimize-transposes then cancels the transposes between them."""

    name = "assign-layouts"

    def run(self, graph: Graph) -> bool:
        backend = self.context.backend if self.context is not None else None
        candidates = [node for node in graph.nodes if _candidate(node, backend)]
        chains = [chain for chain in _chains(graph, candidates) if len(chain) >= MIN_CHAIN]
        renamed = [(_convert(graph, node), node.name) for chain in chains for node in chain]
        if not renamed:
            return False
        graph.sort()
        graph.remove_unused()
        for node, name in renamed:  # the replaced node is gone: its successor takes its name
            node.name = name
        return True
