"""Ember at two git revisions, side by side, timed by the running thread's CPU time at one
thread (wall time at more): robust where other work shares the machine, since time spent
descheduled is not counted. Each revision runs in its own long-lived process from a worktree
of its own (its own kernel library in a cache of its own); they take turns in blocks of
--seconds, and each block's median run is paired with the other's. Prints per model and thread
count the median of each and the median (quartiles) of head/base.

An A/A run (the same revision twice) shows the harness's own bias: the MLP (0.04 ms a run)
came out 1.015 [1.014, 1.016] on the 2-core AMD EPYC, so differences of that size on models
that small are not the code's.

    python bench/ab_thread_cpu.py --base REV --head REV [--models resnet18,mlp,gemm1024]
                                  [--threads 1,2] [--rounds 21] [--seconds 0.25]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ember.support.host import cpu_name

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models"

WORKER = r"""
import json, sys, time
import numpy as np
import onnx
import ember
model, threads = sys.argv[1], int(sys.argv[2])
compiled = ember.compile(model, backend="cpu", num_threads=threads)
proto = onnx.load(model, load_external_data=False)
constants = {i.name for i in proto.graph.initializer}
rng = np.random.default_rng(0)
feeds = {}
for value in proto.graph.input:
    if value.name in constants:
        continue
    t = value.type.tensor_type
    shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
    feeds[value.name] = rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else np.ones(shape, dtype)
for _ in range(3):
    compiled.run(feeds)
print("ready", flush=True)
clock = time.thread_time if threads == 1 else time.perf_counter
for line in sys.stdin:
    seconds, times, start = float(line), [], time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < seconds:
        t0 = clock()
        compiled.run(feeds)
        times.append(clock() - t0)
    print(json.dumps(sorted(times)[len(times) // 2]), flush=True)
"""


class Worker:
    def __init__(self, source: Path, model: Path, threads: int, cache: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(source), OMP_NUM_THREADS=str(threads), EMBER_CACHE_DIR=cache)
        self.process = subprocess.Popen([sys.executable, "-c", WORKER, str(model), str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the worker for {source} did not start")

    def block(self, seconds: float) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{seconds}\n")
        self.process.stdin.flush()
        return float(json.loads(self.process.stdout.readline()))

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def _gemm_model(folder: Path) -> Path:
    sys.path.insert(0, str(REPO / "bench"))
    import compare  # bench/compare.py: the 1024^3 GEMM with constant weights

    return Path(compare.gemm_model(folder))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True)
    parser.add_argument("--head", required=True)
    parser.add_argument("--models", default="resnet18,mobilenetv2,gemm1024,mlp,gru,bert_synthetic")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--seconds", type=float, default=0.25)
    args = parser.parse_args()
    print(f"# {cpu_name()}; {args.head} (head) vs {args.base} (base); 1 thread: thread CPU time, more: wall; "
          "ratio < 1: head is faster")
    with tempfile.TemporaryDirectory() as folder:
        trees = {label: Path(folder) / label for label in ("base", "head")}
        for label, tree in trees.items():
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree),
                            getattr(args, label)], check=True)
        try:
            for name in args.models.split(","):
                model = _gemm_model(Path(folder)) if name == "gemm1024" else SHARED / f"{name}.onnx"
                for threads in [int(t) for t in args.threads.split(",")]:
                    workers = {label: Worker(tree / "src", model, threads, f"{folder}/cache-{label}")
                               for label, tree in trees.items()}
                    medians: dict[str, list[float]] = {"base": [], "head": []}
                    try:
                        for round_ in range(args.rounds):
                            for label in ("base", "head") if round_ % 2 == 0 else ("head", "base"):
                                medians[label].append(workers[label].block(args.seconds))
                    finally:
                        for worker in workers.values():
                            worker.close()
                    ratios = sorted(h / b for h, b in zip(medians["head"], medians["base"], strict=True))
                    q = statistics.quantiles(ratios, n=4)
                    print(f"{name:<15} threads={threads}  base {statistics.median(medians['base']) * 1e3:8.3f} ms  "
                          f"head {statistics.median(medians['head']) * 1e3:8.3f} ms  "
                          f"head/base {statistics.median(ratios):.3f} [{q[0]:.3f}, {q[2]:.3f}]", flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
