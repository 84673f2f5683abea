"""Run-time profiles of compiled models: per-step times from the backend (the cpu backend's
native timers, the interpreter's clock around each instruction), aggregated per op type and
per graph node with GFLOP/s where the work is known, and written as a Chrome trace
(chrome://tracing, ui.perfetto.dev) together with the compile's stages and passes.

    outputs, profile = model.run(feeds, profile=True)
    print(profile.format())
    trace = chrome_trace([profile], compile_trace)

Imports backends/ (the step records) and passes/ (the compile trace's instrumentation)."""
from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.backends.profiling import StepInfo, StepTimes
from ember.passes import PassInstrumentation
from ember.passes.context import IRKind


@dataclass
class RunProfile:
    """Profiled runs of one model: each run's step times, and each run's wall time measured
    around the backend's call (what a caller of `run` waits for, less input checks)."""

    backend: str
    runs: list[StepTimes]
    wall: list[float]

    @property
    def steps(self) -> list[StepInfo]:
        return self.runs[0].steps if self.runs else []

    def step_seconds(self) -> list[float]:
        """Each step's mean time over the runs."""
        return [statistics.fmean(run.seconds[k] for run in self.runs) for k in range(len(self.steps))]

    @property
    def steps_total(self) -> float:
        """The mean over runs of the sum of the steps' times."""
        return statistics.fmean(sum(run.seconds) for run in self.runs)

    @property
    def wall_total(self) -> float:
        return statistics.fmean(self.wall)

    @staticmethod
    def merge(profiles: Sequence[RunProfile]) -> RunProfile:
        if not profiles:
            raise ValueError("no profiles to merge")
        runs = [run for profile in profiles for run in profile.runs]
        return RunProfile(profiles[0].backend, runs, [wall for profile in profiles for wall in profile.wall])

    def by_op(self) -> list[dict[str, Any]]:
        """Rows per (op, kernel, backend: "" unless segments of several backends ran): steps,
        seconds (mean per run), share of the steps' total, flops and GFLOP/s where every step
        of the row has a known FLOP count; slowest first."""
        return self._group(lambda step: (step.op, step.kernel, step.backend), ("op", "kernel", "backend"))

    def by_node(self) -> list[dict[str, Any]]:
        """Rows per graph node (its steps: a node lowered to several instructions has
        several), slowest first."""
        return self._group(lambda step: (step.node, step.op, step.kernel, step.backend),
                           ("node", "op", "kernel", "backend"))

    def _group(self, key: Any, names: tuple[str, ...]) -> list[dict[str, Any]]:
        groups: dict[tuple[str, ...], list[tuple[StepInfo, float]]] = {}
        for step, seconds in zip(self.steps, self.step_seconds(), strict=True):
            groups.setdefault(key(step), []).append((step, seconds))
        total = self.steps_total or 1.0
        rows = []
        for values, members in groups.items():
            seconds = sum(s for _, s in members)
            flops = [step.flops for step, _ in members]
            known = None if any(f is None for f in flops) else sum(f for f in flops if f is not None)
            row: dict[str, Any] = dict(zip(names, values, strict=True))
            row.update(steps=len(members), seconds=seconds, share=seconds / total, flops=known,
                       gflop_per_second=(known / seconds / 1e9 if known and seconds > 0 else None))
            rows.append(row)
        return sorted(rows, key=lambda row: -row["seconds"])

    def format(self, top: int = 15) -> str:
        """Tables per op type and per node (the `top` slowest), and the totals."""
        lines = [f"profile: {len(self.runs)} run(s) on {self.backend}, {len(self.steps)} steps; "
                 f"steps sum to {self.steps_total * 1e3:.3f} ms of {self.wall_total * 1e3:.3f} ms measured "
                 f"around the run ({_ratio(self.steps_total, self.wall_total)})", "",
                 f"{'op':<22} {'kernel':<24} {'steps':>5} {'ms':>9} {'share':>6} {'GFLOP/s':>8}"]
        for row in self.by_op():
            lines.append(f"{row['op'][:22]:<22} {_where(row)[:24]:<24} {row['steps']:>5} "
                         f"{row['seconds'] * 1e3:>9.3f} {row['share']:>6.1%} {_rate(row['gflop_per_second']):>8}")
        lines += ["", f"{'node':<32} {'op':<18} {'kernel':<22} {'ms':>9} {'share':>6} {'GFLOP/s':>8}"]
        nodes = self.by_node()
        for row in nodes[:top]:
            lines.append(f"{_tail(row['node'], 32):<32} {row['op'][:18]:<18} {_where(row)[:22]:<22} "
                         f"{row['seconds'] * 1e3:>9.3f} {row['share']:>6.1%} {_rate(row['gflop_per_second']):>8}")
        if len(nodes) > top:
            lines.append(f"... {len(nodes) - top} more nodes")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "runs": len(self.runs), "steps_ms": self.steps_total * 1e3,
                "wall_ms": self.wall_total * 1e3, "by_op": _milliseconds(self.by_op()),
                "by_node": _milliseconds(self.by_node())}


