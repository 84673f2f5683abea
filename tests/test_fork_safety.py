"""A model compiled and run in the parent keeps working in forked children (multiprocessing
servers fork): OpenMP's threads do not survive fork, and a child entering a parallel region
used to wait for them forever (backends/cpu/native.py; runtime/segmented.py's thread pool)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork()")


def _in_forked_child(run, out: Path, timeout: float = 60.0) -> str:
    """Runs `run()` in a forked child that saves its result to `out`; 'hung' if it outlives
    the timeout (then it is killed)."""
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            np.save(out, run())
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "ok" if os.waitstatus_to_exitcode(status) == 0 else "failed"
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"


def _wide_graph():
    """Big enough (4M multiply-adds a MatMul) that 2 threads really start parallel regions."""
    from ember.graph import Graph
    from ember.types import DType, TensorType

    g = Graph("wide")
    x = g.add_input("x", TensorType(DType.FLOAT32, (128, 256)))
    w = g.add_constant(np.random.default_rng(2).standard_normal((256, 128)).astype(np.float32), "w")
    h = g.add("Relu", g.add("MatMul", x, w))
    g.set_outputs([("y", g.add("Tanh", g.add("MatMul", h, g.add("Transpose", w, attrs=_perm()))))])
    return g


def _perm():
    from ember.ops.tensor import TransposeAttrs

    return TransposeAttrs((1, 0))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_native_model_keeps_working_in_a_forked_child(threads, tmp_path):
    from ember.backends.cpu import CpuBackend
    from ember.driver import compile_graph

    model = compile_graph(_wide_graph(), CpuBackend(num_threads=threads))
    assert ("/*nthreads*/ 2" in model.executable.source) == (threads == 2)
    x = {"x": np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)}
    name = "y"
    expected = model.run(x)[name]  # the parent has used its OpenMP threads
    for round_ in range(2):  # a child of a child too
        out = tmp_path / f"child{round_}.npy"
        assert _in_forked_child(lambda: model.run(x)[name], out) == "ok"
        np.testing.assert_allclose(np.load(out), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(model.run(x)[name], expected)  # and the parent still runs


def test_a_partitioned_model_with_concurrent_segments_works_in_a_forked_child(tmp_path):
    from ember.backends.cpu import CpuBackend
    from ember.backends.interpreter import InterpreterBackend
    from ember.graph import Graph
    from ember.heterogeneous import compile_partitioned
    from ember.types import DType, TensorType

    class CpuWithoutNeg(CpuBackend):
        def refusal(self, node):
            return "withheld for the test" if node.op == "Neg" else super().refusal(node)

    g = Graph("fork")
    x = g.add_input("x", TensorType(DType.FLOAT32, (256, 256)))
    left = g.add("Tanh", g.add("MatMul", x, x))
    right = g.add("Neg", x)
    g.set_outputs([("y", g.add("Add", left, right))])
    model = compile_partitioned(g, [CpuWithoutNeg(num_threads=2), InterpreterBackend()])
    assert model.executable.concurrent
    feeds = {"x": np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)}
    expected = model.run(feeds)["y"]
    out = tmp_path / "child.npy"
    assert _in_forked_child(lambda: model.run(feeds)["y"], out) == "ok"
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-6)
