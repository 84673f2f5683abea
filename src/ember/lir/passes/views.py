"""Zero-copy views: copy elimination, reshapes, contiguous slices and concats in place.

Each of these instructions moves bytes unchanged: `copy`, `Reshape` (ONNX Squeeze,
Unsqueeze and Flatten arrive as Reshape), a Slice whose kept elements are contiguous, a
Concat along its outermost non-unit axis. A move of src bytes [s, s+n) to dst bytes
[d, d+n) goes away by making one side a view of the other; the legality rules are
analysis.can_view_src / can_view_dst. The four passes differ in which instructions they
look at. Imports lir/ir and the pass analysis."""
from __future__ import annotations

import math

from ember.lir.ir import COPY, DEALLOC, VIEW, Buffer, BufferKind, Instr, Program, footprint
from ember.lir.passes.analysis import Move, UseIndex, can_view_dst, can_view_src, make_view, operand
from ember.lir.passes.registry import LirPass, register_lir_pass
from ember.support.names import UniqueNamer


class ViewPass(LirPass):
    """Shared driver: sweeps the program once per round, rewriting what it can (one
    rewrite can enable another, e.g. a reshape into a slice that became a view), until a
    round changes nothing."""

    def moves(self, instr: Instr) -> list[Move] | None:
        raise NotImplementedError

    def run(self, program: Program) -> bool:
        changed = False
        while True:
            candidates = [(instr, moves) for instr in program.instrs if (moves := self.moves(instr))]
            if not candidates:  # nothing to rewrite: no index to build (large graphs pay for it)
                return changed
            uses = UseIndex(program)
            progress = False
            for instr, moves in candidates:
                progress |= self.rewrite(program, uses, instr, moves)
            # Rewritten moves leave the program in one sweep (removing each at once would
            # rescan the program per move).
            program.instrs = [i for i in program.instrs if id(i) not in uses.removed]
            if not progress:
                return changed
            changed = True

    def rewrite(self, program: Program, uses: UseIndex, instr: Instr, moves: list[Move]) -> bool:
        """Removes a single whole move, preferring to write the producer's result straight
        into the destination (which may be an output or a slice of a concat)."""
        (move,) = moves
        index = uses.ordinal[id(instr)]
        if can_view_src(uses, index, move):
            viewed, base, offset = move.src, move.dst, move.dst_offset
        elif can_view_dst(uses, index, move):
            viewed, base, offset = move.dst, move.src, move.src_offset
        else:
            return False
        _remove(program, uses, instr)
        make_view(program, viewed, base, offset, instr.source)
        uses.refresh(viewed)
        return True


def _remove(program: Program, uses: UseIndex, instr: Instr) -> None:
    """Forgets a rewritten move; the round's sweep takes it out of the program."""
    uses.drop(instr)
    uses.removed.add(id(instr))


@register_lir_pass
class CopyElimination(ViewPass):
    """Removes `copy @out %y, @in %x`.

    Rules:
    1. a copy whose source and destination are the same bytes is deleted;
    2. else %x becomes a view of %y (the producer of %x writes straight into %y, which may
       be an output) when can_view_src allows, and the copy is deleted;
    3. else %y becomes a view of %x when can_view_dst allows, and the copy is deleted.
    Preconditions: a verified program. Only activations that own storage become views;
    weights and inputs are never written; an output only ever holds its own data."""

    name = "copy-elimination"

    def moves(self, instr: Instr) -> list[Move] | None:
        return [Move.whole(operand(instr, 1), operand(instr, 0))] if instr.name == COPY else None

    def rewrite(self, program: Program, uses: UseIndex, instr: Instr, moves: list[Move]) -> bool:
        dst, src = operand(instr, 0), operand(instr, 1)
        if footprint(dst) == footprint(src):
            _remove(program, uses, instr)
            return True
        return super().rewrite(program, uses, instr, moves)


@register_lir_pass
class ReshapeViews(ViewPass):
    """Removes `Reshape @out %y, @in %x` (a reshape moves no element).

    Rules:
    1. %x becomes a view of %y, typed as before, when can_view_src allows;
    2. else %y becomes a view of %x when can_view_dst allows;
    either way the Reshape is deleted. Preconditions: as copy-elimination."""

    name = "reshape-views"

    def moves(self, instr: Instr) -> list[Move] | None:
        return [Move.whole(operand(instr, 1), operand(instr, 0))] if instr.name == "Reshape" else None


