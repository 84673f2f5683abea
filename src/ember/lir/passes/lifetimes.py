"""Lifetime passes: hoist deallocs, sink allocs, delete dead allocs.

They only move or drop markers, so they never change what a program computes; they tighten
the live ranges that the memory planner packs. A view's lifetime counts as a use of its
bases: a base is declared before its first view and dies after its last one.
Imports lir/ir and the pass analysis."""
from __future__ import annotations

from ember.lir.ir import ALLOC, DEALLOC, MARKERS, VIEW, Buffer, Instr, Program
from ember.lir.passes.analysis import operand, users_by_position, view_depth
from ember.lir.passes.registry import LirPass, register_lir_pass


def _declared(program: Program) -> list[tuple[int, Instr]]:
    return [(n, i) for n, i in enumerate(program.instrs) if i.name in (ALLOC, VIEW)]


def _deepest_first(program: Program) -> list[Buffer]:
    """Declared buffers, every view before its base (so a base can fold in its views)."""
    buffers = [operand(i, 0) for _, i in _declared(program)]
    return sorted(buffers, key=view_depth, reverse=True)


@register_lir_pass
class HoistDealloc(LirPass):
    """Moves every `dealloc %x` to just after the last instruction that uses %x.

    Rules:
    1. last(x) is the latest of x's own uses and last(v) for every view v of x;
    2. a buffer with no use at all dies right after its `alloc` / `view`;
    3. deallocs landing after the same instruction put views before their bases.
    Precondition: a verified program."""

    name = "hoist-dealloc"

    def run(self, program: Program) -> bool:
        uses = users_by_position(program)
        declared = {id(i.operands[0]): n for n, i in _declared(program)}
        last: dict[int, int] = {}
        for buffer in _deepest_first(program):
            own = uses.get(id(buffer))
            last[id(buffer)] = max(last.get(id(buffer), -1), own[-1] if own else declared[id(buffer)])
            if buffer.view_of is not None:
                base = id(buffer.view_of)
                last[base] = max(last.get(base, -1), last[id(buffer)])
        after: dict[int, list[Instr]] = {}
        deallocs = [(n, i) for n, i in enumerate(program.instrs) if i.name == DEALLOC]
        for index, instr in sorted(deallocs, key=lambda p: -view_depth(operand(p[1], 0))):
            after.setdefault(last.get(id(instr.operands[0]), index), []).append(instr)
        rebuilt: list[Instr] = []
        for index, instr in enumerate(program.instrs):
            if instr.name != DEALLOC:
                rebuilt.append(instr)
            rebuilt.extend(after.get(index, ()))
        return _replace(program, rebuilt)


@register_lir_pass
class SinkAlloc(LirPass):
    """Moves every `alloc %x` (and `view %x`) to just before the first instruction that uses %x.

    Rules:
    1. first(x) is the earliest of x's own uses and first(v) for every view v of x;
    2. a buffer with no use at all is declared right before its dealloc (or stays where it
       is when it has none);
    3. declarations landing before the same instruction put bases before their views.
    Precondition: a verified program."""

    name = "sink-alloc"

    def run(self, program: Program) -> bool:
        uses = users_by_position(program)
        ends = {id(i.operands[0]): n for n, i in enumerate(program.instrs) if i.name == DEALLOC}
        first: dict[int, int] = {}
        for index, instr in _declared(program):
            own = uses.get(id(instr.operands[0]))
            first[id(instr.operands[0])] = own[0] if own else ends.get(id(instr.operands[0]), index)
        for buffer in _deepest_first(program):
            if buffer.view_of is not None and id(buffer.view_of) in first:
                base = id(buffer.view_of)
                first[base] = min(first[base], first[id(buffer)])
        before: dict[int, list[Instr]] = {}
        for _, instr in sorted(_declared(program), key=lambda p: view_depth(operand(p[1], 0))):
            before.setdefault(first[id(instr.operands[0])], []).append(instr)
        rebuilt: list[Instr] = []
        for index, instr in enumerate(program.instrs):
            rebuilt.extend(before.get(index, ()))
            if instr.name not in (ALLOC, VIEW):
                rebuilt.append(instr)
        return _replace(program, rebuilt)


@register_lir_pass
class DeleteDeadAllocs(LirPass):
    """Drops the markers of buffers nothing uses.

    Rules:
    1. `alloc %x` / `view %x` and `dealloc %x` go when no compute instruction names %x and
       no view of %x is used;
    2. views are judged before their bases, so a base whose only views were unused goes too.
    Precondition: a verified program. A buffer that is only written still counts as used:
    run dse first."""

    name = "delete-dead-allocs"

    def run(self, program: Program) -> bool:
        uses = users_by_position(program)
        used: set[int] = set()
        for buffer in _deepest_first(program):
            if id(buffer) in uses or id(buffer) in used:
                used.add(id(buffer))
                if buffer.view_of is not None:
                    used.add(id(buffer.view_of))
        dead = {id(i.operands[0]) for _, i in _declared(program)} - used
        return _replace(program, [i for i in program.instrs
                                  if i.name not in MARKERS or id(i.operands[0]) not in dead])


def _replace(program: Program, instrs: list[Instr]) -> bool:
    changed = len(instrs) != len(program.instrs) or any(a is not b for a, b in zip(instrs, program.instrs, strict=True))
    program.instrs = instrs
    return changed
