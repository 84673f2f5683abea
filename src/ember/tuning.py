"""Measured kernel selection (`ember.compile(model, tune=True)`): where the cost model chooses
among several kernels that can all run an instruction (a 3x3 convolution: Winograd F(4x4),
Winograd F(2x2), pixel rows, direct or im2col GEMM), time them in the model on this machine and
keep the fastest.

A default compile lists the instructions with more than one feasible variant
(KernelRegistry.candidates) by signature (op, operand types, attributes, threads:
codegen/kernels/registry.instr_signature). Signatures the tuning cache does not hold are
measured in rounds: round k compiles the whole model with every such instruction on its k-th
variant (CpuBackend(variant_round=k)) and times each step with the profiler's per-step clocks
(best of a few runs after a warm-up), so each variant runs with the caches and neighbours it
has in the model. A variant replaces the cost model's choice only when it is at least MARGIN
faster. Choices are cached per CPU model, compiler and kernel sources in the user cache folder
(kernel-tuning.json), so later compiles of any model with those layers reuse them without
timing; the compile's stats["tuning"] reports them, and `ember dump` marks tuned kernels
`tuned=true`. Imports the driver, backends/cpu and codegen/kernels."""
from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ember.backends.cpu.backend import CpuBackend
from ember.backends.cpu.build import compiler_identity
from ember.codegen import RUNTIME_SOURCES, runtime_source
from ember.codegen.kernels.registry import instr_signature
from ember.lir.ir import Program
from ember.runtime.compiled import CompiledModel
from ember.runtime.feeds import seeded_inputs
from ember.support.host import cpu_name
from ember.support.json_cache import load_json_cache, update_json_cache
from ember.support.paths import cache_dir

CACHE_FILE = "kernel-tuning.json"
# A measured variant replaces the cost model's choice only when at least this much faster:
# smaller differences are within a shared machine's run-to-run noise.
MARGIN = 0.03
# Rounds at most: the most variants any op has (convolutions: five).
MAX_ROUNDS = 8
RUNS = 5


@dataclass
class _Tunable:
    """An instruction with several feasible kernels: its node, the cost model's choice and,
    once measured, each variant's best step time in seconds."""

    node: str
    default: str
    seconds: dict[str, float] = field(default_factory=dict)


class _Capturing(CpuBackend):
    """A cpu backend that keeps the instruction program it compiles (to read the kernels chosen
    and the instructions' signatures)."""

    program: Program | None = None

    def compile(self, program: Program) -> Any:
        self.program = program
        return super().compile(program)


