"""Text forms shared by both IRs: tensor types and typed attribute dictionaries.

Attribute values print as: true/false, integers, floats (always with '.', 'e', inf or nan, so
they parse back as floats), JSON strings, element type names, none, and [lists]."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from ember.support.errors import ParseError
from ember.support.lexer import TokenStream
from ember.types import DType, QuantParams, TensorType

_DTYPE_NAMES = {d.value: d for d in DType}


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, DType):
        return value.value
    if value is None:
        return "none"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    raise TypeError(f"attribute value {value!r} has no text form")


def format_attrs(attrs: Any) -> str:
    """'{a=1, b=[2, 3]}' listing fields that differ from their defaults; '' if none do."""
    parts = []
    for field in dataclasses.fields(attrs):
        value = getattr(attrs, field.name)
        if field.default is not dataclasses.MISSING and value == field.default and type(value) is type(field.default):
            continue
        parts.append(f"{field.name}={format_value(value)}")
    return "{" + ", ".join(parts) + "}" if parts else ""


def parse_value(stream: TokenStream) -> Any:
    token = stream.next()
    if token.kind == "number":
        text = token.text
        if any(c in text for c in ".eEn") or "inf" in text:
            return float(text)
        return int(text)
    if token.kind == "string":
        return json.loads(token.text)
    if token.kind == "ident":
        if token.text in ("true", "false"):
            return token.text == "true"
        if token.text == "none":
            return None
        if token.text in _DTYPE_NAMES:
            return _DTYPE_NAMES[token.text]
        raise ParseError(f"unknown attribute value '{token.text}'", token.line)
    if token.text == "[":
        items = []
        while not stream.accept("]"):
            items.append(parse_value(stream))
            if not stream.accept(","):
                stream.expect("]")
                break
        return tuple(items)
    raise ParseError(f"expected an attribute value, found '{token.text}'", token.line)


def parse_attr_dict(stream: TokenStream, what: str = "an attribute name") -> dict[str, Any]:
    """Parses an optional '{k=v, ...}' into a dict (empty when there is no '{')."""
    values: dict[str, Any] = {}
    if stream.accept("{"):
        while not stream.accept("}"):
            key = stream.expect_kind("ident", what).text
            stream.expect("=")
            values[key] = parse_value(stream)
            if not stream.accept(","):
                stream.expect("}")
                break
    return values


def parse_attrs(stream: TokenStream, attrs_class: type) -> Any:
    """Parses an optional '{k=v, ...}' into `attrs_class`."""
    line = stream.peek.line
    values = parse_attr_dict(stream)
    known = {f.name: f for f in dataclasses.fields(attrs_class)}
    unknown = set(values) - set(known)
    if unknown:
        raise ParseError(f"unknown attributes {sorted(unknown)} for {attrs_class.__name__}", line)
    for key, value in values.items():
        # Integers are valid where floats are declared (e.g. 'alpha=1' written by hand).
        if "float" in str(known[key].type) and isinstance(value, int) and not isinstance(value, bool):
            values[key] = float(value)
    try:
        return attrs_class(**values)
    except TypeError as err:
        raise ParseError(f"bad attributes for {attrs_class.__name__}: {err}", line) from None


def parse_type(stream: TokenStream) -> TensorType:
    token = stream.expect_kind("ident", "an element type")
    if token.text not in _DTYPE_NAMES:
        raise ParseError(f"unknown element type '{token.text}'", token.line)
    stream.expect("[")
    dims: list[int] = []
    while not stream.accept("]"):
        dims.append(int(stream.expect_kind("number", "a dimension").text))
        if not stream.accept(","):
            stream.expect("]")
            break
    quant = None
    if stream.peek.text == "q":
        quant = _parse_quant(stream)
    try:
        return TensorType(_DTYPE_NAMES[token.text], tuple(dims), quant)
    except ValueError as err:
        raise ParseError(str(err), token.line) from None


def _parse_quant(stream: TokenStream) -> QuantParams:
    stream.expect("q")
    stream.expect("(")
    if stream.accept("axis"):
        stream.expect("=")
        axis = int(stream.expect_kind("number", "an axis").text)
        stream.expect(",")
        scales = parse_value(stream)
        stream.expect(",")
        zero_points = parse_value(stream)
        stream.expect(")")
        return QuantParams(tuple(float(s) for s in scales), tuple(int(z) for z in zero_points), axis)
    scale = float(stream.expect_kind("number", "a scale").text)
    stream.expect(",")
    zero_point = int(stream.expect_kind("number", "a zero point").text)
    stream.expect(")")
    return QuantParams((scale,), (zero_point,))
