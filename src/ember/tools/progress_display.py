"""Shows long steps (support/progress.py) while an `ember` command works: on a terminal, one
spinner line that names the current step and the seconds since the command started (rich, when
installed; plain lines otherwise); nothing at all when standard error is not a terminal (scripts,
pipes, CI logs), or when EMBER_QUIET is set."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from ember.support.progress import reporting


@contextlib.contextmanager
def terminal_progress(stream: TextIO | None = None, force_terminal: bool = False) -> Iterator[None]:
    """Steps started inside the block are shown on `stream` (default standard error) if it is
    a terminal (or `force_terminal`); the spinner line is erased when the block ends."""
    stream = stream or sys.stderr
    if os.environ.get("EMBER_QUIET") or not (force_terminal or stream.isatty()):
        yield
        return
    start = time.perf_counter()
    try:
        from rich.console import Console
        from rich.live import Live
        from rich.markup import escape
        from rich.spinner import Spinner
    except ImportError:
        def plain(message: str) -> None:
            print(f"ember: {message} ({time.perf_counter() - start:.1f} s)", file=stream, flush=True)

        with reporting(plain):
            yield
        return
    console = Console(file=stream, force_terminal=force_terminal or None, highlight=False)
    line = _SpinnerLine(Spinner("dots"), escape, start)
    # The command's results on standard output go above the spinner when both are the same
    # terminal; redirected (`ember dump ... > out.txt`), they are left alone.
    with Live(line, console=console, transient=True, refresh_per_second=8,
              redirect_stdout=sys.stdout.isatty(), redirect_stderr=True):
        with reporting(line.show):
            yield


class _SpinnerLine:
    """The current step and the seconds since the command started, counted at every refresh."""

    def __init__(self, spinner: Any, escape: Callable[[str], str], start: float) -> None:
        self.spinner, self.escape, self.start = spinner, escape, start
        self.message = "starting"

    def show(self, message: str) -> None:
        self.message = message

    def __rich__(self) -> Any:
        # Messages may hold names from the model or paths: never rich markup.
        self.spinner.update(text=f"{self.escape(self.message)} [dim]({time.perf_counter() - self.start:.1f} s)[/dim]")
        return self.spinner
