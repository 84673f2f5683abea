"""Text form of the low-level IR, printer and parser (they round-trip).

    program "mlp" {
      weight @w: f32[512,784]
      input %input: f32[1,784] "input"
      output %logits: f32[1,10] "logits"
      alloc %h: f32[1,512]
      MatMul @out %h, @in %input, @in @w  # fc1
      dealloc %h
    }

Once memory is planned, activations show their arena offset: `alloc %h: f32[1,512] at 64`.
A view starts its life with `view %r: f32[512] of %h at 0`, the byte offset in its base
(which may be any buffer, a weight or another view included); a view never has an arena
offset of its own.
Weights with up to INLINE_LIMIT elements print their data inline, as in the graph text."""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from ember.graph.text import INLINE_LIMIT, format_constant_data
from ember.lir.ir import (
    ALLOC,
    DEALLOC,
    INSTRS,
    VIEW,
    Buffer,
    BufferKind,
    Instr,
    KernelUse,
    OperandKind,
    Packing,
    Program,
)
from ember.lir.verify import verify_program
from ember.ops.text import format_attrs, format_value, parse_attr_dict, parse_attrs, parse_type, parse_value
from ember.support.errors import ParseError, VerificationError
from ember.support.lexer import TokenStream, quote_name


def _ref(buffer: Buffer | None) -> str:
    return "none" if buffer is None else buffer.sigil + quote_name(buffer.name)


def print_program(program: Program) -> str:
    lines = [f"program {json.dumps(program.name)} {{"]
    for weight in program.weights:
        text = f"  weight {_ref(weight)}: {weight.type}"
        if weight.packing is not None:
            text += f" packed {weight.packing.layout}"
            if weight.packing.source is not None:
                text += f" of {_ref(weight.packing.source)}"
        if weight.type.size <= INLINE_LIMIT:
            text += f" = {format_constant_data(weight.constant())}"
        lines.append(text)
    for buffer in program.inputs + program.outputs:
        lines.append(f"  {buffer.kind.value} {_ref(buffer)}: {buffer.type} {json.dumps(buffer.external_name)}")
    for instr in program.instrs:
        lines.append("  " + format_instr(instr))
    lines.append("}")
    return "\n".join(lines) + "\n"


def format_instr(instr: Instr) -> str:
    if instr.name == ALLOC:
        buffer = instr.operand(0)
        text = f"alloc {_ref(buffer)}: {buffer.type}"
        if buffer.offset is not None:
            text += f" at {buffer.offset}"
        return text
    if instr.name == VIEW:
        view = instr.operand(0)
        return f"view {_ref(view)}: {view.type} of {_ref(view.view_of)} at {view.view_offset}"
    if instr.name == DEALLOC:
        return f"dealloc {_ref(instr.operands[0])}"
    pairs = list(zip(instr.operands, instr.kinds(), strict=True))
    operands = ", ".join(f"{k.value} {_ref(b)}" for b, k in pairs[:instr.base_count])
    text = f"{instr.name} {operands}"
    attrs = format_attrs(instr.attrs)
    if attrs:
        text += f" {attrs}"
    if instr.kernel is not None:
        extra = ", ".join(f"{k.value} {_ref(b)}" for b, k in pairs[instr.base_count:])
        text += f" kernel {instr.kernel.name}({extra})"
        if instr.kernel.params:
            text += " {" + ", ".join(f"{k}={format_value(v)}" for k, v in instr.kernel.params.items()) + "}"
    if instr.source:
        text += f"  # {json.dumps(instr.source)}"
    return text


def parse_program(text: str, weights: Mapping[str, np.ndarray] | None = None) -> Program:
    """Parses and verifies a program. Instruction comments carry the source node name, so
    the parser reads the trailing '# "name"' comment before the lexer drops it."""
    sources = _source_comments(text)
    stream = TokenStream(text)
    stream.expect("program")
    program = Program(json.loads(stream.expect_kind("string", "the program name").text))
    stream.expect("{")
    buffers: dict[str, Buffer] = {}
    while not stream.accept("}"):
        token = stream.peek
        if stream.accept("weight"):
            weight = _parse_weight(stream, weights or {}, buffers)
            _declare(buffers, weight, token.line)
            program.weights.append(weight)
        elif token.text in ("input", "output") and token.kind == "ident":
            stream.next()
            name = stream.expect_kind("local", "a buffer name").name
            stream.expect(":")
            type_ = parse_type(stream)
            external = json.loads(stream.expect_kind("string", "the model's name").text)
            buffer = Buffer(name, type_, BufferKind(token.text), external_name=external)
            _declare(buffers, buffer, token.line)
            (program.inputs if token.text == "input" else program.outputs).append(buffer)
        elif stream.accept(ALLOC):
            name = stream.expect_kind("local", "a buffer name").name
            stream.expect(":")
            buffer = Buffer(name, parse_type(stream), BufferKind.ACTIVATION)
            if stream.accept("at"):
                buffer.offset = int(stream.expect_kind("number", "an offset").text)
            _declare(buffers, buffer, token.line)
            program.instrs.append(Instr(ALLOC, [buffer], source=sources.get(token.line, "")))
        elif stream.accept(VIEW):
            name = stream.expect_kind("local", "a view name").name
            stream.expect(":")
            type_ = parse_type(stream)
            stream.expect("of")
            base = _buffer_ref(stream, buffers)
            stream.expect("at")
            offset = int(stream.expect_kind("number", "a byte offset").text)
            buffer = Buffer(name, type_, BufferKind.ACTIVATION, view_of=base, view_offset=offset)
            _declare(buffers, buffer, token.line)
            program.instrs.append(Instr(VIEW, [buffer], source=sources.get(token.line, "")))
        elif stream.accept(DEALLOC):
            ref = stream.expect_kind("local", "an activation name")
            if ref.name not in buffers:
                raise ParseError(f"'{ref.text}' is not a declared buffer", ref.line)
            program.instrs.append(Instr(DEALLOC, [buffers[ref.name]]))
        elif token.kind == "ident" and token.text in INSTRS:
            program.instrs.append(_parse_instr(stream, buffers, sources))
        else:
            raise stream.error("expected a declaration or an instruction")
    try:
        verify_program(program)
    except VerificationError as err:
        raise ParseError(f"parsed program does not verify: {err}") from None
    return program


