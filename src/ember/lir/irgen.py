"""IRGen: a fully lowered graph becomes a Program, one instruction per node.

Rules:
1. Constants become weight buffers, graph inputs input buffers and graph outputs output
   buffers (named after the model's output names).
2. A node result that is a graph output is written straight into the output buffer; every
   other result gets an activation with `alloc` just before its instruction.
3. `dealloc` follows the last instruction that reads an activation.
4. An output that reads a weight, an input or a value already written to another output is
   filled by `copy`.
Imports graph/, lir/ir and below."""
from __future__ import annotations

from ember.graph import Constant, Graph, Placeholder, Value
from ember.lir.ir import ALLOC, COPY, DEALLOC, INSTRS, Buffer, BufferKind, Instr, Program
from ember.support.errors import UnsupportedError
from ember.support.names import UniqueNamer


def generate_program(graph: Graph) -> Program:
    program = Program(graph.name)
    namer = UniqueNamer()
    buffers: dict[Value, Buffer] = {}

    for const in graph.constants.values():
        buffer = Buffer(namer.unique(const.name), const.type, BufferKind.WEIGHT, data=const.data)
        program.weights.append(buffer)
        buffers[const] = buffer
    for placeholder in graph.inputs:
        buffer = Buffer(namer.unique(placeholder.name), placeholder.type, BufferKind.INPUT,
                        external_name=placeholder.name)
        program.inputs.append(buffer)
        buffers[placeholder] = buffer

    # The first output reading a node result receives it directly; later ones copy it.
    direct_outputs: dict[Value, Buffer] = {}
    copies: list[tuple[Buffer, Value]] = []
    for output in graph.outputs:
        buffer = Buffer(namer.unique(output.name), output.value.type, BufferKind.OUTPUT,
                        external_name=output.name)
        program.outputs.append(buffer)
        value = output.value
        if isinstance(value, Constant | Placeholder) or value in direct_outputs:
            copies.append((buffer, value))
        else:
            direct_outputs[value] = buffer

    last_use: dict[Value, int] = {}
    for index, node in enumerate(graph.nodes):
        for operand in node.inputs:
            if operand is not None:
                last_use[operand] = index

    for index, node in enumerate(graph.nodes):
        if node.op not in INSTRS:
            raise UnsupportedError(f"{node.location}: {node.op} has no instruction")
        for out in node.outputs:
            if out in direct_outputs:
                buffers[out] = direct_outputs[out]
            else:
                buffers[out] = Buffer(namer.unique(out.name), out.type, BufferKind.ACTIVATION)
                program.instrs.append(Instr(ALLOC, [buffers[out]], source=node.name))
        operands = [buffers[o] for o in node.outputs] + [None if v is None else buffers[v] for v in node.inputs]
        program.instrs.append(Instr(node.op, operands, node.attrs, source=node.name))
        for out in node.outputs:
            # A result nobody reads (an unused second result) dies at once.
            if out not in last_use and out not in direct_outputs and not _is_copied(out, copies):
                program.instrs.append(Instr(DEALLOC, [buffers[out]], source=node.name))
        for value in dict.fromkeys(v for v in node.inputs if v is not None):
            if last_use.get(value) == index and not _is_copied(value, copies):
                _dealloc_if_activation(program, buffers[value], node.name)

    for buffer, value in copies:
        program.instrs.append(Instr(COPY, [buffer, buffers[value]], source=f"output {buffer.external_name}"))
    for value in dict.fromkeys(v for _, v in copies):
        _dealloc_if_activation(program, buffers[value], "outputs")
    return program


def _is_copied(value: Value, copies: list[tuple[Buffer, Value]]) -> bool:
    return any(v is value for _, v in copies)


def _dealloc_if_activation(program: Program, buffer: Buffer, source: str) -> None:
    if buffer.kind is BufferKind.ACTIVATION:
        program.instrs.append(Instr(DEALLOC, [buffer], source=source))
