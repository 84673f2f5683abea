"""The tensor-expression IR shared by kernels and instructions (ISA Mapper, issue 16).

One expression is a multiply-accumulate over an iteration domain:

    C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:64, j:32, k:128

- the domain lists named dimensions with their extents: an integer, `*` (any length, e.g. the
  rows a systolic array streams) or `<=N` (any length up to N with no padding, e.g. RISC-V
  Vector's `vl`);
- each operand is a tensor access whose indices are affine in the dimensions (`oh*2 + kh`);
  an empty index list (`A[]`) is a scalar, broadcast by an instruction;
- a dimension that does not index the output is a reduction dimension;
- each operand carries its element type; the output's type is the accumulator's.

Inputs are read as zero-padded where an index runs past a tensor (a convolution's pads), so an
expression states the arithmetic, not the bounds. Text prints and parses back to an equal
expression. Imports types/ and support/ only."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ember.support.errors import ParseError
from ember.types import DType

ELEMENT_TYPES = {d.value: d for d in DType if d is not DType.BOOL}


class ExprError(ParseError):
    """An expression that does not parse or does not make sense (an undeclared dimension...)."""


@dataclass(frozen=True)
class Dim:
    """A dimension of an iteration domain. extent None: any length (`*`); upto: any length up
    to `extent` without padding (`<=N`)."""

    name: str
    extent: int | None
    upto: bool = False

    def __str__(self) -> str:
        if self.extent is None:
            return f"{self.name}:*"
        return f"{self.name}:{'<=' if self.upto else ''}{self.extent}"

    @property
    def fixed(self) -> bool:
        return self.extent is not None and not self.upto


@dataclass(frozen=True)
class Affine:
    """sum(coefficient * dim) + constant; terms keep their written order, one per dim."""

    terms: tuple[tuple[str, int], ...]
    constant: int = 0

    @staticmethod
    def of(dim: str) -> Affine:
        return Affine(((dim, 1),))

    def coefficient(self, dim: str) -> int:
        return sum(c for d, c in self.terms if d == dim)

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.terms)

    @property
    def plain(self) -> str | None:
        """The dimension when the index is exactly one dimension (coefficient 1, no offset)."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and self.constant == 0:
            return self.terms[0][0]
        return None

    def evaluate(self, values: Mapping[str, int]) -> int:
        return sum(c * values[d] for d, c in self.terms) + self.constant

    def span(self, extents: Mapping[str, int]) -> int:
        """How many positions the index covers when each dim runs over [0, extent)."""
        return sum(abs(c) * (extents[d] - 1) for d, c in self.terms) + 1

    def __str__(self) -> str:
        parts: list[str] = []
        for dim, coeff in self.terms:
            magnitude = abs(coeff)
            text = dim if magnitude == 1 else f"{dim}*{magnitude}"
            parts.append(("- " if coeff < 0 else "+ ") + text if parts else ("-" if coeff < 0 else "") + text)
        if self.constant or not parts:
            sign = "-" if self.constant < 0 else "+"
            parts.append(f"{sign} {abs(self.constant)}" if parts else str(self.constant))
        return " ".join(parts)


@dataclass(frozen=True)
class Access:
    """One operand: a tensor, its affine indices and its element type."""

    tensor: str
    indices: tuple[Affine, ...]
    dtype: DType

    @property
    def dims(self) -> tuple[str, ...]:
        """The dimensions this operand's indices use, in first-use order."""
        seen: dict[str, None] = {}
        for index in self.indices:
            for dim in index.dims:
                seen.setdefault(dim)
        return tuple(seen)

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(str(i) for i in self.indices)}]:{self.dtype.value}"


@dataclass(frozen=True)
class TensorExpr:
    """output += a * b over domain."""

    output: Access
    a: Access
    b: Access
    domain: tuple[Dim, ...]

    def __post_init__(self) -> None:
        names = [d.name for d in self.domain]
        if len(set(names)) != len(names):
            raise ExprError(f"dimension declared twice in {names}")
        tensors = [self.output.tensor, self.a.tensor, self.b.tensor]
        if len(set(tensors)) != 3:
            raise ExprError(f"the three operands must be distinct tensors, got {tensors}")
        used = {d for access in self.operands for d in access.dims}
        undeclared = sorted(used - set(names))
        if undeclared:
            raise ExprError(f"undeclared dimension(s) {', '.join(undeclared)} (declared: {', '.join(names)})")
        unused = [n for n in names if n not in used]
        if unused:
            raise ExprError(f"dimension(s) {', '.join(unused)} index no operand")

    @property
    def operands(self) -> tuple[Access, Access, Access]:
        return (self.output, self.a, self.b)

    def dim(self, name: str) -> Dim:
        for dim in self.domain:
            if dim.name == name:
                return dim
        raise KeyError(name)

    @property
    def extents(self) -> dict[str, int]:
        """Extents of the fixed dimensions; `*` counts as 1 and `<=N` as N."""
        return {d.name: (1 if d.extent is None else d.extent) for d in self.domain}

    @property
    def reduction_dims(self) -> tuple[str, ...]:
        out = set(self.output.dims)
        return tuple(d.name for d in self.domain if d.name not in out)

    @property
    def iterations(self) -> int:
        """Multiply-accumulates of one execution (fixed extents; `*` counted once)."""
        total = 1
        for extent in self.extents.values():
            total *= extent
        return total

    def access(self, tensor: str) -> Access:
        for access in self.operands:
            if access.tensor == tensor:
                return access
        raise KeyError(tensor)

    def __str__(self) -> str:
        return f"{self.output} += {self.a} * {self.b} over {', '.join(str(d) for d in self.domain)}"


