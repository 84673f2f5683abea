"""Ember vs ONNX Runtime latency on the real pretrained models shipped inside PyPI wheels
(tests/pretrained_models.py), at one thread, in one process.

Each model compiles on Ember's cpu backend, or on 'auto' (cpu plus the interpreter for what
cpu refuses) where cpu refuses it. The two engines then take turns in short timing blocks,
reversing the order every round; the reported ratio is the median over rounds of
(Ember's block median / ONNX Runtime's block median), with its quartiles, so both sides of
each ratio saw the same load from the machine's neighbours (see ember/bench.py). Also
printed: each engine's median latency, the largest relative error against ONNX Runtime
(which is the yardstick only), Ember's compile time, and the ops cpu refuses.

    python bench/pretrained.py [--models magika,nudenet,...] [--backend cpu|auto] [--rounds 9] [--seconds 0.2]
"""
from __future__ import annotations

import os

# One thread everywhere, NumPy's BLAS included (the interpreter's segments under 'auto' use
# it): set before NumPy loads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package (registry)

import ember  # noqa: E402
from ember.support.errors import UnsupportedError  # noqa: E402
from tests.pretrained_models import MODELS, PretrainedModel, refused_ops  # noqa: E402


def _block(fn: Callable[[], Any], seconds: float, min_runs: int) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _ember(model: PretrainedModel, backend: str) -> tuple[Any, str, float, str]:
    """(compiled model, backend used, compile seconds, cpu refusal)."""
    refusal = ""
    proto = model.proto()
    shapes = model.input_shapes or None
    t0 = time.perf_counter()
    if backend == "cpu":
        try:
            return ember.compile(proto, backend="cpu", input_shapes=shapes, num_threads=1), "cpu", \
                time.perf_counter() - t0, ""
        except UnsupportedError as err:
            refusal = ",".join(sorted(refused_ops(err))) or str(err)[:60]
        t0 = time.perf_counter()
    compiled = ember.compile(proto, backend="auto", input_shapes=shapes, num_threads=1)
    return compiled, "auto", time.perf_counter() - t0, refusal


def measure(model: PretrainedModel, backend: str, rounds: int, seconds: float, min_runs: int) -> dict[str, Any]:
    import onnxruntime as ort

    feeds = model.make_inputs()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model.path()), options, providers=["CPUExecutionProvider"])
    compiled, used, compile_seconds, refusal = _ember(model, backend)
    ember_feeds = {k: v for k, v in feeds.items() if k in compiled.input_names}
    expected = session.run(None, feeds)
    actual = compiled.run(ember_feeds)
    error = max(float(np.max(np.abs(actual[o.name].astype(np.float64) - r.astype(np.float64))))
                / max(1.0, float(np.max(np.abs(r)))) for o, r in zip(session.get_outputs(), expected, strict=True))
    engines = {"ember": lambda: compiled.run(ember_feeds), "ort": lambda: session.run(None, feeds)}
    for run in engines.values():
        for _ in range(3):
            run()
    times: dict[str, list[float]] = {e: [] for e in engines}
    ratios = []
    for round_ in range(rounds):
        order = list(engines) if round_ % 2 == 0 else list(engines)[::-1]
        medians = {}
        for engine in order:
            block = _block(engines[engine], seconds, min_runs)
            times[engine] += block
            medians[engine] = statistics.median(block)
        ratios.append(medians["ember"] / medians["ort"])
    ratios.sort()
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    partition = ""
    if used == "auto":
        partition = str(compiled.stats.get("partition", "")).splitlines()[0].split(": ", 1)[-1]
    return {"backend": used, "ember": statistics.median(times["ember"]), "ort": statistics.median(times["ort"]),
            "ratio": statistics.median(ratios), "q1": quartiles[0], "q3": quartiles[2], "error": error,
            "compile": compile_seconds, "refusal": refusal, "partition": partition}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(m.name for m in MODELS))
    parser.add_argument("--backend", choices=["cpu", "auto"], default="cpu",
                        help="cpu (falling back to auto where cpu refuses) or auto")
    parser.add_argument("--rounds", type=int, default=9, help="timing blocks per engine")
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timing block")
    parser.add_argument("--min-runs", type=int, default=3, help="runs per block at least")
    args = parser.parse_args()
    by_name = {m.name: m for m in MODELS}
    print(f"{'model':20} {'backend':7} {'ember ms':>9} {'ort ms':>9} {'ratio':>6} {'(q1-q3)':>11} "
          f"{'rel err':>8} {'compile s':>9}  cpu refuses / partition", flush=True)
    for name in args.models.split(","):
        model = by_name[name]
        reason = model.missing_reason()
        if reason:
            print(f"skipping {name}: {reason}", file=sys.stderr)
            continue
        try:
            r = measure(model, args.backend, args.rounds, args.seconds, args.min_runs)
        except Exception as err:  # a refusal on every backend, or an Ember bug: reported, not fatal
            print(f"{name:20} {'-':7} failed: {type(err).__name__}: {str(err)[:150]}", flush=True)
            continue
        detail = "; ".join(x for x in (r["refusal"], r["partition"]) if x)
        print(f"{name:20} {r['backend']:7} {r['ember'] * 1e3:>9.3f} {r['ort'] * 1e3:>9.3f} {r['ratio']:>6.2f} "
              f"{r['q1']:>5.2f}-{r['q3']:<5.2f} {r['error']:>8.1e} {r['compile']:>9.2f}  {detail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
