"""Calibration (a profile's ranges -> scales and zero points) and the quantize rewrite that
inserts QuantizeLinear / DequantizeLinear around Conv, MatMul and Gemm, in the QDQ form ONNX
Runtime's quantizer writes, so that the `fold-qdq` pass of the optimizer turns each island into
QLinearConv / QLinearMatMul on the cpu backend's integer (VNNI u8 x s8) kernels.

Schemas (schemas.py): asymmetric uint8 activations (the default, ONNX Runtime's U8S8), symmetric
int8, symmetric with uint8 activations, power-of-2 scales; weights symmetric int8 per output
channel, biases int32 at scale x_scale * w_scale. Calibration methods (calibrate.py): "minmax",
"percentile" and "entropy" (KL divergence over the profile's histogram).

What stays float, by design: only Conv / MatMul / Gemm whose weight (B) is a constant are
quantized, so a MatMul of two activations (attention's Q.K^T and scores.V), Softmax and its
inputs, and the additive attention-mask arithmetic (x + mask, with mask values like -1e9 or
-3.4e38 that would wreck a min/max range) are never quantized; the keep-float list excludes
more by op type or node name. A dense (MatMul / Gemm) result is requantized only where every
reader takes it as a quantized input (the next dense layer); one read in float (a transformer's
head reshapes, residual Add, GELU, a graph output) is MatMulInteger(Q(x), W) dequantized per
column plus the bias in float: no rounding of the result, so a real encoder's outlier features
survive (paraphrase-MiniLM-L3-v2: cosine 0.94 requantized, 0.996 so; bench/quant_bert.py).
Convolutions always requantize (the next layer, or the residual Add, reads integers). Ranges
are those of the float graph's tensors, so the profile must be taken on the graph being
quantized (checked by hash).

May import graph/, ops/, types and support/."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ember.graph import Graph, Node, Value
from ember.graph.ir import Constant
from ember.ops.quant import QuantizeAttrs
from ember.ops.registry import OPS
from ember.quant.calibrate import METHODS, activation_range
from ember.quant.integer_ops import quantize_residual_adds
from ember.quant.profile import Profile, ProfileError
from ember.quant.schemas import SCHEMAS, Schema, get_schema
from ember.support.errors import EmberError
from ember.types import DType

QUANTIZABLE = ("Conv", "MatMul", "Gemm")


def uint8_params(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Asymmetric uint8 (scale, zero point) for [lo, hi], widened to hold 0."""
    return SCHEMAS["asymmetric"].activation(lo, hi)


