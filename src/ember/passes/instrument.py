"""Pass instrumentation: observers every PassManager reports to, of either IR, installed for
a dynamic extent with `instrumented(...)`.

Tools use this to see inside pipelines they do not build themselves: `ember dump
--print-after-all` prints the IR after every pass of the driver's pipelines (graph passes,
then LIR passes), and a timer collects the seconds each pass took, without the driver
growing debugging parameters. Each hook receives the IR object and its IRKind, which prints
and measures it. Imports passes/context.py only."""
from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ember.passes.context import IRKind


class PassInstrumentation:
    """Hooks called by PassManager; subclasses override what they need."""

    def after_pass(self, name: str, ir: Any, seconds: float, changed: bool, kind: IRKind) -> None:
        """Called after every pass (after verification, when the manager verifies) with the
        pass name, the IR it ran on, its run time, whether it changed the IR, and the IR's
        kind (kind.print(ir) is its text)."""


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
    """Writes `// after <pass>` and the IR text (graph or LIR, printed by its kind) after every
    pass. With only_changed, passes that changed nothing print just the header (long
    pipelines stay readable)."""

    def __init__(self, write: Callable[[str], object], only_changed: bool = False) -> None:
        self.write = write
        self.only_changed = only_changed

    def after_pass(self, name: str, ir: Any, seconds: float, changed: bool, kind: IRKind) -> None:
        if self.only_changed and not changed:
            self.write(f"// after {name} (unchanged)\n")
            return
        self.write(f"// after {name}\n{kind.print(ir)}")


@dataclass
class PassRecord:
    """One pass run. nodes_after: the IR's size after it (graph nodes, LIR instructions)."""

    name: str
    seconds: float
    changed: bool
    nodes_after: int
    ir: str = "graph"


class PassTimer(PassInstrumentation):
    """Collects one record per pass run, of either IR; `report()` formats them with totals
    per pass name and IR."""

    def __init__(self) -> None:
        self.records: list[PassRecord] = []

    def after_pass(self, name: str, ir: Any, seconds: float, changed: bool, kind: IRKind) -> None:
        self.records.append(PassRecord(name, seconds, changed, kind.size(ir), kind.name))

    def report(self) -> str:
        return format_timings([(r.name, r.seconds, r.changed, r.ir) for r in self.records])


def format_timings(records: Sequence[tuple[str, float, bool] | tuple[str, float, bool, str]]) -> str:
    """A table of total milliseconds, runs and changing runs per pass, slowest first. Records
    may carry a fourth item, the IR kind's name: passes are then told apart by IR too, and
    an `ir` column ends each row."""
    totals: dict[tuple[str, str], list[float]] = {}
    with_ir = any(len(record) > 3 for record in records)
    for record in records:
        name, seconds, changed = record[:3]
        ir = record[3] if len(record) > 3 else ""
        entry = totals.setdefault((name, ir), [0.0, 0, 0])
        entry[0] += seconds
        entry[1] += 1
        entry[2] += int(changed)
    total = sum(entry[0] for entry in totals.values())
    header = f"{'pass':<28} {'ms':>9} {'runs':>5} {'changed':>8}"
    lines = [header + ("  ir" if with_ir else "")]
    for (name, ir), (total_seconds, runs, changed_runs) in sorted(totals.items(), key=lambda item: -item[1][0]):
        row = f"{name:<28} {total_seconds * 1e3:>9.2f} {int(runs):>5} {int(changed_runs):>8}"
        lines.append(row + (f"  {ir}" if with_ir else ""))
    lines.append(f"{'total':<28} {total * 1e3:>9.2f}")
    return "\n".join(lines) + "\n"
