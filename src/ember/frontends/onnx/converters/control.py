"""Control flow, resolved at import: If whose condition is a constant inlines the branch it
takes; Loop with a constant trip count (and a condition that folds each iteration) and Scan
(opset 9+, over its static sequence length) are unrolled, one inlined copy of the body per
iteration. Ember compiles one static dataflow graph, so control flow that depends on run-time
data is refused."""
from __future__ import annotations

import numpy as np
from onnx import GraphProto

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.tensor import normalize_axis
from ember.frontends.onnx.converters.vectorize import move_axis, reverse_leading, vectorized_scan
from ember.frontends.onnx.dtypes import to_dtype
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Constant, Value
from ember.ops.tensor import AxisAttrs, SliceAttrs
from ember.support.errors import ModelImportError, UnsupportedError

# Unrolling more iterations than this would make a graph too large to be useful.
MAX_UNROLL = 4096


@converter("If")
def if_(ctx: NodeContext) -> list[Value]:
    cond = ctx.constant(0, "cond")
    if cond.size != 1:
        raise ModelImportError(f"cond must hold one value, got shape {list(cond.shape)}")
    branch = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    return ctx.inline(ctx.attr_graph(branch), {}, branch.split("_")[0])


def _scalar_constant(ctx: NodeContext, body: GraphProto, index: int, value) -> Value:
    """A constant for body input `index` (the iteration number or the condition), shaped as
    the body declares it (a scalar, or [1])."""
    vi = body.input[index]
    dtype = to_dtype(vi.type.tensor_type.elem_type, f"loop body input '{vi.name}'")
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim] if vi.type.tensor_type.HasField("shape") else []
    return ctx.add_constant(np.full(dims, value, dtype=dtype.numpy), f"{ctx.name}_{vi.name}")


def _stack(ctx: NodeContext, parts: list[Value], axis: int, name: str) -> Value:
    """Stacks same-shaped values along a new axis `axis`."""
    shape = parts[0].type.shape
    axis = normalize_axis(axis, len(shape) + 1)
    expanded = [ctx.reshape(p, shape[:axis] + (1,) + shape[axis:]) for p in parts]
    if len(expanded) == 1:
        return expanded[0]
    return ctx.emit("Concat", expanded, AxisAttrs(axis), [name])[0]


def _empty_scan_output(ctx: NodeContext, body: GraphProto, index: int) -> Value:
    vi = body.output[index]
    tensor_type = vi.type.tensor_type
    dims = [d.dim_value if d.WhichOneof("value") == "dim_value" else None for d in tensor_type.shape.dim]
    if not tensor_type.HasField("shape") or None in dims:
        raise UnsupportedError(f"the loop runs no iteration, and the shape of scan output '{vi.name}' is not "
                               "declared, so Ember cannot give it a static shape")
    dtype = to_dtype(tensor_type.elem_type, f"scan output '{vi.name}'")
    return ctx.constant_result(np.zeros([0, *(int(d) for d in dims if d is not None)], dtype=dtype.numpy), index)


@converter("Loop")
def loop(ctx: NodeContext) -> list[Value]:
    body = ctx.attr_graph("body")
    trip = None
    if ctx.input(0) is not None:
        data = ctx.constant(0, "M (trip count)")
        trip = int(data.reshape(-1)[0])
    cond = True
    if ctx.input(1) is not None:
        cond = bool(ctx.constant(1, "cond").reshape(-1)[0])
    carried = [ctx.require(i) for i in range(2, ctx.num_inputs)]
    n_carried = len(carried)
    if len(body.input) != 2 + n_carried or len(body.output) < 1 + n_carried:
        raise ModelImportError(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs, "
                               f"which does not fit {n_carried} loop-carried values")
    scans: list[list[Value]] = [[] for _ in range(len(body.output) - 1 - n_carried)]
    k = 0
    while cond and (trip is None or k < trip):
        if k >= MAX_UNROLL:
            raise UnsupportedError(f"the loop runs more than {MAX_UNROLL} iterations; Ember unrolls loops at "
                                   "import and refuses longer ones")
        bindings = {body.input[0].name: _scalar_constant(ctx, body, 0, k),
                    body.input[1].name: _scalar_constant(ctx, body, 1, cond)}
        bindings.update({vi.name: v for vi, v in zip(body.input[2:], carried, strict=True)})
        outputs = ctx.inline(body, bindings, f"iter{k}")
        cond_out = outputs[0]
        if not isinstance(cond_out, Constant):
            raise UnsupportedError(f"the loop condition of iteration {k} is computed at run time; Ember "
                                   "unrolls loops at import, so the condition must fold to a constant")
        cond = bool(cond_out.data.reshape(-1)[0])
        carried = outputs[1:1 + n_carried]
        for parts, value in zip(scans, outputs[1 + n_carried:], strict=True):
            parts.append(value)
        k += 1
    results = list(carried)
    for j, parts in enumerate(scans):
        index = n_carried + j
        name = ctx.output_name(index) or f"{ctx.name}_scan{j}"
        results.append(_stack(ctx, parts, 0, name) if parts else _empty_scan_output(ctx, body, 1 + index))
    return results


