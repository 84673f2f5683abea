"""The interpreter backend: executes the low-level program with NumPy, one kernel per
instruction, each kernel being the op table's reference semantics. It is the oracle every
other backend is tested against, so it favours obviously-correct over fast."""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.backends.api import Backend
from ember.backends.profiling import StepHook, StepTimes, step_infos
from ember.graph import Graph, Node
from ember.lir.chain import ELEMENTWISE_CHAIN, chain_steps, run_steps
from ember.lir.ir import COPY, MARKERS, Buffer, BufferKind, Instr, Program, resolve_address
from ember.lir.text import parse_program, print_program
from ember.memory import plan_memory
from ember.ops import OpError
from ember.partition.cost import analytic_seconds
from ember.support.errors import EmberError
from ember.types import DType

Env = dict[int, np.ndarray]
Step = Callable[[Env], None]


class InterpreterBackend(Backend):
    name = "interpreter"

    def __init__(self, num_threads: int | None = None) -> None:
        # Accepted so callers can pass the same options to every backend; NumPy decides its
        # own threading, and the oracle favours simple over fast.
        self.num_threads = num_threads

    def supports(self, node: Node) -> bool:
        # An op traited 'oracle' (Attention, Einsum, ...) runs its NumPy reference whole here,
        # though it is no primitive: the lowering compiled backends run is checked against it.
        return node.opdef.primitive or "oracle" in node.opdef.traits

    def cost(self, graph: Graph) -> float:
        # NumPy: tens of microseconds of Python per instruction, BLAS-speed matrix products,
        # a few GB/s for elementwise work (measured on a 2-core EPYC; a rough guide).
        return analytic_seconds(graph, flops_per_second=15e9, bytes_per_second=2e9, per_node=25e-6)

    def compile(self, program: Program) -> InterpretedProgram:
        return InterpretedProgram(program)

    def load_executable(self, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> InterpretedProgram:
        """A program saved by InterpretedProgram.artifact: its LIR text and its weights."""
        blob, weights = files["weights.bin"], {}
        for name, dtype, shape, offset in meta["weights"]:
            count = int(np.prod(shape, dtype=np.int64))
            weights[name] = np.frombuffer(blob, DType(dtype).numpy, count, int(offset)).reshape(shape)
        return InterpretedProgram(parse_program(files["program.lir"].decode(), weights))


class InterpretedProgram:
    """Runs against one arena laid out as the memory planner decided: every activation is a
    NumPy view of the arena at its planned offset and every view a view of its root's bytes
    (via resolve_address), so a wrong plan or a wrong alias shows up as wrong numbers. The
    arena starts filled with 0xFF bytes (NaN for floats) so reading unwritten memory shows too.
    A program nobody planned is planned here."""

    def __init__(self, program: Program) -> None:
        if any(b.offset is None for b in program.activations()):
            plan_memory(program)
        self.program = program
        self.arena_bytes = max((_offset(b) + b.type.nbytes for b in program.activations()), default=0)
        self.views = program.views()
        self.steps: list[Step] = [_step(instr) for instr in program.instrs if instr.name not in MARKERS]

    def artifact(self) -> tuple[dict[str, bytes], dict]:
        """The program's LIR text and its weights (one blob; the table gives each weight's
        name, element type, shape and offset), for runtime/artifact.py."""
        blob, table, offset = bytearray(), [], 0
        for weight in self.program.weights:
            data = np.ascontiguousarray(weight.constant())
            table.append([weight.name, weight.type.dtype.value, list(data.shape), offset])
            blob += data.tobytes()
            offset += data.nbytes
        files = {"program.lir": print_program(self.program).encode(), "weights.bin": bytes(blob)}
        return files, {"weights": table}

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._run(inputs, None)

    def run_profiled(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], StepTimes]:
        """Outputs and each instruction's time in one run (backends/profiling.py)."""
        stamps: list[float] = []

        def stamp(k: int, *_: object) -> bool:
            stamps.append(time.perf_counter())
            return False

        outputs = self._run(inputs, stamp)
        steps = step_infos(self.program)
        begin = stamps[0]
        return outputs, StepTimes(steps, [t - begin for t in stamps[:-1]],
                                  [b - a for a, b in itertools.pairwise(stamps)], stamps[-1] - begin)

    def run_stepwise(self, inputs: Sequence[np.ndarray], hook: StepHook) -> list[np.ndarray]:
        """Runs with `hook(k, arena, inputs, outputs)` before each instruction k and after the
        last (backends/profiling.py); a hook returning True stops the run."""
        return self._run(inputs, hook)

    def _run(self, inputs: Sequence[np.ndarray], hook: StepHook | None) -> list[np.ndarray]:
        arena = np.full(self.arena_bytes, 0xFF, dtype=np.uint8)
        env: Env = {id(w): w.constant() for w in self.program.weights}
        for buffer, array in zip(self.program.inputs, inputs, strict=True):
            env[id(buffer)] = array if array.flags.c_contiguous else np.array(array, order="C")  # keeps 0-d arrays 0-d
        outputs = [np.empty(b.type.shape, dtype=b.type.dtype.numpy) for b in self.program.outputs]
        for buffer, array in zip(self.program.outputs, outputs, strict=True):
            env[id(buffer)] = array
        for buffer in self.program.activations():
            env[id(buffer)] = _typed(arena, _offset(buffer), buffer)
        for view in self.views:
            root, offset = resolve_address(view)
            env[id(view)] = _typed(env[id(root)].reshape(-1).view(np.uint8), offset, view)
        with np.errstate(all="ignore"):
            for k, step in enumerate(self.steps):
                if hook is not None and hook(k, arena, inputs, outputs):
                    return outputs
                step(env)
        if hook is not None:
            hook(len(self.steps), arena, inputs, outputs)
        return outputs


