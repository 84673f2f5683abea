"""How the cpu backend's threads wait for work: Ember's own pool, and a vendor library's OpenMP.

Generated kernels parallelise with `#pragma omp parallel for`, but a model library links
Ember's pool (ember_pool.c) in place of an OpenMP runtime. Why not libgomp:
- libgomp's teams wait at a closing barrier for every thread of the team. With other work
  on the cores a thread of ours may sit queued behind another process, and every region's
  barrier then costs a scheduler slice: a 2-thread BERT went from ~11 ms to 0.5-2 s on a
  loaded 2-core machine with libgomp's default spinning.
- Passive waiting (OMP_WAIT_POLICY=PASSIVE, Ember's setting until the pool) cured that but
  made every region pay a futex wake-up (7-20 us), so small products stayed on one thread and
  2 threads barely beat 1 (GRU 1.46 -> 1.35 ms, where ONNX Runtime halves).
The pool's region is a set of tasks ("OpenMP thread t" is task t) that the caller and the
workers claim; the caller runs whatever no worker has claimed, so a region never waits for a
thread that is asleep or not running, and costs at most its one-thread time; a worker that
comes late to a region leaves a task to the threads already at work when they would reach it
first. Idle workers spin up to EMBER_SPIN_US microseconds (default 5000) after each region,
then sleep (and end after 2 s idle); they stop spinning at once when another model library of
the process starts a region (share_pool). Measured with bench/compare.py --load N against ONNX
Runtime: spinning only while the cores seemed free (yielding, or running short regions on the
caller, once involuntary context switches showed other work) left a 2-thread GRU at its
one-thread speed under load, and so did short spins (0.02-0.1 ms): a worker that sleeps between
runs is woken onto the caller's core as often as not (ember_pool.c says more).

A vendor library a library backend links (oneDNN) brings libgomp with it, for its own threads.
That runtime reads its wait policy from the environment once, when it is loaded: the first load
sets OMP_WAIT_POLICY=PASSIVE (read by both libgomp and LLVM's libomp) for the duration of the
dlopen, unless the user has chosen a policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT or KMP_BLOCKTIME
set): then theirs stands. The variable is removed again afterwards, so processes the user
starts later do not inherit it. Threads are not bound to cores: a bound thread cannot move to
a core another process has just left."""
from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

# Environment variables that choose how OpenMP threads wait: when any is set, Ember sets none.
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
_RUNTIMES = ("libgomp", "libomp", "libiomp")

_policy: str | None = None  # what the first model library load decided, for wait_policy()


def _runtime_loaded() -> bool:
    """Whether an OpenMP runtime is already mapped into this process (its policy is then fixed)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    return any(name in maps for name in _RUNTIMES)


def _decide() -> str | None:
    """The variable to set for the first load, and records the policy in effect."""
    global _policy
    chosen = [f"{name}={os.environ[name]}" for name in WAIT_SETTINGS if name in os.environ]
    if chosen:
        _policy = f"the user's ({', '.join(chosen)})"
        return None
    if _runtime_loaded():
        _policy = "the OpenMP runtime's default (it was loaded before Ember's first model)"
        return None
    _policy = "passive (OMP_WAIT_POLICY=PASSIVE, set by Ember)"
    return "PASSIVE"


@contextlib.contextmanager
def openmp_wait_policy() -> Iterator[None]:
    """Around loading a model library: on the first load in this process, the OpenMP runtime
    that comes in with it reads OMP_WAIT_POLICY=PASSIVE (see the module's docstring)."""
    setting = _decide() if _policy is None else None
    if setting is None:
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = setting
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)


DEFAULT_SPIN_US = 5000  # ember_pool.c's POOL_DEFAULT_SPIN_US; EMBER_SPIN_US overrides it (0 to 100000)

# The one word every model library's pool in this process shares (ember_pool.c's
# ember_pool_share): which pool started a region last, so that the idle workers of the others
# stop spinning on cores the active one needs (models run one after another, a pipeline's or a
# partitioned model's segments). It has an aligned pair of cache lines to itself (the unit
# Intel's adjacent-line prefetcher moves): spinning workers read it, and a line shared with
# Python objects whose reference counts change at every run would move between the cores.
_LINES = 128
_POOL_WORD_BUFFER = ctypes.create_string_buffer(2 * _LINES)
_POOL_WORD = ctypes.addressof(_POOL_WORD_BUFFER) + (-ctypes.addressof(_POOL_WORD_BUFFER)) % _LINES


def share_pool(library: ctypes.CDLL) -> None:
    """Hands a freshly loaded model library the process's shared pool word (before its
    first run). Libraries without Ember's pool (built by a compiler that does not speak
    libgomp's ABI) have nothing to share."""
    try:
        share = library.ember_pool_share
    except AttributeError:
        return
    share.argtypes = [ctypes.c_void_p]
    share.restype = None
    share(_POOL_WORD)


def pool_spin_us() -> int:
    """How long the pool's idle workers spin before they sleep, as ember_pool.c reads it."""
    try:
        spin = int(os.environ.get("EMBER_SPIN_US", DEFAULT_SPIN_US))
    except ValueError:
        spin = 0  # strtol of text that is no number
    return max(0, min(spin, 100000))


def wait_policy() -> str:
    """How this process's threads wait: Ember's pool, and the OpenMP runtime a vendor library
    brought in, as decided at the first model library load."""
    from ember.backends.cpu.build import find_compiler, speaks_libgomp_abi

    if not speaks_libgomp_abi(find_compiler()):
        return f"the compiler's OpenMP runtime: {_policy or 'not decided yet (no model library loaded)'}"
    pool = f"Ember's pool (idle workers spin up to {pool_spin_us()} us, EMBER_SPIN_US, then sleep)"
    if _policy is None or not _runtime_loaded():
        return pool
    return f"{pool}; a vendor library's OpenMP runtime: {_policy}"
