"""Ember as a torch.compile backend against eager PyTorch and torch.compile's default Inductor
backend, on the models of tests/torch_models.py (ResNet-18, MobileNetV2, the LSTM tagger, the
MLP, a small BERT) at 1 and 2 threads.

For each model and thread count the three are compiled (first-call seconds: Dynamo's trace
plus the backend's compile), then timed in interleaved rounds (eager, Inductor, Ember, in
turn, each for ~50 ms per measurement) so that load on a shared machine hits all alike. The
report gives median latencies, compile seconds and the per-round ratios Ember / eager and
Ember / Inductor (below 1: Ember is faster). The CPU is named in the header.

    python bench/torch_compile.py                      # full sizes, 1 and 2 threads
    python bench/torch_compile.py --models mlp,bert --threads 1 --rounds 5
    python bench/torch_compile.py --small              # the tests' sizes (quick)

Needs torch (pip install -e '.[torch]') and, for BERT, transformers; Inductor needs a C++
compiler (g++); where Inductor fails the row says so and the others still run."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.single_op import cpu_name, measure  # noqa: E402
from tests import torch_models  # noqa: E402

FULL = {
    "resnet18": lambda: torch_models.resnet18(size=224),
    "mobilenet_v2": lambda: torch_models.mobilenet_v2(size=224, width=1.0),
    "lstm_tagger": lambda: torch_models.lstm_tagger(length=32, batch=4),
    "mlp": lambda: torch_models.mlp(batch=64),
    "bert": lambda: torch_models.bert(length=64, batch=1, layers=4, hidden=128),
}


def _compiled(module: torch.nn.Module, engine: str, threads: int) -> torch.nn.Module | Callable:
    if engine == "eager":
        return module
    if engine == "inductor":
        return torch.compile(module)
    return torch.compile(module, backend="ember", options={"backend": "cpu", "num_threads": threads})


def bench_model(name: str, make: Callable, threads: int, rounds: int) -> dict:
    module, inputs = make()
    torch.set_num_threads(threads)
    torch._dynamo.reset()  # every engine compiles afresh at this thread count
    runs: dict[str, Callable[[], object]] = {}
    compile_seconds: dict[str, float] = {}
    failures: dict[str, str] = {}
    with torch.no_grad():
        for engine in ("eager", "inductor", "ember"):
            try:
                fn = _compiled(module, engine, threads)
                started = time.perf_counter()
                fn(*inputs)
                compile_seconds[engine] = time.perf_counter() - started
                # Each engine keeps its own compiled code: Dynamo's cache is per torch.compile object.
                runs[engine] = (lambda f=fn: f(*inputs))
            except Exception as err:  # a backend that fails is reported, the others still run
                failures[engine] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
        repeats = max(1, int(0.05 / max(measure(runs["eager"], 1), 1e-6)))
        times: dict[str, list[float]] = {engine: [] for engine in runs}
        for _ in range(rounds):
            for engine, run in runs.items():
                times[engine].append(measure(run, repeats))
    ratios, best = {}, {}
    for other in ("eager", "inductor"):
        if "ember" in times and other in times:
            ratios[other] = statistics.median(e / o for e, o in zip(times["ember"], times[other], strict=True))
            best[other] = min(times["ember"]) / min(times[other])
    return {"name": name, "threads": threads, "latency": {k: statistics.median(v) for k, v in times.items()},
            "fastest": {k: min(v) for k, v in times.items()}, "compile": compile_seconds, "ratios": ratios,
            "best": best, "failures": failures}


def _ms(seconds: float | None) -> str:
    return "        -" if seconds is None else f"{seconds * 1e3:9.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(FULL), help="comma-separated, of: " + ", ".join(FULL))
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--small", action="store_true", help="the tests' model sizes instead of the full ones")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch._dynamo.config.allow_rnn = True  # else Dynamo leaves nn.LSTM to eager, for every backend
    makers = torch_models.MODELS if args.small else FULL
    print(f"CPU: {cpu_name()}; torch {torch.__version__}; interleaved rounds: {args.rounds}")
    print("latencies: median of the rounds (fastest round in brackets); ratios: median of the per-round ratios "
          "(ratio of the fastest rounds in brackets)")
    print(f"{'model':<13} {'thr':>3} {'eager ms':>19} {'inductor ms':>19} {'ember ms':>19} "
          f"{'ember/eager':>13} {'ember/inductor':>14}   compile s (eager/inductor/ember)")
    for threads in (int(t) for t in args.threads.split(",")):
        for name in args.models.split(","):
            row = bench_model(name, makers[name], threads, args.rounds)
            comp = row["compile"]
            compile_text = "/".join(f"{comp[e]:.1f}" if e in comp else "-" for e in ("eager", "inductor", "ember"))
            latencies = " ".join(f"{_ms(row['latency'].get(e))} [{_ms(row['fastest'].get(e))}]"
                                 for e in ("eager", "inductor", "ember"))
            ratios = " ".join(f"{row['ratios'].get(o, float('nan')):>6.2f} [{row['best'].get(o, float('nan')):4.2f}]"
                              for o in ("eager", "inductor"))
            print(f"{name:<13} {threads:>3} {latencies} {ratios}   {compile_text}", flush=True)
            for engine, failure in row["failures"].items():
                print(f"    {engine} failed: {failure}")


if __name__ == "__main__":
    main()
