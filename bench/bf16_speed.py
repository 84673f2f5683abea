"""Ember fp32 vs Ember bf16 (ember.compile(precision="bf16")) on the cpu backend, side by side:
each precision in its own long-lived process, the two taking turns in short timing blocks
(as bench/compare.py times Ember against ONNX Runtime). Prints the median latencies, the
median fp32/bf16 ratio of adjacent blocks (the bf16 speed-up) with its quartiles, GFLOP/s
where the FLOP count is known, and how the bf16 build agrees with fp32 (max relative error,
top-1 agreement on the reference input).

    python bench/bf16_speed.py [--models resnet18,mobilenetv2,bert_synthetic,gemm1024] [--threads 1]
                               [--rounds 15] [--seconds 0.3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ember.backends.cpu.features import has_avx512_bf16
from ember.bench import _HANDOFF_SECONDS
from ember.bench import _Worker as Worker  # one engine per process, timed in blocks on request
from ember.support.host import cpu_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import GFLOP, SHARED, gemm_model  # noqa: E402  (the shared models and the GEMM)


def agreement(path: Path, threads: int) -> str:
    """bf16 against fp32 on the model's reference input (random where it has none)."""
    import ember

    outputs = []
    for precision in ("fp32", "bf16"):
        compiled = ember.compile(str(path), backend="cpu", num_threads=threads, precision=precision)
        reference = path.with_suffix(".ref.npz")
        stored = dict(np.load(reference)) if reference.exists() else {}
        rng = np.random.default_rng(0)
        feeds = {s.name: stored.get(f"in_{s.name}", rng.standard_normal(s.type.shape).astype(s.type.dtype.numpy))
                 for s in compiled.inputs}
        outputs.append(next(iter(compiled.run(feeds).values())).astype(np.float64))
    fp32, bf16 = outputs
    error = float(np.abs(bf16 - fp32).max() / max(1e-30, np.abs(fp32).max()))
    rows = fp32.reshape(fp32.shape[0], -1)
    top1 = float(np.mean(rows.argmax(1) == bf16.reshape(bf16.shape[0], -1).argmax(1)))
    return f"{error:.2e} {top1:>5.0%}"


def interleaved(path: Path, threads: int, rounds: int, seconds: float) -> dict[str, float]:
    workers = {p: Worker("ember", str(path), threads, "cpu", None, p) for p in ("fp32", "bf16")}
    times: dict[str, list[float]] = {p: [] for p in workers}
    medians: dict[str, list[float]] = {p: [] for p in workers}
    try:
        order = list(workers)
        for round_ in range(rounds):
            for precision in (order if round_ % 2 == 0 else order[::-1]):
                block = workers[precision].block(seconds, 5)
                times[precision] += block
                medians[precision].append(statistics.median(block))
                time.sleep(_HANDOFF_SECONDS)
    finally:
        for worker in workers.values():
            worker.close()
    ratios = sorted(a / b for a, b in zip(medians["fp32"], medians["bf16"], strict=True))
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"fp32": statistics.median(times["fp32"]), "bf16": statistics.median(times["bf16"]),
            "speedup": statistics.median(ratios), "q1": q1, "q3": q3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,mobilenetv2,bert_synthetic,gemm1024")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--rounds", type=int, default=15, help="timing blocks per precision")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timing block")
    args = parser.parse_args()
    if not has_avx512_bf16():
        print("this CPU has no AVX512-BF16: precision='bf16' is refused here", file=sys.stderr)
        return 1
    print(f"CPU: {cpu_name()}; Ember cpu backend, fp32 vs bf16, {args.rounds} interleaved blocks of "
          f"{args.seconds} s each")
    print(f"{'model':16} {'thr':>3} {'fp32 ms':>9} {'bf16 ms':>9} {'speedup':>7} {'(q1-q3)':>11} "
          f"{'fp32 GF/s':>9} {'bf16 GF/s':>9} {'bf16 err':>9} {'top1':>5}")
    with tempfile.TemporaryDirectory() as tmp:
        for threads in [int(t) for t in args.threads.split(",")]:
            for name in args.models.split(","):
                path = gemm_model(Path(tmp)) if name == "gemm1024" else SHARED / f"{name}.onnx"
                if not path.exists():
                    print(f"skipping {name}: {path} not found", file=sys.stderr)
                    continue
                r = interleaved(path, threads, args.rounds, args.seconds)
                flops = [f"{GFLOP[name] / r[p]:.1f}" if name in GFLOP else "-" for p in ("fp32", "bf16")]
                print(f"{name:16} {threads:>3} {r['fp32'] * 1e3:>9.3f} {r['bf16'] * 1e3:>9.3f} {r['speedup']:>7.2f} "
                      f"{r['q1']:.2f}-{r['q3']:.2f}".ljust(62) +
                      f" {flops[0]:>9} {flops[1]:>9} {agreement(path, threads)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
