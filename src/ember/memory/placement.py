"""Placement of live intervals in one arena (after Glow's MemoryAllocator::allocateAll).

Each strategy picks the next interval by some priority and puts it in a gap between the
already placed intervals that overlap it in time (lowest address that fits, or the
tightest gap). Strategies are tried in order and the smallest arena wins; the search stops
as soon as one reaches the lower bound, which no placement can beat. Imports nothing from
Ember but liveness."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ember.memory.liveness import Interval, max_live_bytes


@dataclass(frozen=True)
class Placement:
    """offsets[i] is where intervals[i] starts; `arena` the bytes the placement needs."""

    offsets: tuple[int, ...]
    arena: int
    strategy: str


Order = Callable[[Sequence[Interval]], list[int]]


def _static(key: Callable[[Interval], tuple]) -> Order:
    return lambda intervals: sorted(range(len(intervals)), key=lambda i: key(intervals[i]))


def _by_max_live(tie_break: Callable[[Interval], tuple]) -> Order:
    """Glow's MaxLiveSize* strategies: repeatedly go to the instruction where the intervals
    not yet placed need the most memory, and take the best one live there."""

    def order(intervals: Sequence[Interval]) -> list[int]:
        if not intervals:
            return []
        starts = np.array([i.start for i in intervals])
        ends = np.array([i.end for i in intervals])
        sizes = np.array([i.size for i in intervals], dtype=np.int64)
        delta = np.zeros(int(ends.max()) + 2, dtype=np.int64)
        np.add.at(delta, starts, sizes)
        np.add.at(delta, ends + 1, -sizes)
        live = np.cumsum(delta)
        left = np.ones(len(intervals), dtype=bool)
        chosen: list[int] = []
        while left.any():
            t = int(np.argmax(live))
            candidates = np.flatnonzero(left & (starts <= t) & (ends >= t))
            if len(candidates) == 0:  # only zero-size intervals remain
                candidates = np.flatnonzero(left)
            best = min(candidates.tolist(), key=lambda i: tie_break(intervals[i]))
            chosen.append(best)
            left[best] = False
            live[starts[best]:ends[best] + 1] -= sizes[best]
        return chosen

    return order


def _length(i: Interval) -> int:
    return i.end - i.start


STRATEGIES: dict[str, Order] = {
    "max-live/size": _by_max_live(lambda i: (-i.size, -_length(i), i.start)),
    "max-live/time": _by_max_live(lambda i: (-_length(i), -i.size, i.start)),
    "size": _static(lambda i: (-i.size, -_length(i), i.start)),
    "lifetime": _static(lambda i: (-_length(i), -i.size, i.start)),
    "area": _static(lambda i: (-i.size * (_length(i) + 1), i.start)),
    "program-order": _static(lambda i: (i.start, -i.size)),
}


def place(intervals: Sequence[Interval], strategies: Sequence[str] | None = None) -> Placement:
    """The best placement over the strategies (all by default), each with first fit and
    best fit; stops early once the arena equals the lower bound."""
    bound = max_live_bytes(list(intervals))
    best: Placement | None = None
    for name in strategies or list(STRATEGIES):
        order = STRATEGIES[name](intervals)
        for fit in ("first-fit", "best-fit"):
            offsets = _place_in_order(intervals, order, best_fit=fit == "best-fit")
            arena = max((o + i.size for o, i in zip(offsets, intervals, strict=True)), default=0)
            if best is None or arena < best.arena:
                best = Placement(tuple(offsets), arena, f"{name}, {fit}")
            if best.arena <= bound:
                return best
    return best if best is not None else Placement((), 0, "empty")


def _place_in_order(intervals: Sequence[Interval], order: list[int], best_fit: bool) -> list[int]:
    starts = np.array([i.start for i in intervals])
    ends = np.array([i.end for i in intervals])
    sizes = np.array([i.size for i in intervals], dtype=np.int64)
    offsets = np.zeros(len(intervals), dtype=np.int64)
    placed = np.zeros(len(intervals), dtype=bool)
    for index in order:
        busy = np.flatnonzero(placed & (starts <= ends[index]) & (ends >= starts[index]))
        segments = sorted(zip(offsets[busy].tolist(), (offsets[busy] + sizes[busy]).tolist(), strict=True))
        offsets[index] = _gap(segments, int(sizes[index]), best_fit)
        placed[index] = True
    return offsets.tolist()


def _gap(segments: list[tuple[int, int]], size: int, best_fit: bool) -> int:
    """Lowest (or, for best fit, tightest) address where `size` bytes avoid every segment;
    segments are (start, end) sorted by start and may overlap one another."""
    candidate, choice, slack = 0, None, None
    for lo, hi in segments:
        if lo - candidate >= size:
            if not best_fit:
                return candidate
            if slack is None or lo - candidate - size < slack:
                choice, slack = candidate, lo - candidate - size
        candidate = max(candidate, hi)
    return candidate if choice is None else choice
