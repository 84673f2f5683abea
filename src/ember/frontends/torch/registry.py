"""The ATen converter table: ATEN_CONVERTERS maps an ATen overload's name ("aten.add.Tensor")
to the function that turns one node of the exported program into graph IR. Converters
register with @aten; importing ember.frontends.torch.converters fills the table."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from ember.frontends.torch.context import AtenContext
    from ember.graph.ir import Value

# A converter returns one Value per result of the ATen op (None for one Ember cannot produce
# and nothing reads), or one Value for single-result ops.
AtenConverterFn = Callable[["AtenContext"], Union["Value", Sequence[Union["Value", None]]]]

ATEN_CONVERTERS: dict[str, AtenConverterFn] = {}


def aten(*names: str) -> Callable[[AtenConverterFn], AtenConverterFn]:
    """Registers the decorated function for each ATen overload in `names` ("add.Tensor")."""

    def register(fn: AtenConverterFn) -> AtenConverterFn:
        for name in names:
            key = f"aten.{name}"
            if key in ATEN_CONVERTERS:
                raise ValueError(f"ATen op {key} has two converters")
            ATEN_CONVERTERS[key] = fn
        return fn

    return register
