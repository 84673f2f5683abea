"""Mutation fuzzing of Ember's model import, compile and run (issue 20, the robustness suite).

Seeds are the ONNX backend node test models (bench/onnx_node_data.py) and the small example
and shared models (examples/lenet.onnx, ../shared/models/{mlp,gru}.onnx). Each case copies a
seed and applies one to three mutations at the protobuf level: attribute values (ints to
0/-1/huge/odd, floats to nan/inf/huge, strings garbled or invalid UTF-8, lists shortened,
lengthened, repeated), attribute types, attributes dropped or added, tensor dims (0, 1, -1,
huge, symbolic, rank changed), element types flipped, node inputs dropped, duplicated or
rewired, node outputs renamed or clashing, nodes deleted, duplicated, reordered or changed
into another op, initializers truncated, NaN-filled, reshaped, retyped or moved to (hostile)
external data, run-time inputs made constant and constants made inputs, opsets and IR
versions changed, names made hostile (quotes, newlines, `*/`, `../`, 10,000 characters, C
keywords, names that sanitize to the same C identifier, invalid UTF-8), and input data given
NaN, infinities and out-of-range indices. Inputs are random (from the case's seed) unless
the seed's own data still fits. Everything is deterministic given --seed.

Each case runs in a long-lived worker process (restarted when it dies or hangs): the model
file is compiled and run by Ember (ember.onnx_backend.prepare, which binds inputs that must be
constants), then, where Ember accepted, by ONNX Runtime, and the results are compared. A case
ends as one of:

  refused       Ember raised an EmberError (a clean refusal)
  match         Ember and ONNX Runtime both ran it; the results agree
  ember-only    Ember ran it, ONNX Runtime refused it
  not-compared  both ran it, but its outputs are random (RandomNormal, Bernoulli, ...)
  ort-differs   both ran it, the results differ, and Ember's match ONNX's reference
                implementation (onnx.reference), the tie-break: ONNX Runtime's difference
  no-consensus  both ran it, the results differ, and the reference agrees with neither (listed
                with each result in the summary, to be looked at: no agreed answer to hold to)
  ort-crash, ort-timeout   ONNX Runtime died or hung on a model Ember ran (not Ember's)
and the findings (each an Ember bug):
  crash         the worker died (signal or exit) while Ember worked on the case
  hang          Ember ran past the time limit
  escape        Ember raised an exception that is not an EmberError
  internal      an EmberError that says it is an Ember bug ("internal error", "an Ember bug")
  mismatch      both ran it, the results differ beyond tolerance (shape, element type, NaN
                positions, infinities, or values past rtol/atol), and ONNX's reference
                agrees with ONNX Runtime (or fails on the model)

Each finding's model, side files and inputs (and those of ort-differs and no-consensus cases)
are saved under --out/<outcome>/<case>/ with an info.json; `--replay DIR` runs one saved case
in this process (no isolation) to debug it.

    python bench/fuzz_models.py --cases 10000 --backend interpreter|cpu [--seed 0] [--jobs 2]
                                [--timeout 60] [--out fuzz-findings] [--start 0]
    python bench/fuzz_models.py --replay fuzz-findings/escape/000123 --backend cpu

Workers run under a resource budget (EMBER_MAX_TENSOR_BYTES=256 MiB, EMBER_MAX_ARENA_BYTES=
1 GiB, EMBER_MAX_GRAPH_NODES=100000, address space 8 GiB), as a service embedding Ember
would; the cpu backend builds into its own cache folder (--cache-dir), pruned of model
libraries as the run goes."""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import numpy as np

from ember.support.host import cpu_name

try:  # run as a script (bench/ on sys.path) or imported as bench.fuzz_models
    from fuzz_compare import Outcome, run_case, write_case_files
    from fuzz_mutations import Case, load_seeds, make_case
except ImportError:  # pragma: no cover
    from bench.fuzz_compare import Outcome, run_case, write_case_files
    from bench.fuzz_mutations import Case, load_seeds, make_case

FINDINGS = ("crash", "hang", "escape", "internal", "mismatch")
OUTCOMES = ("refused", "match", "ember-only", "not-compared", "ort-differs", "no-consensus", "ort-crash", "ort-timeout",
            *FINDINGS)
