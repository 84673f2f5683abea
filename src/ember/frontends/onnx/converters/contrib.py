"""Converters for the com.microsoft contrib operators that ONNX Runtime's transformer optimizer
and quantization tools write into models: Gelu, BiasGelu, FastGelu, QuickGelu, FusedMatMul,
SkipLayerNormalization, SkipSimplifiedLayerNormalization, EmbedLayerNormalization, Attention,
MatMulIntegerToFloat, DynamicQuantizeMatMul, DynamicQuantizeLSTM, QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool and QLinearConcat.

Each is expressed through Ember's own ops at import (so the cpu backend's kernels run them and
the graph passes see the usual patterns), with ONNX Runtime's CPU kernels as the reference for
every detail a spec leaves open: default epsilons (1e-12), -10000 for masked attention keys,
how the quantized ops round (the arithmetic of MLAS's kernels, in float32), which zero points
and mask forms exist. Forms ONNX Runtime's CPU kernels do not implement (4-D Megatron masks,
shared past/present buffers, rotary attention) are refused, naming the form."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import ConverterFn, converter
from ember.graph.ir import Value
from ember.ops.activations import GeluAttrs
from ember.ops.attention import AttentionAttrs
from ember.ops.elementwise import CastAttrs
from ember.ops.normalization import LayerNormAttrs, RMSNormAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.tensor import AxisAttrs, ReshapeAttrs, SliceAttrs, TransposeAttrs
from ember.support.errors import ModelImportError, UnsupportedError
from ember.types import DType

DOMAIN = "com.microsoft"
# ONNX Runtime's default epsilon of its fused layer normalizations.
DEFAULT_EPSILON = 1e-12


def contrib(op_type: str, inputs: int, outputs: int, attrs: Sequence[str] = ()) -> Callable[[ConverterFn], ConverterFn]:
    """Registers a com.microsoft converter. The node's arity and attribute names are checked
    against ONNX Runtime's schema of the op first: an unknown attribute is refused, never ignored."""
    allowed = frozenset(attrs)

    def register(fn: ConverterFn) -> ConverterFn:
        def convert(ctx: NodeContext):
            where = f"{DOMAIN}.{op_type}"
            if ctx.num_inputs > inputs:
                raise ModelImportError(f"{ctx.num_inputs} inputs given, but {where} takes at most {inputs}")
            if ctx.num_outputs > outputs:
                raise ModelImportError(f"{ctx.num_outputs} outputs given, but {where} has at most {outputs}")
            unknown = sorted({a.name for a in ctx.node.attribute} - allowed)
            if unknown:
                known = ", ".join(sorted(allowed)) or "none"
                raise ModelImportError(f"unknown attribute{'s' if len(unknown) > 1 else ''} "
                                       f"{', '.join(map(repr, unknown))} ({where} has: {known})")
            return fn(ctx)

        converter(op_type, domain=DOMAIN)(convert)
        return fn

    return register


# helpers ------------------------------------------------------------------------------------

def constant_of(ctx: NodeContext, value, dtype: DType, label: str) -> Value:
    return ctx.add_constant(np.asarray(value, dtype.numpy), f"{ctx.name}_{label}")


def cast_to(ctx: NodeContext, x: Value, dtype: DType) -> Value:
    return x if x.type.dtype is dtype else ctx.emit1("Cast", [x], CastAttrs(dtype))


def _require_float(ctx: NodeContext, x: Value, what: str) -> None:
    if not x.type.dtype.is_float:
        raise ModelImportError(f"{what} must be a float tensor, got {x.type}")


def _hidden_param(ctx: NodeContext, value: Value | None, hidden: int, what: str) -> None:
    if value is not None and value.type.shape != (hidden,):
        raise ModelImportError(f"{what} {value.type} must be 1-D of the hidden size {hidden}")


# activations --------------------------------------------------------------------------------

@contrib("Gelu", 1, 1)
def gelu(ctx: NodeContext) -> list[Value]:
    return ctx.result("Gelu", [ctx.require(0, "X")], GeluAttrs("none"))


