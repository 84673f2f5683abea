"""ElementwiseChain: several elementwise instructions computed in one loop.

    ElementwiseChain @out %y, @in %a, @in %b, @in %c {steps=["Mul(x0, x1)", "Add(v0, x2)"]}

Each step applies one elementwise op of the op table to sources `xN` (the instruction's @in
operands, in order) and earlier steps' values `vN`; the last step's value is the result. The
intermediate values never reach memory. Steps carry their op's attributes in the graph text
form: "Clip(v0) {min=0.0, max=6.0}". The chain is made by a backend's fusion pass (the cpu
backend's `fuse-elementwise`); the interpreter runs it step by step with the op references.
Imports ops/, types, support/ and lir.ir."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.lir.ir import INSTRS, InstrDef, OperandKind
from ember.ops import OPS, NoAttrs, OpError
from ember.ops.text import format_attrs, parse_attrs
from ember.support.errors import ParseError
from ember.support.lexer import TokenStream
from ember.types import TensorType

ELEMENTWISE_CHAIN = "ElementwiseChain"


@dataclass(frozen=True)
class ChainAttrs:
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    op: str
    args: tuple[str, ...]  # "x<i>": source i; "v<j>": the value of step j
    attrs: Any

    def text(self) -> str:
        attrs = format_attrs(self.attrs)
        return f"{self.op}({', '.join(self.args)})" + (f" {attrs}" if attrs else "")


@functools.lru_cache(maxsize=4096)
def parse_step(text: str) -> Step:
    """The step a text stands for (cached: verification re-reads every chain after each pass)."""
    stream = TokenStream(text)
    op = stream.expect_kind("ident", "an op name").text
    if op not in OPS:
        raise ParseError(f"chain step '{text}': unknown op '{op}'")
    stream.expect("(")
    args: list[str] = []
    while not stream.accept(")"):
        arg = stream.expect_kind("ident", "a step argument (xN or vN)").text
        if arg[:1] not in ("x", "v") or not arg[1:].isdigit():
            raise ParseError(f"chain step '{text}': argument '{arg}' is not xN or vN")
        args.append(arg)
        if not stream.accept(","):
            stream.expect(")")
            break
    attrs = parse_attrs(stream, OPS[op].attrs) if OPS[op].attrs is not NoAttrs else NoAttrs()
    if stream.peek.kind != "eof":
        raise stream.error(f"chain step '{text}': unexpected text")
    return Step(op, tuple(args), attrs)


def chain_steps(attrs: ChainAttrs) -> list[Step]:
    return [parse_step(text) for text in attrs.steps]


def _pick(arg: str, sources: Sequence[Any], values: Sequence[Any], what: str) -> Any:
    index = int(arg[1:])
    pool = sources if arg[0] == "x" else values
    if index >= len(pool):
        raise OpError(f"{what}: argument '{arg}' refers past the {len(pool)} available")
    return pool[index]


def infer_chain(attrs: ChainAttrs, sources: Sequence[TensorType]) -> list[TensorType]:
    """The type of every step's value (the last is the instruction's result)."""
    return infer_steps(chain_steps(attrs), sources)


def infer_steps(steps: Sequence[Step], sources: Sequence[TensorType]) -> list[TensorType]:
    types: list[TensorType] = []
    for number, step in enumerate(steps):
        operand_types = tuple(_pick(a, sources, types, f"step {number}") for a in step.args)
        try:
            result = _step_type(step.op, step.attrs, operand_types)
        except TypeError:  # attributes that do not hash
            result = OPS[step.op].infer_types(step.attrs, list(operand_types))[0]
        types.append(result)
    return types


@functools.lru_cache(maxsize=4096)
def _step_type(op: str, attrs: Any, operand_types: tuple[TensorType, ...]) -> TensorType:
    """A step's result type (cached: verification and C generation infer every chain again,
    and a chain repeats a few ops over one shape)."""
    return OPS[op].infer_types(attrs, list(operand_types))[0]


def run_steps(steps: Sequence[Step], sources: Sequence[np.ndarray]) -> np.ndarray:
    """The reference semantics: the steps' op references one after another."""
    values: list[np.ndarray] = []
    for number, step in enumerate(steps):
        arrays = [_pick(a, sources, values, f"step {number}") for a in step.args]
        values.append(OPS[step.op].reference(step.attrs, arrays)[0])
    return values[-1]


INSTRS[ELEMENTWISE_CHAIN] = InstrDef(ELEMENTWISE_CHAIN, (OperandKind.OUT, OperandKind.IN), None, ChainAttrs,
                                     variadic=True)