# Not findings, but saved and listed for review: Ember differs from ONNX Runtime.
REVIEW = ("ort-differs", "no-consensus")
WORKER_ENV = {"EMBER_MAX_TENSOR_BYTES": str(256 << 20), "EMBER_MAX_ARENA_BYTES": str(1 << 30),
              "EMBER_MAX_GRAPH_NODES": "100000", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
ADDRESS_SPACE = 8 << 30


def _limit_worker(cache_dir: str | None) -> None:
    import resource
    import warnings

    os.environ.update(WORKER_ENV)
    if cache_dir:
        os.environ["EMBER_CACHE_DIR"] = cache_dir
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")


def _fuzz_worker(conn, backend: str, cache_dir: str | None, sanitized: bool) -> None:
    if not sanitized:
        _limit_worker(cache_dir)
    else:
        import warnings

        os.environ.update({k: v for k, v in WORKER_ENV.items() if k.startswith("EMBER_")})
        warnings.simplefilter("ignore")
    work = Path(tempfile.mkdtemp(prefix="ember-fuzz-"))
    try:
        while True:
            case = conn.recv()
            if case is None:
                return
            folder = work / f"{case.index}"
            outcome = run_case(case, backend, folder, lambda p: conn.send(("phase", p)))
            shutil.rmtree(folder, ignore_errors=True)
            conn.send(("done", outcome))
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The pool: long-lived workers, restarted when one dies, hangs or has run `recycle` tasks


@contextlib.contextmanager
def _environment(changes: dict[str, str] | None) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in (changes or {})}
    os.environ.update(changes or {})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Worker:
    def __init__(self, ctx, target, args: tuple, env: dict[str, str] | None) -> None:
        self.conn, child = ctx.Pipe()
        with _environment(env):
            self.process = ctx.Process(target=target, args=(child, *args), daemon=True)
            self.process.start()
        child.close()
        self.task: Any = None
        self.phase = ""
        self.started = 0.0
        self.done = 0

    @property
    def pid(self) -> int:
        return self.process.pid or 0

    def give(self, task: Any) -> None:
        self.task, self.phase, self.started = task, "sent", time.monotonic()
        self.conn.send(task)

    def stop(self, kill: bool = False) -> None:
        if not kill:
            with contextlib.suppress(OSError, BrokenPipeError):
                self.conn.send(None)
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


@dataclass
class Finished:
    task: Any
    result: Any  # what the worker sent, or None when it died or timed out
    status: str  # "done", "died" or "timeout"
    phase: str  # the last phase the worker reported
    pid: int
    exitcode: int | None = None
    seconds: float = 0.0


def run_pool(tasks: Iterator[Any], target, args: tuple, jobs: int, timeout: float,
             on_finished: Callable[[Finished], None], env: dict[str, str] | None = None,
             recycle: int = 0) -> None:
    """Feeds `tasks` to `jobs` workers running `target(conn, *args)`: each receives a task and
    sends ("phase", name) messages, then ("done", result). A worker that dies, or runs one phase
    past `timeout` seconds, is replaced."""
    ctx = multiprocessing.get_context("spawn")
    pending = iter(tasks)
    exhausted = False
    workers = [Worker(ctx, target, args, env) for _ in range(max(1, jobs))]
    try:
        while True:
            for i, w in enumerate(workers):
                if w.task is None and not exhausted:
                    if recycle and w.done >= recycle:
                        w.stop()
                        workers[i] = w = Worker(ctx, target, args, env)
                    try:
                        w.give(next(pending))
                    except StopIteration:
                        exhausted = True
            busy = [w for w in workers if w.task is not None]
            if not busy:
                return
            ready = wait([w.conn for w in busy], timeout=0.25)
            for i, w in enumerate(list(workers)):
                if w.task is None:
                    continue
                finished = None
                if w.conn in ready:
                    try:
                        while w.conn.poll():
                            kind, payload = w.conn.recv()
                            if kind == "phase":
                                w.phase, w.started = payload, time.monotonic()
                            else:
                                finished = Finished(w.task, payload, "done", w.phase, w.pid)
                                break
                    except (EOFError, OSError):
                        w.process.join(2)
                        finished = Finished(w.task, None, "died", w.phase, w.pid, w.process.exitcode)
                elif time.monotonic() - w.started > timeout:
                    finished = Finished(w.task, None, "timeout", w.phase, w.pid)
                if finished is None:
                    continue
                finished.seconds = time.monotonic() - w.started
                w.task = None
                w.done += 1
                if finished.status != "done":
                    w.stop(kill=True)
                    workers[i] = Worker(ctx, target, args, env)
                on_finished(finished)
    finally:
        for w in workers:
            w.stop(kill=w.task is not None)


# ---------------------------------------------------------------------------------------------
# A run


@dataclass
class Record:
    index: int
    seed: str
    mutations: list[str]
    status: str
    detail: str
    seconds: float