def _bias_add(ctx: NodeContext, x: Value, bias: Value | None) -> Value:
    """x + bias, the bias 1-D of x's last dimension (as ONNX Runtime requires)."""
    if bias is None:
        return x
    if bias.type.rank != 1 or not x.type.rank or bias.type.shape[0] != x.type.shape[-1]:
        raise ModelImportError(f"bias {bias.type} must be 1-D of the input's last dimension (input {x.type})")
    return ctx.emit1("Add", [x, bias])


@contrib("BiasGelu", 2, 1)
def bias_gelu(ctx: NodeContext) -> list[Value]:
    x = _bias_add(ctx, ctx.require(0, "A"), ctx.require(1, "B"))
    return ctx.result("Gelu", [x], GeluAttrs("none"))


@contrib("FastGelu", 2, 1)
def fast_gelu(ctx: NodeContext) -> list[Value]:
    """0.5 x (1 + tanh(0.797885 x + 0.035677 x^3)): Gelu's tanh approximation."""
    x = _bias_add(ctx, ctx.require(0, "X"), ctx.input(1))
    return ctx.result("Gelu", [x], GeluAttrs("tanh"))


@contrib("QuickGelu", 1, 1, ("alpha",))
def quick_gelu(ctx: NodeContext) -> list[Value]:
    """x * sigmoid(alpha x), alpha 1.702 by default (1 is Silu)."""
    x = ctx.require(0, "X")
    _require_float(ctx, x, "X")
    alpha = ctx.attr_float("alpha", 1.702)
    if alpha == 1.0:
        return ctx.result("Silu", [x])
    scaled = ctx.emit1("Mul", [x, constant_of(ctx, alpha, x.type.dtype, "alpha")])
    return ctx.result("Mul", [x, ctx.emit1("Sigmoid", [scaled])])


# FusedMatMul ------------------------------------------------------------------------------------

def _fused_operand(ctx: NodeContext, x: Value, trans: bool, trans_batch: bool, what: str) -> Value:
    """transBatch moves the first dimension behind the batch dimensions (perm 1..r-2, 0, r-1);
    trans then swaps the last two (as ONNX Runtime's MatMulComputeHelper does)."""
    rank = x.type.rank
    if not (trans or trans_batch):
        return x
    if rank < 2:
        raise ModelImportError(f"trans{what} needs input {what} of rank >= 2, got {x.type}")
    perm = list(range(rank))
    if trans_batch:
        perm = list(range(1, rank - 1)) + [0, rank - 1]
    if trans:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    return ctx.emit1("Transpose", [x], TransposeAttrs(tuple(perm)))


@contrib("FusedMatMul", 2, 1, ("alpha", "transA", "transB", "transBatchA", "transBatchB"))
def fused_matmul(ctx: NodeContext) -> list[Value]:
    """alpha * (A' @ B'), A' and B' A and B transposed as the attributes ask."""
    a, b = ctx.require(0, "A"), ctx.require(1, "B")
    batch_a, batch_b = ctx.attr_bool("transBatchA", False), ctx.attr_bool("transBatchB", False)
    if (batch_a or batch_b) and not (a.type.rank == b.type.rank and a.type.rank >= 3):
        raise ModelImportError(f"transBatchA/transBatchB need A and B of equal rank >= 3, got {a.type} and {b.type}")
    a = _fused_operand(ctx, a, ctx.attr_bool("transA", False), batch_a, "A")
    b = _fused_operand(ctx, b, ctx.attr_bool("transB", False), batch_b, "B")
    alpha = ctx.attr_float("alpha", 1.0)
    if alpha == 1.0:
        return ctx.result("MatMul", [a, b])
    product = ctx.emit1("MatMul", [a, b])
    return ctx.result("Mul", [product, constant_of(ctx, alpha, product.type.dtype, "alpha")])


# layer normalizations -----------------------------------------------------------------------------

