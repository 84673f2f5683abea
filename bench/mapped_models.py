"""The cpu backend with and without the ISA Mapper's GEMM kernels (codegen/kernels/gemm_mapped.py)
on the shared models, side by side in one process: both compiled for each thread count, then
timed in interleaved rounds (mapped, hand-written, mapped, ...). At 1 thread each round is the
thread CPU time (time.thread_time) of a block of runs, robust to other work on the machine;
at more threads, wall time (perf_counter). Prints per model and thread count the median per-run
time of each and the median of the per-round ratios hand-written / mapped (> 1: mapped faster),
with the kernels each chose for its GEMMs and the outputs' agreement.

--gemms M,N,K ...: instead, one FullyConnected (bias and ReLU epilogue) per shape, and the time
of its step alone (the program's own per-step timers, run(profile=True): no Python call
overhead, which a comparison of a bare ctypes call with a whole run() would charge to one side
only), median over the runs of each round, 1 thread.

    python bench/mapped_models.py [--models gru,mlp] [--threads 1,2] [--rounds 15] [--seconds 0.2] [--batch 4]
    python bench/mapped_models.py --gemms 1,512,512 4,1536,512 [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ember.backends.cpu import CpuBackend
from ember.driver import compile_model
from ember.support.host import cpu_name

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"


# The batch axis of the inputs and outputs of the shared models whose batch can change (the
# GRU's export reshapes to batch 1).
BATCH_AXES = {"mlp": {"input": 0}}


def _model(name: str, batch: int):
    """The model (a path, or a ModelProto with its batch set) and inputs for it."""
    ref = np.load(SHARED / f"{name}.ref.npz")
    feeds = {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}
    if batch == 1:
        return SHARED / f"{name}.onnx", feeds
    import onnx

    if name not in BATCH_AXES:
        raise SystemExit(f"--batch: the shared {name} model has a fixed batch of 1")
    model = onnx.load(SHARED / f"{name}.onnx")
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[BATCH_AXES[name].get(value.name, 0)].dim_value = batch
    for key, array in feeds.items():
        feeds[key] = np.repeat(array, batch, axis=BATCH_AXES[name][key])
    return model, feeds


def _kernels(compiled) -> str:
    chosen = Counter(line.split("[")[1].split("]")[0] for line in compiled.executable.source.splitlines()
                     if line.startswith("/* ") and "FullyConnected [" in line)
    return ", ".join(f"{k} x{v}" for k, v in sorted(chosen.items())) or "no FullyConnected"


def _block(run, feeds, seconds: float, cpu: bool) -> float:
    """Mean seconds per run over a block of about `seconds`."""
    clock = time.thread_time if cpu else time.perf_counter
    runs, start = 0, clock()
    while True:
        run(feeds)
        runs += 1
        elapsed = clock() - start
        if elapsed >= seconds:
            return elapsed / runs


def _fc_model(m: int, n: int, k: int):
    from ember.graph.ir import Graph
    from ember.types import DType, TensorType

    rng = np.random.default_rng(m + n + k)
    g = Graph("fc")
    x = g.add_input("x", TensorType(DType.FLOAT32, (m, k)))
    y = g.add("Add", g.add("MatMul", x, g.add_constant(rng.standard_normal((k, n)).astype(np.float32), "w")),
              g.add_constant(rng.standard_normal(n).astype(np.float32), "b"))
    g.set_outputs([("y", g.add("Relu", y))])
    return g


def _step_seconds(compiled, feeds, runs: int) -> float:
    """Median over `runs` profiled runs of the FullyConnected steps' summed time."""
    totals = []
    for _ in range(runs):
        _, profile = compiled.run(feeds, profile=True)
        for run in profile.runs:
            totals.append(sum(t for info, t in zip(run.steps, run.seconds, strict=True) if info.op == "FullyConnected"))
    return statistics.median(totals)


def gemms(shapes: list[str], rounds: int) -> None:
    from ember.driver import compile_graph

    print(f"CPU: {cpu_name()}; 1 thread; the FullyConnected step's own time (profiled), median of 200 runs per "
          f"round, {rounds} interleaved rounds")
    print(f"{'M,N,K':>14} {'mapped us':>10} {'hand us':>10} {'hand/mapped':>12}  [q1, q3]  kernel")
    for shape in shapes:
        m, n, k = (int(v) for v in shape.split(","))
        engines = {flag: compile_graph(_fc_model(m, n, k), CpuBackend(num_threads=1, mapped_kernels=flag))
                   for flag in (True, False)}
        kinds = _kernels(engines[True])
        feeds = {"x": np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)}
        times: dict[bool, list[float]] = {True: [], False: []}
        for c in engines.values():
            _step_seconds(c, feeds, 20)
        for _ in range(rounds):
            for flag, c in engines.items():
                times[flag].append(_step_seconds(c, feeds, 200))
        ratios = sorted(h / mp for h, mp in zip(times[False], times[True], strict=True))
        q = statistics.quantiles(ratios, n=4)
        mapped_us, hand_us = statistics.median(times[True]) * 1e6, statistics.median(times[False]) * 1e6
        print(f"{shape:>14} {mapped_us:>10.2f} {hand_us:>10.2f} {statistics.median(ratios):>12.3f}  "
              f"[{q[0]:.3f}, {q[2]:.3f}]  {kinds}")
        sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gru,mlp")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.2)
    parser.add_argument("--gemms", nargs="*", default=None, metavar="M,N,K")
    parser.add_argument("--batch", type=int, default=1, help="the models' batch (their files have 1)")
    args = parser.parse_args()
    if args.gemms:
        gemms(args.gemms, args.rounds)
        return 0
    print(f"CPU: {cpu_name()}; {args.rounds} interleaved rounds of ~{args.seconds} s per engine; "
          "1 thread: thread CPU time, more: wall time")
    print(f"{'model':8} {'threads':>7} {'mapped ms':>10} {'hand ms':>10} {'hand/mapped':>12}  [q1, q3]  "
          "kernels (mapped)")
    for name in args.models.split(","):
        model, feeds = _model(name, args.batch)
        for threads in (int(t) for t in args.threads.split(",")):
            engines = {flag: compile_model(model, CpuBackend(num_threads=threads, mapped_kernels=flag))
                       for flag in (True, False)}
            outs = {flag: m.run(feeds) for flag, m in engines.items()}
            agree = max(float(np.max(np.abs(outs[True][k] - outs[False][k]))) for k in outs[True])
            for m in engines.values():  # warm
                _block(m.run, feeds, args.seconds, threads == 1)
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.rounds):
                for flag, m in engines.items():
                    times[flag].append(_block(m.run, feeds, args.seconds, threads == 1))
            ratios = sorted(h / m for h, m in zip(times[False], times[True], strict=True))
            q = statistics.quantiles(ratios, n=4)
            print(f"{name:8} {threads:>7} {statistics.median(times[True]) * 1e3:>10.4f} "
                  f"{statistics.median(times[False]) * 1e3:>10.4f} {statistics.median(ratios):>12.3f}  "
                  f"[{q[0]:.3f}, {q[2]:.3f}]  {_kernels(engines[True])}; max |diff| {agree:.2g}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
