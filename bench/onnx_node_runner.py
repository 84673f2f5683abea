"""Runs ONNX node test cases (bench/onnx_node_data.py) on an Ember backend through
`ember.onnx_backend`, each in a worker process with a time limit, so that no case can hang or
crash the run. Outputs are compared the way ONNX's backend test runner compares them: same
count, shape and element type, then assert_allclose at rtol 1e-3, atol 1e-7 (two bfloat16
ULPs of rtol for bfloat16 outputs).

A case ends as one of:
  pass      outputs match
  fail      compiled and ran, but an output differs (value, shape or element type)
  error     Ember refused it with an EmberError (the message names node, op and reason)
  bug       any other exception (an Ember bug: refusals must be EmberErrors)
  crash     the worker process died
  timeout   the case ran past the time limit (the worker is killed and replaced)
"""
from __future__ import annotations

import multiprocessing
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np

try:  # run as a script (bench/ on sys.path) or imported as bench.onnx_node_runner
    from onnx_node_data import NodeCase, read_case
except ImportError:  # pragma: no cover
    from bench.onnx_node_data import NodeCase, read_case

RTOL, ATOL = 1e-3, 1e-7
STATUSES = ("pass", "fail", "error", "bug", "crash", "timeout")
DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Result:
    name: str
    op: str
    kind: str
    status: str
    detail: str = ""
    seconds: float = 0.0
    specialized: bool = False  # compiled with some inputs bound as constants (see ember.onnx_backend)


def compare(expected: list, actual: Iterable) -> None:
    """Raises AssertionError when `actual` does not match `expected` (ONNX runner rules)."""
    actual = list(actual)
    np.testing.assert_equal(len(actual), len(expected), err_msg="number of outputs")
    for i, (ref, out) in enumerate(zip(expected, actual, strict=True)):
        if isinstance(ref, list):
            if not isinstance(out, list | tuple):
                raise AssertionError(f"output {i} must be a sequence, got {type(out).__name__}")
            compare(ref, out)
            continue
        np.testing.assert_array_equal(out.shape, ref.shape, err_msg=f"output {i} has incorrect shape")
        if ref.dtype == object:
            np.testing.assert_array_equal(out, ref)
            continue
        np.testing.assert_equal(out.dtype, ref.dtype, err_msg=f"output {i} element type")
        rtol = RTOL
        if out.dtype.name == "bfloat16":
            rtol = max(rtol, 2 ** -6)
        if out.dtype.kind not in "biufc":  # bfloat16, float8 and the like: compare as float32
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=ATOL, err_msg=f"output {i}")


def run_case(case: NodeCase, backend: str) -> Result:
    """Runs one case in this process."""
    from ember.onnx_backend import prepare
    from ember.support.errors import EmberError

    started = time.perf_counter()

    specialized = False

    def result(status: str, detail: str = "") -> Result:
        return Result(case.name, case.op, case.kind, status, detail, time.perf_counter() - started, specialized)

    try:
        model, inputs, expected = read_case(case)
    except Exception as err:  # noqa: BLE001
        return result("bug", f"cannot read the test data: {type(err).__name__}: {err}")
    try:
        rep = prepare(model, "CPU", backend=backend)
        outputs = rep.run(inputs)
        specialized = bool(rep.bound)
    except EmberError as err:
        return result("error", f"{type(err).__name__}: {err}")
    except Exception as err:  # noqa: BLE001
        tb = traceback.extract_tb(err.__traceback__)[-1]
        return result("bug", f"{type(err).__name__}: {err} (at {tb.filename}:{tb.lineno})")
    try:
        compare(expected, outputs)
    except AssertionError as err:
        return result("fail", " ".join(str(err).split())[:400])
    return result("pass")


def _worker(conn, backend: str) -> None:
    import warnings

    warnings.simplefilter("ignore")
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(run_case(case, backend))


class _Worker:
    def __init__(self, ctx, backend: str) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, backend), daemon=True)
        self.process.start()
        child.close()
        self.case: NodeCase | None = None
        self.started = 0.0

    def give(self, case: NodeCase) -> None:
        self.case, self.started = case, time.monotonic()
        self.conn.send(case)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def run_cases(cases: list[NodeCase], backend: str = "interpreter", jobs: int = 2,
              timeout: float = DEFAULT_TIMEOUT, on_result: Callable[[Result], None] | None = None,
              ) -> list[Result]:
    """Runs `cases` on `jobs` worker processes (in this process when jobs is 0, without a
    time limit); returns the results in the order of `cases`."""
    report = on_result or (lambda r: None)
    results: dict[str, Result] = {}
    if jobs <= 0:
        for case in cases:
            results[case.name] = run_case(case, backend)
            report(results[case.name])
        return [results[c.name] for c in cases]
    ctx = multiprocessing.get_context("spawn")  # no state (threads, OpenMP) inherited
    pending = deque(cases)
    workers = [_Worker(ctx, backend) for _ in range(min(jobs, len(cases)))]
    try:
        while pending or any(w.case for w in workers):
            for w in workers:
                if w.case is None and pending:
                    w.give(pending.popleft())
            busy = [w for w in workers if w.case is not None]
            ready = wait([w.conn for w in busy], timeout=0.5)
            for i, w in enumerate(list(workers)):
                if w.case is None:
                    continue
                case = w.case
                outcome = None
                if w.conn in ready:
                    try:
                        outcome = w.conn.recv()
                    except (EOFError, OSError):
                        code = w.process.exitcode if not w.process.is_alive() else "?"
                        outcome = Result(case.name, case.op, case.kind, "crash",
                                         f"worker died (exit code {code})", time.monotonic() - w.started)
                elif time.monotonic() - w.started > timeout:
                    outcome = Result(case.name, case.op, case.kind, "timeout",
                                     f"ran past {timeout:g} s", time.monotonic() - w.started)
                if outcome is None:
                    continue
                results[case.name] = outcome
                report(outcome)
                w.case = None
                if outcome.status in ("crash", "timeout"):
                    w.stop(kill=True)
                    workers[i] = _Worker(ctx, backend)
    finally:
        for w in workers:
            w.stop(kill=w.case is not None)
    return [results[c.name] for c in cases]
