"""Text form of the graph IR: a printer and a parser that round-trip.

    graph "mlp" {
      input %input: f32[1,784]
      const @w: f32[512,784]              # data supplied by the caller's weight table
      const @shape: i64[2] = [1, 512]     # small constants are printed inline
      %h: f32[1,512] = Gemm(%input, @w, @b) {transB=true} name="fc1"
      output "logits" = %h
    }

Absent optional operands print as `none`. Constants with more than INLINE_LIMIT elements
are referenced by name and type only."""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from ember.graph.ir import Constant, Graph, Output, Value
from ember.graph.verify import verify_graph
from ember.ops import OpError, get_op
from ember.ops.text import format_attrs, format_value, parse_attrs, parse_type, parse_value
from ember.support.errors import ParseError, VerificationError
from ember.support.lexer import TokenStream, quote_name

INLINE_LIMIT = 16


def _local(value: Value) -> str:
    sigil = "@" if isinstance(value, Constant) else "%"
    return sigil + quote_name(value.name)


def format_constant_data(data: np.ndarray) -> str:
    flat = data.reshape(-1)
    if data.dtype.kind == "f" or data.dtype.name == "bfloat16":
        items = [float(v) for v in flat]
    elif data.dtype.kind == "b":
        items = [bool(v) for v in flat]
    else:
        items = [int(v) for v in flat]
    return format_value(items)


def print_graph(graph: Graph) -> str:
    lines = [f"graph {json.dumps(graph.name)} {{"]
    for placeholder in graph.inputs:
        lines.append(f"  input {_local(placeholder)}: {placeholder.type}")
    for const in graph.constants.values():
        text = f"  const {_local(const)}: {const.type}"
        if const.type.size <= INLINE_LIMIT:
            text += f" = {format_constant_data(const.data)}"
        lines.append(text)
    for node in graph.nodes:
        results = ", ".join(f"{_local(v)}: {v.type}" for v in node.outputs)
        operands = ", ".join("none" if v is None else _local(v) for v in node.inputs)
        attrs = format_attrs(node.attrs)
        text = f"  {results} = {node.op}({operands})"
        if attrs:
            text += f" {attrs}"
        lines.append(f"{text} name={json.dumps(node.name)}")
    for output in graph.outputs:
        lines.append(f"  output {json.dumps(output.name)} = {_local(output.value)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def parse_graph(text: str, weights: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Parses and verifies a graph. Constants printed without data are looked up by name in
    `weights`; a missing one is an error."""
    stream = TokenStream(text)
    stream.expect("graph")
    graph = Graph(json.loads(stream.expect_kind("string", "the graph name").text))
    stream.expect("{")
    values: dict[str, Value] = {}
    while not stream.accept("}"):
        keyword = stream.peek
        if stream.accept("input"):
            name = stream.expect_kind("local", "an input name").name
            stream.expect(":")
            values[name] = graph.add_input(name, parse_type(stream))
        elif stream.accept("const"):
            values_entry = _parse_constant(stream, graph, weights or {})
            values[values_entry.name] = values_entry
        elif stream.accept("output"):
            name = json.loads(stream.expect_kind("string", "an output name").text)
            stream.expect("=")
            graph.outputs.append(Output(name, _operand(stream, values)))
        elif keyword.kind == "local":
            _parse_node(stream, graph, values)
        else:
            raise stream.error("expected input, const, output or a node")
    if stream.peek.kind != "eof":
        raise stream.error("expected end of input")
    try:
        verify_graph(graph)
    except VerificationError as err:
        raise ParseError(f"parsed graph does not verify: {err}") from None
    return graph


def _parse_constant(stream: TokenStream, graph: Graph, weights: Mapping[str, np.ndarray]) -> Constant:
    token = stream.expect_kind("global", "a constant name")
    stream.expect(":")
    type_ = parse_type(stream)
    if stream.accept("="):
        items = parse_value(stream)
        data = np.array(items, dtype=type_.dtype.numpy).reshape(type_.shape)
    elif token.name in weights:
        data = np.asarray(weights[token.name])
    else:
        raise ParseError(f"constant '{token.name}' has no inline data and no entry in the weights", token.line)
    if tuple(data.shape) != type_.shape or data.dtype != type_.dtype.numpy:
        raise ParseError(f"weights for '{token.name}' are {data.dtype}{list(data.shape)}, text says {type_}",
                         token.line)
    try:
        return graph.add_constant(data, token.name, exact=True)
    except VerificationError as err:
        raise ParseError(str(err), token.line) from None


def _operand(stream: TokenStream, values: Mapping[str, Value]) -> Value:
    token = stream.next()
    if token.kind not in ("local", "global") or token.name not in values:
        raise ParseError(f"'{token.text}' is not a defined value", token.line)
    return values[token.name]


def _parse_node(stream: TokenStream, graph: Graph, values: dict[str, Value]) -> None:
    line = stream.peek.line
    results: list[tuple[str, object]] = []
    while True:
        name = stream.expect_kind("local", "a result name").name
        stream.expect(":")
        results.append((name, parse_type(stream)))
        if not stream.accept(","):
            break
    stream.expect("=")
    op_token = stream.expect_kind("ident", "an op name")
    try:
        opdef = get_op(op_token.text)
    except OpError as err:
        raise ParseError(str(err), op_token.line) from None
    stream.expect("(")
    operands: list[Value | None] = []
    while not stream.accept(")"):
        operands.append(None if stream.accept("none") else _operand(stream, values))
        if not stream.accept(","):
            stream.expect(")")
            break
    attrs = parse_attrs(stream, opdef.attrs)
    stream.expect("name")
    stream.expect("=")
    node_name = json.loads(stream.expect_kind("string", "a node name").text)
    for name, _ in results:
        if name in values:
            raise ParseError(f"value '{name}' is defined twice", line)
    try:
        outs = graph.add_node(opdef.name, operands, attrs, name=node_name, result_names=[n for n, _ in results])
    except VerificationError as err:
        raise ParseError(str(err), line) from None
    if graph.nodes[-1].name != node_name:  # add_node appended it
        raise ParseError(f"node name '{node_name}' is used twice", line)
    for out, (name, declared) in zip(outs, results, strict=True):
        if out.name != name:
            raise ParseError(f"value '{name}' clashes with an earlier name", line)
        if out.type != declared:
            raise ParseError(f"'{name}' is declared {declared} but {opdef.name} infers {out.type}", line)
        values[name] = out
