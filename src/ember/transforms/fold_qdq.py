"""Folding ONNX QDQ patterns into Ember's integer ops, so the cpu backend's integer kernels run
them (models from onnxruntime.quantization's QDQ format, and Ember's own quantizer, quant/).

Only folds that are exact up to the rounding ONNX Runtime itself does when it fuses the same
patterns: the float graph DQ -> Conv -> Q computes with dequantized values in float32 and
rounds once at Q; the integer op accumulates exactly in int32 and rounds once when it
requantizes by x_scale * w_scale / y_scale. Anything else (a per-row activation scale, a
blocked scale, Gemm with alpha/beta != 1 or transA, a result read elsewhere) stays float."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.graph import Node, Value
from ember.ops.elementwise import CastAttrs, ClipAttrs
from ember.ops.nn import PoolAttrs
from ember.ops.quant import QuantizeAttrs, quantize
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import constant_data, producer
from ember.types import DType

_BYTES = (DType.UINT8, DType.INT8)
_INT32_MAX = 2**31 - 1


@dataclass
class _Dq:
    """A DequantizeLinear's quantized input and its parameters (zero None: zero)."""

    q: Value
    scale: np.ndarray
    zero: np.ndarray | None
    axis: int


def _dequantized(value: Value | None, constant_input: bool) -> _Dq | None:
    """`value` = DequantizeLinear(q, scale, zero) with constant, unblocked parameters, q i8/u8
    (i32 for a bias) and a float32 result; q a constant when `constant_input`."""
    node = producer(value, "DequantizeLinear")
    if node is None or node.attrs.block_size or node.attrs.to is not DType.FLOAT32:
        return None
    q = node.input(0)
    scale, zero = constant_data(node.inputs[1]), constant_data(node.inputs[2])
    if scale is None or (node.inputs[2] is not None and zero is None):
        return None
    if constant_input and constant_data(q) is None:
        return None
    axis = node.attrs.axis % max(q.type.rank, 1)
    return _Dq(q, scale.astype(np.float32), zero, axis)


def _per_tensor(dq: _Dq | None) -> bool:
    return dq is not None and dq.scale.size == 1 and (dq.zero is None or dq.zero.size == 1) \
        and dq.q.type.dtype in _BYTES


def _per_channel(dq: _Dq | None, axis: int, count: int) -> np.ndarray | None:
    """The scale as a float32 vector of `count` (one per channel on `axis`, or a broadcast
    per-tensor one), or None when the parameters do not fit."""
    if dq is None or dq.q.type.dtype not in _BYTES:
        return None
    for p in (dq.scale, dq.zero):
        if p is not None and p.size != 1 and (p.size != count or dq.axis != axis):
            return None
    return np.broadcast_to(dq.scale.reshape(-1), (count,)).astype(np.float32)


def _zero(rw: Rewriter, dq: _Dq, name: str) -> Value:
    """The zero point operand the integer ops require (a zero constant when absent)."""
    if dq.zero is not None:
        return rw.constant(dq.zero.astype(dq.q.type.dtype.numpy), name)
    return rw.constant(np.zeros((), dq.q.type.dtype.numpy), name)


@dataclass
class _Output:
    """y_q = QuantizeLinear(act(core)) with a per-tensor y scale/zero, act a Relu or Clip
    (possibly none): what replaces q, given the integer core result."""

    q: Node
    core: Value
    scale: np.ndarray
    zero: np.ndarray
    low: int
    high: int


def _quantized_output(rw: Rewriter, q: Node) -> _Output | None:
    scale, zero = constant_data(q.inputs[1]), constant_data(q.inputs[2])
    to = q.attrs.to
    if to not in _BYTES or scale is None or scale.size != 1 or (q.inputs[2] is not None and (
            zero is None or zero.size != 1)):
        return None
    zero = np.zeros((), to.numpy) if zero is None else zero.reshape(()).astype(to.numpy)
    info = np.iinfo(to.numpy)
    low, high = int(info.min), int(info.max)
    core = q.input(0)
    act = producer(core, "Relu", "Clip")
    if act is not None and rw.has_one_use(core):
        # Q is monotone, so Q(clip(v, lo, hi)) = clip(Q(v), Q(lo), Q(hi)) exactly.
        lo, hi = (0.0, None) if act.op == "Relu" else (act.attrs.min, act.attrs.max)
        attrs = QuantizeAttrs(to)

        def qb(v: float) -> int:
            return int(quantize(np.asarray(v, np.float32), scale.reshape(()).astype(np.float32), zero, attrs))
        low = max(low, qb(lo)) if lo is not None else low
        high = min(high, qb(hi)) if hi is not None else high
        core = act.input(0)
    return _Output(q, core, scale.reshape(()).astype(np.float32), zero, low, high)


