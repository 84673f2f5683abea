"""C_KERNELS: the C kernel registry the cpu backend (and its AOT bundles) selects from.
Kernel families register into it from their own modules (gemm, conv, pooling, ...);
importing ember.codegen.kernels registers them all."""
from __future__ import annotations

from dataclasses import replace

from ember.codegen.c_types import C_TYPES
from ember.codegen.kernels.registry import KernelRegistry, OpView
from ember.lir.chain import ELEMENTWISE_CHAIN, chain_steps, infer_steps
from ember.ops import get_op
from ember.types import DType, TensorType

# Stored as bits: converted by Cast, moved by byte copies, computed in float32 otherwise (the
# graph pass compute-halves-in-float32 puts Casts around every other op on them).
HALF_TYPES = (DType.FLOAT16, DType.BFLOAT16)
HALF_OPS = ("Cast", "copy", "Reshape", "BitCast")
# Likewise the narrow types (float8, float4, int4, int2: one element per byte), which nothing
# but conversions and copies reads.
NARROW_TYPES = tuple(t for t in DType if t.is_narrow)


def c_types_only(view: OpView) -> str | None:
    """Every C kernel reads and writes plain element types: no quantized tensors, no types C
    has no arithmetic for (the narrow float and int4 types); 16-bit floats only where they are
    converted or copied."""
    tensors = view.results + tuple(t for t in view.operands if t is not None)
    for tensor in tensors:
        if tensor.quant is not None:
            return "quantized tensor types have no C kernels (they run on the interpreter)"
        if tensor.dtype not in C_TYPES:
            return f"{tensor.dtype}: no C kernels for this element type (it runs on the interpreter)"
    if any(t.dtype in HALF_TYPES or t.dtype in NARROW_TYPES for t in tensors):
        return _half_refusal(view)
    return None


def as_float32(view: OpView) -> OpView:
    """The view of an op on 16-bit floats as the C kernels see it once the pass
    compute-halves-in-float32 has converted around it (unchanged for the ops that keep them)."""
    def widen(t: TensorType | None) -> TensorType | None:
        return t.with_dtype(DType.FLOAT32) if t is not None and t.dtype in HALF_TYPES else t

    results = tuple(t.with_dtype(DType.FLOAT32) if t.dtype in HALF_TYPES else t for t in view.results)
    operands = tuple(map(widen, view.operands))
    if view.op in HALF_OPS or (results, operands) == (view.results, view.operands):
        return view
    try:  # the pass widens only where the float32 op gives exactly the widened results
        inferred = tuple(get_op(view.op).infer_types(view.attrs, list(operands)))
    except Exception:
        return view
    return replace(view, results=results, operands=operands) if inferred == results else view


# Kernels that convert 16-bit and narrow operands themselves (their accepts decide which).
CONVERTING_OPS = ("QuantizeLinear", "DequantizeLinear")


def _half_refusal(view: OpView) -> str | None:
    if view.op in HALF_OPS or view.op in CONVERTING_OPS:
        return None
    if view.op == ELEMENTWISE_CHAIN:
        steps = chain_steps(view.attrs)
        sources = [t for t in view.operands if t is not None]
        values = infer_steps(steps, sources)
        for step, value in zip(steps, values, strict=True):
            args = [values[int(a[1:])] if a[0] == "v" else sources[int(a[1:])] for a in step.args]
            if step.op != "Cast" and any(t.dtype in HALF_TYPES + NARROW_TYPES for t in (*args, value)):
                break
        else:
            return None
    types = sorted({str(t.dtype) for t in (*view.results, *view.operands)
                    if t is not None and (t.dtype in NARROW_TYPES or t.dtype in HALF_TYPES)})
    return (f"{types[0]}: no C kernels for this element type in {view.op} (C converts and copies 16-bit and "
            "narrow types; compute-halves-in-float32 computes other ops on 16-bit floats in float32)")


C_KERNELS = KernelRegistry("C", precondition=c_types_only)