def _statistics(ctx: NodeContext, x: Value, simplified: bool) -> tuple[Value, Value]:
    """The optional mean and inv_std_var outputs ([..., 1], float32) of a normalization over the
    last axis: 1 / sqrt(var + eps), or 1 / sqrt(mean(x^2) + eps) and a zero mean when simplified
    (as ONNX Runtime writes them)."""
    epsilon = ctx.attr_float("epsilon", DEFAULT_EPSILON)
    xs = cast_to(ctx, x, DType.FLOAT32)
    reduce = ReduceAttrs((x.type.rank - 1,), keepdims=True)
    stat_shape = x.type.shape[:-1] + (1,)
    if simplified:
        mean = ctx.add_constant(np.zeros(stat_shape, np.float32), ctx.output_name(1) or f"{ctx.name}_mean")
        spread = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [xs, xs])], reduce)
    else:
        mean = ctx.emit("ReduceMean", [xs], reduce, [ctx.output_name(1) or f"{ctx.name}_mean"])[0]
        centered = ctx.emit1("Sub", [xs, mean])
        spread = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [centered, centered])], reduce)
    std = ctx.emit1("Sqrt", [ctx.emit1("Add", [spread, constant_of(ctx, epsilon, DType.FLOAT32, "epsilon")])])
    inv = ctx.emit("Reciprocal", [std], None, [ctx.output_name(2) or f"{ctx.name}_inv_std_var"])[0]
    return mean, inv


def _skip_layer_norm(ctx: NodeContext, simplified: bool) -> list[Value | None]:
    x, skip, gamma = ctx.require(0, "input"), ctx.require(1, "skip"), ctx.require(2, "gamma")
    beta = None if simplified else ctx.input(3)
    bias = ctx.input(3 if simplified else 4)
    _require_float(ctx, x, "input")
    if x.type.rank not in (2, 3):
        raise ModelImportError(f"input {x.type} must be 3-D (batch, sequence, hidden) or 2-D (tokens, hidden)")
    hidden = x.type.shape[-1]
    tail = x.type.shape[-skip.type.rank:] if skip.type.rank <= x.type.rank else None
    if tail is None or skip.type.shape[-1] != hidden or any(d not in (1, t) for d, t in zip(skip.type.shape, tail,
                                                                                          strict=True)):
        raise ModelImportError(f"skip {skip.type} does not fit input {x.type} (ONNX Runtime takes the input's "
                               "shape, (1, sequence, hidden) or (sequence, hidden))")
    for value, what in ((gamma, "gamma"), (beta, "beta"), (bias, "bias")):
        _hidden_param(ctx, value, hidden, what)
    # (input + bias) + skip: the input is usually a MatMul's output, whose bias and residual
    # Adds then both become the epilogue of one FullyConnected kernel. ONNX Runtime adds the
    # skip first; the two orders differ in the last bit at most.
    total = x if bias is None else ctx.emit1("Add", [x, bias])
    total = ctx.emit1("Add", [total, skip])
    epsilon = ctx.attr_float("epsilon", DEFAULT_EPSILON)
    if simplified:
        (y,) = ctx.result("RMSNormalization", [total, gamma], RMSNormAttrs(-1, epsilon))
    else:
        (y,) = ctx.result("LayerNormalization", [total, gamma, beta], LayerNormAttrs(-1, epsilon))
    mean = inv = None
    if ctx.output_used(1) or ctx.output_used(2):
        mean, inv = _statistics(ctx, total, simplified)
    return [y, mean, inv, total]


@contrib("SkipLayerNormalization", 5, 4, ("epsilon",))
def skip_layer_norm(ctx: NodeContext) -> list[Value | None]:
    """LayerNormalization(input + skip [+ bias]) over the last axis; optional outputs: mean,
    inv_std_var ([..., 1]) and input_skip_bias_sum."""
    return _skip_layer_norm(ctx, simplified=False)


@contrib("SkipSimplifiedLayerNormalization", 4, 4, ("epsilon",))
def skip_simplified_layer_norm(ctx: NodeContext) -> list[Value | None]:
    """RMSNormalization(input + skip [+ bias]) * gamma; the optional mean output is zeros."""
    return _skip_layer_norm(ctx, simplified=True)


