"""What the single-op benchmarks (op_lstm, op_resize, op_conv_nd, op_integer_gemm, ml_trees)
share: the CPU's name for their headers, and Ember and ONNX Runtime timed in alternating
rounds, so that load on a shared machine hits both alike."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from ember.support.host import cpu_name

__all__ = ["cpu_name", "interleaved", "measure"]


def measure(run: Callable[[], object], repeats: int) -> float:
    """Seconds per call of `run`, over `repeats` calls after one warm-up call."""
    run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats


def interleaved(runs: dict[str, Callable[[], object]], rounds: int) -> tuple[dict[str, float], float]:
    """Each engine in `runs` ("ember" and "ort") timed once per round, in turn, for ~50 ms a
    measurement. Returns each engine's median seconds and the median per-round ratio
    ember / ort."""
    repeats = max(1, int(0.05 / max(measure(runs["ort"], 1), 1e-6)))
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(measure(run, repeats))
    ratio = statistics.median(e / o for e, o in zip(times["ember"], times["ort"], strict=True))
    return {name: statistics.median(values) for name, values in times.items()}, ratio
