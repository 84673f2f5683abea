"""Dead store elimination: delete instructions whose results nobody observes.

Imports lir/ir and the pass registry."""
from __future__ import annotations

from ember.lir.ir import MARKERS, Program, footprint
from ember.lir.passes.registry import LirPass, register_lir_pass

Ranges = list[tuple[int, int]]


@register_lir_pass
class DeadStoreElimination(LirPass):
    """One backward scan over the instructions, tracking the bytes that are still to be read
    ("demanded"), per root buffer.

    Rules:
    1. outputs are demanded in full at the end of the program (an implicit final read);
    2. an instruction whose every written footprint misses the demanded bytes is deleted
       (all instructions are pure: their only effect is their @out/@inout operands);
    3. otherwise its @out footprints stop being demanded (they are overwritten here) and
       then its @in/@inout footprints become demanded.
    Aliasing is exact: views are compared by the byte ranges they cover in their root.
    Precondition: a verified program. Leaves the dead buffers' markers for delete-dead-allocs."""

    name = "dse"

    def run(self, program: Program) -> bool:
        demanded: dict[int, Ranges] = {id(b): [(0, b.type.nbytes)] for b in program.outputs}
        kept = []
        for instr in reversed(program.instrs):
            if instr.name in MARKERS:
                kept.append(instr)
                continue
            operands = [(footprint(b), k.reads, k.writes)
                        for b, k in zip(instr.operands, instr.kinds(), strict=True) if b is not None]
            writes = [f for f, _, writes in operands if writes]
            if writes and not any(_overlaps(demanded.get(id(root), []), lo, hi) for root, lo, hi in writes):
                continue
            for (root, lo, hi), reads, _ in operands:
                if not reads:
                    demanded[id(root)] = _subtract(demanded.get(id(root), []), lo, hi)
            for (root, lo, hi), reads, _ in operands:
                if reads:
                    demanded.setdefault(id(root), []).append((lo, hi))
            kept.append(instr)
        changed = len(kept) != len(program.instrs)
        program.instrs = kept[::-1]
        return changed


def _overlaps(ranges: Ranges, lo: int, hi: int) -> bool:
    return any(a < hi and lo < b for a, b in ranges)


def _subtract(ranges: Ranges, lo: int, hi: int) -> Ranges:
    out = []
    for a, b in ranges:
        if b <= lo or hi <= a:
            out.append((a, b))
            continue
        if a < lo:
            out.append((a, lo))
        if hi < b:
            out.append((hi, b))
    return out
