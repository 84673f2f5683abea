"""Measured refinement of an emitted GEMM: the analytic model ranks the register tiles, the few
best are emitted, built with the system compiler and timed on this machine, and the fastest is
kept. The choice is cached per CPU model in the user cache folder (isa-tuning.json under
support.paths.cache_dir()), keyed by the candidates' sources, the CPU's name and the compiler,
so a later compile on the same kind of machine reuses it without timing anything.

Timing is thread CPU time, best of the calls that fit a small budget after one warm-up: on a
shared machine that is what other processes disturb least. Imports isa.*, support/ and numpy."""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ember.isa.emit_c import GemmCode, emit_gemm
from ember.isa.schedule import Schedule, register_tiles
from ember.support.errors import EmberError, UnsupportedError
from ember.support.host import cpu_name as cpu_model
from ember.support.json_cache import load_json_cache, update_json_cache
from ember.support.paths import cache_dir

CACHE_FILE = "isa-tuning.json"


@dataclass(frozen=True)
class Tuned:
    """The chosen code, each candidate's best seconds ('MRxNR' -> s; empty when cached), and
    whether the choice came from the cache."""

    code: GemmCode
    seconds: dict[str, float]
    from_cache: bool




def _compiler() -> str:
    return os.environ.get("CC", "cc")


def _compiler_version(compiler: str) -> str:
    try:
        run = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30, check=False)
        return run.stdout.splitlines()[0] if run.stdout else compiler
    except (OSError, subprocess.SubprocessError):
        return compiler


def candidates(schedule: Schedule, count: int = 4) -> list[GemmCode]:
    """Emitted code for the analytic model's `count` best register tiles, distinct ones only."""
    codes: dict[tuple[int, int], GemmCode] = {}
    for tile in register_tiles(schedule.mapping, schedule.target, count):
        code = emit_gemm(schedule, register_tile=tile)
        codes.setdefault((code.mr, code.nr), code)
    return list(codes.values())


def _key(codes: list[GemmCode], compiler: str) -> str:
    digest = hashlib.sha256()
    for part in [cpu_model(), _compiler_version(compiler)] + [c.source for c in codes]:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _inputs(code: GemmCode, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if code.a_dtype.is_int:
        a = rng.integers(0, 100, size=(code.m, code.k)).astype(code.a_dtype.numpy)
        b = rng.integers(-100, 100, size=(code.k, code.n)).astype(code.b_dtype.numpy)
        c = np.zeros((code.m, code.n), np.int32)
    else:
        a = rng.standard_normal((code.m, code.k)).astype(np.float32)
        b = rng.standard_normal((code.k, code.n)).astype(np.float32)
        c = np.zeros((code.m, code.n), np.float32)
    if code.b_transposed:
        b = np.ascontiguousarray(b.T)
    packed = b if code.b_in_place else code.pack_b(b)
    workspace = np.zeros(code.workspace_elements, a.dtype)
    return a, packed, c, workspace


def measure(code: GemmCode, folder: Path, compiler: str, budget_s: float) -> float:
    """Best thread CPU seconds of one call of `code`, built in `folder`."""
    source, library = folder / f"{code.name}_{code.mr}x{code.nr}.c", folder / f"{code.name}_{code.mr}x{code.nr}.so"
    source.write_text(code.source)
    build = subprocess.run([compiler, "-O3", "-march=native", "-shared", "-fPIC", *code.flags.split(), str(source),
                            "-o", str(library)], capture_output=True, text=True, timeout=300, check=False)
    if build.returncode != 0:
        raise EmberError(f"the C compiler refused a mapped GEMM candidate ({code.mr}x{code.nr}): "
                         f"{build.stderr.strip()[:500]}")
    function = getattr(ctypes.CDLL(str(library)), code.name)
    function.argtypes = [ctypes.c_void_p] * 4
    a, packed, c, workspace = _inputs(code, np.random.default_rng(0))
    pointers = (a.ctypes.data, packed.ctypes.data, c.ctypes.data, workspace.ctypes.data)
    function(*pointers)
    best, spent, calls = float("inf"), 0.0, 0
    while calls < 3 or spent < budget_s:
        start = time.thread_time()
        function(*pointers)
        elapsed = time.thread_time() - start
        best, spent, calls = min(best, elapsed), spent + elapsed, calls + 1
    return best


def tune_gemm(schedule: Schedule, *, count: int = 4, budget_s: float = 0.05, cache: Path | None = None) -> Tuned:
    """The fastest of the analytic model's `count` best register tiles for `schedule`'s GEMM,
    measured on this machine (or taken from the cache)."""
    codes = candidates(schedule, count)
    if not codes:
        raise UnsupportedError("no candidate to tune")
    compiler = _compiler()
    path = (cache or cache_dir()) / CACHE_FILE
    key = _key(codes, compiler)
    entry = load_json_cache(path).get(key)
    if isinstance(entry, dict):
        chosen = next((c for c in codes if f"{c.mr}x{c.nr}" == entry.get("choice")), None)
        if chosen is not None:
            return Tuned(chosen, {}, True)
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ember-isa-tune-") as folder:
        for code in codes:
            seconds[f"{code.mr}x{code.nr}"] = measure(code, Path(folder), compiler, budget_s)
    choice = min(seconds, key=lambda tile: (seconds[tile], tile))
    entry = {"cpu": cpu_model(), "gemm": f"{codes[0].m}x{codes[0].n}x{codes[0].k}",
             "instruction": schedule.mapping.instruction.name, "choice": choice, "seconds": seconds}
    update_json_cache(path, lambda data: data.__setitem__(key, entry))
    return Tuned(next(c for c in codes if f"{c.mr}x{c.nr}" == choice), seconds, False)
