"""Buffer sharing: an elementwise instruction writes its result into an operand's buffer
when that operand dies there (in-place Relu, Add into the residual, and so on).

Imports lir/ir and the pass analysis."""
from __future__ import annotations

from ember.lir.ir import Buffer, BufferKind, Instr, OperandKind, Program, footprint
from ember.lir.passes.analysis import (
    Move,
    UseIndex,
    can_view_src,
    cover_with_bases,
    deallocations,
    declarations,
    is_storage_owner,
    make_view,
)
from ember.lir.passes.registry import LirPass, register_lir_pass


@register_lir_pass
class ShareBuffers(LirPass):
    """For `Op @out %y, @in %x, ...` where Op has the op-table trait "elementwise", %x and %y
    have exactly the same type (shape and dtype: %x is no broadcast operand), and %x dies
    here (no later instruction touches any byte %x covers, through any alias), the result
    takes %x's place. Elementwise kernels read element i before writing element i, so
    writing over the operand is safe. Rules, tried in order:

    1. Merge: %y is replaced by %x from here on and %y's markers go (%x dies where %y did).
       Needs: %y owns its storage (an activation, not a view), has no views and is not
       touched before; %x's root is an activation (weights and inputs are never
       overwritten, outputs never hold another buffer's data).
    2. Operand into result: when %y is a view (say, into a concat's slice), %x becomes a
       view of %y instead. Needs: %x owns its storage; %y's root is an activation; no other
       instruction touches %y's bytes while %x is live (see analysis.can_view_src).
    Either way no other operand of the instruction may overlap the shared bytes, except
    another use of %x itself.
    """

    name = "share-buffers"

    def run(self, program: Program) -> bool:
        uses = UseIndex(program)
        markers = _Markers(program)
        changed = False
        for instr in list(program.instrs):
            op = instr.idef.op
            if op is not None and "elementwise" in op.traits:
                changed |= self._try(program, uses, markers, uses.ordinal[id(instr)], instr)
        markers.flush()
        return changed

    def _try(self, program: Program, uses: UseIndex, markers: _Markers, index: int, instr: Instr) -> bool:
        kinds = instr.kinds()
        for out in [b for b, k in zip(instr.operands, kinds, strict=True) if k is OperandKind.OUT and b is not None]:
            for x in [b for b, k in zip(instr.operands, kinds, strict=True) if k is OperandKind.IN and b is not None]:
                if x.type != out.type or not _dies_here(uses, index, x) or not _alone(instr, out, x):
                    continue
                if _mergeable(uses, index, out, x):
                    uses.substitute(out, x)
                    markers.merge(out, x)
                    return True
                if can_view_src(uses, index, Move.whole(x, out), roots=(BufferKind.ACTIVATION,)):
                    markers.flush()
                    make_view(program, x, out, 0, instr.source)
                    markers.reindex()
                    uses.refresh(x)
                    return True
        return False


def _dies_here(uses: UseIndex, index: int, x: Buffer) -> bool:
    root, lo, hi = footprint(x)
    return is_storage_owner(root) and not uses.touched_after(root, lo, hi, index)


def _alone(instr: Instr, out: Buffer, x: Buffer) -> bool:
    """Only `out` (once) and `x` (any number of times) touch the bytes of either."""
    shared = [footprint(out), footprint(x)]
    if footprint(out)[0] is footprint(x)[0] or sum(b is out for b in instr.operands) != 1:
        return False
    for b in instr.operands:
        if b is None or b is out or b is x:
            continue
        root, lo, hi = footprint(b)
        if any(root is r and lo < r_hi and r_lo < hi for r, r_lo, r_hi in shared):
            return False
    return True


def _mergeable(uses: UseIndex, index: int, out: Buffer, x: Buffer) -> bool:
    if not is_storage_owner(out):
        return False
    return all(t.buffer is out and t.index >= index for t in uses.family(out))


class _Markers:
    """The lifetime markers of a program during the pass, updated merge by merge without
    rescanning it: marker positions stay put (a marker moves by taking another's slot, and
    removals wait for flush), so a chain of N merges costs O(N), not O(N^2)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.reindex()

    def reindex(self) -> None:
        self.declared = declarations(self.program)
        self.ends = deallocations(self.program)
        self.removed: set[int] = set()

    def flush(self) -> None:
        """Applies the pending removals (then positions change: reindex)."""
        if self.removed:
            self.program.instrs = [i for n, i in enumerate(self.program.instrs) if n not in self.removed]
        self.reindex()

    def merge(self, out: Buffer, operand: Buffer) -> None:
        """`out` (first touched where `operand` dies; already replaced in every instruction)
        goes away; `operand` dies at the later of the two deallocs (or never, if either never
        died); its bases cover it."""
        instrs = self.program.instrs
        end, old_end = self.ends.pop(id(out), None), self.ends.get(id(operand))
        self.removed.add(self.declared.pop(id(out)))
        if end is None or old_end is None:
            self.removed |= {n for n in (end, old_end) if n is not None}
            self.ends.pop(id(operand), None)
        elif end > old_end:
            instrs[end] = instrs[old_end]
            self.removed.add(old_end)
            self.ends[id(operand)] = end
        else:
            self.removed.add(end)
        if operand.is_view:
            self.flush()
            cover_with_bases(self.program, operand)
            self.reindex()