def int8_per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights per channel on `axis`: (quantized, scales)."""
    return SCHEMAS["asymmetric"].weights(w, axis)


class _Inserter:
    def __init__(self, graph: Graph, profile: Profile, schema: Schema, method: str, percentile: float) -> None:
        self.graph, self.profile, self.schema = graph, profile, schema
        self.method, self.percentile = method, percentile
        self.dequantized: dict[Value, Value] = {}
        self.quantized: dict[Value, tuple[Value, Value]] = {}  # value -> (its Q's result, zero point)
        self.params: dict[Value, tuple[np.ndarray, np.ndarray]] = {}

    def qparams(self, value: Value) -> tuple[np.ndarray, np.ndarray]:
        if value not in self.params:
            stats = self.profile.tensors.get(value.name)
            if stats is None:
                raise ProfileError(f"the profile has no range for '{value.name}'")
            if stats.nonfinite or not (np.isfinite(stats.min) and np.isfinite(stats.max)):
                raise ProfileError(f"'{value.name}' held {stats.nonfinite} infinite or NaN values in calibration "
                                   "(and no finite range): keep its consumer float (keep_float)")
            levels = self.schema.levels(stats.min)
            self.params[value] = self.schema.activation(*activation_range(stats, self.method, self.percentile, levels))
        return self.params[value]

    def qdq(self, value: Value) -> Value:
        """DQ(Q(value)) (one pair per value), with the value's calibrated parameters."""
        if value not in self.dequantized:
            scale, zero = self.qparams(value)
            g = self.graph
            s = g.add_constant(scale, f"{value.name}.scale")
            z = g.add_constant(zero, f"{value.name}.zero")
            to = DType.from_numpy(zero.dtype)
            q = g.add("QuantizeLinear", value, s, z, attrs=QuantizeAttrs(to), name=f"{value.name}.q")
            dq = g.add("DequantizeLinear", q, s, z, attrs=QuantizeAttrs(DType.FLOAT32), name=f"{value.name}.dq")
            self.dequantized[value] = self.dequantized[dq] = dq  # an island's input may be the last one's output
            self.quantized[value] = self.quantized[dq] = (q, z)
            self.params[dq] = (scale, zero)
        return self.dequantized[value]

    def weight(self, node: Node, w: Constant, axis: int) -> tuple[Value, np.ndarray]:
        q, scale = self.schema.weights(w.data, axis)
        g = self.graph
        dq = g.add("DequantizeLinear", g.add_constant(q, f"{node.name}.w_q"), g.add_constant(scale, f"{node.name}.w_s"),
                   None, attrs=QuantizeAttrs(DType.FLOAT32, axis=axis), name=f"{node.name}.w_dq")
        return dq, scale

    def integer_dense(self, node: Node, x: Value, w: Constant, axis: int) -> Value:
        """MatMul / Gemm as MatMulInteger(Q(x), W_q) dequantized per column (scale x_scale *
        w_scale), plus a Gemm's bias in float: the result stays float, unrounded."""
        g = self.graph
        self.qdq(x)
        q, zero = self.quantized[x]
        x_scale, _ = self.qparams(x)
        w_q, w_scale = self.schema.weights(w.data, axis)
        if axis == 0:  # Gemm transB: B as [K, N]
            w_q = np.ascontiguousarray(w_q.T)
        acc = g.add("MatMulInteger", q, g.add_constant(w_q, f"{node.name}.w_q"), zero,
                    g.add_constant(np.zeros((), np.int8), f"{node.name}.w_zero"), name=f"{node.name}.int")
        real = g.add("DequantizeLinear", acc, g.add_constant(self.schema.bias_scale(x_scale, w_scale),
                                                             f"{node.name}.acc_scale"),
                     None, attrs=QuantizeAttrs(DType.FLOAT32, axis=-1), name=f"{node.name}.dq")
        bias = node.inputs[2] if node.op == "Gemm" and len(node.inputs) > 2 else None
        return real if bias is None else g.add("Add", real, bias, name=f"{node.name}.bias")

    def bias(self, node: Node, b: Constant, acc_scale: np.ndarray) -> Value:
        g = self.graph
        data = np.broadcast_to(b.data.astype(np.float64).reshape(-1), acc_scale.shape)
        q = np.clip(np.rint(data / acc_scale.astype(np.float64)), -(2**31) + 1, 2**31 - 1).astype(np.int32)
        return g.add("DequantizeLinear", g.add_constant(q, f"{node.name}.b_q"),
                     g.add_constant(acc_scale.astype(np.float32), f"{node.name}.b_s"), None,
                     attrs=QuantizeAttrs(DType.FLOAT32, axis=0), name=f"{node.name}.b_dq")


def _output_of(graph: Graph, node: Node, users: dict, schema: Schema) -> Value:
    """The value to quantize after `node`: through a lone Relu/Clip (the fold keeps them
    exact) and, for a MatMul, a lone bias Add of a constant. Not through the Relu/Clip after a
    dense node's bias when activations are int8: fold-qdq folds an activation after the bias
    only where it clamps nothing (a zero point at the type's minimum, as uint8 after Relu), so
    the activation then stays float between the integer op and the next quantization."""
    value = node.outputs[0]
    biased = node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] is not None
    for ops in (("Add",) if node.op == "MatMul" else (), ("Relu", "Clip")):
        readers = users.get(value, [])
        if len(readers) == 1 and readers[0][0].op in ops and value not in graph.output_values():
            nxt = readers[0][0]
            if nxt.op == "Add" and not any(isinstance(v, Constant) for v in nxt.inputs):
                continue
            if nxt.op != "Add" and biased and schema.activation_dtype is DType.INT8:
                continue
            biased = biased or nxt.op == "Add"
            value = nxt.outputs[0]
    return value


def _float_reason(node: Node, keep: set[str]) -> str | None:
    """Why a Conv / MatMul / Gemm stays float, or None when it is one to quantize."""
    if node.op in keep or node.name in keep:
        return "kept float (keep_float)"
    x, w = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if not isinstance(w, Constant):
        return "its weight is not a constant (an activation x activation product)"
    if isinstance(x, Constant) or x is None or x.type.dtype is not DType.FLOAT32:
        return "its input is not a float32 activation"
    if node.op == "Gemm" and (node.attrs.transA or node.attrs.alpha != 1.0 or node.attrs.beta != 1.0):
        return "Gemm with transA, alpha or beta (no integer form)"
    if node.op == "Conv" and x.type.rank != 4 or node.op != "Conv" and w.type.rank != 2:
        return "not a 2-D convolution or a 2-D weight"
    return None


