"""Layout assignment: chains of nodes that a backend runs channels last inside keep their
activations channels last (NHWC) between them, instead of each node transposing its input
and output.

Each chain of connected nodes the target's backend `prefers_channels_last` becomes their
channels-last forms: a tensor one member writes and another reads is NHWC; where a member
reads a tensor from outside the chain, or writes one only read outside it, that operand stays
NCHW (the node's `x_channels_last` / `y_channels_last` say which), so the kernel converts on
the way in or out and no Transpose runs. A member's result read both inside and outside the
chain is NHWC, with one Transpose back to NCHW for the outside readers.

Only chains worth MIN_CHAIN convolutions or more change: a lone node would be the same node
again, and a short chain's conversions at its ends cost more than its NHWC kernels save.
Without a backend in the pass context (tests, `ember opt`), nothing changes."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ember.graph import Graph, Node, Value
from ember.ops.layouts import TO_NCHW, TO_NHWC, channels_last, residual_operand
from ember.ops.tensor import TransposeAttrs
from ember.passes import GraphPass, register_pass

# The ops with a channels-last form (`x_channels_last` / `y_channels_last` attributes, see
# ops/layouts.py: x is operand 0, the residual in y's layout), each with the convolutions it is.
CONVOLUTIONS = {"InvertedResidual": 3, "FusedConv": 1}
# The least a chain is worth converting, in convolutions: its ends pay the conversions, which a
# short chain's NHWC kernels do not earn back. Three 64-channel FusedConvs on 28x28 (pointwise,
# depthwise, pointwise) ran 1.13x slower channels last, five 1.00x, nine 0.78x; two MobileNetV2
# blocks already gain (Xeon, 1 thread).
MIN_CHAIN = 4


def _candidate(node: Node, backend: Any) -> bool:
    return (backend is not None and node.op in CONVOLUTIONS and not channels_last(node.attrs)
            and backend.prefers_channels_last(node))


def _residual(node: Node) -> Value | None:
    index = residual_operand(node.op)
    return node.inputs[index] if len(node.inputs) > index else None


def _activations(node: Node) -> list[Value]:
    return [v for v in (node.inputs[0], _residual(node)) if v is not None]


def _chains(candidates: list[Node]) -> list[list[Node]]:
    """The candidates in connected groups: a candidate reading another's result (as x or
    residual) joins its group. Groups and their nodes in graph order."""
    index = {id(node): i for i, node in enumerate(candidates)}
    parent = list(range(len(candidates)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for node in candidates:
        for value in _activations(node):
            if value.producer is not None and id(value.producer) in index:
                parent[root(index[id(node)])] = root(index[id(value.producer)])
    groups: dict[int, list[Node]] = {}
    for i, node in enumerate(candidates):
        groups.setdefault(root(i), []).append(node)
    return list(groups.values())


def _transpose(graph: Graph, value: Value, perm: tuple[int, ...], name: str) -> Value:
    return graph.add("Transpose", value, attrs=TransposeAttrs(perm), name=name)


def _convert(graph: Graph, chain: list[Node]) -> list[tuple[Node, Node]]:
    """Replaces the chain's nodes by their channels-last forms; returns each new node with the
    node it replaces."""
    members = {id(node) for node in chain}
    users = graph.users()
    outputs = graph.output_values()
    nhwc: dict[Value, Value] = {}  # a member's NCHW result -> its NHWC result
    back: dict[Value, Value] = {}  # a member's NHWC result -> its one Transpose to NCHW

    def to_nchw(value: Value, name: str) -> Value:
        if value not in back:
            back[value] = _transpose(graph, value, TO_NCHW, name)
        return back[value]

    replaced: list[tuple[Value, Value]] = []
    renamed = []
    for node in chain:
        out = node.outputs[0]
        readers = users.get(out, [])
        inside = any(id(user) in members for user, _ in readers)
        outside = out in outputs or any(id(user) not in members for user, _ in readers)
        inputs: list[Value | None] = list(node.inputs)
        x = node.input(0)
        inputs[0] = nhwc.get(x, x)
        residual = _residual(node)
        if residual is not None:
            index = residual_operand(node.op)
            if inside:  # y NHWC, and the residual with it
                inputs[index] = nhwc.get(residual) or _transpose(graph, residual, TO_NHWC, f"{node.name}.residual")
            elif residual in nhwc:
                inputs[index] = to_nchw(nhwc[residual], f"{residual.name}.to_nchw")
        attrs = replace(node.attrs, x_channels_last=x in nhwc, y_channels_last=inside)
        (y,) = graph.add_node(node.op, inputs, attrs, name=node.name,
                              result_names=[f"{out.name}.nhwc" if inside else out.name])
        assert y.producer is not None
        renamed.append((y.producer, node))
        if inside:
            nhwc[out] = y
            if outside:
                replaced.append((out, to_nchw(y, f"{out.name}.to_nchw")))
        else:
            replaced.append((out, y))
    for old, new in replaced:
        graph.replace_all_uses(old, new)
    return renamed


@register_pass
class AssignLayouts(GraphPass):
    """Preconditions: the backend's fused ops are formed (fuse-inverted-residual has run).
    Rules:
    1. Nodes the context's backend prefers channels last, connected through x or residual in
       groups worth at least MIN_CHAIN convolutions: each -> its channels-last form, NHWC where the tensor
       stays in the group, NCHW where it comes from or goes only outside (a Transpose back to
       NCHW for outside readers of a tensor the group also reads)."""

    name = "assign-layouts"

    def run(self, graph: Graph) -> bool:
        backend = self.context.backend if self.context is not None else None
        candidates = [node for node in graph.nodes if _candidate(node, backend)]
        renamed = [pair for chain in _chains(candidates)
                   if sum(CONVOLUTIONS[node.op] for node in chain) >= MIN_CHAIN for pair in _convert(graph, chain)]
        if not renamed:
            return False
        graph.sort()
        graph.remove_unused()
        for new, old in renamed:  # the replaced node is gone: its successor takes its names
            new.name = old.name
            if not new.attrs.y_channels_last:
                new.outputs[0].name = old.outputs[0].name
        return True
