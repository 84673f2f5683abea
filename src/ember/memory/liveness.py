"""Liveness of the activations the planner places: one closed interval of instruction
indices per storage-owning activation, from its `alloc` to its `dealloc` (or the program's
end when it has none). The verifier guarantees every view lives inside its root's markers,
so roots alone decide the arena. Imports lir/ir."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.lir.ir import ALLOC, DEALLOC, Buffer, Program

ALIGNMENT = 64


def aligned(nbytes: int, alignment: int = ALIGNMENT) -> int:
    return -(-nbytes // alignment) * alignment


@dataclass(frozen=True)
class Interval:
    """`buffer` is live from instruction `start` through `end` and needs `size` bytes
    (its byte size rounded up to the alignment). Two intervals conflict when they share
    an instruction index. Placement never reads `buffer`, so tests of it pass None."""

    buffer: Buffer | None
    start: int
    end: int
    size: int

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


def live_intervals(program: Program, alignment: int = ALIGNMENT) -> list[Interval]:
    starts: dict[int, tuple[int, Buffer]] = {}
    ends: dict[int, int] = {}
    for index, instr in enumerate(program.instrs):
        if instr.name == ALLOC:
            buffer = instr.operands[0]
            assert buffer is not None, "a marker names its buffer"
            starts[id(buffer)] = (index, buffer)
        elif instr.name == DEALLOC:
            ends[id(instr.operands[0])] = index
    last = len(program.instrs)
    return [Interval(buffer, start, ends.get(key, last), aligned(buffer.type.nbytes, alignment))
            for key, (start, buffer) in starts.items()]


def max_live_bytes(intervals: list[Interval]) -> int:
    """The largest total size of intervals live at one instruction: no placement can use
    less (the planner's lower bound)."""
    if not intervals:
        return 0
    horizon = max(i.end for i in intervals) + 2
    delta = np.zeros(horizon, dtype=np.int64)
    for interval in intervals:
        delta[interval.start] += interval.size
        delta[interval.end + 1] -= interval.size
    return int(np.cumsum(delta).max())