def classify(finished: Finished) -> Outcome:
    if finished.status == "done":
        return finished.result
    in_ort = finished.phase in ("ort", "compare")
    if finished.phase == "reference":  # Ember and ONNX Runtime differ, and the tie-break failed
        return Outcome("mismatch", f"the results differ from ONNX Runtime's, and ONNX's reference "
                                   f"{'died' if finished.status == 'died' else 'hung'} on the case")
    if finished.status == "died":
        code = finished.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return Outcome("ort-crash" if in_ort else "crash", f"worker died ({how}) in phase {finished.phase}")
    return Outcome("ort-timeout" if in_ort else "hang", f"phase {finished.phase} ran past the time limit")


def save_finding(case: Case, outcome: Outcome, backend: str, out: Path) -> Path:
    folder = out / outcome.status / f"{case.index:06d}"
    write_case_files(case, folder)
    arrays = {k: v for k, v in case.inputs.items() if isinstance(v, np.ndarray)}
    # ml_dtypes arrays (bfloat16, int4...) are stored as their bytes and viewed back on load.
    np.savez(folder / "inputs.npz", **{f"in_{i}": v.view(np.uint8) if v.dtype.kind == "V" else v
                                      for i, v in enumerate(arrays.values())})
    info = {"index": case.index, "seed_model": case.seed, "mutations": case.mutations, "backend": backend,
            "status": outcome.status, "detail": outcome.detail, "input_names": list(arrays),
            "input_dtypes": [v.dtype.name for v in arrays.values()],
            "side_files": sorted(case.side_files), "rtol": case.rtol, "atol": case.atol,
            "random_outputs": case.random_outputs}
    (folder / "info.json").write_text(json.dumps(info, indent=1))
    return folder


def load_saved(folder: Path) -> tuple[Case, str]:
    info = json.loads((folder / "info.json").read_text())
    import ml_dtypes

    with np.load(folder / "inputs.npz") as data:
        inputs = {name: data[f"in_{i}"] for i, name in enumerate(info["input_names"])}
    for (name, value), dtype in zip(list(inputs.items()), info.get("input_dtypes", []), strict=False):
        if value.dtype.name != dtype and hasattr(ml_dtypes, dtype):
            inputs[name] = value.view(getattr(ml_dtypes, dtype))
    side = {name: (folder / name).read_bytes() for name in info["side_files"]}
    case = Case(info["index"], info["seed_model"], info["mutations"], (folder / "model.onnx").read_bytes(), inputs,
                side, info["rtol"], info["atol"], info["random_outputs"])
    return case, info["backend"]


def prune_cache(cache: Path, older_than: float = 120.0) -> None:
    """Removes model libraries (not the kernel library object) the fuzz run built."""
    folder = cache / "cpu"
    if not folder.is_dir():
        return
    now = time.time()
    for entry in folder.iterdir():
        if entry.name.startswith("runtime-") or entry.name == ".lock":
            continue
        # A build folder is in use until its build ends (a loaded machine's gcc may run minutes
        # without touching the folder): only one left by a killed worker, long past any case's
        # time limit, is removed.
        limit = max(older_than, 600.0) if entry.name.startswith("build-") else older_than
        with contextlib.suppress(OSError):
            if now - entry.lstat().st_mtime > limit:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()


WARM_UP = """
import numpy as np
from onnx import helper
import ember
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm",
                          [helper.make_tensor_value_info("x", 1, [3])], [helper.make_tensor_value_info("y", 1, None)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
ember.compile(model, backend="cpu").run({"x": np.ones(3, np.float32)})
"""


def warm_cache(env: dict[str, str] | None = None) -> None:
    """Builds the cpu backend's kernel library object once, before the timed workers start:
    on a loaded machine that build alone can run past a case's time limit."""
    import subprocess

    result = subprocess.run([sys.executable, "-c", WARM_UP], env={**os.environ, **(env or {})},
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"the cpu backend does not work here:\n{result.stderr[-3000:]}")


