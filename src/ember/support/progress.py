"""Progress of long steps, for whoever is watching.

Compiling a large model takes seconds and the first compile on a machine builds the kernel
library (about 10 s); library code names each step as it starts (`step("optimizing the graph")`)
and knows nothing of how, or whether, it is shown. A front end (the `ember` command on a
terminal) installs a reporter for the duration of its work with `reporting(callback)`; with
none installed a step costs one context-variable read. The reporter lives in a ContextVar, so a
thread or task that installs one does not see another's steps."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

Reporter = Callable[[str], None]
_REPORTER: ContextVar[Reporter | None] = ContextVar("ember_progress_reporter", default=None)


def step(message: str) -> None:
    """A long step starts: `message` says what it is, in the user's terms."""
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter(message)


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """Steps started inside the block go to `reporter` (the previous one is restored after)."""
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)
