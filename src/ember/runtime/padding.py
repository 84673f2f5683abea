"""Can a dynamic dimension be padded up to a bucket? Padding a batch of 5 to a compiled batch
of 8 is exact only if no op mixes entries along that axis: samples must stay independent from
the inputs to the outputs. This analysis follows the padded axis of each input through the
graph, op by op, and either returns the axis each output carries it on (so the runtime slices
the padding off) or refuses naming the first node that mixes along it (a reduction or softmax
over it, a matrix product contracting it, a reshape merging it with another axis...).

Rules are conservative: an op it does not know, reading a padded value, refuses."""
from __future__ import annotations

from collections.abc import Callable

from ember.graph import Graph, Node, Value
from ember.support.errors import UnsupportedError

# Ops that treat axis 0 (N) of their first operand as independent samples.
PER_SAMPLE = {"Conv", "FusedConv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
              "GlobalMaxPool", "LpPool", "BatchNormalization", "InstanceNormalization", "LRN",
              "GroupNormalization", "DepthToSpace", "SpaceToDepth"}
MATRIX = {"MatMul", "FullyConnected", "Gemm"}


class Refusal(Exception):
    """Raised by a rule: the op mixes along the padded axis (the message says how)."""


Rule = Callable[[Node, list[int | None]], list[int | None]]


def padded_output_axes(graph: Graph, input_axes: dict[str, int], symbol: str) -> dict[str, int | None]:
    """Per graph output name, the axis carrying `symbol` (None: it does not depend on it).
    input_axes: input name -> the axis of that input holding the padded dimension. Raises
    UnsupportedError when padding would change the results."""
    carried: dict[Value, int] = {p: input_axes[p.name] for p in graph.inputs if p.name in input_axes}
    for node in graph.nodes:
        axes = [carried.get(v) if v is not None else None for v in node.inputs]
        if all(a is None for a in axes):
            continue
        try:
            results = _rule(node)(node, axes)
        except Refusal as why:
            raise UnsupportedError(f"dimension '{symbol}' cannot be padded to a bucket: {node.location} {why}; "
                                   "compile without buckets for it (one specialization per size)") from None
        for value, axis in zip(node.outputs, results, strict=True):
            if axis is not None:
                carried[value] = axis
    return {o.name: carried.get(o.value) for o in graph.outputs}


def _rule(node: Node) -> Rule:
    if "elementwise" in node.opdef.traits or node.op in ("Expand", "Identity"):
        return _aligned
    if node.op in PER_SAMPLE:
        return _per_sample
    if node.op in MATRIX:
        return _matrix
    rules: dict[str, Rule] = {"Transpose": _transpose, "Reshape": _reshape, "Concat": _concat, "Slice": _slice,
                              "Gather": _gather, "Pad": _pad, "Tile": _tile}
    if node.op in rules:
        return rules[node.op]
    if hasattr(node.attrs, "axes") or hasattr(node.attrs, "axis"):
        return _along_axes
    return _unknown


def _unknown(node: Node, axes: list[int | None]) -> list[int | None]:
    raise Refusal("is not known to keep samples independent")


def _aligned(node: Node, axes: list[int | None]) -> list[int | None]:
    """Broadcasting ops: operands align on their trailing axes."""
    rank = node.outputs[0].type.rank
    positions = {rank - v.type.rank + a for v, a in zip(node.inputs, axes, strict=True)
                 if v is not None and a is not None}
    if len(positions) != 1:
        raise Refusal("reads the padded axis at different positions of its operands")
    return [positions.pop()] * len(node.outputs)


def _per_sample(node: Node, axes: list[int | None]) -> list[int | None]:
    if axes[0] != 0 or any(a is not None for a in axes[1:]):
        raise Refusal("treats only axis 0 of its input as independent samples")
    return [0] * len(node.outputs)


