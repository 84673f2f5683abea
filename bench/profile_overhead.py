"""How well the profiler accounts for a run, on the shared models: per model and thread count,
plain runs (the library without timers) interleaved with profiled runs (the timed library),
one of each per round. Prints the median plain latency, the median profiled wall time (around
the native call), the median sum of the per-step times, and the ratios: steps / plain (what the
issue's "per-op times sum to within 10% of the measured latency" asks) and profiled / plain
(what the timers cost).

    python bench/profile_overhead.py [--models resnet18,bert_synthetic] [--threads 1,2] [--rounds 30]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import ember
from ember.support.host import cpu_name as _cpu_name

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"




def _feeds(model):
    rng = np.random.default_rng(0)
    return {s.name: rng.standard_normal(s.type.shape).astype(s.type.dtype.numpy) if s.type.dtype.is_float
            else np.zeros(s.type.shape, s.type.dtype.numpy) for s in model.inputs}


def measure(path: Path, threads: int, rounds: int) -> dict[str, float]:
    model = ember.compile(str(path), backend="cpu", num_threads=threads)
    feeds = _feeds(model)
    for _ in range(3):
        model.run(feeds)
        model.run(feeds, profile=True)
    plain, wall, steps = [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        model.run(feeds)
        plain.append(time.perf_counter() - start)
        _, profile = model.run(feeds, profile=True)
        wall.append(profile.wall[0])
        steps.append(sum(profile.runs[0].seconds))
    return {"plain": statistics.median(plain), "wall": statistics.median(wall), "steps": statistics.median(steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,bert_synthetic")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(f"CPU: {_cpu_name()}; {args.rounds} interleaved rounds (one plain and one profiled run each)")
    print(f"{'model':<16} {'threads':>7} {'plain ms':>9} {'profiled ms':>11} {'steps ms':>9} "
          f"{'steps/plain':>11} {'profiled/plain':>14}")
    for name in args.models.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            r = measure(MODELS / f"{name}.onnx", threads, args.rounds)
            print(f"{name:<16} {threads:>7} {r['plain'] * 1e3:>9.3f} {r['wall'] * 1e3:>11.3f} "
                  f"{r['steps'] * 1e3:>9.3f} {r['steps'] / r['plain']:>11.3f} {r['wall'] / r['plain']:>14.3f}")


if __name__ == "__main__":
    main()
