"""The NPU backend: a described accelerator (a target file of src/ember/isa/targets whose
instructions are timed per issue by a cycles formula and whose operands live in scratchpads,
e.g. npu-systolic16, a 16x16 systolic array) as an Ember backend, written against the backend
API only (docs/adding-a-backend.md).

It runs the matrix products and convolutions the ISA mapper maps exactly onto the target
(Conv, FusedConv, MatMul, Gemm, FullyConnected in float32; lossy mappings such as the i8
array with quantizing fix-ups are never used) through the functional simulator
(ember.isa.fold_sim: the real result with NumPy, and the cycles of every fold by the
description), and reports per node the mapping, the schedule, the simulated and scheduled
cycles and the array utilisation (`backend_stats`, in `m.stats`). A node with another op, other
element types or no exact mapping is refused with the reason, so a backend list
`["npu-systolic16", "cpu"]` runs it on the cpu: never a wrong result. The epilogue (bias,
Gemm's alpha and beta, a residual, the activation) is applied while draining the accumulators,
with the ops' own reference arithmetic, and is not timed. Everything else in a segment
(copies, views) runs as the interpreter runs it.

Every accelerator description is registered by its target name, and "npu" names
npu-systolic16; they run only when named (not in backend="auto"): on this machine they are a
simulation, not a device."""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.backends.interpreter import Env, InterpretedProgram, InterpreterBackend, Step
from ember.graph import Graph, Node, Value
from ember.isa.describe import TARGETS_DIR, DescriptionError, Target, load_target
from ember.isa.fold_sim import count_cycles, run_folds, supported
from ember.isa.kernels import Kernel, kernels_of
from ember.isa.mapper import map_kernel
from ember.isa.schedule import Schedule, schedule
from ember.lir.ir import MARKERS, Instr, Program
from ember.ops.fused import apply_activation
from ember.ops.layouts import channels_last
from ember.ops.nn import ConvAttrs
from ember.partition.cost import analytic_seconds
from ember.support.errors import EmberError
from ember.types import DType

NPU_OPS = ("Conv", "FusedConv", "MatMul", "Gemm", "FullyConnected")
DEFAULT_TARGET = "npu-systolic16"
SCHEDULED = 4  # exact mappings scheduled per instruction (the mapper's best first)


def accelerator_targets() -> list[str]:
    """Described targets that are accelerators: every instruction timed by a cycles formula
    and at least one scratchpad. A description that does not load is left out (`ember dump
    --stage mappings --target NAME` says why)."""
    names = []
    for path in sorted(TARGETS_DIR.glob("*.toml")):
        try:
            target = load_target(path)
        except DescriptionError:
            continue
        if all(i.cycles is not None for i in target.instructions) and any(m.scratchpad for m in target.memory):
            names.append(path.stem)
    return names


@dataclass(frozen=True)
class NodePlan:
    """How one node runs on the target: its kernel, the chosen exact schedule and the length
    its streamed dimension is issued in (the scratchpad level's tile; None: whole)."""

    kernel: Kernel
    schedule: Schedule
    stream: int | None

    def stats(self, op: str) -> dict[str, Any]:
        mapping = self.schedule.mapping
        issues, cycles = count_cycles(mapping, self.stream)
        macs = mapping.kernel.expr.iterations * mapping.kernel.repeat
        pes = math.prod(d.extent for d in mapping.instruction.semantics.domain if d.extent and not d.upto)
        return {"op": op, "kernel": str(self.kernel), "mapping": str(mapping).splitlines()[0],
                "layout": [str(c) for c in mapping.layout], "schedule": str(self.schedule).splitlines(),
                "folds": issues, "simulated_cycles": cycles, "scheduled_cycles": self.schedule.cycles,
                "bound": self.schedule.bound, "macs": macs, "mapping_utilisation": mapping.utilisation,
                "array_utilisation": macs / (pes * cycles) if cycles else 0.0}