def _weight_axis(node: Node, keep: set[str]) -> int | None:
    """The weight's output-channel axis when `node` is one to quantize, else None."""
    if node.op not in QUANTIZABLE or _float_reason(node, keep) is not None:
        return None
    return 0 if node.op == "Conv" or node.op == "Gemm" and node.attrs.transB else 1


def _read_as_integers(graph: Graph, value: Value, keep: set[str]) -> bool:
    """Whether every reader of `value` quantizes it as its input (so the value may be
    requantized in the integer op itself, and no float reader loses precision to it)."""
    readers = graph.users().get(value, [])
    return bool(readers) and value not in graph.output_values() and all(
        i == 0 and _weight_axis(reader, keep) is not None for reader, i in readers)


def _replace(graph: Graph, old: Value, make: Callable[..., Value], *args: Any) -> None:
    """Every reader of `old` (as it is now), and the graph outputs that are `old`, read the
    value `make(*args)` builds instead (it may itself read `old`)."""
    readers = list(graph.users().get(old, []))
    outputs = [o for o in graph.outputs if o.value is old]
    new = make(*args)
    for reader, i in readers:
        reader.inputs[i] = new
    for o in outputs:
        o.value = new


def quantize_graph(graph: Graph, profile: Profile, keep_float: Iterable[str] | None = None,
                   method: str | None = None, percentile: float | None = None,
                   schema: str | Schema | None = None, decisions: dict[str, str] | None = None) -> int:
    """Inserts Q/DQ around every quantizable node; returns how many were quantized. Options
    left None take the profile's recorded ones (Profile.options), else asymmetric, minmax,
    99.99 and nothing kept float. `decisions`, when given, gets each Conv / MatMul / Gemm's
    name -> what became of it (compile() puts it in stats["quantization"])."""
    profile.check_graph(graph)
    recorded = profile.options
    keep_float = recorded.get("keep_float", ()) if keep_float is None else keep_float
    method = recorded.get("method", "minmax") if method is None else method
    percentile = float(recorded.get("percentile", 99.99) if percentile is None else percentile)
    if method not in METHODS:
        raise EmberError(f"unknown calibration method '{method}' (known: {', '.join(METHODS)})")
    chosen = get_schema(recorded.get("schema", "asymmetric") if schema is None else schema)
    if not 0.0 < percentile <= 100.0:
        raise EmberError(f"percentile {percentile}: give a percentage in (0, 100]")
    keep = set(keep_float)
    unknown = sorted(keep - set(OPS) - {n.name for n in graph.nodes})
    if unknown:
        raise EmberError(f"keep_float {unknown}: neither op types nor node names of graph '{graph.name}'")
    ins = _Inserter(graph, profile, chosen, method, percentile)
    users = graph.users()
    count = 0
    said = {} if decisions is None else decisions
    for node in list(graph.nodes):
        axis = _weight_axis(node, keep)
        if axis is None:
            if node.op in QUANTIZABLE:
                said[node.name] = f"float: {_float_reason(node, keep)}"
            continue
        x, w = node.input(0), node.inputs[1]
        assert isinstance(w, Constant)
        out = _output_of(graph, node, users, chosen)
        x_scale, _ = ins.qparams(x)
        if node.op != "Conv" and not _read_as_integers(graph, out, keep):
            _replace(graph, node.outputs[0], ins.integer_dense, node, x, w, axis)
            said[node.name] = f"int8 ({chosen.name}), result float (read in float)"
            count += 1
            continue
        ins.qparams(out)  # fails before any rewrite when the profile lacks the output
        xd = ins.qdq(x)
        wd, w_scale = ins.weight(node, w, axis)
        node.inputs[0], node.inputs[1] = xd, wd
        b = node.inputs[2] if len(node.inputs) > 2 else None
        if isinstance(b, Constant) and b.type.rank <= 1 + (node.op == "Gemm"):
            node.inputs[2] = ins.bias(node, b, chosen.bias_scale(x_scale, w_scale))
        _replace(graph, out, ins.qdq, out)
        said[node.name] = f"int8 ({chosen.name}), result requantized"
        count += 1
    quantize_residual_adds(graph, ins, profile.tensors, keep)  # keeps residual Adds integer
    graph.sort()
    graph.remove_unused()
    return count
