"""Alias-aware use information and lifetime repairs shared by the LIR passes.

Every operand is reduced to its footprint: (root buffer, byte range) through resolve_address,
so two operands alias exactly when their footprints overlap. UseIndex lists, per root, every
compute instruction that reads or writes some of its bytes; legality checks are range
queries on it. The repair helpers keep `alloc`/`view`/`dealloc` valid after a pass turned a
buffer into a view or merged two buffers: a base is declared before its views and dies after
them. Imports lir/ir only."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ember.lir.ir import ALLOC, DEALLOC, MARKERS, VIEW, Buffer, BufferKind, Instr, Program, footprint


def operand(instr: Instr, index: int) -> Buffer:
    """Operand `index` of `instr`, one its definition requires: only optional operands are
    None, and the verifier rejects a missing required one. A marker's buffer is operand 0."""
    buffer = instr.operands[index]
    if buffer is None:
        raise ValueError(f"{instr.name}: operand {index} is absent")
    return buffer


@dataclass(slots=True)
class Touch:
    """One operand of one compute instruction, as bytes [lo, hi) of a root buffer (not
    frozen: an index holds one per operand, and a frozen one's __init__ cost most of building
    it; never changed once made)."""

    index: int
    buffer: Buffer
    lo: int
    hi: int
    reads: bool
    writes: bool


class UseIndex:
    """Touches of every root by the compute instructions of a program (markers excluded).

    Touch.index is the instruction's position when the index was built: an ordinal that
    stays meaningful while passes move markers and delete compute instructions (only the
    order of compute instructions matters to the checks). A pass that inserts compute
    instructions rebuilds the index; one that rewrites buffers patches it (drop, refresh,
    substitute)."""

    def __init__(self, program: Program) -> None:
        self.rebuild(program)

    def rebuild(self, program: Program) -> None:
        self.by_root: dict[int, list[Touch]] = {}
        self.last: dict[int, int] = {}  # id(root) -> the latest ordinal touching it
        self.ordinal: dict[int, int] = {}
        self.instr_at: dict[int, Instr] = {}
        self.removed: set[int] = set()  # id() of instructions a pass dropped, still to delete
        for index, instr in enumerate(program.instrs):
            if instr.name not in MARKERS:
                self.ordinal[id(instr)] = index
                self.instr_at[index] = instr
                for buffer, kind in zip(instr.operands, instr.kinds(), strict=True):
                    if buffer is not None:
                        self._add(index, buffer, kind.reads, kind.writes)

    def _add(self, index: int, buffer: Buffer, reads: bool, writes: bool) -> None:
        root, lo, hi = footprint(buffer)
        self.by_root.setdefault(id(root), []).append(Touch(index, buffer, lo, hi, reads, writes))
        if index > self.last.get(id(root), -1):
            self.last[id(root)] = index

    def touched_after(self, root: Buffer, lo: int, hi: int, index: int) -> bool:
        """Whether an instruction after ordinal `index` touches bytes [lo, hi) of `root`.
        Constant time when nothing touches the root after it at all (the common case: a
        chain whose every step reuses one buffer would otherwise rescan the whole chain)."""
        if self.last.get(id(root), -1) <= index:
            return False
        return any(t.index > index for t in self.overlapping(root, lo, hi))

    def family(self, root: Buffer) -> list[Touch]:
        """Every touch of `root`'s bytes, through the root itself or any of its views."""
        return self.by_root.get(id(root), [])

    def overlapping(self, root: Buffer, lo: int, hi: int) -> Iterator[Touch]:
        return (t for t in self.family(root) if t.lo < hi and lo < t.hi)

    def drop(self, instr: Instr) -> None:
        """Forgets a compute instruction (call before deleting it)."""
        index = self.ordinal.pop(id(instr))
        self.instr_at.pop(index, None)
        for key in {id(footprint(b)[0]) for b in instr.operands if b is not None}:
            self.by_root[key] = [t for t in self.by_root[key] if t.index != index]
            self.last[key] = max((t.index for t in self.by_root[key]), default=-1)

    def refresh(self, old_root: Buffer) -> None:
        """Re-files the touches of a former root after it became a view."""
        self.last.pop(id(old_root), None)
        for t in self.by_root.pop(id(old_root), []):
            self._add(t.index, t.buffer, t.reads, t.writes)

    def substitute(self, old: Buffer, new: Buffer) -> None:
        """`old`, a root without views, is replaced by `new`: in every instruction touching it
        (found through the index, not by scanning the program) and in the index."""
        self.last.pop(id(old), None)
        for t in self.by_root.pop(id(old), []):
            instr = self.instr_at[t.index]
            instr.operands = [new if b is old else b for b in instr.operands]
            self._add(t.index, new, t.reads, t.writes)


WRITABLE_ROOTS = (BufferKind.ACTIVATION, BufferKind.OUTPUT)


@dataclass(frozen=True)
class Move:
    """An instruction copies `src` bytes [src_offset, src_offset + nbytes) unchanged to
    `dst` bytes [dst_offset, dst_offset + nbytes)."""

    src: Buffer
    dst: Buffer
    nbytes: int
    src_offset: int = 0
    dst_offset: int = 0

    @staticmethod
    def whole(src: Buffer, dst: Buffer) -> Move:
        return Move(src, dst, src.type.nbytes)


