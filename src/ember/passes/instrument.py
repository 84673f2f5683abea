"""Pass instrumentation: observers every PassManager reports to, installed for a dynamic
extent with `instrumented(...)`.

Tools use this to see inside pipelines they do not build themselves: `ember dump
--print-after-all` prints the IR after every pass of the driver's pipelines, and a timer
collects the seconds each pass took, without the driver growing debugging parameters.
Imports graph/ and below."""
from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ember.graph import Graph, print_graph


class PassInstrumentation:
    """Hooks called by PassManager; subclasses override what they need."""

    def after_pass(self, name: str, graph: Graph, seconds: float, changed: bool) -> None:
        """Called after every pass (after verification, when the manager verifies)."""


_ACTIVE: contextvars.ContextVar[tuple[PassInstrumentation, ...]] = contextvars.ContextVar(
    "ember_pass_instrumentation", default=()
)


def active_instrumentations() -> tuple[PassInstrumentation, ...]:
    return _ACTIVE.get()


@contextmanager
def instrumented(*instrumentations: PassInstrumentation) -> Iterator[None]:
    """Every PassManager that runs inside the `with` block also reports to these."""
    token = _ACTIVE.set(_ACTIVE.get() + instrumentations)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


class PrintAfterAll(PassInstrumentation):
    """Writes `// after <pass>` and the graph text after every pass. With only_changed, passes
    that changed nothing print just the header (long pipelines stay readable)."""

    def __init__(self, write: Callable[[str], object], only_changed: bool = False) -> None:
        self.write = write
        self.only_changed = only_changed

    def after_pass(self, name: str, graph: Graph, seconds: float, changed: bool) -> None:
        if self.only_changed and not changed:
            self.write(f"// after {name} (unchanged)\n")
            return
        self.write(f"// after {name}\n{print_graph(graph)}")


@dataclass
class PassRecord:
    name: str
    seconds: float
    changed: bool
    nodes_after: int


class PassTimer(PassInstrumentation):
    """Collects one record per pass run; `report()` formats them with totals per pass name."""

    def __init__(self) -> None:
        self.records: list[PassRecord] = []

    def after_pass(self, name: str, graph: Graph, seconds: float, changed: bool) -> None:
        self.records.append(PassRecord(name, seconds, changed, len(graph.nodes)))

    def report(self) -> str:
        return format_timings([(r.name, r.seconds, r.changed) for r in self.records])


def format_timings(records: list[tuple[str, float, bool]]) -> str:
    """A table of total seconds, runs and changing runs per pass name, slowest first."""
    totals: dict[str, list[float]] = {}
    for name, seconds, changed in records:
        entry = totals.setdefault(name, [0.0, 0, 0])
        entry[0] += seconds
        entry[1] += 1
        entry[2] += int(changed)
    total = sum(entry[0] for entry in totals.values())
    lines = [f"{'pass':<28} {'ms':>9} {'runs':>5} {'changed':>8}"]
    for name, (seconds, runs, changed) in sorted(totals.items(), key=lambda item: -item[1][0]):
        lines.append(f"{name:<28} {seconds * 1e3:>9.2f} {int(runs):>5} {int(changed):>8}")
    lines.append(f"{'total':<28} {total * 1e3:>9.2f}")
    return "\n".join(lines) + "\n"