@contrib("EmbedLayerNormalization", 9, 3, ("epsilon", "mask_index_type"))
def embed_layer_norm(ctx: NodeContext) -> list[Value | None]:
    """LayerNormalization(word[input_ids] + position[position_ids or 0..S-1] (+ segment[segment_ids]));
    mask_index[b] counts the ones in mask row b (zeros without a mask); embedding_sum is the
    sum before normalizing. Ids past the end of a table fail at run time (Gather's check), as
    ONNX Runtime refuses them; negative ids count from the end (Gather's semantics) where ONNX
    Runtime refuses them too."""
    ids, segment_ids = ctx.require(0, "input_ids"), ctx.input(1)
    word, position, segment = ctx.require(2, "word_embedding"), ctx.require(3, "position_embedding"), ctx.input(4)
    gamma, beta, mask, position_ids = ctx.require(5, "gamma"), ctx.require(6, "beta"), ctx.input(7), ctx.input(8)
    ctx.attr_int("mask_index_type", 1)  # only steers ONNX Runtime's shape inference
    for value, what in ((ids, "input_ids"), (segment_ids, "segment_ids"), (mask, "mask"),
                        (position_ids, "position_ids")):
        if value is not None and (value.type.dtype is not DType.INT32 or value.type.rank != 2):
            raise ModelImportError(f"{what} {value.type} must be a 2-D i32 tensor")
    if (segment_ids is None) != (segment is None):
        raise ModelImportError("segment_ids and segment_embedding go together (one is given without the other)")
    batch, seq = ids.type.shape
    _require_float(ctx, word, "word_embedding")
    hidden = word.type.shape[-1]
    for table, what in ((word, "word_embedding"), (position, "position_embedding"), (segment, "segment_embedding")):
        if table is not None and (table.type.rank != 2 or table.type.shape[1] != hidden):
            raise ModelImportError(f"{what} {table.type} must be 2-D with {hidden} columns")
    _hidden_param(ctx, gamma, hidden, "gamma")
    _hidden_param(ctx, beta, hidden, "beta")
    for value, what in ((segment_ids, "segment_ids"), (mask, "mask")):
        if value is not None and value.type.shape != (batch, seq):
            raise ModelImportError(f"{what} {value.type} must have the shape of input_ids [{batch}, {seq}]")
    if position_ids is not None and position_ids.type.shape not in ((batch, seq), (1, seq)):
        raise ModelImportError(f"position_ids {position_ids.type} must be [{batch}, {seq}] or [1, {seq}]")
    total = ctx.emit1("Gather", [word, ids], AxisAttrs(0))
    if position_ids is not None:
        positions = ctx.emit1("Gather", [position, position_ids], AxisAttrs(0))
    else:
        if seq > position.type.shape[0]:
            raise ModelImportError(f"sequence length {seq} exceeds the {position.type.shape[0]} positions of "
                                   "position_embedding")
        positions = ctx.emit1("Slice", [position], SliceAttrs((0,), (0,), (seq,), (1,)))
    total = ctx.emit1("Add", [total, positions])
    if segment is not None and segment_ids is not None:
        total = ctx.emit1("Add", [total, ctx.emit1("Gather", [segment, segment_ids], AxisAttrs(0))])
    attrs = LayerNormAttrs(-1, ctx.attr_float("epsilon", DEFAULT_EPSILON))
    (y,) = ctx.result("LayerNormalization", [total, gamma, beta], attrs)
    mask_index: Value | None = None
    if ctx.output_used(1):
        if mask is None:
            mask_index = ctx.constant_result(np.zeros((batch,), np.int32), 1)
        else:
            ones = ctx.emit1("Equal", [mask, constant_of(ctx, 1, DType.INT32, "one")])
            counts = ctx.emit1("Cast", [ones], CastAttrs(DType.INT32))
            mask_index = ctx.emit("ReduceSum", [counts], ReduceAttrs((1,), keepdims=False),
                                  [ctx.output_name(1)])[0]
    return [y, mask_index, total]


# Attention ------------------------------------------------------------------------------------

def _columns(ctx: NodeContext, x: Value, start: int, end: int) -> Value:
    axis = x.type.rank - 1
    if (start, end) == (0, x.type.shape[axis]):
        return x
    return ctx.emit1("Slice", [x], SliceAttrs((axis,), (start,), (end,), (1,)))


