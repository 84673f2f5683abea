"""One pass infrastructure for both IRs: the pass base, registries of passes by name and the
pass manager, parameterised by an IRKind (passes/context.py) that says how to print, verify
and measure the IR.

A pass is a small named object with one entry point, `run(ir) -> bool` (whether it changed
anything). It may declare the IR properties it `requires` and `ensures` ("lowered",
"scheduled", "kernels-selected", "memory-planned"...); the manager refuses, before running
anything, a pipeline in which a pass requires what neither the IR nor an earlier pass
establishes. Passes register by name in their IR's registry; a pipeline is a list of names
(or pass objects) run by a PassManager, which verifies and prints the IR after every pass,
records the time each pass takes, reports to the active instrumentations
(passes/instrument.py) and hands every pass the pipeline's PassContext.

The graph IR's instance lives here (GraphPass, PASSES, register_pass, get_pass); the LIR
declares its own in lir/passes/registry.py. Imports graph/ and below."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ember.graph import Graph, parse_graph, print_graph, verify_graph
from ember.passes.context import IRKind, PassContext
from ember.passes.instrument import active_instrumentations, format_timings
from ember.support.errors import EmberError, VerificationError


class Pass:
    """Base of every pass, of either IR. Subclasses (through their IR's base: GraphPass,
    LirPass) set `name` and implement `run`; the docstring of each pass states its
    preconditions and rewrite rules.

    requires: IR properties that must hold before the pass runs.
    ensures: IR properties that hold after it.
    context: the pipeline's PassContext, set by the manager before `run` (None when the
    pipeline has none)."""

    name: str = ""
    requires: frozenset[str] = frozenset()
    ensures: frozenset[str] = frozenset()
    context: PassContext | None = None

    def run(self, ir: Any) -> bool:
        raise NotImplementedError


class PassRegistry(dict[str, type[Pass]]):
    """The passes of one IR by name: a dict of pass classes, plus the IR kind, the base class
    its passes derive from and the word error messages call them ("pass", "LIR pass")."""

    def __init__(self, kind: IRKind, base: type[Pass], label: str) -> None:
        super().__init__()
        self.kind = kind
        self.base = base
        self.label = label

    def register(self, cls: type[Pass]) -> type[Pass]:
        if not cls.name:
            raise ValueError(f"{self.label} {cls.__name__} has no name")
        if not issubclass(cls, self.base):
            raise ValueError(f"{self.label} '{cls.name}' does not derive from {self.base.__name__}")
        if self.get(cls.name, cls) is not cls:
            raise ValueError(f"{self.label} name '{cls.name}' is registered twice")
        self[cls.name] = cls
        return cls

    def create(self, name: str) -> Pass:
        """A new instance of the pass registered as `name`."""
        try:
            return self[name]()
        except KeyError:
            known = ", ".join(sorted(self))
            raise EmberError(f"unknown {self.label} '{name}' (known {self.label}es: {known})") from None

    def resolve(self, entry: str | Pass) -> Pass:
        """A pipeline entry as a pass object: a registered name, or a pass object of this IR."""
        if isinstance(entry, str):
            return self.create(entry)
        if isinstance(entry, self.base):
            return entry
        if isinstance(entry, Pass):
            raise EmberError(f"'{entry.name}' ({type(entry).__name__}) is not a {self.label}: this pipeline "
                             f"runs on the {self.kind.name} IR")
        raise TypeError(f"a pipeline entry is a pass name or a {self.base.__name__}, not {entry!r}")


def debug_mode() -> bool:
    """EMBER_DEBUG=1 turns on verification after every pass where a caller left it unset."""
    return os.environ.get("EMBER_DEBUG", "") not in ("", "0")


@dataclass
class PassTiming:
    name: str
    seconds: float
    changed: bool


class PassManager:
    """Runs a pipeline over one IR, once or until nothing changes.

    pipeline: pass names registered in `registry`, or pass objects of its IR.
    registry: the IR's pass registry (PASSES, the graph IR's, by default; LIR_PASSES for
    the LIR, see lir/passes/registry.py).
    verify: run the IR's verifier after every pass and name the pass that broke the IR
    (None: only in debug mode, see debug_mode()).
    fixed_point: repeat the whole pipeline until no pass changes anything (at most
    max_iterations rounds).
    print_after: called with (pass name, IR text) after every pass. Instrumentations
    installed with passes.instrument.instrumented() are called too (e.g. `ember dump
    --print-after-all`, `--time-passes`).
    context: a PassContext every pass sees as `self.context` (left as it is when None).
    properties: IR properties that hold before the pipeline (`self.assumed`), besides those
    the IR kind reads off the IR itself. After `run`, `self.properties` holds them plus
    every pass's `ensures`."""

    def __init__(self, pipeline: Sequence[str | Pass], *, verify: bool | None = True, fixed_point: bool = False,
                 max_iterations: int = 10, print_after: Callable[[str, str], None] | None = None,
                 context: PassContext | None = None, properties: Iterable[str] = (),
                 registry: PassRegistry | None = None) -> None:
        self.registry = PASSES if registry is None else registry
        self.kind = self.registry.kind
        self.passes = [self.registry.resolve(entry) for entry in pipeline]
        self.verify = debug_mode() if verify is None else verify
        self.fixed_point = fixed_point
        self.max_iterations = max_iterations
        self.print_after = print_after
        self.context = context
        self.assumed = frozenset(properties)
        self.properties = self.assumed
        self.timings: list[PassTiming] = []

    def run(self, ir: Any) -> bool:
        """Runs the pipeline on `ir` in place; returns whether any pass changed it."""
        self.properties = self.check_requirements(self.assumed | self.kind.properties(ir))
        changed_any = False
        for _ in range(self.max_iterations if self.fixed_point else 1):
            changed = False
            for one_pass in self.passes:
                changed |= self._run_one(one_pass, ir)
            changed_any |= changed
            if not changed:
                break
        return changed_any

    def check_requirements(self, established: frozenset[str]) -> frozenset[str]:
        """Raises EmberError when a pass requires a property that neither `established` nor
        an earlier pass's `ensures` provides; returns the properties after the pipeline."""
        for one_pass in self.passes:
            missing = sorted(set(one_pass.requires) - established)
            if missing:
                have = ", ".join(sorted(established)) or "none"
                raise EmberError(f"{self.registry.label} '{one_pass.name}' requires '{missing[0]}', which no "
                                 f"earlier pass ensures (established before it: {have})")
            established = established | frozenset(one_pass.ensures)
        return established

    def timing_report(self) -> str:
        """Total milliseconds, runs and changing runs per pass, slowest first."""
        return format_timings([(t.name, t.seconds, t.changed) for t in self.timings])

    def _run_one(self, one_pass: Pass, ir: Any) -> bool:
        if self.context is not None:
            one_pass.context = self.context
        start = time.perf_counter()
        changed = bool(one_pass.run(ir))
        seconds = time.perf_counter() - start
        self.timings.append(PassTiming(one_pass.name, seconds, changed))
        if self.verify:
            try:
                self.kind.verify(ir)
            except VerificationError as err:
                raise VerificationError(f"after {self.registry.label} '{one_pass.name}': {err}") from None
        if self.print_after is not None:
            self.print_after(one_pass.name, self.kind.print(ir))
        for instrumentation in active_instrumentations():
            instrumentation.after_pass(one_pass.name, ir, seconds, changed, self.kind)
        return changed


# -- the graph IR -------------------------------------------------------------------------------

GRAPH_IR = IRKind("graph", print=print_graph, verify=verify_graph, size=lambda graph: len(graph.nodes),
                  keyword="graph", parse=parse_graph)


class GraphPass(Pass):
    """Base class of graph passes: subclasses set `name` and implement `run(graph)`."""

    def run(self, graph: Graph) -> bool:
        raise NotImplementedError


PASSES = PassRegistry(GRAPH_IR, GraphPass, "pass")


def register_pass(cls: type[GraphPass]) -> type[GraphPass]:
    """Class decorator: registers a graph pass under its `name`."""
    PASSES.register(cls)
    return cls


def get_pass(name: str) -> GraphPass:
    """A new instance of the graph pass registered as `name`."""
    return PASSES.create(name)  # type: ignore[return-value]