# ---------------------------------------------------------------------------------------
# Parser

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>\+=|<=|[\[\]\-+*:,]))")


def _tokenize(text: str) -> list[str]:
    tokens, position = [], 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ExprError(f"unexpected character {text[position:].lstrip()[:1]!r} at column {position + 1} "
                            f"in {text!r}")
        tokens.append(match.group(match.lastgroup or "op"))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def next(self) -> str:
        token = self.peek()
        if token is None:
            raise ExprError(f"unexpected end of {self.text!r}")
        self.position += 1
        return token

    def expect(self, token: str) -> None:
        got = self.next()
        if got != token:
            raise ExprError(f"expected {token!r}, got {got!r} in {self.text!r}")

    def name(self, what: str) -> str:
        token = self.next()
        if not re.fullmatch(r"[A-Za-z_]\w*", token):
            raise ExprError(f"expected {what}, got {token!r} in {self.text!r}")
        return token

    def number(self) -> int:
        token = self.next()
        if not token.isdigit():
            raise ExprError(f"expected a number, got {token!r} in {self.text!r}")
        return int(token)

    def affine(self) -> Affine:
        terms: dict[str, int] = {}
        constant = 0
        sign = -1 if self.peek() == "-" else 1
        if self.peek() in ("-", "+"):
            self.next()
        while True:
            token = self.next()
            if token.isdigit():
                if self.peek() == "*":
                    self.next()
                    dim = self.name("a dimension")
                    terms[dim] = terms.get(dim, 0) + sign * int(token)
                else:
                    constant += sign * int(token)
            else:
                if not re.fullmatch(r"[A-Za-z_]\w*", token):
                    raise ExprError(f"expected an index term, got {token!r} in {self.text!r}")
                coeff = 1
                if self.peek() == "*":
                    self.next()
                    coeff = self.number()
                terms[token] = terms.get(token, 0) + sign * coeff
            if self.peek() not in ("+", "-"):
                break
            sign = -1 if self.next() == "-" else 1
        return Affine(tuple((d, c) for d, c in terms.items() if c != 0), constant)

    def access(self) -> Access:
        tensor = self.name("a tensor name")
        self.expect("[")
        indices: list[Affine] = []
        if self.peek() != "]":
            indices.append(self.affine())
            while self.peek() == ",":
                self.next()
                indices.append(self.affine())
        self.expect("]")
        self.expect(":")
        dtype = self.name("an element type")
        if dtype not in ELEMENT_TYPES:
            raise ExprError(f"unknown element type {dtype!r} in {self.text!r} (known: {', '.join(ELEMENT_TYPES)})")
        return Access(tensor, tuple(indices), ELEMENT_TYPES[dtype])

    def dim(self) -> Dim:
        name = self.name("a dimension")
        self.expect(":")
        if self.peek() == "*":
            self.next()
            return Dim(name, None)
        upto = self.peek() == "<="
        if upto:
            self.next()
        extent = self.number()
        if extent < 1:
            raise ExprError(f"dimension {name} has extent {extent}; extents are positive")
        return Dim(name, extent, upto)

    def expression(self) -> TensorExpr:
        output = self.access()
        self.expect("+=")
        a = self.access()
        self.expect("*")
        b = self.access()
        domain: list[Dim] = []
        if self.peek() is not None:
            if self.next() != "over":
                raise ExprError(f"expected 'over' after the operands in {self.text!r}")
            domain.append(self.dim())
            while self.peek() == ",":
                self.next()
                domain.append(self.dim())
        if self.peek() is not None:
            raise ExprError(f"unexpected {self.peek()!r} at the end of {self.text!r}")
        return TensorExpr(output, a, b, tuple(domain))


def parse_expr(text: str) -> TensorExpr:
    """The expression `text` (as TensorExpr.__str__ prints it) describes."""
    return _Parser(text).expression()


def parse_affine(text: str) -> Affine:
    parser = _Parser(text)
    affine = parser.affine()
    if parser.peek() is not None:
        raise ExprError(f"unexpected {parser.peek()!r} in index {text!r}")
    return affine


def with_extents(expr: TensorExpr, extents: Mapping[str, int]) -> TensorExpr:
    """`expr` with some dimensions' extents replaced (fixed)."""
    domain = tuple(Dim(d.name, extents[d.name]) if d.name in extents else d for d in expr.domain)
    return TensorExpr(expr.output, expr.a, expr.b, domain)


def make_expr(output: tuple[str, Iterable[str | Affine], DType], a: tuple[str, Iterable[str | Affine], DType],
              b: tuple[str, Iterable[str | Affine], DType], domain: Iterable[tuple[str, int]]) -> TensorExpr:
    """An expression from plain tuples; a string index is a dimension name. Dimensions of
    extent 1 are dropped (from the domain and every index), since they iterate nothing."""
    dims = [(n, e) for n, e in domain]
    unit = {n for n, e in dims if e == 1}

    def index(item: str | Affine) -> Affine:
        affine = Affine.of(item) if isinstance(item, str) else item
        return Affine(tuple((d, c) for d, c in affine.terms if d not in unit), affine.constant)

    def access(spec: tuple[str, Iterable[str | Affine], DType]) -> Access:
        tensor, indices, dtype = spec
        kept = [index(i) for i in indices]
        # A position left constant 0 by dropped unit dimensions carries no information.
        kept = [i for i in kept if i.terms or i.constant]
        return Access(tensor, tuple(kept), dtype)

    return TensorExpr(access(output), access(a), access(b), tuple(Dim(n, e) for n, e in dims if n not in unit))