def _attention_mask(ctx: NodeContext, mask: Value, batch: int, seq: int, total: int, dtype: DType,
                    filter_value: float) -> Value:
    """mask_index as an additive mask [B, 1, S or 1, T] (0 where attended, mask_filter_value
    where not), for each form ONNX Runtime's CPU kernel reads: 1-D end positions [B] (and start
    positions [2B]), a raw 0/1 mask [B, T] or [B, S, T]."""
    if mask.type.dtype is not DType.INT32:
        raise ModelImportError(f"mask_index {mask.type} must be i32")
    shape = mask.type.shape
    zero, masked = constant_of(ctx, 0.0, dtype, "zero"), constant_of(ctx, filter_value, dtype, "mask_filter")
    if shape in ((batch,), (2 * batch,)):
        positions = constant_of(ctx, np.arange(total).reshape(1, total), DType.INT32, "positions")

        def bound(start: int) -> Value:
            part = ctx.emit1("Slice", [mask], SliceAttrs((0,), (start,), (start + batch,), (1,)))
            return ctx.emit1("Reshape", [part], ReshapeAttrs((batch, 1)))

        outside = ctx.emit1("GreaterOrEqual", [positions, bound(0)])  # right padding: j >= end
        if shape == (2 * batch,):  # left padding too: j < start
            outside = ctx.emit1("Or", [outside, ctx.emit1("Less", [positions, bound(batch)])])
        additive = ctx.emit1("Where", [outside, masked, zero])
        return ctx.emit1("Reshape", [additive], ReshapeAttrs((batch, 1, 1, total)))
    if shape == (batch, total):
        kept = ctx.emit1("Greater", [mask, constant_of(ctx, 0, DType.INT32, "zero_i")])
        return ctx.emit1("Reshape", [ctx.emit1("Where", [kept, zero, masked])], ReshapeAttrs((batch, 1, 1, total)))
    if shape == (batch, seq, total):
        kept = ctx.emit1("Greater", [mask, constant_of(ctx, 0, DType.INT32, "zero_i")])
        return ctx.emit1("Reshape", [ctx.emit1("Where", [kept, zero, masked])], ReshapeAttrs((batch, 1, seq, total)))
    if len(shape) == 4:
        raise UnsupportedError(f"mask_index {mask.type}: the 4-D (Megatron) mask form is not supported "
                               "(ONNX Runtime's CPU kernel does not implement it either)")
    if shape == (3 * batch + 2,):
        raise UnsupportedError(f"mask_index {mask.type}: the (3 * batch + 2) index form is not supported "
                               "(ONNX Runtime implements it on GPUs only)")
    raise ModelImportError(f"mask_index {mask.type} fits none of the forms [{batch}], [{2 * batch}], "
                           f"[{batch}, {total}] or [{batch}, {seq}, {total}] (batch {batch}, sequence {seq}, "
                           f"total sequence {total})")


@contrib("Attention", 7, 2, ("num_heads", "unidirectional", "qkv_hidden_sizes", "past_present_share_buffer",
                             "do_rotary", "rotary_embedding_dim", "mask_filter_value", "scale"))
