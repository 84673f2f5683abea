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
from collections.abc import Mapping, Sequence
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


def _cache_key() -> str:
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


def _measure_round(compile_with, round_index: int, wanted: Mapping[str, _Tunable],
                   inputs: Mapping[str, np.ndarray] | None) -> bool:
    """Compiles with every instruction on its `round_index`-th variant and records the step
    times of the wanted signatures. Returns whether any instruction has a further variant."""
    backend, compiled = compile_with(variant_round=round_index)
    options = backend.kernel_options()
    program = backend.program
    executable = compiled.executable
    feeds = _feeds(compiled, inputs)
    for _ in range(2):
        executable.run_profiled(feeds)
    best: dict[int, float] = {}
    for _ in range(RUNS):
        _, times = executable.run_profiled(feeds)
        for step, seconds in zip(times.steps, times.seconds, strict=True):
            best[step.index] = min(best.get(step.index, float("inf")), seconds)
    further = False
    for index, seconds in best.items():
        instr = program.instrs[index]
        candidates = backend.kernels.candidates(instr, options)
        further = further or len(candidates) > round_index + 1
        tunable = wanted.get(instr_signature(instr, options))
        if tunable is not None and instr.kernel is not None:
            name = instr.kernel.name
            tunable.seconds[name] = min(tunable.seconds.get(name, float("inf")), seconds)
    return further


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
                 budget_s: float = 60.0, cache: Path | None = None) -> Tuning:
    """The measured kernel choices for `model` on the cpu backend (see the module docstring):
    from the cache where it has them, else timed. `inputs`: values to time with (seeded random
    data otherwise); `budget_s`: no round starts after this many seconds (instructions left
    unmeasured keep the cost model's choice and are not cached)."""
    from ember.driver import compile_model

    started = time.perf_counter()
    path = cache if cache is not None else cache_dir() / CACHE_FILE
    key = _cache_key()

    def compile_with(**choices: Any) -> tuple[_Capturing, CompiledModel]:
        backend = _Capturing(num_threads=num_threads, **choices)
        return backend, compile_model(model, backend, input_shapes)

    backend, compiled = compile_with()
    tunables = _tunables(backend)
    cached = load_json_cache(path).get(key, {})
    missing = {sig: t for sig, t in tunables.items() if sig not in cached}
    rounds = 0
    while missing and rounds < MAX_ROUNDS and time.perf_counter() - started < budget_s:
        further = _measure_round(compile_with, rounds, missing, inputs)
        rounds += 1
        if not further:
            break
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
    from ember.driver import compile_model

    tuning = tune_kernels(model, input_shapes, num_threads, inputs, budget_s, cache)
    compiled = tuning.default
    if tuning.pins:
        compiled = compile_model(model, CpuBackend(num_threads=num_threads, kernel_pins=tuning.pins), input_shapes)
    compiled.stats["tuning"] = tuning.report
    return compiled
