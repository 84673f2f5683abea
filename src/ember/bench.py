"""Side-by-side latency measurement shared by `ember bench` and bench/compare.py.

Each engine runs in its own process (so thread pools never compete), the processes
alternate, and each reports the median of many timed runs after warm-up; ratios are
computed from medians taken in the same session. ONNX Runtime is only a yardstick here."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ember.support.errors import EmberError


def _inputs_for(session_inputs: list[tuple[str, tuple[int, ...], np.dtype]], reference: Path | None) -> dict:
    data = dict(np.load(reference)) if reference and reference.exists() else {}
    rng = np.random.default_rng(0)
    feeds = {}
    for name, shape, dtype in session_inputs:
        if f"in_{name}" in data:
            feeds[name] = data[f"in_{name}"]
        elif np.dtype(dtype).kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype)
    return feeds


def _time(fn, seconds: float, min_runs: int) -> list[float]:
    for _ in range(3):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 20 * min_runs:
            break
    return times


def worker(engine: str, model: str, threads: int, backend: str, seconds: float, min_runs: int) -> dict[str, Any]:
    """Runs inside a child process: loads one engine, returns timings as a dict."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    reference = Path(model).with_suffix(".ref.npz")
    if engine == "ember":
        import ember

        t0 = time.perf_counter()
        compiled = ember.compile(model, backend=backend, num_threads=threads)
        compile_seconds = time.perf_counter() - t0
        specs = [(s.name, s.type.shape, s.type.dtype.numpy) for s in compiled.inputs]
        feeds = _inputs_for(specs, reference)
        times = _time(lambda: compiled.run(feeds), seconds, min_runs)
        return {"median": statistics.median(times), "runs": len(times), "compile_seconds": compile_seconds}
    if engine == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        type_map = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
                    "tensor(bool)": np.bool_, "tensor(double)": np.float64}
        specs = [(i.name, tuple(i.shape), type_map[i.type]) for i in session.get_inputs()]
        feeds = _inputs_for(specs, reference)
        times = _time(lambda: session.run(None, feeds), seconds, min_runs)
        return {"median": statistics.median(times), "runs": len(times)}
    raise EmberError(f"unknown engine '{engine}' (ember or onnxruntime)")


def run_in_process(engine: str, model: str, threads: int, backend: str = "cpu", seconds: float = 2.0,
                   min_runs: int = 20) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        code = ("import json, sys; from ember.bench import worker; "
                "json.dump(worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), int(sys.argv[6])), "
                "open(sys.argv[7], 'w'))")
        # NumPy's own BLAS pool would spin on the cores the engine under test uses (Ember folds
        # constants with NumPy at compile time): one BLAS thread, for both engines alike.
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        result = subprocess.run([sys.executable, "-c", code, engine, model, str(threads), backend, str(seconds),
                                 str(min_runs), out.name], capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise EmberError(f"{engine} failed on {model}:\n{result.stderr[-3000:]}")
        return json.load(open(out.name))


def compare(model: str, threads: int, backend: str = "cpu", rounds: int = 3, seconds: float = 1.0,
            engines: tuple[str, ...] = ("ember", "onnxruntime")) -> dict[str, Any]:
    """Alternates engines for `rounds` rounds; reports the median of the per-round medians."""
    medians: dict[str, list[float]] = {e: [] for e in engines}
    compile_times: list[float] = []
    for _ in range(rounds):
        for engine in engines:
            result = run_in_process(engine, model, threads, backend, seconds)
            medians[engine].append(result["median"])
            if "compile_seconds" in result:
                compile_times.append(result["compile_seconds"])
    summary: dict[str, Any] = {e: statistics.median(v) for e, v in medians.items()}
    if "ember" in summary and "onnxruntime" in summary:
        summary["ratio"] = summary["ember"] / summary["onnxruntime"]
    if compile_times:
        summary["compile_first"] = compile_times[0]
        summary["compile_cached"] = statistics.median(compile_times[1:]) if len(compile_times) > 1 else None
    return summary