@functools.lru_cache(maxsize=1024)
def _plan_kernel(kernel: Kernel, target: Target) -> NodePlan | str:
    schedules: list[Schedule] = []
    reasons: list[str] = []
    for instruction in target.instructions:
        mappings, rejections = map_kernel(kernel, instruction, allow_lossy=False)
        reasons += [str(r) for r in rejections]
        runnable = [m for m in mappings if supported(m) is None]
        reasons += [f"{instruction.name}: {supported(m)}" for m in mappings[:1] if supported(m) is not None]
        schedules += [schedule(m, target) for m in runnable[:SCHEDULED]]
    if not schedules:
        return f"no exact mapping onto {target.name}: {'; '.join(dict.fromkeys(reasons)) or 'none found'}"
    best = min(schedules, key=lambda s: (s.cycles, str(s.mapping)))
    streamed = [a for a in best.mapping.axes if a.width is None]
    stream = None
    if streamed and len(best.levels) > 1:
        stream = dict(best.levels[1].tile).get(f"{streamed[0].dim}'")
    return NodePlan(kernel, best, stream)


def plan_node(node: Node, target: Target) -> NodePlan | str:
    """The node's plan, or why the target cannot run it."""
    if node.op not in NPU_OPS:
        return f"{node.op} is not a matrix product or convolution (the NPU runs {', '.join(NPU_OPS)})"
    if channels_last(node.attrs):
        return f"{node.op}'s channels-last form runs on the cpu backend only (the NPU's kernels read NCHW)"
    types = [v.type for v in node.inputs if v is not None] + [v.type for v in node.outputs]
    for t in types:
        if t.dtype is not DType.FLOAT32 or t.quant is not None:
            return f"the NPU backend runs float32 {node.op} only, not {t.dtype.value}"
    try:
        kernels = kernels_of(node)
    except EmberError as err:
        return str(err)
    if len(kernels) != 1:
        return f"{node.op} is {len(kernels)} kernels, the NPU backend runs one"
    return _plan_kernel(kernels[0], target)


