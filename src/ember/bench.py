"""Side-by-side latency measurement shared by `ember bench` and bench/compare.py.

Each engine lives in its own long-running process (so thread pools never compete), and the
processes take turns: the driver asks one for a short block of timed runs, waits, then asks
the other, many times over, reversing the order every pair. On a shared machine the load
from neighbours comes and goes over seconds; a ratio taken per adjacent pair of blocks sees
both engines under the same conditions, so the reported ratio is the median of the per-pair
ratios (with its quartiles), not a ratio of medians taken at different times.
ONNX Runtime is only a yardstick here."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ember.support.errors import EmberError

# Threads of the engine that just finished may spin for a moment before sleeping.
_HANDOFF_SECONDS = 0.05


def _inputs_for(session_inputs: Sequence[tuple[str, tuple[int, ...], npt.DTypeLike]], reference: Path | None) -> dict:
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


def _time_block(fn: Callable[[], Any], seconds: float, min_runs: int) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _load(engine: str, model: str, threads: int, backend: str,
          precision: str = "fp32") -> tuple[Callable[[], Any], dict[str, Any]]:
    reference = Path(model).with_suffix(".ref.npz")
    if engine == "ember":
        import ember

        t0 = time.perf_counter()
        compiled = ember.compile(model, backend=backend, num_threads=threads, precision=precision)
        info = {"compile_seconds": time.perf_counter() - t0}
        if not isinstance(compiled, ember.CompiledModel):
            raise EmberError(f"{model} has symbolic input dimensions: benchmark a model of static shapes")
        specs: list[tuple[str, tuple[int, ...], npt.DTypeLike]] = [
            (s.name, s.type.shape, s.type.dtype.numpy) for s in compiled.inputs]
        feeds = _inputs_for(specs, reference)
        return (lambda: compiled.run(feeds)), info
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
        return (lambda: session.run(None, feeds)), {}
    raise EmberError(f"unknown engine '{engine}' (ember or onnxruntime)")


def serve(engine: str, model: str, threads: int, backend: str, precision: str = "fp32") -> None:
    """Runs inside a child process: loads one engine, then answers timing requests.

    The protocol is one JSON object per line on the original stdout (anything the engine
    prints goes to stderr): first {"ready": ..., info}, then for each request line
    {"seconds": s, "min_runs": n} a reply {"times": [...]}, until stdin closes."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        run, info = _load(engine, model, threads, backend, precision)
        for _ in range(3):
            run()
    except Exception as err:  # reported to the driver, which raises it as an EmberError
        protocol.write(json.dumps({"error": f"{type(err).__name__}: {err}"}) + "\n")
        protocol.flush()
        return
    protocol.write(json.dumps({"ready": True, **info}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        request = json.loads(line)
        times = _time_block(run, float(request["seconds"]), int(request["min_runs"]))
        protocol.write(json.dumps({"times": times}) + "\n")
        protocol.flush()


class _Worker:
    def __init__(self, engine: str, model: str, threads: int, backend: str, cache_dir: str | None = None,
                 precision: str = "fp32"):
        self.engine = engine
        code = ("import sys; from ember.bench import serve; "
                "serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])")
        # NumPy's own BLAS pool would spin on the cores the engine under test uses (Ember folds
        # constants with NumPy at compile time): one BLAS thread, for both engines alike.
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        if cache_dir:
            env["EMBER_CACHE_DIR"] = cache_dir
        self._stderr = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen([sys.executable, "-c", code, engine, model, str(threads), backend, precision],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                         text=True, env=env)
        assert self._process.stdin is not None and self._process.stdout is not None  # both PIPE
        self._requests, self._replies = self._process.stdin, self._process.stdout
        self.info = self._reply()

    def _reply(self) -> dict[str, Any]:
        line = self._replies.readline()
        reply = json.loads(line) if line else {}
        if "error" in reply or not reply:
            self._stderr.seek(0)
            detail = reply.get("error") or self._stderr.read()[-3000:]
            self.close()
            raise EmberError(f"{self.engine} failed: {detail}")
        return reply

    def block(self, seconds: float, min_runs: int) -> list[float]:
        self._requests.write(json.dumps({"seconds": seconds, "min_runs": min_runs}) + "\n")
        self._requests.flush()
        return self._reply()["times"]

    def close(self) -> None:
        if self._process.poll() is None:
            self._requests.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._stderr.close()


def _compile_seconds(model: str, threads: int, backend: str, cache_dir: str | None, precision: str = "fp32") -> float:
    worker = _Worker("ember", model, threads, backend, cache_dir, precision)
    worker.close()
    return worker.info["compile_seconds"]


def compare(model: str, threads: int, backend: str = "cpu", rounds: int = 15, seconds: float = 0.3,
            engines: tuple[str, ...] = ("ember", "onnxruntime"), min_runs: int = 5,
            fresh_cache: bool = True, precision: str = "fp32") -> dict[str, Any]:
    """Times each engine in `rounds` interleaved blocks of about `seconds` each.

    Returns the median latency per engine (over all runs), the median and quartiles of the
    per-round ratio ember / other engine, and Ember's compile time in the first process
    ("compile_first": from an empty cache, kernel library included, when `fresh_cache`) and
    in a second one, with the cache filled ("compile_cached"). `precision` is Ember's
    (ember.compile(precision=...): "fp32" or "bf16")."""
    with tempfile.TemporaryDirectory(prefix="ember-bench-cache-") as fresh:
        cache = fresh if fresh_cache else None
        workers = [_Worker(engine, model, threads, backend, cache if engine == "ember" else None, precision)
                   for engine in engines]
        times: dict[str, list[float]] = {e: [] for e in engines}
        block_medians: dict[str, list[float]] = {e: [] for e in engines}
        try:
            for round_ in range(rounds):
                for worker in (workers if round_ % 2 == 0 else workers[::-1]):
                    block = worker.block(seconds, min_runs)
                    times[worker.engine] += block
                    block_medians[worker.engine].append(statistics.median(block))
                    time.sleep(_HANDOFF_SECONDS)
        finally:
            for worker in workers:
                worker.close()
        summary: dict[str, Any] = {e: statistics.median(v) for e, v in times.items()}
        summary["runs"] = {e: len(v) for e, v in times.items()}
        if "ember" in engines:
            summary["compile_first"] = workers[engines.index("ember")].info["compile_seconds"]
            summary["compile_cached"] = _compile_seconds(model, threads, backend, cache, precision)
        others = [e for e in engines if e != "ember"]
        if "ember" in engines and others:
            ratios = sorted(a / b for a, b in zip(block_medians["ember"], block_medians[others[0]], strict=True))
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
            summary["ratio"] = statistics.median(ratios)
            summary["ratio_q1"], summary["ratio_q3"] = quartiles[0], quartiles[2]
    return summary
