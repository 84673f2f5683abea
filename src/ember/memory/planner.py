"""plan_memory: liveness -> placement -> offsets on the buffers, plus the report. It is
the step after the LIR passes; backends read `buffer.offset` of each storage-owning
activation and resolve views through lir.ir.resolve_address. Imports lir/ir and the
memory modules."""
from __future__ import annotations

from collections.abc import Sequence

from ember.lir.ir import Program
from ember.memory.liveness import ALIGNMENT, live_intervals, max_live_bytes
from ember.memory.placement import place
from ember.memory.report import BufferPlacement, MemoryPlan
from ember.support import limits


def plan_memory(program: Program, alignment: int = ALIGNMENT,
                strategies: Sequence[str] | None = None) -> MemoryPlan:
    """Sets `offset` on every activation that owns storage and returns the plan."""
    intervals = live_intervals(program, alignment)
    placement = place(intervals, strategies)
    limit = limits.current().max_arena_bytes
    if placement.arena > limit:
        largest = max(intervals, key=lambda i: i.size)
        raise limits.ResourceLimitError(
            f"program '{program.name}' needs {placement.arena} bytes of activation memory, more than the arena "
            f"limit of {limit} bytes (its largest buffer: {largest.size} bytes for "
            f"'{largest.buffer.name if largest.buffer else '?'}'; {limits.HOW_TO_RAISE})")
    placements: list[BufferPlacement] = []
    for interval, offset in zip(intervals, placement.offsets, strict=True):
        buffer = interval.buffer
        assert buffer is not None, "live_intervals gives every interval its buffer"
        buffer.offset = offset
        placements.append(BufferPlacement(buffer, offset, interval.size, interval.start, interval.end))
    return MemoryPlan(
        program=program.name,
        placements=tuple(placements),
        arena_bytes=placement.arena,
        lower_bound_bytes=max_live_bytes(intervals),
        unshared_bytes=sum(p.buffer.type.nbytes for p in placements),
        weight_bytes=program.weight_bytes(),
        instructions=len(program.instrs),
        strategy=placement.strategy,
    )