def _matrix(node: Node, axes: list[int | None]) -> list[int | None]:
    a, b = node.inputs[0], node.inputs[1]
    rank = node.outputs[0].type.rank
    assert a is not None and b is not None
    position = {}
    if axes[0] is not None:
        if axes[0] == a.type.rank - 1:
            raise Refusal("contracts the padded axis")
        position["a"] = rank - a.type.rank + axes[0]
    if axes[1] is not None:
        if axes[1] == b.type.rank - 2 or b.type.rank == 1:
            raise Refusal("contracts the padded axis")
        position["b"] = rank - b.type.rank + axes[1]
    if len(set(position.values())) != 1 or (len(position) == 2 and position["a"] >= rank - 2):
        raise Refusal("reads the padded axis in both operands at different positions")
    if any(x is not None for x in axes[2:]):
        raise Refusal("reads the padded axis in its bias")
    return [next(iter(position.values()))]


def _transpose(node: Node, axes: list[int | None]) -> list[int | None]:
    return [list(node.attrs.perm).index(axes[0])]


def _reshape(node: Node, axes: list[int | None]) -> list[int | None]:
    axis = axes[0]
    source, result = node.inputs[0], node.outputs[0]
    assert axis is not None and source is not None
    if source.type.shape[:axis + 1] != result.type.shape[:axis + 1]:
        raise Refusal("merges or splits the padded axis with others")
    return [axis]


def _concat(node: Node, axes: list[int | None]) -> list[int | None]:
    rank = node.outputs[0].type.rank
    axis = node.attrs.axis % rank
    positions = {a for a in axes if a is not None}
    if axis in positions:
        raise Refusal("concatenates along the padded axis")
    if len(positions) != 1:
        raise Refusal("reads the padded axis at different positions of its operands")
    return [positions.pop()]


def _slice(node: Node, axes: list[int | None]) -> list[int | None]:
    axis = axes[0]
    source = node.inputs[0]
    assert axis is not None and source is not None
    if node.outputs[0].type.shape[axis] != source.type.shape[axis]:
        raise Refusal("slices along the padded axis")
    return [axis]


def _pad(node: Node, axes: list[int | None]) -> list[int | None]:
    axis = axes[0]
    rank = node.outputs[0].type.rank
    assert axis is not None
    if node.attrs.pads[axis] or node.attrs.pads[axis + rank]:
        raise Refusal("pads along the padded axis")
    return [axis]


def _tile(node: Node, axes: list[int | None]) -> list[int | None]:
    axis = axes[0]
    assert axis is not None
    if node.attrs.repeats[axis] != 1:
        raise Refusal("tiles along the padded axis")
    return [axis]


def _gather(node: Node, axes: list[int | None]) -> list[int | None]:
    data, indices = node.inputs[0], node.inputs[1]
    assert data is not None and indices is not None
    gather_axis = node.attrs.axis % data.type.rank
    data_axis, index_axis = axes[0], axes[1]
    if data_axis is not None and index_axis is not None:
        raise Refusal("reads the padded axis in both data and indices")
    if index_axis is not None:  # an embedding lookup of padded token ids
        return [gather_axis + index_axis]
    assert data_axis is not None
    if data_axis == gather_axis:
        raise Refusal("gathers along the padded axis")
    return [data_axis if data_axis < gather_axis else data_axis + indices.type.rank - 1]


def _along_axes(node: Node, axes: list[int | None]) -> list[int | None]:
    """Ops working along named axes (reductions, softmax, normalization, arg-reductions):
    fine as long as those axes are not the padded one."""
    axis = axes[0]
    source = node.inputs[0]
    if axis is None or any(a is not None for a in axes[1:]) or source is None:
        raise Refusal("reads the padded axis in an operand other than its first")
    rank = source.type.rank
    named = node.attrs.axes if hasattr(node.attrs, "axes") else (node.attrs.axis,)
    normalized = sorted(a % rank for a in named) if named else list(range(rank))
    if node.op in ("LayerNormalization", "LayerNorm", "RMSNormalization") and hasattr(node.attrs, "axis"):
        normalized = list(range(node.attrs.axis % rank, rank))
    if axis in normalized:
        raise Refusal("computes along the padded axis")
    results: list[int | None] = []
    for value in node.outputs:
        if value.type.rank == rank:
            results.append(axis)
        elif value.type.rank == rank - len(normalized):
            results.append(axis - sum(1 for a in normalized if a < axis))
        else:
            raise Refusal("changes rank in a way the padding analysis does not follow")
    return results
