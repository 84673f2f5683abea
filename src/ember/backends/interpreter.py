"""The interpreter backend: executes the low-level program with NumPy, one kernel per
instruction, each kernel being the op table's reference semantics. It is the oracle every
other backend is tested against, so it favours obviously-correct over fast."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember.backends.api import Backend
from ember.lir.ir import ALLOC, COPY, DEALLOC, Buffer, BufferKind, Instr, Program
from ember.ops import OpError
from ember.support.errors import EmberError

Env = dict[int, np.ndarray]
Step = Callable[[Env], None]


class InterpreterBackend(Backend):
    name = "interpreter"

    def compile(self, program: Program) -> InterpretedProgram:
        return InterpretedProgram(program)


class InterpretedProgram:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.steps: list[Step] = [_step(instr) for instr in program.instrs]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        env: Env = {id(w): w.data for w in self.program.weights}
        for buffer, array in zip(self.program.inputs, inputs, strict=True):
            env[id(buffer)] = array
        outputs = [_empty(b) for b in self.program.outputs]
        for buffer, array in zip(self.program.outputs, outputs):
            env[id(buffer)] = array
        with np.errstate(all="ignore"):
            for step in self.steps:
                step(env)
        return outputs


def _empty(buffer: Buffer) -> np.ndarray:
    return np.empty(buffer.type.shape, dtype=buffer.type.dtype.numpy)


def _step(instr: Instr) -> Step:
    if instr.name == ALLOC:
        (buffer,) = instr.operands
        return lambda env: env.__setitem__(id(buffer), _empty(buffer))
    if instr.name == DEALLOC:
        (buffer,) = instr.operands
        return lambda env: env.pop(id(buffer))
    if instr.name == COPY:
        dest, src = instr.operands

        def copy(env: Env) -> None:
            env[id(dest)][...] = env[id(src)]

        return copy
    op = instr.idef.op
    results = len(op.results)
    outs = instr.operands[:results]
    ins = instr.operands[results:]
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
