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
    """An executable: the library, the weight blob and the arena (kernels' scratch included).
    Runs are serialized per model because the arena is shared; separate CompiledModels run
    in parallel."""

    def __init__(self, library: Path, cprogram: CProgram, program: Program) -> None:
        self._lib = ctypes.CDLL(str(library))
        self._entry = getattr(self._lib, cprogram.entry)
        self._entry.restype = ctypes.c_int
        self._entry.argtypes = [ctypes.c_void_p] * 4
        self._weights = _aligned_empty(cprogram.weights.size)
        self._weights[...] = cprogram.weights
        self._arena = _aligned_empty(cprogram.arena_bytes)
        self._errors = cprogram.errors
        self._outputs = [(b.type.shape, b.type.dtype.numpy) for b in program.outputs]
        # Fetching an array's address costs microseconds: the fixed regions' are taken once.
        self._fixed = (self._weights.ctypes.data, self._arena.ctypes.data)
        self._lock = threading.Lock()
        self.source = cprogram.source
        self.library = library

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        outputs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        out_ptrs = (ctypes.c_void_p * max(len(outputs), 1))(*[a.ctypes.data for a in outputs])
        weights, arena = self._fixed
        with self._lock:
            status = self._entry(weights, in_ptrs, out_ptrs, arena)
        if status:
            raise EmberError(self._errors.get(status, f"native code failed with status {status}"))
        return outputs