def _clamped(rw: Rewriter, out: _Output, y: Value) -> Value:
    info = np.iinfo(out.zero.dtype)
    if out.low == int(info.min) and out.high == int(info.max):
        return y
    lo = float(out.low) if out.low != int(info.min) else None
    hi = float(out.high) if out.high != int(info.max) else None
    return rw.add("Clip", y, attrs=ClipAttrs(lo, hi))


def _bias_int32(bias: Value | None, acc_scale: np.ndarray) -> np.ndarray | None | bool:
    """The bias in accumulator units (scale x_scale * w_scale per channel): a DQ'd int32 bias
    rescaled (exactly itself when its scale is the accumulator's, as quantizers write it), or a
    float constant rounded as quantizers round it. False when it cannot be folded."""
    if bias is None:
        return None
    dq = _dequantized(bias, constant_input=True)
    data = constant_data(bias)
    q_data = constant_data(dq.q) if dq is not None else None
    if dq is not None and q_data is not None and dq.q.type.dtype is DType.INT32 and (
            dq.zero is None or not np.any(dq.zero)):
        real = q_data.astype(np.float64) * dq.scale.reshape(-1).astype(np.float64)
    elif data is not None and bias.type.dtype is DType.FLOAT32:
        real = data.astype(np.float64).reshape(-1)
    else:
        return False
    if real.size not in (1, acc_scale.size):
        return False
    b = np.rint(np.broadcast_to(real, acc_scale.shape) / acc_scale.astype(np.float64))
    if np.any(np.abs(b) > _INT32_MAX // 2):
        return False
    return b.astype(np.int32)


@pattern("QuantizeLinear")
def fold_conv(rw: Rewriter, q: Node) -> Value | None:
    out = _quantized_output(rw, q)
    if out is None:
        return None
    conv = producer(out.core, "Conv")
    if conv is None or not rw.has_one_use(out.core) or conv.input(0).type.rank != 4:
        return None
    x, w = _dequantized(conv.input(0), False), _dequantized(conv.input(1), True)
    channels = conv.input(1).type.shape[0]
    w_scale = _per_channel(w, 0, channels)
    if not _per_tensor(x) or w is None or w_scale is None:
        return None
    assert x is not None
    acc_scale = x.scale.reshape(()).astype(np.float32) * w_scale
    bias = _bias_int32(conv.inputs[2], acc_scale)
    if bias is False:
        return None
    name = conv.name
    w_scale_v = rw.constant(w_scale if w.scale.size > 1 else w.scale.reshape(()), f"{name}.w_scale")
    w_zero = _zero(rw, w, f"{name}.w_zero")
    if w.zero is not None and w.zero.size > 1:
        w_zero = rw.constant(w.zero.reshape(-1).astype(w.q.type.dtype.numpy), f"{name}.w_zero")
    operands = [x.q, rw.constant(x.scale.reshape(()), f"{name}.x_scale"), _zero(rw, x, f"{name}.x_zero"),
                w.q, w_scale_v, w_zero, rw.constant(out.scale, f"{name}.y_scale"),
                rw.constant(out.zero, f"{name}.y_zero"),
                None if bias is None else rw.constant(np.asarray(bias), f"{name}.b_q")]
    y = rw.add("QLinearConv", *operands, attrs=conv.attrs, name=name)
    return _clamped(rw, out, y)


def _dense(rw: Rewriter, core: Value) -> tuple[_Dq, _Dq, np.ndarray, Value | None, str] | None:
    """core = MatMul(DQ(a), DQ(B)) [+ bias] or Gemm(DQ(a), DQ(B)[, bias]) with a constant 2-D B:
    (a, B as [K, N] with its per-column parameters, the bias operand, the name)."""
    bias: Value | None = None
    node = producer(core, "MatMul", "Gemm", "Add")
    if node is not None and node.op == "Add":
        for i in (0, 1):
            mm = producer(node.inputs[i], "MatMul")
            other = node.inputs[1 - i]
            if mm is not None and rw.has_one_use(mm.outputs[0]) and other is not None \
                    and other.type.rank <= 1 and (constant_data(other) is not None or
                                                  _dequantized(other, True) is not None):
                node, bias = mm, other
                break
        else:
            return None
    if node is None:
        return None
    if node.op == "Gemm":
        attrs = node.attrs
        if attrs.transA or attrs.alpha != 1.0 or (node.inputs[2] is not None and attrs.beta != 1.0):
            return None
        bias = node.inputs[2]
        if bias is not None and bias.type.rank > 1 and not (bias.type.rank == 2 and bias.type.shape[0] == 1):
            return None
    a, b = _dequantized(node.input(0), False), _dequantized(node.input(1), True)
    if not _per_tensor(a) or b is None or b.q.type.rank != 2 or b.q.type.dtype not in _BYTES:
        return None
    assert a is not None
    trans = node.op == "Gemm" and node.attrs.transB
    n = b.q.type.shape[0] if trans else b.q.type.shape[1]
    scale = _per_channel(b, 0 if trans else 1, n)
    if scale is None:
        return None
    if trans:  # B as [K, N]: its per-column parameters stay per column
        b_data = constant_data(b.q)
        assert b_data is not None  # _dequantized(.., True) checked it
        data = np.ascontiguousarray(b_data.T)
        b = _Dq(rw.constant(data, f"{node.name}.b_t"), b.scale, b.zero, 1)
    return a, b, scale, bias, node.name


@pattern("QuantizeLinear")
def fold_dense(rw: Rewriter, q: Node) -> Value | None:
    """Without a bias: QLinearMatMul. With one: MatMulInteger, then the accumulator
    dequantized per column and the bias added in float (QLinearMatMul has no bias operand;
    the float add is what the QDQ graph computes), then requantized by the same Q."""
    out = _quantized_output(rw, q)
    if out is None or not rw.has_one_use(out.core):
        return None
    found = _dense(rw, out.core)
    if found is None:
        return None
    a, b, scale, bias, name = found
    info = np.iinfo(out.zero.dtype)
    if bias is not None and (out.low != int(info.min) or out.high != int(info.max)):
        return None  # an activation between the bias and Q: rare in QDQ graphs, left float
    per_col = b.scale.size > 1
    b_scale = rw.constant(scale if per_col else b.scale.reshape(()), f"{name}.b_scale")
    b_zero = _zero(rw, b, f"{name}.b_zero") if b.zero is None or b.zero.size == 1 else \
        rw.constant(b.zero.reshape(-1).astype(b.q.type.dtype.numpy), f"{name}.b_zero")
    a_zero = _zero(rw, a, f"{name}.a_zero")
    if bias is None:
        y = rw.add("QLinearMatMul", a.q, rw.constant(a.scale.reshape(()), f"{name}.a_scale"), a_zero, b.q, b_scale,
                   b_zero, rw.constant(out.scale, f"{name}.y_scale"), rw.constant(out.zero, f"{name}.y_zero"),
                   name=name)
        return _clamped(rw, out, y)
    acc = rw.add("MatMulInteger", a.q, b.q, a_zero, b_zero, name=name)
    acc_scale = (a.scale.reshape(()).astype(np.float32) * scale).astype(np.float32)
    real = rw.add("DequantizeLinear", acc, rw.constant(acc_scale, f"{name}.acc_scale"), None,
                  attrs=QuantizeAttrs(DType.FLOAT32, axis=-1), name=f"{name}.dq")
    summed = rw.add("Add", real, bias, name=f"{name}.bias")
    return rw.add("QuantizeLinear", summed, q.inputs[1], q.inputs[2], attrs=q.attrs, name=q.name)


@pattern("QuantizeLinear")
def drop_requantize(rw: Rewriter, q: Node) -> Value | None:
    """Q(DQ(x)) with the same per-tensor parameters and type is x (exactly: every integer
    dequantizes to a value that quantizes back to itself)."""
    dq = _dequantized(q.input(0), False)
    scale, zero = constant_data(q.inputs[1]), constant_data(q.inputs[2])
    if dq is None or not _per_tensor(dq) or scale is None or scale.size != 1 or dq.q.type.dtype is not q.attrs.to:
        return None
    zq = 0 if zero is None else int(zero.reshape(-1)[0])
    zd = 0 if dq.zero is None else int(dq.zero.reshape(-1)[0])
    if zq != zd or np.float32(scale.reshape(-1)[0]) != np.float32(dq.scale.reshape(-1)[0]):
        return None
    return dq.q


def _real_cell_in_every_window(attrs: PoolAttrs, spatial: tuple[int, ...]) -> bool:
    """Whether every window of a pool covers at least one input cell (never only padding):
    then its max over integers, which pad with the type's minimum, is the max over reals."""
    for i, size in enumerate(spatial):
        k, s, d = attrs.kernel[i], attrs.strides[i], attrs.dilations[i]
        begin, end = attrs.pads[i], attrs.pads[i + len(spatial)]
        extent = (k - 1) * d + 1
        total = size + begin + end - extent
        count = (-(-total // s) if attrs.ceil_mode else total // s) + 1
        for w in range(count):
            if not any(0 <= w * s - begin + j * d < size for j in range(k)):
                return False
    return True


@pattern("MaxPool", "Reshape", "Transpose")
def sink_dequantize(rw: Rewriter, node: Node) -> Value | None:
    """X(DQ(q)) -> DQ(X(q)) for a per-tensor DQ: moving data commutes with an elementwise map,
    and so does a max with an increasing one (a positive scale), so the pool runs on the
    integers and what reads the result can stay integer."""
    dq = _dequantized(node.input(0), False)
    if not _per_tensor(dq) or len(node.outputs) != 1:
        return None
    assert dq is not None
    if node.op == "MaxPool" and (float(dq.scale.reshape(-1)[0]) <= 0.0 or not np.isfinite(dq.scale).all() or
                                 not _real_cell_in_every_window(node.attrs, dq.q.type.shape[2:])):
        return None
    moved = rw.add(node.op, dq.q, attrs=node.attrs, name=f"{node.name}.q")
    dq_node = producer(node.input(0), "DequantizeLinear")
    assert dq_node is not None
    return rw.add("DequantizeLinear", moved, dq_node.inputs[1], dq_node.inputs[2], attrs=dq_node.attrs, name=node.name)


# Elementwise ops whose operands and results the expanded Q/DQ below meet inside one fused loop.
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Relu", "Clip", "Max", "Min"})


def _expanded_dequantize(rw: Rewriter, dq: _Dq, name: str) -> Value:
    """(float32(q) - zero) * scale: DequantizeLinear's arithmetic as elementwise ops."""
    real = rw.add("Cast", dq.q, attrs=CastAttrs(DType.FLOAT32), name=f"{name}.f")
    if dq.zero is not None and np.any(dq.zero):
        real = rw.add("Sub", real, rw.constant(dq.zero.reshape(()).astype(np.float32), f"{name}.zf"), name=f"{name}.c")
    return rw.add("Mul", real, rw.constant(dq.scale.reshape(()), f"{name}.s"), name=name)


def _expanded_quantize(rw: Rewriter, value: Value, scale: np.ndarray, zero: np.ndarray, to: DType,
                       name: str) -> Value:
    """QuantizeLinear's arithmetic as elementwise ops: round(v / scale) (half to even, in
    float32) + zero, saturated, cast. The float32 sum is exact below 2**24; above, it
    saturates to the same bound as the interpreter's float64 sum."""
    info = np.iinfo(to.numpy)
    q = rw.add("Round", rw.add("Div", value, rw.constant(scale.reshape(()).astype(np.float32), f"{name}.s"),
                               name=f"{name}.d"), name=f"{name}.r")
    if np.any(zero):
        q = rw.add("Add", q, rw.constant(zero.reshape(()).astype(np.float32), f"{name}.zf"), name=f"{name}.z")
    q = rw.add("Clip", q, attrs=ClipAttrs(float(info.min), float(info.max)), name=f"{name}.c")
    return rw.add("Cast", q, attrs=CastAttrs(to), name=name)


def _per_tensor_q(q: Node) -> tuple[np.ndarray, np.ndarray, DType] | None:
    scale, zero = constant_data(q.inputs[1]), constant_data(q.inputs[2])
    to = q.attrs.to
    if to not in _BYTES or scale is None or scale.size != 1 or q.input(0).type.dtype is not DType.FLOAT32 or (
            q.inputs[2] is not None and (zero is None or zero.size != 1)):
        return None
    return scale.astype(np.float32), (np.zeros((), to.numpy) if zero is None else zero.astype(to.numpy)), to


@pattern("DequantizeLinear")
def expand_dequantize(rw: Rewriter, node: Node) -> Value | None:
    """A per-tensor DQ of a computed u8/i8 tensor read only by elementwise ops becomes its
    arithmetic, which the backend's elementwise fusion computes in the readers' loop: the
    float tensor never reaches memory."""
    dq = _dequantized(node.outputs[0], False)
    users = rw.users(node.outputs[0])
    if not _per_tensor(dq) or constant_data(node.inputs[0]) is not None or not users or rw.is_output(node.outputs[0]) \
            or any(user.op not in ELEMENTWISE for user, _ in users):
        return None
    assert dq is not None
    return _expanded_dequantize(rw, dq, node.name)


@pattern("QuantizeLinear")
def expand_quantize(rw: Rewriter, q: Node) -> Value | None:
    """A per-tensor Q of an elementwise result, or of a per-tensor DQ (a requantize), becomes
    its arithmetic (the DQ's too), so the elementwise loop writes the 8-bit result."""
    params = _per_tensor_q(q)
    source = q.input(0)
    if params is None:
        return None
    dq = _dequantized(source, False)
    if _per_tensor(dq) and constant_data(source) is None:
        assert dq is not None
        source = _expanded_dequantize(rw, dq, f"{q.name}.dq")
    elif producer(source, *ELEMENTWISE) is None:
        return None
    return _expanded_quantize(rw, source, *params, q.name)


@register_pass
class FoldQdq(RewritePass):
    """Preconditions: none (it only matches QDQ islands; run it before constant-fold, which
    would fold the weights' DequantizeLinear away). Q = QuantizeLinear to u8/i8 with a constant
    per-tensor scale and zero point; DQ(x) per tensor with constant parameters; DQ(W) of a
    constant i8/u8 weight, per tensor or per output channel (Conv axis 0, MatMul axis 1, Gemm
    transB axis 0); act = Relu or Clip, folded exactly as a Clip of the integer result to
    [Q(lo), Q(hi)] (dropped when that is the whole type, as with a zero point of 0).
    1. Q(act(Conv(DQ(x), DQ(W), b))) -> QLinearConv(x, .., W, .., b_q) [Clip], 2-D convs;
       b = DQ(int32) rescaled to x_scale * w_scale (itself when quantizers wrote it so) or a
       float constant rounded to that scale.
    2. Q(act(MatMul(DQ(a), DQ(B))) / Gemm without bias) -> QLinearMatMul [Clip].
    3. Q(MatMul(DQ(a), DQ(B)) + bias) / Q(Gemm(.., bias)) -> Q(DQ(MatMulInteger(a, B),
       a_scale * b_scale per column) + bias).
    4. Q(DQ(x)) with the same parameters and type -> x.
    5. MaxPool/Reshape/Transpose(DQ(q)) -> DQ(op(q)) for a per-tensor DQ (MaxPool: a positive
       scale and no window entirely in padding), so pools and reshapes run on the integers.
    6. What is left between integer ops, run by elementwise ops, becomes exact arithmetic that
       the backend fuses into one loop over the 8-bit tensors (the residual Add of two
       quantized tensors, its Relu and its Q): a per-tensor DQ of a computed tensor read only by
       elementwise ops (Add, Sub, Mul, Relu, Clip, Max, Min) -> Mul(Sub(Cast(q), zero), scale);
       a per-tensor Q of an elementwise result or of another per-tensor DQ (a requantize) ->
       Cast(Clip(Add(Round(Div(v, scale)), zero))). Same float32 operations as the two ops."""

    name = "fold-qdq"
    patterns = (drop_requantize, fold_conv, fold_dense, sink_dequantize, expand_dequantize, expand_quantize)