def fuzz(cases: int, backend: str, seed: int = 0, jobs: int = 2, timeout: float = 60.0, start: int = 0,
         out: Path | None = None, cache_dir: Path | None = None, recycle: int = 300,
         progress: Callable[[Record, Counter], None] | None = None) -> list[Record]:
    """Runs cases start .. start+cases-1 of the run `seed` on `backend`; returns a record per
    case (in index order). Findings are saved under `out` when given."""
    seeds = load_seeds()
    records: dict[int, Record] = {}
    counts: Counter = Counter()
    by_index: dict[int, Case] = {}

    def tasks() -> Iterator[Case]:
        for index in range(start, start + cases):
            case = make_case(seeds, seed, index)
            by_index[index] = case
            yield case

    last_prune = [time.monotonic()]

    def finished(f: Finished) -> None:
        case: Case = f.task
        outcome = classify(f)
        records[case.index] = Record(case.index, case.seed, case.mutations, outcome.status, outcome.detail,
                                     f.seconds if f.status != "done" else outcome.seconds)
        counts[outcome.status] += 1
        if out is not None and outcome.status in (*FINDINGS, *REVIEW):
            save_finding(case, outcome, backend, out)
        by_index.pop(case.index, None)
        if progress:
            progress(records[case.index], counts)
        if cache_dir is not None and time.monotonic() - last_prune[0] > 60:
            prune_cache(cache_dir)
            last_prune[0] = time.monotonic()

    if backend == "cpu":
        warm_cache({"EMBER_CACHE_DIR": str(cache_dir)} if cache_dir is not None else None)
    run_pool(tasks(), _fuzz_worker, (backend, str(cache_dir) if cache_dir else None, False), jobs, timeout,
             finished, recycle=recycle)
    if cache_dir is not None:
        prune_cache(cache_dir, older_than=0.0)
    return [records[i] for i in sorted(records)]


def summary(records: list[Record], backend: str, seconds: float) -> str:
    counts = Counter(r.status for r in records)
    lines = [f"backend {backend}: {len(records)} cases in {seconds:.1f} s ({len(records) / max(seconds, 1e-9):.1f} "
             "cases/s)", f"{'outcome':<14} {'cases':>7}"]
    for status in OUTCOMES:
        marker = "  <- finding" if status in FINDINGS and counts[status] else ""
        lines.append(f"{status:<14} {counts[status]:>7}{marker}")
    per_mutation: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        for m in r.mutations:
            per_mutation[m.split(":")[0]][r.status] += 1
    columns = ("refused", "match", "ember-only", "findings")
    lines.append(f"{'mutation':<16}" + "".join(f"{c:>11}" for c in columns))
    for kind in sorted(per_mutation):
        c = per_mutation[kind]
        row = [c["refused"], c["match"], c["ember-only"], sum(c[s] for s in FINDINGS)]
        lines.append(f"{kind:<16}" + "".join(f"{v:>11}" for v in row))
    findings = sum(counts[s] for s in FINDINGS)
    lines.append(f"findings: {findings} (crash {counts['crash']}, hang {counts['hang']}, escape {counts['escape']}, "
                 f"internal {counts['internal']}, mismatch {counts['mismatch']})")
    return "\n".join(lines)




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--backend", default="interpreter", choices=["interpreter", "cpu"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0,
                        help="first case index (to rerun one case: --start I --cases 1)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case phase (a hang past it)")
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"), help="findings are saved here")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="EMBER_CACHE_DIR of the workers (default: <ember cache>/fuzz, pruned as it goes)")
    parser.add_argument("--recycle", type=int, default=300, help="restart a worker after this many cases")
    parser.add_argument("--json", type=Path, help="write every case's record here")
    parser.add_argument("--replay", type=Path, help="run one saved finding in this process")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()

    if args.replay:
        case, backend = load_saved(args.replay)
        _limit_worker(None)
        with tempfile.TemporaryDirectory() as folder:
            outcome = run_case(case, args.backend if "--backend" in sys.argv else backend, Path(folder))
        print(f"{outcome.status}: {outcome.detail}")
        return 0

    from ember.support.paths import cache_dir as ember_cache

    cache = args.cache_dir or ember_cache() / "fuzz"
    started = time.perf_counter()
    print(f"fuzzing {args.cases} cases on {args.backend} (seed {args.seed}, {args.jobs} jobs, timeout "
          f"{args.timeout:g} s) on {cpu_name()}; findings -> {args.out}", flush=True)

    def progress(record: Record, counts: Counter) -> None:
        done = sum(counts.values())
        if record.status in (*FINDINGS, *REVIEW) and not args.quiet:
            print(f"  #{record.index} {record.status} [{record.seed}] {'; '.join(record.mutations)[:200]}: "
                  f"{record.detail[:300]}", flush=True)
        if done % 500 == 0:
            rate = done / (time.perf_counter() - started)
            brief = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            print(f"  {done} cases ({rate:.1f}/s): {brief}", flush=True)

    records = fuzz(args.cases, args.backend, args.seed, args.jobs, args.timeout, args.start, args.out, cache,
                   args.recycle, progress)
    seconds = time.perf_counter() - started
    print(summary(records, args.backend, seconds))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in records], indent=0))
    return 1 if any(r.status in FINDINGS for r in records) else 0


if __name__ == "__main__":
    raise SystemExit(main())
