"""Residual Adds between quantized layers join the integer domain: their float operands get the
Q/DQ pairs the layers around them already have (one pair per value, shared), and their result
(through a lone Relu/Clip) gets one, so that fold-qdq turns Q(act(Add(DQ(a), DQ(b)))) into one
fused loop over 8-bit tensors and the layers between them never pass through float32 memory.

Which Adds: two float32 activations of the result's shape, each with a range in the profile,
whose result is read only by what is already integer (the QuantizeLinear in front of a
quantized layer), by another Add, or by a MaxPool. So a transformer's residual Add (read by
LayerNormalization) and its attention-mask Add (read by Softmax) stay float, by design.

May import graph/, ops/, types and support/ (layer 5, as the rest of quant/)."""
from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from ember.graph import Graph, Node, Value
from ember.graph.ir import Constant
from ember.types import DType

INTEGER_READERS = ("QuantizeLinear", "Add", "MaxPool")


class _QdqSource(Protocol):
    dequantized: dict[Value, Value]

    def qdq(self, value: Value) -> Value: ...


def _result(graph: Graph, node: Node, users: dict) -> Value:
    """The Add's value to quantize: through a lone Relu/Clip."""
    value = node.outputs[0]
    readers = users.get(value, [])
    if len(readers) == 1 and readers[0][0].op in ("Relu", "Clip") and value not in graph.output_values():
        return readers[0][0].outputs[0]
    return value


def _activation(value: Value | None, shape: tuple[int, ...], profiled: Collection[str],
                inserter: _QdqSource) -> bool:
    return value is not None and not isinstance(value, Constant) and value.type.dtype is DType.FLOAT32 \
        and value.type.shape == shape and (value.name in profiled or value in inserter.dequantized)


def quantize_residual_adds(graph: Graph, inserter: _QdqSource, profiled: Collection[str],
                           keep: Collection[str] = ()) -> int:
    """Puts Q/DQ around the Adds described above (after the quantizable layers got theirs);
    returns how many."""
    count = 0
    for node in list(graph.nodes):
        if node.op != "Add" or node.op in keep or node.name in keep or len(node.inputs) != 2:
            continue
        users = graph.users()
        shape = node.outputs[0].type.shape
        if not all(_activation(x, shape, profiled, inserter) for x in node.inputs):
            continue
        out = _result(graph, node, users)
        dq_node = inserter.dequantized[out].producer if out in inserter.dequantized else None
        own_q = dq_node.input(0).producer if dq_node is not None else None
        readers = [(n, i) for n, i in users.get(out, []) if n is not own_q]
        if out.name not in profiled or out in graph.output_values() or not readers \
                or any(n.op not in INTEGER_READERS for n, _ in readers):
            continue
        for i, x in enumerate(node.inputs):
            assert x is not None
            node.inputs[i] = inserter.qdq(x)
        dq = inserter.qdq(out)
        for reader, i in readers:
            reader.inputs[i] = dq
        count += 1
    return count