def _take(ctx: NodeContext, x: Value, axis: int, index: int) -> Value:
    """x[..., index, ...] along `axis`, that axis removed."""
    sliced = ctx.emit1("Slice", [x], SliceAttrs((axis,), (index,), (index + 1,), (1,)))
    shape = x.type.shape
    return ctx.reshape(sliced, shape[:axis] + shape[axis + 1:])


@converter("Scan", min_opset=9)
def scan(ctx: NodeContext) -> list[Value]:
    body = ctx.attr_graph("body")
    n_scan = ctx.attr_int("num_scan_inputs")
    inputs = [ctx.require(i) for i in range(ctx.num_inputs)]
    if not 0 <= n_scan <= len(inputs) or len(body.input) != len(inputs):
        raise ModelImportError(f"the body takes {len(body.input)} inputs, which does not fit the node's "
                               f"{len(inputs)} inputs of which num_scan_inputs = {n_scan} are scanned")
    n_state = len(inputs) - n_scan
    states, sequences = inputs[:n_state], inputs[n_state:]
    in_axes = ctx.attr_ints("scan_input_axes", None) or (0,) * n_scan
    in_dirs = ctx.attr_ints("scan_input_directions", None) or (0,) * n_scan
    n_out = len(body.output) - n_state
    out_axes = ctx.attr_ints("scan_output_axes", None) or (0,) * n_out
    out_dirs = ctx.attr_ints("scan_output_directions", None) or (0,) * n_out
    if n_out < 0:
        raise ModelImportError(f"the body returns {len(body.output)} values, fewer than the node's {n_state} "
                               f"carried states ({len(inputs)} inputs, num_scan_inputs = {n_scan})")
    for what, values in (("scan_input_axes", in_axes), ("scan_input_directions", in_dirs)):
        if len(values) != n_scan:
            raise ModelImportError(f"{what} {list(values)} must have one value per scan input ({n_scan})")
    for what, values in (("scan_output_axes", out_axes), ("scan_output_directions", out_dirs)):
        if len(values) != n_out:
            raise ModelImportError(f"{what} {list(values)} must have one value per scan output ({n_out})")
    axes = [normalize_axis(a, s.type.rank) for a, s in zip(in_axes, sequences, strict=True)]
    lengths = {s.type.shape[a] for s, a in zip(sequences, axes, strict=True)}
    if len(lengths) != 1:
        raise ModelImportError(f"scan inputs have different sequence lengths {sorted(lengths)}")
    length = lengths.pop()
    mapped = vectorized_scan(ctx, body, states, sequences, axes, in_dirs, length)
    if mapped is not None:  # independent iterations: computed at once, no unrolling
        results = list(states)
        for j, stacked in enumerate(mapped):
            if out_dirs[j]:
                stacked = reverse_leading(ctx, stacked)
            axis = normalize_axis(out_axes[j], stacked.type.rank)
            results.append(move_axis(ctx, stacked, 0, axis))
        return results
    if length > MAX_UNROLL:
        raise UnsupportedError(f"the scan runs {length} iterations; Ember unrolls scans at import and refuses "
                               f"more than {MAX_UNROLL}")
    outs: list[list[Value]] = [[] for _ in range(n_out)]
    for t in range(length):
        bindings = {vi.name: v for vi, v in zip(body.input[:n_state], states, strict=True)}
        for vi, seq, axis, direction in zip(body.input[n_state:], sequences, axes, in_dirs, strict=True):
            bindings[vi.name] = _take(ctx, seq, axis, length - 1 - t if direction else t)
        outputs = ctx.inline(body, bindings, f"iter{t}")
        states = outputs[:n_state]
        for parts, value in zip(outs, outputs[n_state:], strict=True):
            parts.append(value)
    results = list(states)
    for j, parts in enumerate(outs):
        if not parts:
            results.append(_empty_scan_output(ctx, body, n_state + j))
            continue
        if out_dirs[j]:
            parts = parts[::-1]
        results.append(_stack(ctx, parts, out_axes[j], ctx.output_name(n_state + j) or f"{ctx.name}_scan{j}"))
    return results
