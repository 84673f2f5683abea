"""CpuBackend: which ops run natively, which are lowered, and compile = codegen + build + load."""
from __future__ import annotations

import os
import re

from ember.backends.api import Backend
from ember.backends.cpu.build import build_library
from ember.backends.cpu.native import NativeProgram
from ember.codegen import generate_c
from ember.codegen.exemptions import C_EXEMPT, C_EXEMPT_FORMS, C_EXEMPT_TYPES
from ember.codegen.kernels import C_KERNELS, nn, normalization
from ember.graph import Node
from ember.lir.ir import Program
from ember.support.errors import EmberError

# High-level ops the C kernels run directly instead of lowering them, with the condition
# under which they do (otherwise they are lowered to primitives).
NATIVE_HIGH_LEVEL = {
    "FusedConv": nn.accepts,
    "FullyConnected": lambda node: True,
    "Gelu": lambda node: True,
    "Silu": lambda node: True,
    "HardSwish": lambda node: True,
    "Softmax": normalization.accepts,
    "LogSoftmax": normalization.accepts,
    "LayerNormalization": normalization.accepts,
}
# Primitive ops whose kernels cover only some forms; other forms make the backend refuse.
KERNEL_CONDITIONS = {op: nn.accepts for op in ("Conv", "MaxPool", "AveragePool")}


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, num_threads: int | None = None, sanitize: bool | None = None, march: str | None = None,
                 winograd: bool = True) -> None:
        """march: build for this ISA level (e.g. "x86-64-v3" for AVX2) instead of the host's
        own, for libraries that must also run on older machines of the same architecture.
        winograd: False keeps every 3x3 convolution on the direct kernel (for comparison)."""
        if march is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", march):
            raise EmberError(f"march {march!r} is not an ISA name")
        self.num_threads = num_threads or os.cpu_count() or 1
        self.march = march
        self.winograd = winograd
        # EMBER_SANITIZE=1 builds every library with AddressSanitizer and UBSan (test mode).
        self.sanitize = os.environ.get("EMBER_SANITIZE") == "1" if sanitize is None else sanitize

    def supports(self, node: Node) -> bool:
        return self.refusal(node) is None

    def refusal(self, node: Node) -> str | None:
        """Why the C kernels cannot run `node` (None when they can); every reason comes from
        codegen/exemptions.py."""
        values = [v for v in node.inputs + node.outputs if v is not None]
        for value in values:
            if value.type.dtype in C_EXEMPT_TYPES:
                return f"{value.type.dtype}: {C_EXEMPT_TYPES[value.type.dtype]}"
            if value.type.quant is not None:
                return C_EXEMPT_FORMS["quantized"]
        if node.op in C_EXEMPT:
            return C_EXEMPT[node.op]
        if node.op not in C_KERNELS:
            return "no C kernel; the cpu backend lowers it when the op has a lowering"
        condition = NATIVE_HIGH_LEVEL.get(node.op) or KERNEL_CONDITIONS.get(node.op)
        if not node.opdef.primitive and node.op not in NATIVE_HIGH_LEVEL:
            return "no C kernel; the cpu backend lowers it"
        if condition is not None and not condition(node):
            return C_EXEMPT_FORMS.get(node.op, "this form has no C kernel; the cpu backend lowers it")
        return None

    def should_lower(self, node: Node) -> bool:
        return not self.supports(node)

    def post_lowering_pipeline(self) -> list[str]:
        # Lowering GRU/LSTM and Gemm exposes MatMuls with constant weights and their bias and
        # activation ops: fold them back into FullyConnected epilogues.
        return ["constant-fold", "form-fully-connected", "fuse-activations", "cse", "dce"]

    def compile(self, program: Program) -> NativeProgram:
        cprogram = generate_c(program, self.num_threads, winograd=self.winograd)
        library = build_library(cprogram.source, sanitize=self.sanitize, march=self.march)
        return NativeProgram(library, cprogram, program)