class NpuBackend(InterpreterBackend):
    """`target`: a described accelerator by name or .toml path. `name`: the name it was asked
    for (the registered alias, e.g. "npu")."""

    precisions = ("fp32",)

    def __init__(self, target: str = DEFAULT_TARGET, name: str | None = None, num_threads: int | None = None) -> None:
        super().__init__(num_threads)
        self.target = load_target(target)
        self.name = name or self.target.name
        self.subject = f"backend '{self.name}' (target {self.target.name})"

    def supports(self, node: Node) -> bool:
        return self.refusal(node) is None

    def refusal(self, node: Node) -> str | None:
        plan = plan_node(node, self.target)
        return plan if isinstance(plan, str) else None

    def should_lower(self, node: Node) -> bool:
        return False  # what it cannot run goes to the next backend, whole

    def pipeline(self) -> list[str]:
        return ["constant-fold", "dce"]  # keeps the standard ops it maps (no fusion into cpu forms)

    def cost(self, graph: Graph) -> float:
        # The simulation on this host: NumPy matrix products, as the interpreter's.
        return analytic_seconds(graph, flops_per_second=15e9, bytes_per_second=2e9, per_node=200e-6)

    def compile(self, program: Program) -> NpuProgram:
        return NpuProgram(program, self.target)

    def load_executable(self, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> NpuProgram:
        """A saved segment (the interpreter's artifact: LIR text and weights) on the NPU again."""
        return NpuProgram(super().load_executable(files, meta).program, self.target)


def _node_of(instr: Instr) -> Node:
    """A one-node graph of a compute instruction (weights as constants), for the mapper."""
    graph = Graph(instr.source or instr.name)
    results = len(instr.idef.op.results) if instr.idef.op is not None else 1
    operands: list[Value | None] = []
    for index, buffer in enumerate(instr.base_operands[results:]):
        if buffer is None:
            operands.append(None)
        elif buffer.data is not None:
            operands.append(graph.add_constant(buffer.constant(), f"w{index}", exact=True))
        else:
            operands.append(graph.add_input(f"x{index}", buffer.type))
    graph.add_node(instr.name, operands, instr.attrs, name=instr.source or instr.name)
    return graph.nodes[-1]


def _squeezed(array: np.ndarray) -> np.ndarray:
    return array.reshape(tuple(s for s in array.shape if s != 1))


def _operands(node: Node, arrays: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """The node's two MAC operands as the kernel's tensors index them: a convolution's input
    zero-bordered and cut to the window's span, and every axis of one element dropped, as
    the kernel's expression drops dimensions of extent 1."""
    first, second = arrays[0], arrays[1]
    assert first is not None and second is not None
    if node.op in ("Conv", "FusedConv"):
        attrs: ConvAttrs = node.attrs if isinstance(node.attrs, ConvAttrs) else node.attrs.conv
        spatial = first.ndim - 2
        pads = [(0, 0), (0, 0)] + list(zip(attrs.pads[:spatial], attrs.pads[spatial:], strict=True))
        padded = np.pad(first, pads)
        out = node.outputs[0].type.shape[2:]
        spans = [(o - 1) * s + (k - 1) * d + 1
                 for o, s, k, d in zip(out, attrs.strides, second.shape[2:], attrs.dilations, strict=True)]
        first = padded[(slice(None), slice(None), *(slice(0, s) for s in spans))]
    return [_squeezed(first), _squeezed(second)]


def _drain(node: Node, acc: np.ndarray, arrays: Sequence[np.ndarray | None]) -> np.ndarray:
    """The epilogue on the accumulators: bias, Gemm's alpha and beta, residual, activation."""
    y = acc.astype(np.float64)
    attrs = node.attrs
    if node.op == "Gemm":
        y = attrs.alpha * y
        if len(arrays) > 2 and arrays[2] is not None:
            y = y + attrs.beta * arrays[2].astype(np.float64)
        return y
    bias = arrays[2] if len(arrays) > 2 else None
    if bias is not None:
        y = y + (bias.reshape((-1,) + (1,) * (y.ndim - 2)) if node.op in ("Conv", "FusedConv") else bias)
    residual = arrays[3] if len(arrays) > 3 else None
    if residual is not None:
        y = y + residual
    if node.op in ("FusedConv", "FullyConnected"):
        y = apply_activation(y, attrs.activation, attrs.alpha, attrs.beta)
    return y


def run_node(node: Node, plan: NodePlan, arrays: Sequence[np.ndarray | None],
             kept: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, float]:
    """The node's result through the simulator, and the cycles it counted (kept: the
    weights' gathered blocks, see fold_sim.run_folds)."""
    expr = plan.kernel.expr
    tensors = {}
    for access, array in zip((expr.a, expr.b), _operands(node, arrays), strict=True):
        shape = tuple(i.span(expr.extents) for i in access.indices)
        if array.shape != shape:
            raise EmberError(f"node '{node.name}' ({node.op}): operand {access.tensor} is {array.shape}, "
                             f"its kernel indexes {shape}")
        tensors[access.tensor] = array
    out_shape = tuple(i.span(expr.extents) for i in expr.output.indices)
    simulation = run_folds(plan.schedule.mapping, tensors, out_shape, plan.stream, kept=kept)
    result = simulation.out.reshape(node.outputs[0].type.shape)
    return _drain(node, result, arrays).astype(np.float32), simulation.cycles


class NpuProgram(InterpretedProgram):
    """The interpreter's executable with the compute instructions run on the simulated NPU.
    backend_stats: per node, what NodePlan.stats says, and the totals."""

    def __init__(self, program: Program, target: Target) -> None:
        super().__init__(program)
        self.target = target
        nodes: dict[str, Any] = {}
        instrs = [i for i in program.instrs if i.name not in MARKERS]
        for position, instr in enumerate(instrs):
            if instr.name not in NPU_OPS:
                continue
            node = _node_of(instr)
            plan = plan_node(node, target)
            if isinstance(plan, str):
                raise EmberError(f"node '{instr.source}' ({instr.name}) cannot run on {target.name}: {plan}")
            nodes[instr.source or instr.name] = plan.stats(instr.name)
            self.steps[position] = _npu_step(instr, node, plan)
        simulated = sum(n["simulated_cycles"] for n in nodes.values())
        scheduled = sum(n["scheduled_cycles"] for n in nodes.values())
        self.backend_stats = {"target": target.name, "nodes": nodes, "simulated_cycles": simulated,
                              "scheduled_cycles": scheduled}


def _npu_step(instr: Instr, node: Node, plan: NodePlan) -> Step:
    results = len(node.outputs)
    out = instr.base_operands[0]
    ins = instr.base_operands[results:]

    kept: dict[str, np.ndarray] = {}  # the weights' blocks, gathered on the first run

    def execute(env: Env) -> None:
        arrays = [None if b is None else env[id(b)] for b in ins]
        env[id(out)][...], _ = run_node(node, plan, arrays, kept)

    return execute


__all__ = ["NPU_OPS", "NodePlan", "NpuBackend", "NpuProgram", "accelerator_targets", "plan_node", "run_node"]
