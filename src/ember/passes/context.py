"""What a pass runs on and in: the IR kind (how the pass infrastructure prints, verifies and
measures one IR, so one manager serves both the graph IR and the LIR) and the pass context
(the compile target, for passes whose rewrites depend on it). Imports nothing of Ember's:
each IR declares its own kind where it declares its pass base (passes/manager.py for the
graph IR, lir/passes/registry.py for the LIR)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


def _no_properties(ir: Any) -> frozenset[str]:
    return frozenset()


@dataclass(frozen=True)
class IRKind:
    """One IR as the pass infrastructure sees it.

    name: "graph", "lir"; shown in timing reports and error messages.
    print: IR -> text (`--print-after-all`, PassManager's print_after).
    verify: raises VerificationError when the IR breaks an invariant.
    size: a count of the IR's units (graph nodes, LIR instructions) for timing records.
    keyword: the first word of the IR's text form ("graph", "program"), to tell files apart.
    parse: (text, weights by name) -> IR, for tools that read text (`ember opt`).
    properties: the properties an IR shows by itself (e.g. "kernels-selected" once every
    instruction has a kernel); a pipeline starts from these plus the ones it is given."""

    name: str
    print: Callable[[Any], str]
    verify: Callable[[Any], None]
    size: Callable[[Any], int] = len
    keyword: str = ""
    parse: Callable[[str, Mapping[str, Any]], Any] | None = None
    properties: Callable[[Any], frozenset[str]] = _no_properties

    def __repr__(self) -> str:
        return f"IRKind({self.name!r})"


@dataclass
class PassContext:
    """The target a pipeline compiles for, visible to its passes as `self.context`.

    backend: the Backend object (a kernel-selecting LIR pass reads its kernel registry and
    options); None when a pipeline runs without a target (tests, `ember opt` without
    --backend), where such passes fall back to their defaults.
    options: free-form settings by name, for passes that take parameters from the caller."""

    backend: Any = None
    options: dict[str, Any] = field(default_factory=dict)
