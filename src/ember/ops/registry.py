"""The op table: one OpDef per operator, driving type inference, verification, the NumPy
reference semantics (used by constant folding and the interpreter), lowering and codegen.

Later stages keep their own tables keyed by op name (LOWERINGS, IRGEN, C_KERNELS); a test
checks that each op has an entry wherever it must. Imports types/ and support/ only."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.support.errors import EmberError
from ember.types import TensorType


class OpError(EmberError):
    """An op's operands or attributes are invalid; callers add the node's location."""


@dataclass(frozen=True)
class NoAttrs:
    """Attributes of an op that has none."""


# Rules receive one entry per operand, None for an absent optional one. The entries are typed
# Any: most rules take required operands only, which mypy cannot tell from optional ones.
InferFn = Callable[[Any, Sequence[Any]], tuple[TensorType, ...]]
ReferenceFn = Callable[[Any, Sequence[Any]], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class OpDef:
    """One operator.

    operands: names in order; a trailing '?' marks an optional operand (may be absent, i.e.
    None), a trailing '*' a variadic tail (only on the last operand, at least one value).
    primitive: the op can reach the low-level IR as one instruction; other ops must be
    lowered (see lowering/). traits: named properties passes query, e.g. 'elementwise'."""

    name: str
    operands: tuple[str, ...]
    results: tuple[str, ...]
    infer: InferFn
    reference: ReferenceFn
    attrs: type = NoAttrs
    primitive: bool = True
    traits: frozenset[str] = field(default_factory=frozenset)
    doc: str = ""

    @property
    def variadic(self) -> bool:
        return bool(self.operands) and self.operands[-1].endswith("*")

    def operand_name(self, index: int) -> str:
        if self.variadic and index >= len(self.operands) - 1:
            return self.operands[-1].rstrip("*")
        return self.operands[index].rstrip("?")

    def check_arity(self, inputs: Sequence[object]) -> None:
        """Raises OpError unless `inputs` (None for an absent optional) fits the operands."""
        required = [o for o in self.operands if not o.endswith("?") and not o.endswith("*")]
        if self.variadic:
            if len(inputs) < len(self.operands):
                raise OpError(f"{self.name} takes at least {len(self.operands)} operands, got {len(inputs)}")
        elif not (len(required) <= len(inputs) <= len(self.operands)):
            raise OpError(
                f"{self.name} takes {len(required)} to {len(self.operands)} operands, got {len(inputs)}"
            )
        for i, value in enumerate(inputs):
            optional = i < len(self.operands) and self.operands[i].endswith("?")
            if value is None and not optional:
                raise OpError(f"{self.name}: operand '{self.operand_name(i)}' is required")

    def pad_optional(self, values: Sequence[object]) -> list:
        """Trailing optional operands that were left out, as None, so rules can unpack."""
        if self.variadic:
            return list(values)
        return list(values) + [None] * (len(self.operands) - len(values))

    def infer_types(self, attrs: Any, in_types: Sequence[TensorType | None]) -> tuple[TensorType, ...]:
        self.check_arity(in_types)
        if not isinstance(attrs, self.attrs):
            raise OpError(f"{self.name} takes attributes {self.attrs.__name__}, got {type(attrs).__name__}")
        out = self.infer(attrs, self.pad_optional(in_types))
        if len(out) != len(self.results):
            raise OpError(f"{self.name}: inference gave {len(out)} results, expected {len(self.results)}")
        return out

    def evaluate(self, attrs: Any, arrays: Sequence[np.ndarray | None]) -> tuple[np.ndarray, ...]:
        """Runs the reference semantics and checks the results against the inferred types,
        so a reference that drifts from inference fails loudly instead of computing quietly."""
        types = self.infer_types(attrs, [None if a is None else TensorType.of(a) for a in arrays])
        results = self.reference(attrs, self.pad_optional(arrays))
        checked = []
        for result, expected in zip(results, types, strict=True):
            result = np.asarray(result)
            if result.dtype != expected.dtype.numpy:
                result = result.astype(expected.dtype.numpy)
            if tuple(result.shape) != expected.shape:
                raise OpError(
                    f"{self.name}: reference produced shape {result.shape}, inference {expected.shape}"
                )
            checked.append(result if result.flags.c_contiguous else np.array(result, order="C"))
        return tuple(checked)


OPS: dict[str, OpDef] = {}


def define_op(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name} is defined twice")
    # __dataclass_params__ is not in typeshed's DataclassInstance protocol.
    if not dataclasses.is_dataclass(op.attrs) or not op.attrs.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"attributes of {op.name} must be a frozen dataclass")
    OPS[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise OpError(f"unknown op '{name}'") from None
