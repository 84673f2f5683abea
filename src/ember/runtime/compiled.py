"""CompiledModel: validates inputs, runs the executable, returns named outputs.

Validation happens here, before any backend code runs, so a native backend never sees a
missing input or an array of the wrong shape or element type.

Threads may call `run` on one model at once (the executables are reentrant). A model can be
given an admission limit, Glow's HostManager queue: at most `running` runs at a time, at most
`waiting` more queued behind them, and a run beyond that is refused with QueueFullError."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from ember.backends import Executable
from ember.support.errors import EmberError, InputError, QueueFullError
from ember.types import TensorType

if TYPE_CHECKING:
    from ember.runtime.profile import RunProfile


@dataclass(frozen=True)
class TensorSpec:
    name: str
    type: TensorType


class CompiledModel:
    def __init__(self, executable: Executable, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 stats: dict[str, Any], backend: str) -> None:
        self._executable = executable
        self.inputs = inputs
        self.outputs = outputs
        self.stats = stats
        self.backend = backend
        self._admission = threading.Lock()
        self._admitted = 0  # runs running or waiting
        self._limit: int | None = None
        self._slots: threading.Semaphore | None = None
        # What a well-formed run's inputs look like: checked first, in one pass, before the
        # checks that explain what is wrong (a model that runs in microseconds notices those).
        self._expected = tuple((s.name, np.dtype(s.type.dtype.numpy), tuple(s.type.shape)) for s in inputs)

    def limit_queue(self, running: int, waiting: int) -> None:
        """At most `running` runs execute at once and `waiting` more wait for a turn; a run
        beyond that raises QueueFullError at once instead of piling up."""
        if not (isinstance(running, int) and isinstance(waiting, int)) or running < 1 or waiting < 0:
            raise EmberError(f"limit_queue needs running >= 1 and waiting >= 0, got {running!r}, {waiting!r}")
        with self._admission:
            self._limit = running + waiting
            self._slots = threading.Semaphore(running)

    @property
    def executable(self) -> Executable:
        """The backend's compiled program (the cpu backend's has `.source`, the C it built)."""
        return self._executable

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the compiled model to one file that `ember.load` reads in another process,
        with no import or compile (runtime/artifact.py)."""
        from ember.runtime.artifact import save

        return save(self, path)

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    @overload
    def run(self, inputs: Mapping[str, Any], profile: Literal[False] = False) -> dict[str, np.ndarray]: ...

    @overload
    def run(self, inputs: Mapping[str, Any], profile: Literal[True]) -> tuple[dict[str, np.ndarray], RunProfile]: ...

    def run(self, inputs: Mapping[str, Any], profile: bool = False) -> Any:
        """Outputs by name. With profile=True, (outputs, RunProfile): the time of every step of
        this run (runtime/profile.py); the cpu backend builds its timed library on first use."""
        if profile:
            return self._run_profiled(inputs)
        arrays = self._validate(inputs)
        if self._limit is None:
            results = self._executable.run(arrays)
        else:
            results = self._run_admitted(arrays)
        return {spec.name: value for spec, value in zip(self.outputs, results, strict=True)}

    def _run_profiled(self, inputs: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], RunProfile]:
        from ember.runtime.profile import RunProfile

        run_profiled = getattr(self._executable, "run_profiled", None)
        if run_profiled is None:
            raise EmberError(f"backend '{self.backend}' cannot profile runs ({type(self._executable).__name__} has "
                             "no per-step timers; the cpu backend and the interpreter have, a saved model has not)")
        arrays = self._validate(inputs)
        start = time.perf_counter()
        results, times = run_profiled(arrays)
        wall = time.perf_counter() - start
        outputs = {spec.name: value for spec, value in zip(self.outputs, results, strict=True)}
        return outputs, RunProfile(self.backend, [times], [wall])

    def _run_admitted(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        with self._admission:
            limit, slots = self._limit, self._slots
            assert limit is not None and slots is not None
            if self._admitted >= limit:
                raise QueueFullError(f"{self!r} has {self._admitted} runs running or waiting, its limit; "
                                     "retry later or raise it with limit_queue")
            self._admitted += 1
        try:
            with slots:
                return self._executable.run(arrays)
        finally:
            with self._admission:
                self._admitted -= 1

    def _validate(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        if type(inputs) is dict and len(inputs) == len(self._expected):
            arrays = []
            for name, dtype, shape in self._expected:
                value = inputs.get(name)
                if (type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape
                        or not value.flags.c_contiguous):
                    break
                arrays.append(value)
            else:
                return arrays
        if not isinstance(inputs, Mapping):
            raise InputError(f"run() takes a dict of input name -> array, got {type(inputs).__name__}")
        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in self.input_names]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing inputs {missing}")
            if unknown:
                parts.append(f"unknown inputs {unknown}")
            raise InputError(f"{'; '.join(parts)} (the model takes {self.input_names})")
        arrays = []
        for spec in self.inputs:
            value = plain_array(spec.name, inputs[spec.name])
            expected = spec.type
            if value.dtype != expected.dtype.numpy:
                raise InputError(f"input '{spec.name}' must have element type {expected.dtype.numpy} "
                                 f"({expected.dtype}), got {value.dtype}")
            if tuple(value.shape) != expected.shape:
                raise InputError(f"input '{spec.name}' must have shape {list(expected.shape)}, "
                                 f"got {list(value.shape)}")
            # np.ascontiguousarray would turn a 0-d input into 1-d.
            arrays.append(value if value.flags.c_contiguous else np.array(value, order="C"))
        return arrays

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.type}" for s in self.inputs)
        outs = ", ".join(f"{s.name}: {s.type}" for s in self.outputs)
        return f"<CompiledModel backend={self.backend} ({ins}) -> ({outs})>"


def plain_array(name: str, value: object) -> np.ndarray:
    """A run-time input as a plain ndarray. Subclasses whose meaning the data alone does not
    carry are refused: a masked array's mask would be ignored, np.matrix changes what `*`
    means. Others (np.memmap, say) are viewed as plain arrays."""
    if not isinstance(value, np.ndarray):
        raise InputError(f"input '{name}' must be a NumPy array, got {type(value).__name__}")
    if isinstance(value, np.ma.MaskedArray):
        raise InputError(f"input '{name}' is a masked array: Ember would ignore its mask; pass "
                         "value.filled(fill_value) or value.data")
    if isinstance(value, np.matrix):
        raise InputError(f"input '{name}' is an np.matrix: pass np.asarray(value)")
    return value if type(value) is np.ndarray else value.view(np.ndarray)
