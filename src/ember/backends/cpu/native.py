"""Loading a compiled model library and calling its entry function through ctypes.

Fork: a model library's own thread pool (ember_pool.c) starts fresh workers in a forked child.
An OpenMP runtime a vendor library brought in does not: its worker threads do not survive
fork, and a forked child entering one of its parallel regions waits for them forever. A
program used in a process other than the one that loaded it (a forked child) therefore first
makes that runtime's parallel regions inactive in that process (omp_set_max_active_levels(0):
teams of one thread, which need no pool) and starts over with fresh locks and arenas.

Waiting: backends/cpu/threads.py (the pool's spin budget; a vendor library's OpenMP runtime is
told to let idle threads sleep rather than spin)."""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ember.backends.cpu.cache import load_library
from ember.backends.cpu.threads import openmp_wait_policy, share_pool
from ember.codegen import CProgram
from ember.lir.ir import Program
from ember.support.errors import EmberError
from ember.support.heap import page_aligned_zeros
from ember.types import DType


class _Arena:
    """Activation memory with its address, and the input and output pointer tables of the run
    that uses it (a run holds its arena alone, so the tables are filled in place, no ctypes
    array built per run). Page-aligned, from 2 MB up on huge pages, as the weights
    (support/heap.py)."""

    __slots__ = ("memory", "address", "in_ptrs", "out_ptrs")

    def __init__(self, nbytes: int, outputs: int) -> None:
        self.memory = page_aligned_zeros(nbytes)
        self.address = self.memory.ctypes.data
        self.in_ptrs = _pointer_table(1)
        self.out_ptrs = _pointer_table(max(outputs, 1))


@functools.cache
def _table_type(length: int) -> type[ctypes.Array]:
    """ctypes' array type of `length` pointers, kept: ctypes caches them weakly, so a type made
    for one model's tables is garbage with cycles (type, mro, descriptors) once the model goes."""
    return ctypes.c_void_p * length


def _pointer_table(length: int) -> ctypes.Array:
    """A zeroed table of `length` pointers."""
    return _table_type(length)()


