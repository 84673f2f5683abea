"""torch's multi-layer LSTM (aten.lstm.input, kept whole by the exporter) as one Ember LSTM op
per layer: torch's gate order (input, forget, cell, output) becomes ONNX's (input, output,
forget, cell), the two biases sit side by side, and the outputs of the directions are
interleaved back into torch's [seq, batch, directions * hidden]. The weight reshuffles are
Slice/Concat of constants, folded at import."""
from __future__ import annotations

from ember.frontends.torch.context import AtenContext
from ember.frontends.torch.registry import aten
from ember.graph.ir import Value
from ember.ops.recurrent import RecurrentAttrs
from ember.ops.tensor import AxisAttrs, SliceAttrs, TransposeAttrs
from ember.support.errors import UnsupportedOpError

_TORCH_TO_ONNX_GATES = (0, 3, 1, 2)  # i, f, g, o -> i, o, f, g


def _gates(ctx: AtenContext, w: Value, hidden: int) -> Value:
    parts = [ctx.emit1("Slice", [w], SliceAttrs((0,), (g * hidden,), ((g + 1) * hidden,), (1,)))
             for g in _TORCH_TO_ONNX_GATES]
    return ctx.emit1("Concat", parts, AxisAttrs(0))


def _stack(ctx: AtenContext, values: list[Value], axis: int = 0) -> Value:
    expanded = [ctx.reshape(v, (1,) + v.type.shape) for v in values]
    return expanded[0] if len(expanded) == 1 else ctx.emit1("Concat", expanded, AxisAttrs(axis))


@aten("lstm.input")
def _lstm(ctx: AtenContext) -> list[Value | None]:
    if ctx["train"] and ctx.number("dropout"):
        raise UnsupportedOpError("an LSTM with dropout in training mode; call model.eval() first")
    x = ctx.tensor("input")
    params = [ctx.value_of(p) for p in ctx["params"]]
    h0, c0 = (ctx.value_of(s) for s in ctx["hx"])
    layers, directions = ctx.ints("num_layers")[0], 2 if ctx["bidirectional"] else 1
    per = 4 if ctx["has_biases"] else 2
    if len(params) != layers * directions * per:
        raise UnsupportedOpError(f"an LSTM with {len(params)} weight tensors for {layers} layers x {directions} "
                                 "directions (projections, proj_size > 0, are not supported)")
    hidden = h0.type.shape[-1]
    if ctx["batch_first"]:
        x = ctx.emit1("Transpose", [x], TransposeAttrs((1, 0, 2)))
    seq, batch = x.type.shape[:2]
    finals_h, finals_c = [], []
    for layer in range(layers):
        ws, rs, bs = [], [], []
        for d in range(directions):
            group = params[(layer * directions + d) * per:(layer * directions + d + 1) * per]
            ws.append(_gates(ctx, group[0], hidden))
            rs.append(_gates(ctx, group[1], hidden))
            if per == 4:
                bs.append(ctx.emit1("Concat", [_gates(ctx, group[2], hidden), _gates(ctx, group[3], hidden)],
                                    AxisAttrs(0)))
        states = slice(layer * directions, (layer + 1) * directions)
        initial_h = ctx.emit1("Slice", [h0], SliceAttrs((0,), (states.start,), (states.stop,), (1,)))
        initial_c = ctx.emit1("Slice", [c0], SliceAttrs((0,), (states.start,), (states.stop,), (1,)))
        attrs = RecurrentAttrs(hidden, "bidirectional" if directions == 2 else "forward",
                               ("Sigmoid", "Tanh", "Tanh") * directions)
        y, y_h, y_c = ctx.emit("LSTM", [x, _stack(ctx, ws), _stack(ctx, rs), _stack(ctx, bs) if bs else None,
                                        None, initial_h, initial_c, None], attrs)
        # [seq, directions, batch, hidden] -> [seq, batch, directions * hidden]
        x = ctx.reshape(ctx.emit1("Transpose", [y], TransposeAttrs((0, 2, 1, 3))), (seq, batch, directions * hidden))
        finals_h.append(y_h)
        finals_c.append(y_c)
    if ctx["batch_first"]:
        x = ctx.emit1("Transpose", [x], TransposeAttrs((1, 0, 2)))
    h_n = finals_h[0] if layers == 1 else ctx.emit1("Concat", finals_h, AxisAttrs(0))
    c_n = finals_c[0] if layers == 1 else ctx.emit1("Concat", finals_c, AxisAttrs(0))
    return [x, h_n if ctx.result_used(1) else None, c_n if ctx.result_used(2) else None]
