"""Cold and cached compile time of a model on the cpu backend, each in a fresh process, split
into the cases a user meets:

  fresh machine  empty EMBER_CACHE_DIR: the kernel library is built, then the model
  empty cache    the kernel library is there, the model's library is not
  cached         the model's library is in the cache (verified, then loaded)

and the README's first command (`ember run examples/lenet.onnx --backend cpu --reference
examples/lenet.ref.npz`) on a fresh machine and with the kernel library built. For each:
wall seconds and CPU seconds (the process and the C compiler it runs, so other work on the
machine does not inflate it) of `import ember` and of `ember.compile(...)`, the median of
--repeat runs. Names the CPU.

    python bench/compile_resnet.py [--model ../shared/models/resnet18.onnx] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ember.support.host import cpu_name  # noqa: E402

DEFAULT_MODEL = ROOT.parent / "shared" / "models" / "resnet18.onnx"

# Runs in the child: times `import ember` and one compile, in this fresh process.
CHILD = r"""
import json, resource, sys, time
def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
w0, c0 = time.perf_counter(), cpu()
import ember
w1, c1 = time.perf_counter(), cpu()
ember.compile(sys.argv[1], backend="cpu")
w2, c2 = time.perf_counter(), cpu()
print(json.dumps({"import_wall": w1 - w0, "import_cpu": c1 - c0, "compile_wall": w2 - w1, "compile_cpu": c2 - c1}))
"""


def run_child(command: list[str], cache: Path, pycache: Path) -> dict[str, float]:
    """Runs `command` with EMBER_CACHE_DIR=cache; its JSON line (if any) plus the process's
    wall seconds. Python's bytecode is cached in `pycache`, as an installed package's is
    (the environment may turn it off: then every process compiles Ember's source again)."""
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), PYTHONPYCACHEPREFIX=str(pycache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr.decode()[-2000:]}")
    result: dict[str, float] = {"process_wall": wall}
    for line in done.stdout.decode().splitlines()[::-1]:
        if line.startswith("{"):
            result.update(json.loads(line))
            break
    return result


def forget_models(cache: Path) -> None:
    """Removes the model libraries from a cache, keeping the kernel library's objects (the
    pieces the models compiled there needed) and the pool."""
    for entry in (cache / "cpu").iterdir():
        if not entry.name.startswith(("runtime-", "pool-", ".lock")):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def process_cpu_seconds(command: list[str], cache: Path, pycache: Path) -> dict[str, float]:
    """run_child through a wrapper that reports the command's wall and CPU seconds (its own
    and its children's: the C compiler)."""
    wrapper = ("import resource, subprocess, sys, time, json\n"
               "t = time.perf_counter()\n"
               "r = subprocess.run(sys.argv[1:])\n"
               "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
               "print(json.dumps({'command_wall': time.perf_counter() - t, 'command_cpu': u.ru_utime + u.ru_stime}))\n"
               "sys.exit(r.returncode)\n")
    return run_child([sys.executable, "-c", wrapper, *command], cache, pycache)


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-readme", action="store_true")
    args = parser.parse_args()
    model = str(Path(args.model).resolve())
    compile_command = [sys.executable, "-c", CHILD, model]
    print(f"compile time of {Path(model).name} on the cpu backend, {cpu_name()}, {os.cpu_count()} cores; "
          f"median of {args.repeat} fresh processes")
    rows: dict[str, list[dict[str, float]]] = {"fresh machine": [], "empty cache": [], "cached": []}
    readme: dict[str, list[dict[str, float]]] = {"fresh machine": [], "kernel library built": []}
    readme_command = [sys.executable, "-m", "ember", "run", "examples/lenet.onnx", "--backend", "cpu",
                      "--reference", "examples/lenet.ref.npz"]
    with tempfile.TemporaryDirectory(prefix="ember-compile-bench-") as scratch:
        pycache = Path(scratch) / "pycache"
        # The first run writes the bytecode (its fresh-machine figure pays for that too).
        for k in range(args.repeat):
            cache = Path(scratch) / f"cache{k}"
            rows["fresh machine"].append(run_child(compile_command, cache, pycache))
            forget_models(cache)
            rows["empty cache"].append(run_child(compile_command, cache, pycache))
            rows["cached"].append(run_child(compile_command, cache, pycache))
            if not args.skip_readme:
                fresh = Path(scratch) / f"readme{k}"
                readme["fresh machine"].append(process_cpu_seconds(readme_command, fresh, pycache))
                forget_models(fresh)
                readme["kernel library built"].append(process_cpu_seconds(readme_command, fresh, pycache))
    print(f"{'case':<16} {'import wall':>11} {'import CPU':>10} {'compile wall':>12} {'compile CPU':>11} "
          f"{'process wall':>12}")
    for name, runs in rows.items():
        print(f"{name:<16} {median(runs, 'import_wall'):>11.2f} {median(runs, 'import_cpu'):>10.2f} "
              f"{median(runs, 'compile_wall'):>12.2f} {median(runs, 'compile_cpu'):>11.2f} "
              f"{median(runs, 'process_wall'):>12.2f}")
    if not args.skip_readme:
        print(f"README first command: {' '.join(['ember', *readme_command[3:]])}")
        print(f"{'case':<22} {'wall s':>8} {'CPU s':>8}")
        for name, runs in readme.items():
            print(f"{name:<22} {median(runs, 'command_wall'):>8.2f} {median(runs, 'command_cpu'):>8.2f}")


if __name__ == "__main__":
    main()
