"""Ember at two git revisions, side by side: the working tree against a base revision (default
the last commit of main before a change), each in its own long-lived process running
`ember.bench.serve` from its own source tree, taking turns in short timing blocks as
ember/bench.py does for engines. Prints per model and thread count the median latency of
each and the median (quartiles) of the per-pair ratio working tree / base. With --load N, N
competing busy processes run through the timed blocks (ember.bench.competing_load), and each
side's p50 and p99 over all its runs are printed too.

    python bench/ab_revisions.py --base REV [--models resnet18,mobilenetv2,path/to/model.onnx] [--threads 1,2]
                                 [--rounds 15] [--seconds 0.3] [--load N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models"
HANDOFF_SECONDS = 0.05


class Worker:
    """One Ember, imported from `source` (a src folder), serving timing blocks for a model."""

    def __init__(self, label: str, source: Path, model: Path, threads: int, cache: str) -> None:
        self.label = label
        env = dict(os.environ, PYTHONPATH=str(source), OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", EMBER_CACHE_DIR=cache)
        code = "import sys; from ember.bench import serve; serve('ember', sys.argv[1], int(sys.argv[2]), 'cpu')"
        self.process = subprocess.Popen([sys.executable, "-c", code, str(model), str(threads)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.info = self._reply()

    def _reply(self) -> dict:
        line = self.process.stdout.readline() if self.process.stdout else ""
        reply = json.loads(line) if line else {"error": "the worker died"}
        if "error" in reply:
            raise RuntimeError(f"{self.label}: {reply['error']}")
        return reply

    def block(self, seconds: float) -> list[float]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"seconds": seconds, "min_runs": 5}) + "\n")
        self.process.stdin.flush()
        return self._reply()["times"]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def compare(base_src: Path, model: Path, threads: int, rounds: int, seconds: float, load: int = 0) -> dict:
    from ember.bench import competing_load

    with tempfile.TemporaryDirectory() as cache_a, tempfile.TemporaryDirectory() as cache_b:
        workers = [Worker("base", base_src, model, threads, cache_a),
                   Worker("head", REPO / "src", model, threads, cache_b)]
        medians: dict[str, list[float]] = {"base": [], "head": []}
        runs: dict[str, list[float]] = {"base": [], "head": []}
        try:
            with competing_load(load):
                for round_ in range(rounds):
                    for worker in workers if round_ % 2 == 0 else workers[::-1]:
                        block = worker.block(seconds)
                        medians[worker.label].append(statistics.median(block))
                        runs[worker.label] += block
                        time.sleep(HANDOFF_SECONDS)
        finally:
            for worker in workers:
                worker.close()
    ratios = sorted(h / b for h, b in zip(medians["head"], medians["base"], strict=True))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    # "inclusive": linear interpolation between runs, as np.percentile and ember.bench report p99
    p99 = {label: statistics.quantiles(times, n=100, method="inclusive")[98] if len(times) > 1 else times[0]
           for label, times in runs.items()}
    return {"base": statistics.median(medians["base"]), "head": statistics.median(medians["head"]),
            "ratio": statistics.median(ratios), "q1": q[0], "q3": q[2],
            "p50": {label: statistics.median(times) for label, times in runs.items()}, "p99": p99}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--models", default="resnet18,mobilenetv2,bert_synthetic,gru,mlp",
                        help="shared model names or .onnx paths (static input shapes)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--load", type=int, default=0, help="competing busy processes during the timed blocks")
    args = parser.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    print(f"# {cpu}; working tree vs {args.base}; ratio < 1: the working tree is faster"
          + (f"; {args.load} competing busy processes" if args.load else ""))
    with tempfile.TemporaryDirectory() as folder:
        worktree = Path(folder) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(worktree), args.base],
                       check=True)
        try:
            for name in args.models.split(","):
                for threads in [int(t) for t in args.threads.split(",")]:
                    path = Path(name) if name.endswith(".onnx") else SHARED / f"{name}.onnx"
                    r = compare(worktree / "src", path, threads, args.rounds, args.seconds, args.load)
                    tail = (f"  p50 {r['p50']['base'] * 1e3:.3f} -> {r['p50']['head'] * 1e3:.3f} ms, "
                            f"p99 {r['p99']['base'] * 1e3:.3f} -> {r['p99']['head'] * 1e3:.3f} ms") if args.load else ""
                    print(f"{Path(name).stem:<15} threads={threads}  base {r['base'] * 1e3:8.3f} ms  "
                          f"head {r['head'] * 1e3:8.3f} ms  "
                          f"head/base {r['ratio']:.3f} [{r['q1']:.3f}, {r['q3']:.3f}]{tail}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
