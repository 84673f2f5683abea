"""Scan as a map: when no iteration of a Scan depends on another (every state passes through
its body unchanged), its iterations are independent, and the body runs once over all of
them at once with the iteration as a new leading axis (JAX's vmap, Glow's and TVM's "batch"
rewriting of per-row loops). A scikit-learn nearest-neighbours export scans its 1,500
training rows this way: one Sub and one ReduceSumSquare over [1500, N, 64] instead of
1,500 unrolled copies of the body.

The body is converted once with its scan inputs bound to their first slices, then each of
its nodes that reads an iteration-dependent value is re-emitted batched, by rules over the
op table rather than per ONNX op: elementwise ops (trait 'elementwise') broadcast their
batched operands as [B, 1, ..., 1, *shape] against the unbatched ones, reductions and
ArgMax/ArgMin shift their axes by one, Reshape and Transpose keep the leading axis. Nodes
that read only loop-invariant values stay as they are: computed once, hoisted out of the
loop. Anything else (or a batched tensor past the resource limits) returns None and the
caller unrolls the loop as before, leaving the unused first-iteration nodes to dce."""
from __future__ import annotations

from collections.abc import Sequence

from onnx import GraphProto

from ember.frontends.onnx.context import NodeContext
from ember.graph.ir import Node, Value
from ember.ops.reduce import ArgReduceAttrs, ReduceAttrs
from ember.ops.tensor import ReshapeAttrs, ShapeAttrs, SliceAttrs, TransposeAttrs
from ember.support.errors import EmberError


def states_pass_through(body: GraphProto, n_state: int) -> bool:
    """Whether every state output of the body is its state input (directly or by Identity)."""
    identity = {n.output[0]: n.input[0] for n in body.node if n.op_type == "Identity" and n.input and n.output}
    for vi_in, vi_out in zip(body.input[:n_state], body.output[:n_state], strict=True):
        name, seen = vi_out.name, set()
        while name in identity and name != vi_in.name and name not in seen:  # a cycle: not a pass-through
            seen.add(name)
            name = identity[name]
        if name != vi_in.name:
            return False
    return True


def move_axis(ctx: NodeContext, x: Value, source: int, target: int) -> Value:
    if source == target:
        return x
    perm = [a for a in range(x.type.rank) if a != source]
    perm.insert(target, source)
    return ctx.emit1("Transpose", [x], TransposeAttrs(tuple(perm)))


def reverse_leading(ctx: NodeContext, x: Value) -> Value:
    length = x.type.shape[0]
    return ctx.emit1("Slice", [x], SliceAttrs((0,), (length - 1,), (-1,), (-1,)))


class _Batcher:
    def __init__(self, ctx: NodeContext, length: int) -> None:
        self.ctx = ctx
        self.length = length
        self.batched: dict[Value, Value] = {}  # first-iteration value -> all iterations

    def value(self, v: Value | None) -> Value | None:
        return None if v is None else self.batched.get(v, v)

    def node(self, node: Node) -> bool:
        """Re-emits `node` over all iterations if it reads a batched value; False if no rule fits."""
        if not any(v in self.batched for v in node.inputs if v is not None):
            return True  # loop-invariant: computed once
        attrs, op, ctx = node.attrs, node.op, self.ctx
        if "elementwise" in node.opdef.traits:
            rank = node.outputs[0].type.rank
            inputs = [self._aligned(v, rank) for v in node.inputs]
            results = ctx.emit(op, inputs, attrs)
        elif isinstance(attrs, ReduceAttrs):
            results = ctx.emit(op, [self.value(node.inputs[0])], ReduceAttrs(tuple(a + 1 for a in attrs.axes),
                                                                              attrs.keepdims))
        elif isinstance(attrs, ArgReduceAttrs):
            axis = attrs.axis % node.input(0).type.rank
            results = ctx.emit(op, [self.value(node.inputs[0])],
                               ArgReduceAttrs(axis + 1, attrs.keepdims, attrs.select_last_index))
        elif op == "Reshape" and isinstance(attrs, ReshapeAttrs):
            results = ctx.emit(op, [self.value(node.inputs[0])], ReshapeAttrs((self.length, *attrs.shape)))
        elif op == "Transpose" and isinstance(attrs, TransposeAttrs):
            results = ctx.emit(op, [self.value(node.inputs[0])], TransposeAttrs((0, *(p + 1 for p in attrs.perm))))
        else:
            return False
        for old, new in zip(node.outputs, results, strict=True):
            if new.type.shape != (self.length, *old.type.shape) or new.type.dtype != old.type.dtype:
                return False
            self.batched[old] = new
        return True

    def _aligned(self, v: Value | None, rank: int) -> Value | None:
        """A batched operand as [B, 1, ..., 1, *shape] of rank `rank` + 1, so that it
        broadcasts against the unbatched operands as its first slice did."""
        if v is None or v not in self.batched:
            return v
        shape = v.type.shape
        return self.ctx.reshape(self.batched[v], (self.length, *[1] * (rank - len(shape)), *shape))

    def stacked(self, v: Value) -> Value:
        """All iterations of body output `v`, along a new leading axis."""
        if v in self.batched:
            return self.batched[v]
        return self.ctx.emit1("Expand", [self.ctx.reshape(v, (1, *v.type.shape))],
                              ShapeAttrs((self.length, *v.type.shape)))


def _first_slice(ctx: NodeContext, seq: Value, axis: int, index: int) -> Value:
    """seq[..., index, ...] along `axis` as nodes that never fold, even for a constant
    sequence: every body value computed from it is then a node the batcher sees (a folded
    one would pass for loop-invariant)."""
    shape = seq.type.shape
    (sliced,) = ctx.graph.add_node("Slice", [seq], SliceAttrs((axis,), (index,), (index + 1,), (1,)),
                                   name=f"{ctx.name}_first")
    (first,) = ctx.graph.add_node("Reshape", [sliced], ReshapeAttrs(shape[:axis] + shape[axis + 1:]),
                                  name=f"{ctx.name}_first")
    return first


def vectorized_scan(ctx: NodeContext, body: GraphProto, states: list[Value], sequences: list[Value],
                    axes: list[int], in_dirs: Sequence[int], length: int) -> list[Value] | None:
    """The scan outputs (stacked along a new leading axis, in iteration order) of a Scan
    whose states pass through, computed at once; None where a body op has no batching rule."""
    n_state = len(states)
    if length < 2 or not states_pass_through(body, n_state):
        return None
    batcher = _Batcher(ctx, length)
    bindings = {vi.name: v for vi, v in zip(body.input[:n_state], states, strict=True)}
    for vi, seq, axis, direction in zip(body.input[n_state:], sequences, axes, in_dirs, strict=True):
        first = _first_slice(ctx, seq, axis, length - 1 if direction else 0)
        whole = move_axis(ctx, seq, axis, 0)
        batcher.batched[first] = reverse_leading(ctx, whole) if direction else whole
        bindings[vi.name] = first
    mark = len(ctx.graph.nodes)
    try:
        outputs = ctx.inline(body, bindings, "vectorized")
        for node in list(ctx.graph.nodes[mark:]):
            if not batcher.node(node):
                return None
        return [batcher.stacked(v) for v in outputs[n_state:]]
    except EmberError:  # a batched tensor past the resource limits, an op that refuses: unroll
        return None
