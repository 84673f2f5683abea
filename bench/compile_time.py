"""Compile time versus graph size: an elementwise chain (alternating Relu/Neg/Tanh so no pass
folds it away) of N nodes, compiled for a backend; prints wall seconds, CPU seconds (this
process and the C compiler it runs: what the compile costs, whatever else the machine runs)
and CPU microseconds per node. Per-node time should stay flat from 1k to 100k nodes
(linear-time passes and naming). A 100-node chain is compiled first and reported apart: the
one-time costs of a process (lazy imports, the kernel library if it is not built yet) are no
cost per node.

    python bench/compile_time.py [--backend interpreter|cpu] [--sizes 1000,10000,100000]
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ember.driver import compile_graph  # noqa: E402
from ember.graph import Graph  # noqa: E402
from ember.support.host import cpu_name  # noqa: E402
from ember.types import DType, TensorType  # noqa: E402

OPS = ("Relu", "Neg", "Tanh")


def chain(n: int) -> Graph:
    g = Graph(f"chain{n}")
    value = g.add_input("x", TensorType(DType.FLOAT32, (4, 16)))
    for i in range(n):
        value = g.add(OPS[i % len(OPS)], value)
    g.set_outputs([("y", value)])
    return g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="interpreter")
    parser.add_argument("--sizes", default="1000,2000,4000,10000")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    compile_graph(chain(100), args.backend)
    print(f"{args.backend} backend, {cpu_name()}; warm-up (100 nodes): {time.perf_counter() - started:.2f} s wall, "
          f"{_cpu_seconds() - cpu_started:.2f} s CPU")
    print(f"{'nodes':>8} {'wall s':>9} {'CPU s':>9} {'CPU us/node':>12}")
    for n in sizes:
        graph = chain(n)
        started = time.perf_counter()
        cpu_started = _cpu_seconds()
        if args.profile and n == sizes[-1]:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(compile_graph, graph, args.backend)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        else:
            compile_graph(graph, args.backend)
        seconds = time.perf_counter() - started
        cpu = _cpu_seconds() - cpu_started
        print(f"{n:>8} {seconds:>9.2f} {cpu:>9.2f} {cpu / n * 1e6:>12.0f}", flush=True)


def _cpu_seconds() -> float:
    """User + system time of this process and its finished children (the C compiler)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
