"""Winograd F(2x2, 3x3) against the direct convolution kernel on a shared model: both builds
(CpuBackend(winograd=True/False)) in one process, timed in alternating blocks, so machine
load hits both alike; prints each median, the median per-round ratio and the max relative
error of each against the model's reference output.

    python bench/winograd_ab.py [--model resnet18] [--threads 1] [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ember.backends.cpu import CpuBackend
from ember.driver import compile_model

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    path = SHARED / f"{args.model}.onnx"
    if not path.exists():
        print(f"{path} not found (the shared models live next to the repository)", file=sys.stderr)
        return 1
    reference = np.load(path.with_suffix(".ref.npz"))
    builds = {name: compile_model(str(path), backend=CpuBackend(num_threads=args.threads, winograd=flag))
              for name, flag in (("direct", False), ("winograd", True))}
    feeds = {name: reference[f"in_{name}"] for name in builds["direct"].input_names}
    expected = [reference[key] for key in reference.files if key.startswith("out_")]
    for name, model in builds.items():
        outputs = list(model.run(feeds).values())
        error = max(float(np.max(np.abs(o - e)) / np.max(np.abs(e))) for o, e in zip(outputs, expected, strict=True))
        print(f"{name:9} max relative error vs reference {error:.2e}")
    times: dict[str, list[float]] = {name: [] for name in builds}
    for _ in range(args.rounds):
        for name, model in builds.items():
            for _ in range(2):
                model.run(feeds)
            start = time.perf_counter()
            for _ in range(5):
                model.run(feeds)
            times[name].append((time.perf_counter() - start) / 5)
    for name, values in times.items():
        print(f"{name:9} {statistics.median(values) * 1e3:8.2f} ms")
    ratios = [w / d for w, d in zip(times["winograd"], times["direct"], strict=True)]
    print(f"winograd / direct: {statistics.median(ratios):.3f} (median of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