def _sources_digest() -> str:
    """The kernels' sources: the C library and the Python that emits and plans kernels."""
    digest = hashlib.sha256()
    for name in sorted(RUNTIME_SOURCES):
        digest.update(runtime_source(name).encode())
    for path in sorted((Path(__file__).parent / "codegen" / "kernels").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key() -> str:
    """The tuning cache's key for this process: CPU model, C compiler and kernel sources (the
    timings of another CPU, compiler or kernel do not carry over)."""
    digest = hashlib.sha256()
    for part in (cpu_name(), compiler_identity(os.environ.get("CC", "cc")), _sources_digest()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _tunables(backend: _Capturing) -> dict[str, _Tunable]:
    """Signature -> the instruction's node and default kernel, for every instruction of the
    program `backend` compiled that has several feasible kernels."""
    assert backend.program is not None
    options = backend.kernel_options()
    found: dict[str, _Tunable] = {}
    for instr in backend.program.instrs:
        if instr.kernel is None or len(backend.kernels.candidates(instr, options)) < 2:
            continue
        # The compile made no measured choices: the kernel it took is the cost model's.
        found.setdefault(instr_signature(instr, options), _Tunable(instr.source or instr.name, instr.kernel.name))
    return found


def _feeds(compiled: CompiledModel, inputs: Mapping[str, np.ndarray] | None) -> list[np.ndarray]:
    """The inputs in order: the caller's, else seeded random data (runtime/feeds.py)."""
    given = dict(inputs or {})
    seeded = seeded_inputs([spec for spec in compiled.inputs if spec.name not in given])
    return [np.ascontiguousarray(given[spec.name], dtype=spec.type.dtype.numpy) if spec.name in given
            else seeded[spec.name] for spec in compiled.inputs]


# A round's measurements: signature -> kernel -> its best step time in seconds.
RoundTimes = dict[str, dict[str, float]]
# Runs the given rounds for the given signatures (anywhere: serve/tuning.py runs them on Ray
# workers) and returns each finished round's times; rounds left out are not measured.
RoundRunner = Callable[[Sequence[int], Sequence[str]], Iterable[RoundTimes]]


def measure_round(model: Any, input_shapes: Mapping[str, Sequence[int]] | None, num_threads: int | None,
                  round_index: int, signatures: Iterable[str],
                  inputs: Mapping[str, np.ndarray] | None = None) -> RoundTimes:
    """Compiles `model` with every instruction on its `round_index`-th variant and returns the
    step times of the instructions whose signature is in `signatures`. Self-contained (its
    arguments are data), so it runs as well in another process or on another machine of the
    same CPU model."""
    from ember.driver import compile_model

    wanted = set(signatures)
    backend = _Capturing(num_threads=num_threads, variant_round=round_index)
    compiled = compile_model(model, backend, input_shapes)
    options = backend.kernel_options()
    assert backend.program is not None
    program = backend.program
    executable: Any = compiled.executable  # a native program (run_profiled: per-step clocks)
    feeds = _feeds(compiled, inputs)
    for _ in range(2):
        executable.run_profiled(feeds)
    best: dict[int, float] = {}
    for _ in range(RUNS):
        _, times = executable.run_profiled(feeds)
        for step, seconds in zip(times.steps, times.seconds, strict=True):
            best[step.index] = min(best.get(step.index, float("inf")), seconds)
    found: RoundTimes = {}
    for index, seconds in best.items():
        instr = program.instrs[index]
        signature = instr_signature(instr, options)
        if signature in wanted and instr.kernel is not None:
            kernels = found.setdefault(signature, {})
            kernels[instr.kernel.name] = min(kernels.get(instr.kernel.name, float("inf")), seconds)
    return found


def _rounds_needed(backend: _Capturing, wanted: Mapping[str, _Tunable]) -> int:
    """Rounds that time every variant of the wanted instructions (round k runs the k-th)."""
    assert backend.program is not None
    options = backend.kernel_options()
    counts = [len(backend.kernels.candidates(instr, options)) for instr in backend.program.instrs
              if instr.kernel is not None and instr_signature(instr, options) in wanted]
    return min(max(counts, default=0), MAX_ROUNDS)


def _merge(times: RoundTimes, wanted: Mapping[str, _Tunable]) -> None:
    for signature, kernels in times.items():
        tunable = wanted.get(signature)
        if tunable is None:
            continue
        for name, seconds in kernels.items():
            tunable.seconds[name] = min(tunable.seconds.get(name, float("inf")), seconds)


def _decide(tunable: _Tunable) -> str:
    """The fastest measured variant where it beats the default by MARGIN, else the default."""
    if not tunable.seconds:
        return tunable.default
    fastest = min(tunable.seconds, key=tunable.seconds.__getitem__)
    baseline = tunable.seconds.get(tunable.default)
    if baseline is None or tunable.seconds[fastest] < baseline * (1 - MARGIN):
        return fastest
    return tunable.default


@dataclass
class Tuning:
    """A measured search's outcome: the pins (signature -> kernel) that differ from the cost
    model's choices, what it reports (stats["tuning"]) and the default compile it started
    from (the result itself where nothing is pinned)."""

    pins: dict[str, str]
    report: dict[str, Any]
    default: CompiledModel


def tune_kernels(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 num_threads: int | None = None, inputs: Mapping[str, np.ndarray] | None = None,
                 budget_s: float = 60.0, cache: Path | None = None, run_rounds: RoundRunner | None = None) -> Tuning:
    """The measured kernel choices for `model` on the cpu backend (see the module docstring):
    from the cache where it has them, else timed. `inputs`: values to time with (seeded random
    data otherwise); `budget_s`: no round starts after this many seconds (instructions left
    unmeasured keep the cost model's choice and are not cached). `run_rounds`: where the rounds
    run (all at once, e.g. in parallel on Ray workers: serve/tuning.py; it keeps the budget);
    by default one after another in this process."""
    from ember.driver import compile_model

    started = time.perf_counter()
    path = cache if cache is not None else cache_dir() / CACHE_FILE
    key = cache_key()
    backend = _Capturing(num_threads=num_threads)
    compiled = compile_model(model, backend, input_shapes)
    tunables = _tunables(backend)
    cached = load_json_cache(path).get(key, {})
    missing = {sig: t for sig, t in tunables.items() if sig not in cached}

    def in_this_process(indices: Sequence[int], signatures: Sequence[str]) -> Iterator[RoundTimes]:
        for k in indices:
            if time.perf_counter() - started >= budget_s:
                return
            yield measure_round(model, input_shapes, num_threads, k, signatures, inputs)

    rounds = 0
    if missing:
        for times in (run_rounds or in_this_process)(range(_rounds_needed(backend, missing)), sorted(missing)):
            _merge(times, missing)
            rounds += 1
    measured = {sig: {"kernel": _decide(t), "default": t.default,
                      "us": {k: round(s * 1e6, 1) for k, s in sorted(t.seconds.items())}}
                for sig, t in missing.items() if len(t.seconds) >= 2}
    if measured:
        update_json_cache(path, lambda data: data.setdefault(key, {}).update(measured))
    decisions = {**{sig: entry for sig, entry in cached.items() if sig in tunables}, **measured}
    pins = {sig: entry["kernel"] for sig, entry in decisions.items() if entry["kernel"] != tunables[sig].default}
    report = {
        "seconds": round(time.perf_counter() - started, 2),
        "rounds": rounds,
        "from_cache": sum(1 for sig in tunables if sig in cached),
        "measured": len(measured),
        "tuned": {tunables[sig].node: kernel for sig, kernel in sorted(pins.items())},
        "timings_us": {tunables[sig].node: entry["us"] for sig, entry in decisions.items()},
    }
    return Tuning(pins, report, compiled)


def compile_tuned(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  num_threads: int | None = None, inputs: Mapping[str, np.ndarray] | None = None,
                  budget_s: float = 60.0, cache: Path | None = None) -> CompiledModel:
    """`model` compiled for the cpu backend with the measured kernel choices (tune_kernels);
    stats["tuning"] reports them."""
    return compile_with(model, tune_kernels(model, input_shapes, num_threads, inputs, budget_s, cache), input_shapes,
                        num_threads)


def compile_with(model: Any, tuning: Tuning, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 num_threads: int | None = None) -> CompiledModel:
    """`model` compiled with a search's pins (its default compile where it pinned nothing);
    stats["tuning"] is the search's report."""
    from ember.driver import compile_model

    compiled = tuning.default
    if tuning.pins:
        compiled = compile_model(model, CpuBackend(num_threads=num_threads, kernel_pins=tuning.pins), input_shapes)
    compiled.stats["tuning"] = tuning.report
    return compiled
