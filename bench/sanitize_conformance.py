"""The cpu backend's generated C under AddressSanitizer and UBSan, on the ONNX node conformance
suite: every case the cpu backend passes is compiled again with `-fsanitize=address,undefined
-fno-sanitize-recover=all` (the backend's EMBER_SANITIZE=1 build, as tests/test_cpu_sanitized.py
uses it) and run in a worker process that preloads the sanitizer runtime (Python itself is not
instrumented). A sanitizer report aborts the worker; its report (ASan/UBSan log_path, one file
per process) is read back and shown with the case.

    python bench/sanitize_conformance.py [--jobs 2] [--timeout 300] [--filter REGEX]
                                         [--fuzz N [--seed S]] [--json FILE]

Step 1 runs the cases on the plain cpu backend and keeps those that pass; step 2 reruns them
sanitized. --fuzz N also runs N mutated models of bench/fuzz_models.py sanitized (the same
cases its cpu long mode runs for that seed). Exit status 1 when any sanitizer finding."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "src")]

from fuzz_models import FINDINGS, Finished, classify, load_seeds, make_case, run_pool, warm_cache  # noqa: E402
from onnx_node_data import generate, load_index  # noqa: E402
from onnx_node_runner import DEFAULT_TIMEOUT, run_case, run_cases  # noqa: E402

SANITIZER_FLAGS = "-fsanitize=address,undefined -fno-sanitize-recover=all"


def sanitizer_runtime() -> str:
    """LD_PRELOAD for an uninstrumented Python: ASan's runtime first, then the C++ runtime, so
    that ASan's interceptor of C++ throws finds the real one (ONNX Runtime and ONNX's schema
    checks throw C++ exceptions; without it ASan aborts on the first with a CHECK failure)."""
    compiler = shutil.which(os.environ.get("CC", "gcc").split()[0]) or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("no C compiler found")
    paths = []
    for name in ("libasan.so", "libstdc++.so.6"):
        path = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        if not (os.path.isabs(path) and os.path.exists(path)):
            raise SystemExit(f"the compiler's {name} is not installed (AddressSanitizer needs it)")
        paths.append(path)
    return " ".join(paths)


def sanitized_env(log_dir: Path, cache_dir: Path) -> dict[str, str]:
    return {"EMBER_SANITIZE": "1", "EMBER_CACHE_DIR": str(cache_dir), "LD_PRELOAD": sanitizer_runtime(),
            "ASAN_OPTIONS": f"detect_leaks=0:abort_on_error=1:log_path={log_dir}/asan",
            "UBSAN_OPTIONS": f"halt_on_error=1:print_stacktrace=1:log_path={log_dir}/ubsan"}


def sanitizer_report(log_dir: Path, pid: int) -> str:
    """The report the sanitizers wrote for process `pid` (empty when none)."""
    texts = []
    for prefix in ("asan", "ubsan"):
        for path in sorted(log_dir.glob(f"{prefix}.{pid}*")):
            texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def summary_line(report: str) -> str:
    """The report's headline: 'ERROR: AddressSanitizer: heap-buffer-overflow ...' or the
    UBSan 'runtime error:' line."""
    for line in report.splitlines():
        if "ERROR: AddressSanitizer" in line or "runtime error:" in line or "SUMMARY:" in line:
            return line.strip()
    return report.strip().splitlines()[0] if report.strip() else ""


def _node_worker(conn) -> None:
    import warnings

    warnings.simplefilter("ignore")
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(("phase", "run"))
        conn.send(("done", run_case(case, "cpu")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT * 5, help="seconds per case (sanitized)")
    parser.add_argument("--filter", default="", help="only cases whose name matches this regex")
    parser.add_argument("--fuzz", type=int, default=0, help="also run this many fuzz_models.py cpu cases sanitized")
    parser.add_argument("--seed", type=int, default=0, help="the fuzz run's seed")
    parser.add_argument("--json", type=Path, help="write every sanitized result here")
    args = parser.parse_args()

    cases = load_index(generate())
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    started = time.perf_counter()
    plain = run_cases(cases, "cpu", args.jobs, DEFAULT_TIMEOUT)
    passing = {r.name for r in plain if r.status == "pass"}
    chosen = [c for c in cases if c.name in passing]
    print(f"step 1: {len(chosen)} of {len(cases)} node cases pass on the cpu backend "
          f"({time.perf_counter() - started:.0f} s); running them with {SANITIZER_FLAGS}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="ember-sanitize-"))
    log_dir, cache_dir = work / "logs", work / "cache"
    log_dir.mkdir()
    env = sanitized_env(log_dir, cache_dir)
    warm_cache(env)  # the sanitized kernel library, built once before the timed workers
    results: list[dict] = []
    counts: Counter = Counter()

    def finished(f: Finished, label: str, kind: str) -> None:
        report = sanitizer_report(log_dir, f.pid) if f.status != "done" else ""
        if report:
            status, detail = "sanitizer", summary_line(report)
        elif kind == "node":
            status = {"done": f.result.status if f.result else "?", "died": "crash", "timeout": "timeout"}[f.status]
            detail = f.result.detail if f.status == "done" and f.result else f"worker {f.status} (exit {f.exitcode})"
            status = "clean" if status == "pass" else status
        else:
            outcome = classify(f)
            status = "clean" if outcome.status not in FINDINGS else outcome.status
            detail = outcome.detail
        counts[status] += 1
        results.append({"case": label, "kind": kind, "status": status, "detail": detail[:2000],
                        "report": report[:20000]})
        if status != "clean":
            print(f"  {status:<10} {label}: {detail[:300]}", flush=True)

    sanitized_started = time.perf_counter()
    run_pool(iter(chosen), _node_worker, (), args.jobs, args.timeout,
             lambda f: finished(f, f.task.name, "node"), env=env)
    node_seconds = time.perf_counter() - sanitized_started
    print(f"step 2: {len(chosen)} node cases sanitized in {node_seconds:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)

    if args.fuzz:
        from fuzz_models import _fuzz_worker

        seeds = load_seeds()
        fuzz_counts_before = Counter(counts)
        tasks = (make_case(seeds, args.seed, i) for i in range(args.fuzz))
        run_pool(tasks, _fuzz_worker, ("cpu", None, True), args.jobs, args.timeout,
                 lambda f: finished(f, f"fuzz #{f.task.index} ({f.task.seed})", "fuzz"), env=env)
        fuzz_counts = counts - fuzz_counts_before
        print(f"step 3: {args.fuzz} fuzz cases (seed {args.seed}) sanitized: "
              + ", ".join(f"{k} {v}" for k, v in sorted(fuzz_counts.items())), flush=True)

    findings = [r for r in results if r["status"] == "sanitizer"]
    print(f"sanitizer findings: {len(findings)}; other non-clean results: "
          f"{sum(r['status'] not in ('clean', 'sanitizer') for r in results)}; total "
          f"{time.perf_counter() - started:.0f} s")
    for r in findings:
        print(f"--- {r['case']}\n{r['report'][:3000]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