def _offset(buffer: Buffer) -> int:
    assert buffer.offset is not None, "the program is planned before it runs"
    return buffer.offset


def _typed(raw: np.ndarray, offset: int, buffer: Buffer) -> np.ndarray:
    """`buffer`'s bytes inside the uint8 array `raw`, as an array of its type."""
    dtype = np.dtype(buffer.type.dtype.numpy)
    return raw[offset:offset + buffer.type.nbytes].view(dtype).reshape(buffer.type.shape)


def reference_step(instr: Instr) -> Step:
    """One instruction's reference semantics as a function of an environment mapping
    id(buffer) to arrays (its outputs written in place); kernel operands are ignored, so the
    cpu backend's instructions run here too (the network debugger checks them one by one)."""
    return _step(instr)


def _step(instr: Instr) -> Step:
    if instr.name == COPY:
        dest, src = instr.base_operands

        def copy(env: Env) -> None:
            env[id(dest)][...] = env[id(src)]

        return copy
    if instr.name == ELEMENTWISE_CHAIN:
        out, *sources = instr.required()
        steps = chain_steps(instr.attrs)  # parsed once, not per run

        def chain(env: Env) -> None:
            env[id(out)][...] = run_steps(steps, [env[id(b)] for b in sources])

        return chain
    op = instr.idef.op
    if op is None:
        raise EmberError(f"the interpreter cannot run instruction {instr.name} (node '{instr.source}')")
    results = len(op.results)
    outs = [instr.operand(i) for i in range(results)]
    ins = instr.base_operands[results:]
    attrs = instr.attrs

    def execute(env: Env) -> None:
        arrays = [None if b is None else env[id(b)] for b in ins]
        try:
            values = op.reference(attrs, arrays)
        except OpError as err:
            raise EmberError(f"node '{instr.source}' ({op.name}) failed at run time: {err}") from None
        for buffer, value in zip(outs, values, strict=True):
            target = env[id(buffer)]
            if np.shape(value) != target.shape:
                # Assignment would broadcast silently; a shape drift is an Ember bug.
                raise EmberError(f"node '{instr.source}' ({op.name}) produced shape {np.shape(value)}, "
                                 f"buffer '{buffer.name}' is {buffer.type}")
            target[...] = value

    return execute


__all__ = ["BufferKind", "InterpreterBackend"]
