"""The converter registry: CONVERTERS maps an ONNX op type (default domain) to the function
that turns one node of that type into graph IR, with the opset range it handles.

Converters register themselves with the @converter decorator; importing
ember.frontends.onnx.converters fills the table."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from ember.frontends.onnx.context import NodeContext
    from ember.graph.ir import Value

# A converter returns one Value per ONNX output (None for one it cannot produce), or a
# single Value for single-output nodes.
ConverterFn = Callable[["NodeContext"], Union["Value", Sequence[Union["Value", None]]]]


@dataclass(frozen=True)
class Converter:
    """How to import one ONNX op type; `min_opset`/`max_opset` bound the opsets (inclusive)
    whose semantics the function implements."""

    op_type: str
    fn: ConverterFn
    min_opset: int = 1
    max_opset: int | None = None

    def supports(self, opset: int) -> bool:
        return self.min_opset <= opset and (self.max_opset is None or opset <= self.max_opset)

    def describe_range(self) -> str:
        if self.max_opset is None:
            return f"opset {self.min_opset}+"
        return f"opsets {self.min_opset} to {self.max_opset}"


CONVERTERS: dict[str, Converter] = {}

# Converters of other operator domains (e.g. 'com.microsoft', ONNX Runtime's contrib ops):
# domain -> op type -> Converter. Their min/max_opset bound the default-domain opset too.
DOMAIN_CONVERTERS: dict[str, dict[str, Converter]] = {}
_DEFAULT_DOMAINS = ("", "ai.onnx")


def converter(*op_types: str, min_opset: int = 1, max_opset: int | None = None,
              domain: str = "") -> Callable[[ConverterFn], ConverterFn]:
    """Registers the decorated function for each of `op_types` (of `domain`, default ONNX's)."""
    if not op_types:
        raise ValueError("converter() needs at least one op type")
    table = CONVERTERS if domain in _DEFAULT_DOMAINS else DOMAIN_CONVERTERS.setdefault(domain, {})

    def register(fn: ConverterFn) -> ConverterFn:
        for op_type in op_types:
            if op_type in table:
                raise ValueError(f"ONNX op {domain + '.' if domain else ''}{op_type} has two converters")
            table[op_type] = Converter(op_type, fn, min_opset, max_opset)
        return fn

    return register


def find_converter(domain: str, op_type: str) -> Converter | None:
    """The converter of `op_type` in `domain`, or None."""
    if domain in _DEFAULT_DOMAINS:
        return CONVERTERS.get(op_type)
    return DOMAIN_CONVERTERS.get(domain, {}).get(op_type)
