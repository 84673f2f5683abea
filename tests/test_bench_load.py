"""ember.bench under competing load, against OpenVINO, peak RSS; the cpu backend's OpenMP wait
policy. Small models, short blocks: these check what is reported, never how fast."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ember.bench import ENGINES, compare, competing_load, peak_rss
from ember.cli import main
from ember.support.errors import EmberError
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")


def test_competing_load_runs_busy_processes_and_stops_them():
    with competing_load(2) as busy:
        time.sleep(0.1)
        assert len(busy) == 2 and all(p.poll() is None for p in busy)
    assert all(p.returncode is not None for p in busy)
    with competing_load(0) as none:
        assert none == []


def test_compare_under_load_reports_p50_p99_and_best_peer_ratio():
    pytest.importorskip("onnxruntime")
    result = compare(LENET, 2, rounds=2, seconds=0.03, load=1, fresh_cache=False)
    assert result["load"] == 1
    for engine in ("ember", "onnxruntime"):
        assert result["p50"][engine] == result[engine] > 0
        assert result["p99"][engine] >= result["p50"][engine]
    # One peer: the best of the peers is that peer.
    assert result["best_ratio"] == result["ratio"] and result["best_peer"] == "onnxruntime"
    assert result["best_ratio_q1"] <= result["best_ratio"] <= result["best_ratio_q3"]


def test_compare_with_openvino_takes_the_faster_peer_per_round():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("openvino")
    result = compare(LENET, 1, rounds=2, seconds=0.03, engines=("ember", "onnxruntime", "openvino"),
                     fresh_cache=False)
    assert result["runs"]["openvino"] >= 2 * 5 and result["p50"]["openvino"] > 0
    # Per round Ember is divided by the faster peer, so never by more than by ONNX Runtime alone.
    assert result["best_ratio"] >= result["ratio"] - 1e-12
    assert result["best_peer"] in ("onnxruntime", "openvino")


def test_unknown_engine_and_negative_load_are_refused():
    with pytest.raises(EmberError, match="unknown engine"):
        compare(LENET, 1, engines=("ember", "tvm"))
    with pytest.raises(EmberError, match="load must be"):
        compare(LENET, 1, engines=("ember",), load=-1)
    assert ENGINES == ("ember", "onnxruntime", "openvino")


def test_peak_rss_is_measured_in_a_fresh_process(tmp_path):
    rss = peak_rss("ember", LENET, 1)  # the user's cache: filled by the other tests, no kernel library build
    # The interpreter and NumPy alone take tens of MB; a process cannot peak below what it holds.
    assert 10 * 2 ** 20 < rss < 4 * 2 ** 30
    with pytest.raises(EmberError, match="failed measuring peak RSS"):
        peak_rss("ember", str(tmp_path / "missing.onnx"), 1)


def test_cli_bench_load_and_peers(capsys):
    pytest.importorskip("onnxruntime")
    assert main(["bench", LENET, "--compare", "onnxruntime", "--load", "1", "--rounds", "2",
                 "--seconds", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "1 competing busy process(es)" in out and "p99" in out and "ember/onnxruntime: " in out
    assert "threads wait: Ember's pool (idle workers spin up to" in out
    with pytest.raises(SystemExit):
        main(["bench", LENET, "--compare", "onnxruntime,tvm"])


# A vendor library's OpenMP runtime (a library backend linking libgomp, as oneDNN's does).
_SHOW_POLICY = """
import ctypes, os, sys
from ember.backends.cpu.build import build_library
from ember.backends.cpu.threads import openmp_wait_policy, wait_policy
path = build_library("#include <omp.h>\\nint vendor_threads(void) { return omp_get_max_threads(); }",
                     link_flags=["-lgomp"])
with openmp_wait_policy():
    ctypes.CDLL(str(path))
ctypes.CDLL("libgomp.so.1").omp_display_env(1)
print("AFTER", os.environ.get("OMP_WAIT_POLICY"), "|", wait_policy(), file=sys.stderr)
"""


def _policy_in_child(extra_env: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    result = subprocess.run([sys.executable, "-c", _SHOW_POLICY], capture_output=True, text=True,
                            env={**env, **extra_env}, check=False)
    if result.returncode != 0 and "libgomp" in result.stderr:
        pytest.skip("no libgomp here (not gcc's OpenMP)")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stderr


def test_a_vendor_librarys_openmp_threads_wait_passively_by_default():
    out = _policy_in_child({})
    # libgomp's default spins 300000 PAUSEs (~30 ms on AMD Zen) before sleeping.
    assert "GOMP_SPINCOUNT = '0'" in out
    # Set only for the runtime's load: the process environment is as the user left it.
    assert "AFTER None | Ember's pool" in out and "OpenMP runtime: passive" in out


def test_the_users_wait_policy_stands():
    out = _policy_in_child({"GOMP_SPINCOUNT": "1234"})
    assert "GOMP_SPINCOUNT = '1234'" in out
    assert "OpenMP runtime: the user's (GOMP_SPINCOUNT=1234)" in out


def test_the_pool_reports_its_spin_budget(monkeypatch):
    from ember.backends.cpu.threads import wait_policy

    monkeypatch.setenv("EMBER_SPIN_US", "250")
    assert "spin up to 250 us" in wait_policy()
    monkeypatch.setenv("EMBER_SPIN_US", "lots")  # what the C side's strtol reads as 0
    assert "spin up to 0 us" in wait_policy()


def _matmul_source(k: int, n: int) -> str:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import ember

    weight = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "gemv",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              initializer=[numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = ember.compile(model, backend="cpu", num_threads=2)
    x = np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"a": x})["y"], x @ weight, rtol=1e-4, atol=1e-4)
    return compiled._executable.source


def test_gemv_regions_below_128k_multiply_adds_stay_on_one_thread():
    # A region of Ember's pool costs about a microsecond with its workers at hand: a GEMV of
    # 64K multiply-adds (about 1.5 us) is not worth one; one of 128K is (layouts.GEMM_PARALLEL_MIN_MACS).
    assert "/*nthreads*/ 1)" in _matmul_source(256, 256)  # 64K multiply-adds
    assert "/*nthreads*/ 2)" in _matmul_source(512, 256)  # 128K
