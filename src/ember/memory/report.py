"""The memory plan as data and as text: one line per placed buffer (offset, size, live
range and a lifetime chart), then the totals. `ember dump --stage memory` prints it.
Imports lir/ir only."""
from __future__ import annotations

from dataclasses import dataclass

from ember.lir.ir import Buffer
from ember.support.lexer import quote_name

CHART_WIDTH = 48


@dataclass(frozen=True)
class BufferPlacement:
    buffer: Buffer
    offset: int
    size: int
    start: int
    end: int


@dataclass(frozen=True)
class MemoryPlan:
    """arena_bytes: the activation arena (high-water mark of the placement);
    lower_bound_bytes: the most bytes (aligned sizes) live at one instruction;
    unshared_bytes: all activations that own storage, each in a region of its own;
    weight_bytes: the constant data, outside the arena."""

    program: str
    placements: tuple[BufferPlacement, ...]
    arena_bytes: int
    lower_bound_bytes: int
    unshared_bytes: int
    weight_bytes: int
    instructions: int
    strategy: str

    @property
    def efficiency(self) -> float:
        """lower bound / arena, in (0, 1]; 1 means no byte lost to fragmentation."""
        return self.lower_bound_bytes / self.arena_bytes if self.arena_bytes else 1.0

    def summary(self) -> dict[str, int | float | str]:
        return {
            "arena_bytes": self.arena_bytes,
            "arena_lower_bound_bytes": self.lower_bound_bytes,
            "arena_efficiency": self.efficiency,
            "activation_bytes_unshared": self.unshared_bytes,
            "weight_bytes": self.weight_bytes,
        }


def format_plan(plan: MemoryPlan) -> str:
    lines = [f"memory plan for {plan.program!r}: {len(plan.placements)} buffers in one arena, "
             f"{plan.instructions} instructions (chart: one column per "
             f"{_step(plan.instructions)} instructions)",
             f"  {'offset':>10} {'size':>10}  {'live':<13} {'':{CHART_WIDTH}}  buffer"]
    for p in sorted(plan.placements, key=lambda p: (p.offset, p.start)):
        live = f"[{p.start}, {p.end}]"
        lines.append(f"  {p.offset:>10} {p.size:>10}  {live:<13} {_bar(p, plan.instructions)}  "
                     f"%{quote_name(p.buffer.name)}")
    lines += [
        f"arena:            {plan.arena_bytes} bytes ({plan.strategy})",
        f"lower bound:      {plan.lower_bound_bytes} bytes (most bytes live at once)",
        f"efficiency:       {plan.efficiency:.3f} (lower bound / arena)",
        f"unshared:         {plan.unshared_bytes} bytes (every activation in its own region)",
        f"weights:          {plan.weight_bytes} bytes",
    ]
    return "\n".join(lines) + "\n"


def _step(instructions: int) -> int:
    return max(1, -(-instructions // CHART_WIDTH))


def _bar(p: BufferPlacement, instructions: int) -> str:
    step = _step(instructions)
    first, last = p.start // step, min(p.end, max(instructions - 1, 0)) // step
    return "".join("#" if first <= c <= last else "." for c in range(CHART_WIDTH))
