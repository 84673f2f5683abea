"""Many threads on one compiled model, several models at once, and the admission limit
(runtime/compiled.py, backends/cpu/native.py's arena free list, runtime/segmented.py)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.runtime import CompiledModel, TensorSpec
from ember.support.errors import QueueFullError
from ember.types import DType, TensorType

LENET = Path(__file__).resolve().parents[1] / "examples" / "lenet.onnx"


def _feeds(model: CompiledModel, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.type.shape).astype(s.type.dtype.numpy) for s in model.inputs}


@pytest.mark.parametrize("threads", [1, 2])
def test_eight_threads_a_thousand_runs_each_on_one_model(threads):
    model = ember.compile(str(LENET), backend="cpu", num_threads=threads)
    oracle = ember.compile(str(LENET), backend="interpreter")
    cases = [_feeds(model, seed) for seed in range(16)]
    expected = [oracle.run(feeds) for feeds in cases]

    def worker(worker_index: int) -> int:
        wrong = 0
        for i in range(1000):
            case = (worker_index * 7 + i) % len(cases)
            result = model.run(cases[case])
            wrong += not all(np.allclose(result[k], v, rtol=1e-5, atol=1e-6) for k, v in expected[case].items())
        return wrong

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(worker, range(8))) == 0


def test_two_models_run_concurrently_and_a_partitioned_one_too():
    models = [ember.compile(str(LENET), backend="cpu", num_threads=1),
              ember.compile(str(LENET), backend=["cpu", "interpreter"], num_threads=1)]
    feeds = _feeds(models[0], 0)
    expected = ember.compile(str(LENET), backend="interpreter").run(feeds)

    def worker(index: int) -> bool:
        return all(all(np.allclose(models[index % 2].run(feeds)[k], v, rtol=1e-5, atol=1e-6)
                       for k, v in expected.items()) for _ in range(200))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(worker, range(4)))


class _Gate:
    """An executable that blocks until released: makes 'a run is in flight' deterministic."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def run(self, inputs):
        self.entered.release()
        self.release.wait(10)
        return [inputs[0] * 2]


def _gated_model() -> tuple[CompiledModel, _Gate]:
    gate = _Gate()
    spec = TensorType(DType.FLOAT32, (2,))
    return CompiledModel(gate, [TensorSpec("x", spec)], [TensorSpec("y", spec)], {}, "gate"), gate


def test_the_queue_limit_refuses_cleanly_when_full_and_admits_again_after():
    model, gate = _gated_model()
    model.limit_queue(running=1, waiting=1)
    x = {"x": np.ones(2, np.float32)}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(model.run, x)
        assert gate.entered.acquire(timeout=10)  # one runs
        second = pool.submit(model.run, x)  # one waits for the running slot
        for _ in range(1000):
            if model._admitted == 2:
                break
            threading.Event().wait(0.001)
        with pytest.raises(QueueFullError, match="2 runs running or waiting, its limit"):
            model.run(x)
        gate.release.set()
        assert first.result(10)["y"].tolist() == [2.0, 2.0]
        assert second.result(10)["y"].tolist() == [2.0, 2.0]
    assert model.run(x)["y"].tolist() == [2.0, 2.0]  # admitted again once the queue drained


def test_queue_limit_arguments_are_checked():
    model, _ = _gated_model()
    with pytest.raises(ember.EmberError, match="running >= 1 and waiting >= 0"):
        model.limit_queue(running=0, waiting=1)