def _where(row: dict[str, Any]) -> str:
    """The kernel, after its backend where segments of several backends ran."""
    return f"{row['backend']}:{row['kernel']}" if row["backend"] else row["kernel"]


def _tail(text: str, width: int) -> str:
    """Long node names differ at their ends (/encoder/layer.0/attention/...): keep the end."""
    return text if len(text) <= width else "~" + text[-(width - 1):]


def _ratio(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else "n/a"


def _rate(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def _milliseconds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**{k: v for k, v in row.items() if k != "seconds"}, "ms": row["seconds"] * 1e3} for row in rows]


@dataclass
class TraceEvent:
    """A span of the compile: name, category ("stage", "graph pass", "lir pass"), start
    (perf_counter seconds) and duration."""

    name: str
    category: str
    start: float
    seconds: float
    args: dict[str, Any] = field(default_factory=dict)


class CompileTrace(PassInstrumentation):
    """Records a compile for the trace: every pass of either IR (install with
    `passes.instrumented(trace)`) and the driver's stages (pass `trace.observe` as the
    compile's observer; `finish()` closes the last stage when compile returns)."""

    _STAGE_NAMES = {"graph": "import", "optimized": "optimize", "lowered": "lower",
                    "lir": "schedule, irgen, LIR passes", "memory": "memory plan"}

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self.started = time.perf_counter()
        self._last = self.started

    def after_pass(self, name: str, ir: Any, seconds: float, changed: bool, kind: IRKind) -> None:
        self.events.append(TraceEvent(name, f"{kind.name} pass", time.perf_counter() - seconds, seconds,
                                      {"changed": changed, "size_after": kind.size(ir)}))

    def observe(self, stage: str, artifact: Any) -> None:
        now = time.perf_counter()
        self.events.append(TraceEvent(self._STAGE_NAMES.get(stage, stage), "stage", self._last, now - self._last))
        self._last = now

    def finish(self, name: str = "backend compile (code generation, build)") -> None:
        now = time.perf_counter()
        self.events.append(TraceEvent(name, "stage", self._last, now - self._last))
        self._last = now

    @property
    def seconds(self) -> float:
        return self._last - self.started

    def passes(self) -> list[TraceEvent]:
        return [e for e in self.events if e.category.endswith("pass")]


def chrome_trace(profile: RunProfile | None, compile_trace: CompileTrace | None = None) -> dict[str, Any]:
    """The Trace Event Format (JSON object form) that chrome://tracing and Perfetto read:
    process 1 holds the compile (thread 1 its stages, 2 graph passes, 3 LIR passes), process
    2 the profiled runs one after another (thread 1), each step a complete event carrying
    its node, kernel and GFLOP/s."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "compile"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "run"}},
    ]
    threads = {"stage": 1, "graph pass": 2, "lir pass": 3}
    for label, tid in threads.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": label + "s"}})
    end = 0.0
    if compile_trace is not None:
        for event in compile_trace.events:
            start = (event.start - compile_trace.started) * 1e6
            events.append({"name": event.name, "cat": event.category, "ph": "X", "pid": 1,
                           "tid": threads.get(event.category, 4), "ts": round(start, 3),
                           "dur": round(event.seconds * 1e6, 3), "args": event.args})
        end = compile_trace.seconds * 1e6
    if profile is not None:
        # One track per backend where segments of several ran (steps carry their backend).
        lanes = {name: 1 + k for k, name in enumerate(sorted({step.backend for step in profile.steps}))}
        for name, tid in lanes.items():
            events.append({"name": "thread_name", "ph": "M", "pid": 2, "tid": tid,
                           "args": {"name": name or profile.backend}})
        offset = end
        for number, run in enumerate(profile.runs):
            events.append({"name": f"run {number}", "cat": "run", "ph": "X", "pid": 2, "tid": 0,
                           "ts": round(offset, 3), "dur": round(run.total * 1e6, 3), "args": {}})
            for step, start, seconds in zip(run.steps, run.starts, run.seconds, strict=True):
                args: dict[str, Any] = {"node": step.node, "kernel": step.kernel, "instruction": step.index}
                if step.flops:
                    args["gflops"] = step.flops / 1e9
                    args["gflop_per_second"] = step.flops / seconds / 1e9 if seconds > 0 else None
                events.append({"name": step.op, "cat": "step", "ph": "X", "pid": 2, "tid": lanes[step.backend],
                               "ts": round(offset + start * 1e6, 3), "dur": round(seconds * 1e6, 3), "args": args})
            offset += run.total * 1e6
    return {"traceEvents": events, "displayTimeUnit": "ms"}