def _address(array: np.ndarray) -> int:
    """The address of an array's data. Through a ctypes view of its buffer: a third of the
    time of `array.ctypes.data`, which matters on models that run in tens of microseconds;
    read-only and empty arrays take the general way."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))  # type: ignore[arg-type]
    except (TypeError, ValueError, BufferError):
        return array.ctypes.data


def _aligned_empty(nbytes: int, alignment: int = 4096) -> np.ndarray:
    """Page-aligned, so the 64-byte alignment the memory plan assumes holds and where a
    buffer falls in the cache does not change from one process to the next."""
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


_serialized_in: int | None = None  # the process whose OpenMP regions were made inactive


def _serialize_openmp(library: ctypes.CDLL) -> None:
    """Makes OpenMP parallel regions inactive in this process (once per process). The symbol
    is looked up through the model library, so it is whichever OpenMP runtime it links."""
    global _serialized_in
    if _serialized_in == os.getpid():
        return
    try:
        set_levels = library.omp_set_max_active_levels
    except AttributeError:
        return  # built without OpenMP: nothing to serialize
    set_levels.argtypes = [ctypes.c_int]
    set_levels(0)
    _serialized_in = os.getpid()


class NativeProgram:
    """An executable: the library, the weight blob (read-only at run time) and arenas
    (activations and kernels' scratch). Each run borrows an arena from a free list, making a
    new one when every arena is busy, so threads calling one model run at once with no lock
    around the native call; the free list keeps at most `max_idle_arenas`."""

    max_idle_arenas = 8

    def __init__(self, library: Path, cprogram: CProgram, program: Program) -> None:
        outputs = [(b.type.shape, b.type.dtype.numpy) for b in program.outputs]
        self._library_bytes: bytes | None = None
        with openmp_wait_policy():
            loaded = load_library(library)
        self._setup(loaded, library, cprogram.entry, cprogram.weights, cprogram.arena_bytes,
                    cprogram.errors, outputs, cprogram.source)

    @classmethod
    def from_artifact(cls, library: Path, meta: dict, weights: bytes) -> NativeProgram:
        """A program saved by `artifact` (library already written and verified by the caller).
        Once loaded, the library file is removed (the mapping stays); its bytes are kept for
        saving the model again."""
        native = cls.__new__(cls)
        native._library_bytes = library.read_bytes()
        outputs = [(tuple(shape), np.dtype(DType(dtype).numpy)) for shape, dtype in meta["outputs"]]
        errors = {int(code): str(text) for code, text in meta["errors"].items()}
        with openmp_wait_policy():
            loaded = ctypes.CDLL(str(library))
        native._setup(loaded, library, str(meta["entry"]), np.frombuffer(weights, np.uint8),
                      int(meta["arena_bytes"]), errors, outputs, str(meta.get("source", "")))
        library.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            library.parent.rmdir()
        return native

    def artifact(self) -> tuple[dict[str, bytes], dict]:
        """What a saved model needs to run this program elsewhere: the library, the weights
        and the calling contract (see runtime/artifact.py)."""
        library = self._library_bytes if self._library_bytes is not None else self.library.read_bytes()
        files = {"library.so": library, "weights.bin": self._weights.tobytes()}
        meta = {"entry": self._entry_name, "arena_bytes": self._arena_bytes,
                "errors": {str(code): text for code, text in self._errors.items()},
                "outputs": [[list(shape), DType.from_numpy(np.dtype(dtype)).value] for shape, dtype in self._outputs],
                "source": self.source}
        return files, meta

    def _setup(self, lib: ctypes.CDLL, library: Path, entry: str, weights: np.ndarray, arena_bytes: int,
               errors: dict[int, str], outputs: list[tuple[tuple[int, ...], np.dtype]], source: str) -> None:
        self._lib = lib
        share_pool(lib)
        self._entry_name = entry
        self._entry = getattr(self._lib, entry)
        self._entry.restype = ctypes.c_int
        self._entry.argtypes = [ctypes.c_void_p] * 4
        # The code generator's blob starts on a page (codegen/emitter.py): run it in place rather
        # than hold a second copy of every weight. Read-only: the native code only reads it.
        if weights.ctypes.data % 4096 == 0 and weights.flags.c_contiguous:
            self._weights = weights
        else:
            self._weights = _aligned_empty(weights.size)
            self._weights[...] = weights
        self._weights.flags.writeable = False
        self._arena_bytes = arena_bytes
        self._errors = errors
        self._outputs = outputs
        # Fetching an array's address costs microseconds: the weights' and each arena's are
        # taken once. An arena is kept with its address: (array, address).
        self._weights_address = self._weights.ctypes.data
        self._lock = threading.Lock()  # guards the free list only
        self._idle = [self._new_arena()]
        self._pid = os.getpid()
        self.source = source
        self.library = library

    def _adopt_after_fork(self) -> None:
        """In a forked child: one-thread parallel regions, and locks and arenas of its own (a
        lock held by a parent's thread at the fork would never be released here)."""
        _serialize_openmp(self._lib)
        self._lock = threading.Lock()
        self._idle = [self._new_arena()]
        self._pid = os.getpid()

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        outputs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        if self._pid != os.getpid():
            self._adopt_after_fork()
        with self._lock:
            arena = self._idle.pop() if self._idle else None
        if arena is None:
            arena = self._new_arena()
        if len(arena.in_ptrs) < len(inputs):
            arena.in_ptrs = _pointer_table(len(inputs))
        in_ptrs, out_ptrs = arena.in_ptrs, arena.out_ptrs
        for i, a in enumerate(inputs):
            in_ptrs[i] = _address(a)
        for i, a in enumerate(outputs):
            out_ptrs[i] = _address(a)
        try:
            status = self._entry(self._weights_address, in_ptrs, out_ptrs, arena.address)
        finally:
            with self._lock:
                if len(self._idle) < self.max_idle_arenas:
                    self._idle.append(arena)
        if status:
            raise EmberError(self._errors.get(status, f"native code failed with status {status}"))
        return outputs

    def _new_arena(self) -> _Arena:
        return _Arena(self._arena_bytes, len(self._outputs))
