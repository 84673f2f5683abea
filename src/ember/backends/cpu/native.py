"""Loading a compiled model library and calling its entry function through ctypes."""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ember.codegen import CProgram
from ember.lir.ir import Program
from ember.support.errors import EmberError


def _aligned_empty(nbytes: int, alignment: int = 4096) -> np.ndarray:
    """Page-aligned, so the 64-byte alignment the memory plan assumes holds and where a
    buffer falls in the cache does not change from one process to the next."""
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


class NativeProgram:
    """An executable: the library, the weight blob (read-only at run time) and arenas
    (activations and kernels' scratch). Each run borrows an arena from a free list, making a
    new one when every arena is busy, so threads calling one model run at once with no lock
    around the native call; the free list keeps at most `max_idle_arenas`."""

    max_idle_arenas = 8

    def __init__(self, library: Path, cprogram: CProgram, program: Program) -> None:
        self._lib = ctypes.CDLL(str(library))
        self._entry = getattr(self._lib, cprogram.entry)
        self._entry.restype = ctypes.c_int
        self._entry.argtypes = [ctypes.c_void_p] * 4
        self._weights = _aligned_empty(cprogram.weights.size)
        self._weights[...] = cprogram.weights
        self._arena_bytes = cprogram.arena_bytes
        self._errors = cprogram.errors
        self._outputs = [(b.type.shape, b.type.dtype.numpy) for b in program.outputs]
        # Fetching an array's address costs microseconds: the weights' and each arena's are
        # taken once. An arena is kept with its address: (array, address).
        self._weights_address = self._weights.ctypes.data
        self._idle = [self._new_arena()]
        self._lock = threading.Lock()  # guards the free list only
        self.source = cprogram.source
        self.library = library

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        outputs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        out_ptrs = (ctypes.c_void_p * max(len(outputs), 1))(*[a.ctypes.data for a in outputs])
        with self._lock:
            arena = self._idle.pop() if self._idle else None
        if arena is None:
            arena = self._new_arena()
        try:
            status = self._entry(self._weights_address, in_ptrs, out_ptrs, arena[1])
        finally:
            with self._lock:
                if len(self._idle) < self.max_idle_arenas:
                    self._idle.append(arena)
        if status:
            raise EmberError(self._errors.get(status, f"native code failed with status {status}"))
        return outputs

    def _new_arena(self) -> tuple[np.ndarray, int]:
        arena = _aligned_empty(self._arena_bytes)
        return arena, arena.ctypes.data
