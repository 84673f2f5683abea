"""C_KERNELS: the C kernel registry the cpu backend (and its AOT bundles) selects from.
Kernel families register into it from their own modules (gemm, conv, pooling, ...);
importing ember.codegen.kernels registers them all."""
from __future__ import annotations

from ember.codegen.c_types import C_TYPES
from ember.codegen.kernels.registry import KernelRegistry, OpView


def c_types_only(view: OpView) -> str | None:
    """Every C kernel reads and writes plain element types: no quantized tensors, no types C
    has no arithmetic for yet (float16, bfloat16, the narrow float and int4 types)."""
    for tensor in view.results + tuple(t for t in view.operands if t is not None):
        if tensor.quant is not None:
            return "quantized tensor types have no C kernels yet"
        if tensor.dtype not in C_TYPES:
            return f"{tensor.dtype}: no C kernels for this element type yet (it runs on the interpreter)"
    return None


C_KERNELS = KernelRegistry("C", precondition=c_types_only)
