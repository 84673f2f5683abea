"""The cpu backend's executable with profiling and step-by-step runs (backends/profiling.py).

The plain library has no timers. The first profiled or stepwise run builds a second library
from the same C plus `ember_instrumented_run` (codegen/emitter.py: a CLOCK_MONOTONIC read
around each step's call, and a hook between steps), cached like any library, and calls it with
the same weights; each such run gets an arena of its own."""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ember.backends.cpu.cache import load_library
from ember.backends.cpu.native import NativeProgram, _aligned_empty
from ember.backends.cpu.threads import share_pool
from ember.backends.profiling import StepHook, StepInfo, StepTimes, step_infos
from ember.codegen import CProgram
from ember.codegen.emitter import INSTRUMENTED_ENTRY, instrumented_entry
from ember.lir.ir import Program
from ember.support.errors import EmberError

_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)


class InstrumentedNativeProgram(NativeProgram):
    """A NativeProgram that can also run with per-step timers (`run_profiled`) or stop between
    steps for a debugger (`run_stepwise`). `build` compiles C text into a library with the
    backend's flags."""

    def __init__(self, library: Path, cprogram: CProgram, program: Program, build: Callable[[str], Path]) -> None:
        super().__init__(library, cprogram, program)
        self.steps: list[StepInfo] = step_infos(program, cprogram.steps)
        self._build = build
        self._instrumented: Callable[..., int] | None = None
        self._build_lock = threading.Lock()

    def _instrumented_entry(self) -> Callable[..., int]:
        with self._build_lock:
            if self._instrumented is None:
                source = self.source + instrumented_entry([s.index for s in self.steps])
                library = load_library(self._build(source))
                share_pool(library)
                entry = getattr(library, INSTRUMENTED_ENTRY)
                entry.restype = ctypes.c_int
                entry.argtypes = [ctypes.c_void_p] * 5 + [_HOOK]
                self._instrumented = entry
            return self._instrumented

    def run_profiled(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], StepTimes]:
        """Outputs and the time of each step in one run (nanosecond clock around each call)."""
        outputs, stamps = self._run_instrumented(inputs, None)
        begin = float(stamps[-2])
        starts = [(float(stamps[2 * k]) - begin) * 1e-9 for k in range(len(self.steps))]
        seconds = [float(stamps[2 * k + 1] - stamps[2 * k]) * 1e-9 for k in range(len(self.steps))]
        return outputs, StepTimes(self.steps, starts, seconds, float(stamps[-1] - stamps[-2]) * 1e-9)

    def run_stepwise(self, inputs: Sequence[np.ndarray], hook: StepHook) -> list[np.ndarray]:
        """Runs with `hook(k, arena, inputs, outputs)` called before each step k and after the
        last (k = len(steps)); a hook returning True stops the run."""
        return self._run_instrumented(inputs, hook)[0]

    def _run_instrumented(self, inputs: Sequence[np.ndarray],
                          hook: StepHook | None) -> tuple[list[np.ndarray], np.ndarray]:
        entry = self._instrumented_entry()
        outputs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        arena = _aligned_empty(self._arena_bytes)
        stamps = np.zeros(2 * len(self.steps) + 2, np.uint64)
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        out_ptrs = (ctypes.c_void_p * max(len(outputs), 1))(*[a.ctypes.data for a in outputs])
        failures: list[BaseException] = []

        def call_hook(k: int) -> int:
            assert hook is not None
            try:
                return int(bool(hook(k, arena, inputs, outputs)))
            except BaseException as err:  # noqa: BLE001  (raised again below, out of the C frame)
                failures.append(err)
                return 1

        callback = _HOOK(call_hook) if hook is not None else _HOOK()
        status = entry(self._weights_address, in_ptrs, out_ptrs, arena.ctypes.data, stamps.ctypes.data, callback)
        if failures:
            raise failures[0]
        if status > 0:
            raise EmberError(self._errors.get(status, f"native code failed with status {status}"))
        return outputs, stamps