@register_lir_pass
class SliceViews(ViewPass):
    """Removes `Slice @out %y, @in %x` whose kept elements are one contiguous run of %x.

    Rules:
    1. the run is contiguous when every axis before some axis a keeps one index, axis a is
       stepped by 1 and every axis after a is kept whole (slicing the outermost non-unit
       dimension);
    2. %y becomes a view of %x at the run's byte offset when can_view_dst allows, and the
       Slice is deleted.
    Preconditions: as copy-elimination."""

    name = "slice-views"

    def moves(self, instr: Instr) -> list[Move] | None:
        if instr.name != "Slice":
            return None
        offset = _contiguous_slice_offset(instr)
        out, x = operand(instr, 0), operand(instr, 1)
        return None if offset is None else [Move(x, out, out.type.nbytes, src_offset=offset)]


@register_lir_pass
class ConcatInPlace(ViewPass):
    """Writes the operands of `Concat @out %c, @in %x1, ..., %xn` in place.

    Rules:
    1. only a Concat along an axis with only unit axes before it qualifies (each operand's
       slice of %c is then one contiguous run);
    2. each operand %xk that can_view_src allows becomes a view of its slice of %c, so its
       producer writes into %c directly (an operand named twice qualifies once);
    3. when all operands moved, the Concat is deleted; when only some did, it is replaced
       by `copy` of each remaining operand into a new view of its slice; when none did, it
       stays as it is.
    Preconditions: as copy-elimination."""

    name = "concat-in-place"

    def moves(self, instr: Instr) -> list[Move] | None:
        if instr.name != "Concat":
            return None
        out = operand(instr, 0)
        axis = instr.attrs.axis % out.type.rank
        if math.prod(out.type.shape[:axis]) != 1:
            return None
        moves, offset = [], 0
        for index in range(1, len(instr.operands)):
            x = operand(instr, index)
            moves.append(Move(x, out, x.type.nbytes, dst_offset=offset))
            offset += x.type.nbytes
        return moves

    def rewrite(self, program: Program, uses: UseIndex, instr: Instr, moves: list[Move]) -> bool:
        placed = []
        for move in moves:
            if can_view_src(uses, uses.ordinal[id(instr)], move):
                make_view(program, move.src, move.dst, move.dst_offset, instr.source)
                uses.refresh(move.src)
                placed.append(move)
        if not placed:
            return False
        uses.drop(instr)
        at = program.instrs.index(instr)
        namer = UniqueNamer()
        for buffer in program.buffers():
            namer.reserve(buffer.name)
        copies: list[Instr] = []
        for move in moves:
            if move not in placed:
                slot = Buffer(namer.unique(f"{move.dst.name}.part"), move.src.type, BufferKind.ACTIVATION,
                              view_of=move.dst, view_offset=move.dst_offset)
                copies += [Instr(VIEW, [slot], source=instr.source), Instr(COPY, [slot, move.src], source=instr.source),
                           Instr(DEALLOC, [slot], source=instr.source)]
        program.instrs[at:at + 1] = copies
        if copies:  # new compute instructions need ordinals of their own: sweep, then re-index
            program.instrs = [i for i in program.instrs if id(i) not in uses.removed]
            uses.rebuild(program)
        return True


def _contiguous_slice_offset(instr: Instr) -> int | None:
    """Byte offset of the kept run in the input, or None when the kept elements are not
    one contiguous run."""
    out, x = operand(instr, 0), operand(instr, 1)
    attrs = instr.attrs
    starts = [0] * x.type.rank
    steps = [1] * x.type.rank
    for axis, start, step in zip(attrs.axes, attrs.starts, attrs.steps, strict=True):
        starts[axis], steps[axis] = start, step
    shape, kept = x.type.shape, out.type.shape
    outer = next((a for a, n in enumerate(kept) if n != 1), len(kept))
    for axis in range(outer + 1, len(shape)):
        if kept[axis] != shape[axis] or (kept[axis] > 1 and (starts[axis], steps[axis]) != (0, 1)):
            return None
    if outer < len(shape) and kept[outer] > 1 and steps[outer] != 1:
        return None
    strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    return sum(s * st for s, st in zip(starts, strides, strict=True)) * x.type.dtype.itemsize
