"""`select-kernels`: the LIR pass where a native backend decides how each instruction runs.

For every computing instruction it asks the backend's kernel registry for the first variant
that accepts and applies, and records the choice in the LIR: the kernel's name and
parameters (`kernel conv_winograd(...) {threads=2}`), packed copies of weights as new weights
(`weight @w.winograd_f2x3: ... packed winograd_f2x3 of @w`), constant tables, and scratch as
an activation allocated just around the instruction, which the memory planner places like
any buffer. After it, C generation only prints.

The target comes from the pass context (`context.backend.kernels`, `.kernel_options()`);
without one it selects from C_KERNELS with default options. Imports lir/ and the kernels."""
from __future__ import annotations

from typing import Any

from ember.codegen.kernels import C_KERNELS, KernelOptions, KernelRegistry
from ember.lir.ir import ALLOC, DEALLOC, MARKERS, Buffer, BufferKind, Instr, KernelUse, OperandKind, Packing, Program
from ember.lir.passes.registry import LirPass, register_lir_pass
from ember.support.names import UniqueNamer
from ember.types import DType, TensorType


def kernel_target(context: Any) -> tuple[KernelRegistry, KernelOptions]:
    """The registry and options of the backend in the pass context (C_KERNELS otherwise)."""
    backend = getattr(context, "backend", None)
    if backend is None or not hasattr(backend, "kernels"):
        return C_KERNELS, KernelOptions()
    return backend.kernels, backend.kernel_options()


@register_lir_pass
class SelectKernels(LirPass):
    """Rules:
    1. markers and instructions that already have a kernel are kept as they are;
    2. every other instruction gets the first registered variant whose `accepts` and
       `applies` hold, with the parameters of its plan;
    3. the plan's packed weights and tables become weights (one per source and layout, or
       per table key, shared between instructions), appended as @in kernel operands;
    4. its scratch becomes an activation `alloc`ed just before and `dealloc`ed just after
       the instruction, appended as a @scratch operand.
    Precondition: a verified program (run it last: passes that move or fuse instructions
    do not know kernel operands)."""

    name = "select-kernels"
    context: Any = None

    def run(self, program: Program) -> bool:
        registry, options = kernel_target(self.context)
        namer = UniqueNamer()
        for buffer in program.buffers():
            namer.reserve(buffer.name)
        shared: dict[tuple[Any, ...], Buffer] = {}

        def weight(key: tuple[Any, ...], name: str, layout: str, source: Buffer | None, data) -> Buffer:
            if key not in shared:
                shared[key] = Buffer(namer.unique(name), TensorType(DType.from_numpy(data.dtype), tuple(data.shape)),
                                     BufferKind.WEIGHT, data=data, packing=Packing(layout, source))
                program.weights.append(shared[key])
            return shared[key]

        changed = False
        instrs: list[Instr] = []
        for instr in program.instrs:
            if instr.name in MARKERS or instr.kernel is not None:
                instrs.append(instr)
                continue
            kernel, plan = registry.select(instr, options)
            extras: list[Buffer] = []
            for source, layout, data in plan.packed:
                extras.append(weight((id(source), layout), f"{source.name}.{layout}", layout, source, data))
            for key, layout, data in plan.tables:
                extras.append(weight((layout, key), f"{layout}.{key}", layout, None, data))
            kinds = [OperandKind.IN] * len(extras)
            scratch = None
            if plan.scratch_bytes:
                scratch = Buffer(namer.unique(f"{instr.source or instr.name}.scratch"),
                                 TensorType(DType.UINT8, (plan.scratch_bytes,)), BufferKind.ACTIVATION)
                instrs.append(Instr(ALLOC, [scratch], source=instr.source))
                extras.append(scratch)
                kinds.append(OperandKind.SCRATCH)
            instr.operands = [*instr.operands, *extras]
            instr.kernel = KernelUse(kernel.name, dict(plan.params), tuple(kinds))
            instrs.append(instr)
            if scratch is not None:
                instrs.append(Instr(DEALLOC, [scratch], source=instr.source))
            changed = True
        program.instrs = instrs
        return changed
