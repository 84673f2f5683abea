"""Passes over the graph IR: a pass is a small named object with one entry point,
`run(graph) -> bool` (whether it changed anything). Passes register by name; pipelines are
lists of names run by the PassManager, which can verify and print the IR after every pass and
records the time each pass takes. Imports graph/ and below."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ember.graph import Graph, print_graph, verify_graph
from ember.passes.instrument import active_instrumentations, format_timings
from ember.support.errors import EmberError, VerificationError


class GraphPass:
    """Base class: subclasses set `name` and implement `run`. The docstring of each pass
    states its preconditions and rewrite rules."""

    name: str = ""

    def run(self, graph: Graph) -> bool:
        raise NotImplementedError


PASSES: dict[str, type[GraphPass]] = {}


def register_pass(cls: type[GraphPass]) -> type[GraphPass]:
    if not cls.name:
        raise ValueError(f"pass {cls.__name__} has no name")
    if cls.name in PASSES and PASSES[cls.name] is not cls:
        raise ValueError(f"pass name '{cls.name}' is registered twice")
    PASSES[cls.name] = cls
    return cls


def get_pass(name: str) -> GraphPass:
    try:
        return PASSES[name]()
    except KeyError:
        known = ", ".join(sorted(PASSES))
        raise EmberError(f"unknown pass '{name}' (known passes: {known})") from None


def debug_mode() -> bool:
    """EMBER_DEBUG=1 turns on verification after every pass where a caller left it unset."""
    return os.environ.get("EMBER_DEBUG", "") not in ("", "0")


@dataclass
class PassTiming:
    name: str
    seconds: float
    changed: bool


class PassManager:
    """Runs a pipeline (a list of pass names) once or until nothing changes.

    verify: run the verifier after every pass and name the pass that broke the IR (None:
    only in debug mode, see debug_mode()).
    fixed_point: repeat the whole pipeline until no pass changes anything (at most
    max_iterations rounds).
    print_after: called with (pass name, IR text) after every pass, e.g. for
    `ember dump --print-after-all`. Instrumentations installed with
    passes.instrument.instrumented() are called too."""

    def __init__(self, pipeline: Sequence[str], *, verify: bool | None = True, fixed_point: bool = False,
                 max_iterations: int = 10, print_after: Callable[[str, str], None] | None = None) -> None:
        self.passes = [get_pass(name) for name in pipeline]
        self.verify = debug_mode() if verify is None else verify
        self.fixed_point = fixed_point
        self.max_iterations = max_iterations
        self.print_after = print_after
        self.timings: list[PassTiming] = []

    def run(self, graph: Graph) -> bool:
        changed_any = False
        for _ in range(self.max_iterations if self.fixed_point else 1):
            changed = False
            for graph_pass in self.passes:
                changed |= self._run_one(graph_pass, graph)
            changed_any |= changed
            if not changed:
                break
        return changed_any

    def timing_report(self) -> str:
        """Total milliseconds, runs and changing runs per pass, slowest first."""
        return format_timings([(t.name, t.seconds, t.changed) for t in self.timings])

    def _run_one(self, graph_pass: GraphPass, graph: Graph) -> bool:
        start = time.perf_counter()
        changed = bool(graph_pass.run(graph))
        seconds = time.perf_counter() - start
        self.timings.append(PassTiming(graph_pass.name, seconds, changed))
        if self.verify:
            try:
                verify_graph(graph)
            except VerificationError as err:
                raise VerificationError(f"after pass '{graph_pass.name}': {err}") from None
        if self.print_after is not None:
            self.print_after(graph_pass.name, print_graph(graph))
        for instrumentation in active_instrumentations():
            instrumentation.after_pass(graph_pass.name, graph, seconds, changed)
        return changed
