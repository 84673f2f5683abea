"""Running a partitioned model: each segment is a CompiledModel of its own (on its backend);
tensors pass between them by value name. Segments that do not depend on each other run at
once on a thread pool (native segments release the GIL), the rest in order.

A segment's results are checked before anything reads them (count, array type, element type,
shape), so a plugin backend returning the wrong thing fails with its name instead of
corrupting later segments."""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

import numpy as np

from ember.backends.profiling import StepInfo, StepTimes
from ember.runtime.compiled import CompiledModel
from ember.support.errors import EmberError
from ember.types import TensorType


@dataclass
class SegmentStep:
    """One compiled segment. inputs/outputs: value names, in the segment graph's order.
    after: indices of the steps whose results it reads."""

    index: int
    backend: str
    model: CompiledModel
    inputs: list[str]
    outputs: list[str]
    after: frozenset[int]


class SegmentedExecutable:
    """An Executable over several compiled segments. model_inputs/model_outputs: value names
    of the whole model's inputs and outputs (an output may be a model input or a constant,
    held in `constants`)."""

    def __init__(self, steps: list[SegmentStep], model_inputs: list[str], model_outputs: list[str],
                 constants: dict[str, np.ndarray], max_workers: int = 4) -> None:
        self.steps = steps
        self.model_inputs = model_inputs
        self.model_outputs = model_outputs
        self.constants = constants
        # A chain of segments gains nothing from a pool; independent ones run concurrently.
        self.concurrent = not _is_chain(steps)
        self._max_workers = max_workers
        self._pool = self._new_pool() if self.concurrent else None
        self._pid = os.getpid()

    def _new_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self._max_workers, thread_name_prefix="ember-segment")

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        env: dict[str, np.ndarray] = dict(self.constants)
        env.update(zip(self.model_inputs, inputs, strict=True))
        if self._pool is None:
            for step in self.steps:
                env.update(self._run_step(step, env))
        else:
            self._run_concurrently(env)
        return [env[name] for name in self.model_outputs]

    def run_profiled(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], StepTimes]:
        """One run, the segments one after another (not concurrently, so their steps' times
        do not overlap), each profiled by its backend; steps carry their segment's backend."""
        env: dict[str, np.ndarray] = dict(self.constants)
        env.update(zip(self.model_inputs, inputs, strict=True))
        steps: list[StepInfo] = []
        starts: list[float] = []
        seconds: list[float] = []
        begin = time.perf_counter()
        for step in self.steps:
            offset = time.perf_counter() - begin
            try:
                results, profile = step.model.run({name: env[name] for name in step.inputs}, profile=True)
            except EmberError as err:
                raise EmberError(f"segment{step.index} on backend '{step.backend}': {err}") from None
            for run in profile.runs:
                steps += [replace(info, backend=step.backend) for info in run.steps]
                starts += [offset + start for start in run.starts]
                seconds += run.seconds
            env.update({spec.name: _checked(step, spec.name, spec.type, results.get(spec.name))
                        for spec in step.model.outputs})
        total = time.perf_counter() - begin
        return [env[name] for name in self.model_outputs], StepTimes(steps, starts, seconds, total)

    def _run_concurrently(self, env: dict[str, np.ndarray]) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's pool threads are not here
            self._pool, self._pid = self._new_pool(), os.getpid()
        assert self._pool is not None
        done: set[int] = set()
        running: dict[Future[dict[str, np.ndarray]], SegmentStep] = {}
        pending = list(self.steps)
        while pending or running:
            for step in [s for s in pending if s.after <= done]:
                pending.remove(step)
                feeds = {name: env[name] for name in step.inputs}
                running[self._pool.submit(self._run_step, step, feeds)] = step
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                step = running.pop(future)
                env.update(future.result())  # re-raises a segment's error here
                done.add(step.index)

    @staticmethod
    def _run_step(step: SegmentStep, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = step.model.run({name: env[name] for name in step.inputs})
        except EmberError:
            raise
        except Exception as err:  # a plugin's executable: report it as its failure, by name
            raise EmberError(f"segment{step.index} on backend '{step.backend}' failed: "
                             f"{type(err).__name__}: {err}") from err
        if not isinstance(results, dict):
            raise EmberError(f"segment{step.index} on backend '{step.backend}' returned "
                             f"{type(results).__name__}, not a dict of arrays")
        checked = {}
        for spec in step.model.outputs:
            checked[spec.name] = _checked(step, spec.name, spec.type, results.get(spec.name))
        return checked


def _is_chain(steps: list[SegmentStep]) -> bool:
    """Whether every step depends, directly or not, on the one before it."""
    ancestors: dict[int, set[int]] = {}
    for i, step in enumerate(steps):
        ancestors[step.index] = set(step.after).union(*(ancestors[a] for a in step.after))
        if i > 0 and steps[i - 1].index not in ancestors[step.index]:
            return False
    return True


def _checked(step: SegmentStep, name: str, expected: TensorType, value: object) -> np.ndarray:
    where = f"segment{step.index} on backend '{step.backend}'"
    if not isinstance(value, np.ndarray):
        raise EmberError(f"{where} returned {type(value).__name__} for %{name}, not a NumPy array")
    if value.dtype != expected.dtype.numpy or tuple(value.shape) != expected.shape:
        raise EmberError(f"{where} returned {value.dtype}{list(value.shape)} for %{name}, "
                         f"expected {expected}")
    return value
