"""The op conformance cases and the convolution kernel geometries (direct, Winograd,
depthwise) on the cpu backend built with AddressSanitizer and UBSan, in child processes (the
tests dealt between one per core) that preload the sanitizer runtime (Python itself is not
instrumented). Any out-of-bounds access or undefined behaviour in a kernel aborts that
process and fails here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The kernel test files whose cpu-versus-interpreter tests (named *matches_interpreter* or
# *cpu_matches*) run under the sanitizers: every C kernel family's edge shapes.
SANITIZED_FILES = ("test_cpu_ops.py", "test_cpu_conv_kernels.py", "test_cpu_attention.py", "test_cpu_einsum.py",
                   "test_cpu_loss.py", "test_cpu_rnn.py", "test_cpu_misc_ops.py", "test_cpu_quantized.py",
                   "test_cpu_conv_nd.py", "test_cpu_resize.py", "test_ml_ops.py", "test_cpu_gemm_tiles.py",
                   "test_transforms_attention.py", "test_transforms_inverted_residual.py",
                   "test_transforms_layouts.py")


def _runtime(name: str) -> str | None:
    compiler = shutil.which("gcc")
    if compiler is None:
        return None
    path = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def _collect(env: dict[str, str], selection: list[str]) -> list[str]:
    """The node ids of the selected tests."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "--collect-only",
                             "-p", "no:cacheprovider", *selection], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_op_cases_run_clean_under_sanitizers(tmp_path):
    asan = _runtime("libasan.so")
    if asan is None:
        pytest.skip("gcc's AddressSanitizer runtime (libasan) is not installed")
    env = dict(os.environ, EMBER_SANITIZE="1", LD_PRELOAD=asan,
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1", UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    selection = [*[str(REPO / "tests" / name) for name in SANITIZED_FILES], "-k", "cpu_matches or matches_interpreter"]
    tests = _collect(dict(os.environ), selection)
    assert len(tests) > 100, tests
    # One shard a core (the tests compile and run one model at a time), each with its own cache.
    shards = max(1, min(2, os.cpu_count() or 1))
    runs = []
    for k in range(shards):
        command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-x", "-p", "no:cacheprovider",
                   *tests[k::shards]]
        runs.append(subprocess.Popen(command, cwd=REPO, env=dict(env, EMBER_CACHE_DIR=str(tmp_path / f"shard{k}")),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        for run in runs:
            output, _ = run.communicate(timeout=1800)
            assert run.returncode == 0, output[-4000:]
            assert " passed" in output
    finally:
        for run in runs:
            run.kill()
