"""`compute-halves-in-float32`: a backend whose kernels compute in float32 runs float16 and
bfloat16 models by converting at each op's boundary, the way ONNX Runtime's CPU provider and
Glow's interpreter treat 16-bit floats without native arithmetic.

Every node with a 16-bit float operand or result, other than the ops that only convert or
move bits (HALF_OPS: Cast, Reshape), becomes Cast(operands -> float32) -> the same op on
float32 -> Cast(results -> their 16-bit type). Each result is thus rounded to 16 bits once,
as NumPy's float16 operations (which compute in float32) round it; reductions and products
accumulate in float32 instead of float16, which is closer to the exact result. The Casts of
constant operands fold away (constant-fold runs after this pass), and the fuser merges the
others into the neighbouring elementwise loops. A node whose float32 form still has a 16-bit
result (an op whose attribute names the element type) is left alone: the backend refuses it.

Imports passes/, graph/ and ops/ only."""
from __future__ import annotations

from ember.graph import Node, Value
from ember.ops.elementwise import CastAttrs
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.types import DType

HALF_TYPES = (DType.FLOAT16, DType.BFLOAT16)
# Ops a backend runs on 16-bit floats as they are: conversions and pure relabelings of bits.
HALF_OPS = frozenset({"Cast", "Reshape"})


def _is_half(value: Value | None) -> bool:
    return value is not None and value.type.dtype in HALF_TYPES


@pattern()
def widen_half_node(rw: Rewriter, node: Node) -> list[Value] | None:
    if node.op in HALF_OPS or not (any(map(_is_half, node.inputs)) or any(map(_is_half, node.outputs))):
        return None
    operands = [rw.add("Cast", v, attrs=CastAttrs(DType.FLOAT32)) if _is_half(v) else v for v in node.inputs]
    widened = rw.add_node(node.op, operands, node.attrs)
    if any(map(_is_half, widened)):  # the op's own attributes fix a 16-bit result type
        return None
    results = []
    for old, new in zip(node.outputs, widened, strict=True):
        if new.type == old.type:
            results.append(new)
        elif _is_half(old) and new.type == old.type.with_dtype(DType.FLOAT32):
            results.append(rw.add("Cast", new, attrs=CastAttrs(old.type.dtype)))
        else:  # its inference depends on the 16-bit type in some other way
            return None
    return results


@register_pass
class ComputeHalvesInFloat32(RewritePass):
    """Preconditions: none.
    Rules, for every op outside HALF_OPS with a float16/bfloat16 operand or result:
    1. op(h, ...) -> Cast(op(Cast(h, f32), ...), h's type): 16-bit operands widen, 16-bit
       results narrow back; operands and results of other types stay as they are.
    2. The rewrite applies only where the float32 op infers exactly the widened result types
       (an op whose attributes name a 16-bit result type stays)."""

    name = "compute-halves-in-float32"
    patterns = (widen_half_node,)
