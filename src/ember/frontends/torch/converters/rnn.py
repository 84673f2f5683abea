"""torch's multi-layer LSTM and GRU (aten.lstm.input, aten.gru.input, kept whole by the
exporter) as one Ember LSTM or GRU op per layer: torch's gate blocks are reordered into ONNX's,
the two biases sit side by side, and the outputs of the directions are interleaved back into
torch's [seq, batch, directions * hidden]. The weight reshuffles are Slice/Concat of
constants, folded at import."""
from __future__ import annotations

from ember.frontends.torch.context import AtenContext
from ember.frontends.torch.registry import aten
from ember.graph.ir import Value
from ember.ops.recurrent import GRUAttrs, RecurrentAttrs
from ember.ops.tensor import AxisAttrs, SliceAttrs, TransposeAttrs
from ember.support.errors import UnsupportedOpError

# torch's gate blocks in ONNX's order: LSTM (i, f, g, o) -> (i, o, f, g); GRU (r, z, n) -> (z, r, n).
_LSTM_GATES = (0, 3, 1, 2)
_GRU_GATES = (1, 0, 2)


def _gates(ctx: AtenContext, w: Value, hidden: int, order: tuple[int, ...]) -> Value:
    parts = [ctx.emit1("Slice", [w], SliceAttrs((0,), (g * hidden,), ((g + 1) * hidden,), (1,))) for g in order]
    return ctx.emit1("Concat", parts, AxisAttrs(0))


def _stack(ctx: AtenContext, values: list[Value]) -> Value:
    expanded = [ctx.reshape(v, (1,) + v.type.shape) for v in values]
    return expanded[0] if len(expanded) == 1 else ctx.emit1("Concat", expanded, AxisAttrs(0))


def _layer_slice(ctx: AtenContext, state: Value, layer: int, directions: int) -> Value:
    start = layer * directions
    return ctx.emit1("Slice", [state], SliceAttrs((0,), (start,), (start + directions,), (1,)))


def _recurrent(ctx: AtenContext, op: str, initial: list[Value]) -> list[Value | None]:
    """Both ops: one Ember op per layer. `initial`: h0 (and c0 for the LSTM), torch's
    [layers * directions, batch, hidden]."""
    if ctx["train"] and ctx.number("dropout"):
        raise UnsupportedOpError(f"an {op} with dropout in training mode; call model.eval() first")
    x = ctx.tensor("input")
    params = [ctx.value_of(p) for p in ctx["params"]]
    layers, directions = ctx.ints("num_layers")[0], 2 if ctx["bidirectional"] else 1
    per = 4 if ctx["has_biases"] else 2
    if len(params) != layers * directions * per:
        raise UnsupportedOpError(f"an {op} with {len(params)} weight tensors for {layers} layers x {directions} "
                                 "directions (projections, proj_size > 0, are not supported)")
    hidden = initial[0].type.shape[-1]
    order = _LSTM_GATES if op == "LSTM" else _GRU_GATES
    if ctx["batch_first"]:
        x = ctx.emit1("Transpose", [x], TransposeAttrs((1, 0, 2)))
    seq, batch = x.type.shape[:2]
    finals: list[list[Value]] = [[] for _ in initial]
    direction = "bidirectional" if directions == 2 else "forward"
    for layer in range(layers):
        ws, rs, bs = [], [], []
        for d in range(directions):
            group = params[(layer * directions + d) * per:(layer * directions + d + 1) * per]
            ws.append(_gates(ctx, group[0], hidden, order))
            rs.append(_gates(ctx, group[1], hidden, order))
            if per == 4:
                biases = [_gates(ctx, group[2], hidden, order), _gates(ctx, group[3], hidden, order)]
                bs.append(ctx.emit1("Concat", biases, AxisAttrs(0)))
        bias = _stack(ctx, bs) if bs else None
        states = [_layer_slice(ctx, s, layer, directions) for s in initial]
        if op == "LSTM":
            attrs: object = RecurrentAttrs(hidden, direction, ("Sigmoid", "Tanh", "Tanh") * directions)
            operands = [x, _stack(ctx, ws), _stack(ctx, rs), bias, None, *states, None]
        else:  # torch's GRU applies the reset gate after the recurrent product
            attrs = GRUAttrs(hidden, direction, linear_before_reset=True)
            operands = [x, _stack(ctx, ws), _stack(ctx, rs), bias, *states]
        y, *last = ctx.emit(op, operands, attrs)
        # [seq, directions, batch, hidden] -> [seq, batch, directions * hidden]
        x = ctx.reshape(ctx.emit1("Transpose", [y], TransposeAttrs((0, 2, 1, 3))), (seq, batch, directions * hidden))
        for found, value in zip(finals, last, strict=True):
            found.append(value)
    if ctx["batch_first"]:
        x = ctx.emit1("Transpose", [x], TransposeAttrs((1, 0, 2)))
    results: list[Value | None] = [x]
    for i, found in enumerate(finals, 1):
        if ctx.result_used(i):
            results.append(found[0] if layers == 1 else ctx.emit1("Concat", found, AxisAttrs(0)))
        else:
            results.append(None)
    return results


@aten("lstm.input")
def _lstm(ctx: AtenContext) -> list[Value | None]:
    return _recurrent(ctx, "LSTM", [ctx.value_of(s) for s in ctx["hx"]])


@aten("gru.input")
def _gru(ctx: AtenContext) -> list[Value | None]:
    return _recurrent(ctx, "GRU", [ctx.tensor("hx")])