def _declare(buffers: dict[str, Buffer], buffer: Buffer, line: int) -> None:
    if buffer.name in buffers:
        raise ParseError(f"buffer '{buffer.name}' is declared twice", line)
    buffers[buffer.name] = buffer


def _parse_weight(stream: TokenStream, weights: Mapping[str, np.ndarray], buffers: Mapping[str, Buffer]) -> Buffer:
    token = stream.expect_kind("global", "a weight name")
    stream.expect(":")
    type_ = parse_type(stream)
    packing = None
    if stream.accept("packed"):
        layout = stream.expect_kind("ident", "a packed layout name").text
        source = _buffer_ref(stream, buffers) if stream.accept("of") else None
        packing = Packing(layout, source)
    if stream.accept("="):
        data = np.array(parse_value(stream), dtype=type_.dtype.numpy).reshape(type_.shape)
    elif token.name in weights:
        data = np.asarray(weights[token.name])
    else:
        raise ParseError(f"weight '{token.name}' has no inline data and no entry in the weights", token.line)
    if tuple(data.shape) != type_.shape or data.dtype != type_.dtype.numpy:
        raise ParseError(f"data for '{token.name}' is {data.dtype}{list(data.shape)}, text says {type_}",
                         token.line)
    return Buffer(token.name, type_, BufferKind.WEIGHT, data=data, packing=packing)


_KINDS = ("@in", "@out", "@inout")


def _parse_instr(stream: TokenStream, buffers: Mapping[str, Buffer], sources: Mapping[int, str]) -> Instr:
    token = stream.next()
    idef = INSTRS[token.text]
    operands: list[Buffer | None] = []
    while stream.peek.kind == "global" and stream.peek.text in _KINDS:
        kind_token = stream.next()
        if len(operands) >= len(idef.operand_kinds) and not idef.variadic:
            raise ParseError(f"{idef.name} takes {len(idef.operand_kinds)} operands", kind_token.line)
        expected = idef.kind_of(len(operands)).value
        if kind_token.text != expected:
            raise ParseError(f"operand {len(operands)} of {idef.name} must be {expected}", kind_token.line)
        operands.append(None if stream.accept("none") else _buffer_ref(stream, buffers))
        if not stream.accept(","):
            break
    attrs = parse_attrs(stream, idef.attrs)
    instr = Instr(idef.name, operands, attrs, source=sources.get(token.line, ""))
    if stream.accept("kernel"):
        instr.kernel = _parse_kernel(stream, buffers, instr)
    return instr


def _parse_kernel(stream: TokenStream, buffers: Mapping[str, Buffer], instr: Instr) -> KernelUse:
    """`kernel NAME(@in @packed, @scratch %s) {param=value, ...}` after an instruction."""
    name = stream.expect_kind("ident", "a kernel name").text
    stream.expect("(")
    kinds: list[OperandKind] = []
    while not stream.accept(")"):
        kind_token = stream.next()
        if kind_token.text not in _KINDS + ("@scratch",):
            raise ParseError(f"kernel operand kind '{kind_token.text}' is not one of @in, @out, @inout, @scratch",
                             kind_token.line)
        kinds.append(OperandKind(kind_token.text))
        instr.operands.append(_buffer_ref(stream, buffers))
        if not stream.accept(","):
            stream.expect(")")
            break
    return KernelUse(name, parse_attr_dict(stream, "a kernel parameter name"), tuple(kinds))


def _buffer_ref(stream: TokenStream, buffers: Mapping[str, Buffer]) -> Buffer:
    ref = stream.next()
    if ref.kind not in ("local", "global") or ref.name not in buffers:
        raise ParseError(f"'{ref.text}' is not a declared buffer", ref.line)
    return buffers[ref.name]


def _source_comments(text: str) -> dict[int, str]:
    """Line number -> source node name from trailing '# "name"' comments."""
    out: dict[int, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        marker = line.rfind('  # "')
        if marker >= 0:
            try:
                out[number] = json.loads(line[marker + 4:].strip())
            except json.JSONDecodeError:
                continue
    return out