def can_view_dst(uses: UseIndex, index: int, move: Move) -> bool:
    """Forward rewrite, dst := view of src: dst owns its storage, nothing touches it before
    the move and nothing but the move writes it; the src bytes it will alias are not
    written again while dst is live."""
    dst = move.dst
    if not is_storage_owner(dst) or move.dst_offset or move.nbytes != dst.type.nbytes:
        return False
    family = uses.family(dst)
    if any(t.index < index or (t.writes and t.index != index) for t in family):
        return False
    root, lo, _ = footprint(move.src)
    if root is dst:
        return False
    lo += move.src_offset
    last = max(t.index for t in family)
    return not any(t.writes and index < t.index <= last for t in uses.overlapping(root, lo, lo + dst.type.nbytes))


def can_view_src(uses: UseIndex, index: int, move: Move, roots: tuple[BufferKind, ...] = WRITABLE_ROOTS) -> bool:
    """Backward rewrite, src := view of dst: src owns its storage and is not written from the
    move on; dst's root is of a kind in `roots` (by default an activation or an output,
    whose bytes then hold exactly the output's data); the dst bytes src will live in are
    not touched by any other instruction while src is live."""
    src = move.src
    if not is_storage_owner(src) or move.src_offset or move.nbytes != src.type.nbytes:
        return False
    root, lo, _ = footprint(move.dst)
    if root is src or root.kind not in roots:
        return False
    family = uses.family(src)
    if any(t.writes and t.index >= index for t in family):
        return False
    first, last = min(t.index for t in family), max(t.index for t in family)
    lo += move.dst_offset
    return not any(first <= t.index <= last and t.index != index
                   for t in uses.overlapping(root, lo, lo + src.type.nbytes))


def is_storage_owner(buffer: Buffer | None) -> bool:
    """An activation with storage of its own: the only kind a pass may turn into a view or
    merge away, because nothing outside the program observes it."""
    return buffer is not None and buffer.kind is BufferKind.ACTIVATION and not buffer.is_view


def view_depth(buffer: Buffer) -> int:
    depth = 0
    while buffer.view_of is not None:
        buffer = buffer.view_of
        depth += 1
    return depth


def declared_ancestors(buffer: Buffer) -> list[Buffer]:
    """The bases of a view that have lifetime markers, nearest first (static roots have none)."""
    chain = []
    base = buffer.view_of
    while base is not None and base.kind is BufferKind.ACTIVATION:
        chain.append(base)
        base = base.view_of
    return chain


def declarations(program: Program) -> dict[int, int]:
    """id(buffer) -> index of its `alloc` or `view`."""
    return {id(i.operands[0]): n for n, i in enumerate(program.instrs) if i.name in (ALLOC, VIEW)}


def deallocations(program: Program) -> dict[int, int]:
    """id(buffer) -> index of its `dealloc`."""
    return {id(i.operands[0]): n for n, i in enumerate(program.instrs) if i.name == DEALLOC}


def make_view(program: Program, buffer: Buffer, base: Buffer, offset: int, source: str) -> None:
    """Turns the storage owner `buffer` into a view of `base` at byte `offset`: its `alloc`
    becomes a `view`, and the lifetimes of its new bases stretch to cover it."""
    declaration = _marker_position(program.instrs, buffer, (ALLOC, VIEW))
    assert declaration is not None, f"{buffer.name} has no declaration"
    buffer.view_of, buffer.view_offset = base, offset
    program.instrs[declaration] = Instr(VIEW, [buffer], source=source)
    cover_with_bases(program, buffer)


def cover_with_bases(program: Program, view: Buffer) -> None:
    """Moves the declarations of a view's bases before the view's and their deallocs after
    the view's (a base with no dealloc stays; a view with none keeps its bases alive)."""
    chain = declared_ancestors(view)
    if not chain:
        return
    instrs = program.instrs
    # Targeted scans for the few buffers involved, not an index of every marker: passes
    # call this once per view they make, and rebuilding an index each time was quadratic.
    view_at = _marker_position(instrs, view, (ALLOC, VIEW))
    late = [b for b in chain if (_marker_position(instrs, b, (ALLOC, VIEW)) or 0) > (view_at or 0)]
    if late:
        moved = [instrs[_marker_position(instrs, b, (ALLOC, VIEW)) or 0] for b in reversed(late)]  # root first
        for instr in moved:
            instrs.remove(instr)
        at = instrs.index(next(i for i in instrs if i.name == VIEW and i.operands[0] is view))
        instrs[at:at] = moved
    inner = view
    for base in chain:
        inner_end, base_end = _marker_position(instrs, inner, (DEALLOC,)), _marker_position(instrs, base, (DEALLOC,))
        if base_end is not None and (inner_end is None or base_end < inner_end):
            instr = instrs.pop(base_end)
            if inner_end is not None:
                instrs.insert(inner_end, instr)  # the pop shifted inner's dealloc one left
        inner = base


def _marker_position(instrs: list[Instr], buffer: Buffer, names: tuple[str, ...]) -> int | None:
    """Position of the first marker named in `names` whose buffer is `buffer`."""
    for position, instr in enumerate(instrs):
        if instr.name in names and instr.operands[0] is buffer:
            return position
    return None


def replace_buffer(program: Program, old: Buffer, new: Buffer) -> None:
    """Reads and writes of `old` in compute instructions use `new` instead."""
    for instr in program.instrs:
        if instr.name not in MARKERS:
            instr.operands = [new if b is old else b for b in instr.operands]


def users_by_position(program: Program) -> dict[int, list[int]]:
    """id(buffer) -> indices of the compute instructions naming it directly."""
    uses: dict[int, list[int]] = {}
    for index, instr in enumerate(program.instrs):
        if instr.name not in MARKERS:
            for buffer in instr.operands:
                if buffer is None:
                    continue
                found = uses.get(id(buffer))
                if found is None:
                    uses[id(buffer)] = [index]
                elif found[-1] != index:  # once per instruction, however often it names it
                    found.append(index)
    return uses
