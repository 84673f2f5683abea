"""What a backend reports when it runs a program step by step: which instruction each step
is (op, kernel, graph node, arithmetic work) and how long each took in one run.

An executable that can profile has `run_profiled(inputs) -> (outputs, StepTimes)`; one that
a debugger can step through has `run_stepwise(inputs, hook)`, calling `hook(k)` before its
step k and `hook(len(steps))` after the last, with `buffer_values(k)` readable from the hook
(the cpu backend's native code and the interpreter both do). The runtime aggregates these
(runtime/profile.py); tools print them. Imports lir/ only."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ember.lir.ir import MARKERS, Buffer, BufferKind, Instr, Program, resolve_address
from ember.ops.layouts import TO_NCHW, permuted

# Ops whose work is a sum of products: FLOPs = 2 x result elements x the products per element.
_MATRIX_OPS = ("MatMul", "FullyConnected", "MatMulInteger", "Gemm")
_CONV_OPS = ("Conv", "FusedConv", "ConvInteger")


@dataclass(frozen=True)
class StepInfo:
    """One step: the instruction's index in the program, its op, the kernel that runs it
    (the op itself where a backend has no kernel names), the graph node it came from and its
    floating-point operations where they are known (None elsewhere)."""

    index: int
    op: str
    kernel: str
    node: str
    flops: float | None
    backend: str = ""  # set where segments of several backends are profiled together


@dataclass
class StepTimes:
    """One profiled run: per step its start (seconds after the run began) and duration, and
    the whole run's wall time as its backend measured it around its steps."""

    steps: list[StepInfo]
    starts: list[float]
    seconds: list[float]
    total: float


def instr_flops(instr: Instr) -> float | None:
    """Floating-point operations of a matrix or convolution instruction (a multiply-add
    counts two), None for the others."""
    base = instr.base_operands
    if instr.name == "InvertedResidual":
        return _inverted_residual_flops(base, instr.attrs.x_channels_last, instr.attrs.y_channels_last)
    if instr.name not in _MATRIX_OPS + _CONV_OPS or len(base) < 3 or base[0] is None:
        return None
    result = base[0].type
    first, second = base[1], base[2]
    if first is None or second is None:
        return None
    if instr.name in _MATRIX_OPS:
        depth = first.type.shape[-1] if first.type.shape else 1
        return 2.0 * result.size * depth
    return 2.0 * result.size * math.prod(second.type.shape[1:])


def _inverted_residual_flops(base: Sequence[Buffer | None], x_nhwc: bool, y_nhwc: bool) -> float | None:
    """An InvertedResidual's three convolutions: expansion, depthwise, projection."""
    out, x, w_expand, w_depthwise = base[0], base[1], base[2], base[4]
    if out is None or x is None or w_expand is None or w_depthwise is None:
        return None
    x_shape = (permuted(x.type, TO_NCHW) if x_nhwc else x.type).shape
    out_shape = (permuted(out.type, TO_NCHW) if y_nhwc else out.type).shape
    pixels, out_pixels = math.prod(x_shape[2:]), math.prod(out_shape[2:])
    expanded, taps = w_expand.type.shape[0], math.prod(w_depthwise.type.shape[2:])
    per_image = pixels * x_shape[1] * expanded + out_pixels * expanded * (taps + out_shape[1])
    return 2.0 * x.type.shape[0] * per_image


def step_infos(program: Program, indices: list[int] | None = None) -> list[StepInfo]:
    """The steps of `program`: the instructions at `indices` (every instruction but the
    alloc/dealloc/view markers when None)."""
    if indices is None:
        indices = [i for i, instr in enumerate(program.instrs) if instr.name not in MARKERS]
    steps = []
    for index in indices:
        instr = program.instrs[index]
        kernel = instr.kernel.name if instr.kernel is not None else instr.name
        steps.append(StepInfo(index, instr.name, kernel, instr.source, instr_flops(instr)))
    return steps


# A debugger's view between steps: hook(k, arena, inputs, outputs) runs before step k (and
# with k = len(steps) after the last); the arrays are the run's live memory, laid out as the
# program's memory plan says (read them with read_buffer). Returning True stops the run.
StepHook = Callable[[int, np.ndarray, Sequence[np.ndarray], Sequence[np.ndarray]], bool]


def read_buffer(program: Program, buffer: Buffer, arena: np.ndarray, inputs: Sequence[np.ndarray],
                outputs: Sequence[np.ndarray]) -> np.ndarray:
    """A copy of `buffer`'s current value in a run's memory (an activation or view through the
    planned arena offsets, an input or output by its position). Weights are read from the
    program."""
    root, offset = resolve_address(buffer)
    if root.kind is BufferKind.WEIGHT:
        raw = np.ascontiguousarray(root.constant()).reshape(-1).view(np.uint8)
    elif root.kind is BufferKind.INPUT:
        raw = np.ascontiguousarray(inputs[_position(program.inputs, root)]).reshape(-1).view(np.uint8)
    elif root.kind is BufferKind.OUTPUT:
        raw = outputs[_position(program.outputs, root)].reshape(-1).view(np.uint8)
    else:
        assert root.offset is not None, "the program is planned before it runs"
        raw = arena[root.offset:]
    dtype = np.dtype(buffer.type.dtype.numpy)
    return raw[offset:offset + buffer.type.nbytes].view(dtype).reshape(buffer.type.shape).copy()


def _position(buffers: list[Buffer], buffer: Buffer) -> int:
    return next(i for i, b in enumerate(buffers) if b is buffer)
