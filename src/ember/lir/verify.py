"""Verifier of the low-level IR: declared buffers, operand kinds, lifetimes, views and types."""
from __future__ import annotations

from ember.lir.chain import ELEMENTWISE_CHAIN, infer_chain
from ember.lir.ir import (
    ALLOC,
    COPY,
    DEALLOC,
    INSTRS,
    VIEW,
    Buffer,
    BufferKind,
    Instr,
    OperandKind,
    Program,
    resolve_address,
)
from ember.ops import OpError
from ember.support.errors import EmberError, VerificationError


def verify_program(program: Program) -> None:
    """Raises VerificationError naming the first broken rule and the instruction index:
    1. every operand is a declared buffer, weights carry data of their type;
    2. activations are used only between their alloc and dealloc, each allocated once;
    3. weights and inputs are never written, not even through a view;
    4. operand counts and types agree with the instruction's op (re-inferred);
    5. a view lies inside its base, starts on an element boundary, and its base is live from
       the `view` until the view's `dealloc`.
    """
    names: set[str] = set()
    for buffer in program.weights + program.inputs + program.outputs:
        _declare(names, buffer)
        if buffer.kind is BufferKind.WEIGHT and (
            buffer.data is None or tuple(buffer.data.shape) != buffer.type.shape
        ):
            raise VerificationError(f"weight '{buffer.name}' has no data of type {buffer.type}")
    static = set(map(id, program.weights + program.inputs + program.outputs))
    live: set[int] = set()
    ever: set[int] = set()
    views_of: dict[int, list[Buffer]] = {}
    for view in program.views():
        views_of.setdefault(id(view.view_of), []).append(view)
    for index, instr in enumerate(program.instrs):
        where = f"instruction {index} ({instr.name}, from '{instr.source}')"
        if instr.name not in INSTRS:
            raise VerificationError(f"{where}: unknown instruction")
        if instr.name in (ALLOC, VIEW):
            buffer = instr.operand(0)
            if buffer.kind is not BufferKind.ACTIVATION or id(buffer) in ever:
                raise VerificationError(f"{where}: '{buffer.name}' is not a fresh activation")
            if (instr.name == VIEW) != buffer.is_view:
                raise VerificationError(f"{where}: '{buffer.name}' is {'' if buffer.is_view else 'not '}a view")
            if buffer.is_view:
                base = id(buffer.view_of)
                _check_view(buffer, where, base in static or base in live)
            _declare(names, buffer)
            live.add(id(buffer))
            ever.add(id(buffer))
            continue
        idef = INSTRS[instr.name]
        if instr.base_count > len(idef.operand_kinds) and not idef.variadic:
            raise VerificationError(
                f"{where}: takes at most {len(idef.operand_kinds)} operands, got {instr.base_count}"
            )
        if instr.base_count < 0:
            raise VerificationError(f"{where}: its kernel declares more operands than it has")
        for operand, kind in zip(instr.operands, instr.kinds(), strict=True):
            if operand is None:
                continue
            if id(operand) not in static and id(operand) not in live:
                raise VerificationError(f"{where}: '{operand.name}' is used outside its lifetime")
            root = resolve_address(operand)[0]
            if kind.writes and root.kind in (BufferKind.WEIGHT, BufferKind.INPUT):
                via = "" if root is operand else f" through view '{operand.name}'"
                raise VerificationError(f"{where}: writes {root.kind.value} '{root.name}'{via}")
            if kind is OperandKind.SCRATCH and (operand.kind is not BufferKind.ACTIVATION or operand.is_view):
                raise VerificationError(f"{where}: scratch '{operand.name}' is not an activation of its own")
        if instr.name == DEALLOC:
            dead = instr.operand(0)
            live.discard(id(dead))
            views = [b.name for b in views_of.get(id(dead), ()) if id(b) in live]
            if views:
                raise VerificationError(f"{where}: '{dead.name}' dies while its view '{views[0]}' is live")
            continue
        _check_types(instr, where)


def _check_view(view: Buffer, where: str, base_live: bool) -> None:
    base = view.view_of
    assert base is not None, "only views are checked here"
    if not base_live:
        raise VerificationError(f"{where}: view '{view.name}' of '{base.name}', which is not live")
    end = view.view_offset + view.type.nbytes
    if view.view_offset < 0 or end > base.type.nbytes:
        raise VerificationError(f"{where}: view '{view.name}' covers bytes [{view.view_offset}, {end}) "
                                f"of '{base.name}', which has {base.type.nbytes}")
    if view.view_offset % view.type.dtype.itemsize:
        raise VerificationError(f"{where}: view '{view.name}' starts at byte {view.view_offset}, "
                                f"inside an element")


def _declare(names: set[str], buffer: Buffer) -> None:
    if buffer.name in names:
        raise VerificationError(f"buffer name '{buffer.name}' is declared twice")
    names.add(buffer.name)


def _check_types(instr: Instr, where: str) -> None:
    idef = instr.idef
    if instr.name == COPY:
        dest, src = instr.required()
        if dest.type.shape != src.type.shape or dest.type.dtype != src.type.dtype:
            raise VerificationError(f"{where}: copies {src.type} into {dest.type}")
        return
    if instr.name == ELEMENTWISE_CHAIN:
        out, *sources = instr.required()
        try:
            final = infer_chain(instr.attrs, [b.type for b in sources])[-1]
        except (OpError, IndexError, EmberError) as err:
            raise VerificationError(f"{where}: {err}") from None
        if out.type != final:
            raise VerificationError(f"{where}: result is {out.type}, the steps give {final}")
        return
    op = idef.op
    if op is None:
        raise VerificationError(f"{where}: the instruction has no op to check its types against")
    results = len(op.results)
    base = instr.base_operands
    ins = base[results:]
    if any(b is None for b in base[:results]):
        raise VerificationError(f"{where}: missing result buffer")
    outs = [instr.operand(i) for i in range(results)]
    try:
        expected = op.infer_types(instr.attrs, [None if b is None else b.type for b in ins])
    except OpError as err:
        raise VerificationError(f"{where}: {err}") from None
    for buffer, type_ in zip(outs, expected, strict=False):
        if buffer.type != type_:
            raise VerificationError(f"{where}: result '{buffer.name}' is {buffer.type}, op gives {type_}")