def attention(ctx: NodeContext) -> list[Value | None]:
    """Self-attention with packed Q/K/V projection weights: input @ weights + bias split into
    Q, K, V, then Ember's Attention (3-D, num_heads heads) with mask_index turned into an
    additive mask, attention_bias added to it, unidirectional as the causal mask, past [2, B, N,
    P, H] split into past key and value and present stacked back."""
    x, weights, bias = ctx.require(0, "input"), ctx.require(1, "weights"), ctx.input(2)
    mask, past, attention_bias = ctx.input(3), ctx.input(4), ctx.input(5)
    if ctx.input(6) is not None:
        raise UnsupportedError("input 6 (past_sequence_length) is not supported: it belongs to "
                               "past_present_share_buffer, which Ember does not support")
    if ctx.attr_bool("past_present_share_buffer", False):
        raise UnsupportedError("past_present_share_buffer=1 is not supported (past and present would share "
                               "a buffer of the maximum sequence length)")
    if ctx.attr_bool("do_rotary", False):
        raise UnsupportedError("do_rotary=1 (rotary position embedding inside Attention) is not supported")
    ctx.attr_int("rotary_embedding_dim", 0)  # read only with do_rotary
    heads = ctx.attr_int("num_heads")
    _require_float(ctx, x, "input")
    if x.type.rank != 3 or weights.type.rank != 2 or weights.type.shape[0] != x.type.shape[2]:
        raise ModelImportError(f"input {x.type} must be 3-D (batch, sequence, input_hidden) and weights "
                               f"{weights.type} 2-D (input_hidden, q + k + v hidden)")
    batch, seq, _ = x.type.shape
    packed = weights.type.shape[1]
    sizes = ctx.attr_ints("qkv_hidden_sizes", None)
    if sizes is None:
        if packed % 3:
            raise ModelImportError(f"weights {weights.type}: without qkv_hidden_sizes the second dimension must be "
                                   "divisible by 3")
        sizes = (packed // 3,) * 3
    if len(sizes) != 3 or sum(sizes) != packed or sizes[0] != sizes[1] or heads < 1 \
            or any(s <= 0 or s % heads for s in sizes):
        raise ModelImportError(f"qkv_hidden_sizes {list(sizes)} must be three positive multiples of num_heads "
                               f"{heads} summing to {packed}, with Q and K equal")
    if bias is not None and bias.type.shape != (packed,):
        raise ModelImportError(f"bias {bias.type} must be 1-D of {packed}")
    head, v_head = sizes[0] // heads, sizes[2] // heads

    projections = []
    start = 0
    for size in sizes:
        projection = ctx.emit1("MatMul", [x, _columns(ctx, weights, start, start + size)])
        if bias is not None:
            projection = ctx.emit1("Add", [projection, _columns(ctx, bias, start, start + size)])
        projections.append(projection)
        start += size
    q, k, v = projections

    past_key = past_value = None
    past_len = 0
    if past is not None:
        if head != v_head:
            raise ModelImportError("past needs Q, K and V of equal hidden sizes")
        if past.type.rank != 5 or past.type.shape[:3] != (2, batch, heads) or past.type.shape[4] != head:
            raise ModelImportError(f"past {past.type} must be [2, {batch}, {heads}, past_sequence, {head}]")
        past_len = past.type.shape[3]
        cache = past.type.shape[1:]
        past_key = ctx.reshape(ctx.emit1("Slice", [past], SliceAttrs((0,), (0,), (1,), (1,))), cache)
        past_value = ctx.reshape(ctx.emit1("Slice", [past], SliceAttrs((0,), (1,), (2,), (1,))), cache)
    total = past_len + seq
    dtype = x.type.dtype
    additive = None
    if mask is not None:
        additive = _attention_mask(ctx, mask, batch, seq, total, dtype, ctx.attr_float("mask_filter_value", -10000.0))
    if attention_bias is not None:
        b_shape = attention_bias.type.shape
        if attention_bias.type.rank != 4 or b_shape[0] not in (1, batch) or b_shape[1] not in (1, heads) \
                or b_shape[2:] != (seq, total):
            raise ModelImportError(f"attention_bias {attention_bias.type} must be [{batch} or 1, {heads} or 1, "
                                   f"{seq}, {total}]")
        additive = attention_bias if additive is None else ctx.emit1("Add", [additive, attention_bias])
    scale = ctx.attr_float("scale", 0.0)
    attrs = AttentionAttrs(is_causal=ctx.attr_bool("unidirectional", False) and seq > 1, q_num_heads=heads,
                           kv_num_heads=heads, scale=scale if scale else None)
    outputs = ctx.emit("Attention", [q, k, v, additive, past_key, past_value], attrs,
                       [ctx.output_name(0) or f"{ctx.name}_y", f"{ctx.name}_present_key",
                        f"{ctx.name}_present_value", f"{ctx.name}_qk"])
    present = None
    if ctx.output_used(1):
        stacked = (1, batch, heads, total, head)
        parts = [ctx.reshape(outputs[1], stacked), ctx.reshape(outputs[2], stacked)]
        present = ctx.emit("Concat", parts, AxisAttrs(0), [ctx.output_name(1)])[0]
    return [outputs[0], present]
