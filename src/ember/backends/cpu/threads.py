"""How the cpu backend's OpenMP threads wait for work: passively, unless the user says otherwise.

A thread of an OpenMP team that has nothing to do (a worker between parallel regions, the
caller at a region's closing barrier) spins before it sleeps. libgomp's default spin is
300000 PAUSE instructions; on the AMD EPYC (Zen) this was measured on, a PAUSE takes about
100 ns, so a waiting thread holds its core for up to ~30 ms. A model runs one parallel
region per kernel, tens to hundreds per inference. While the machine has nothing else to
run that spin is free, but with other work on the cores the spinning thread takes CPU time
the thread it waits for (runnable, queued behind someone else) needs, and every region's
barrier costs a scheduler slice: a 2-thread BERT went from ~11 ms to 0.5-2 s on a loaded
2-core machine, where with passive waiting (sleep at once, woken by a futex) it stayed at
~11 ms. Measured by bench/compare.py --load and bench/ab_revisions.py; passive waiting was
also no slower than any short spin (100 to 3000 PAUSEs) with the cores to itself.

The runtime reads its wait policy from the environment once, when it is loaded (with the
first model library). So the first load sets OMP_WAIT_POLICY=PASSIVE (read by both libgomp
and LLVM's libomp) for the duration of the dlopen, unless the user has chosen a policy
(OMP_WAIT_POLICY, GOMP_SPINCOUNT or KMP_BLOCKTIME set): then theirs stands. The variable is
removed again afterwards, so processes the user starts later do not inherit it.
Threads are not bound to cores (OMP_PROC_BIND is left as the user set it; unset, libgomp
binds nothing): a bound thread cannot move to a core another process has just left."""
from __future__ import annotations

import contextlib
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


def wait_policy() -> str:
    """How this process's OpenMP threads wait, as decided at the first model library load."""
    return _policy or "not decided yet (no model library loaded in this process)"
