"""Progress of long steps: library code names each step (support/progress.py); the `ember`
command shows them on a terminal only (tools/progress_display.py)."""
from __future__ import annotations

import io
import subprocess
import sys

import pytest

import ember
from ember.support.progress import reporting, step
from ember.tools.progress_display import terminal_progress
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")


def test_a_compile_names_its_steps_in_order():
    seen: list[str] = []
    with reporting(seen.append):
        ember.compile(LENET, backend="cpu", num_threads=1)
    order = ["importing the model", "optimizing the graph", "lowering for cpu",
             "scheduling and generating the instruction IR", "planning memory", "compiling for cpu", "generating C"]
    positions = [next(i for i, message in enumerate(seen) if message.startswith(want)) for want in order]
    assert positions == sorted(positions), seen
    step("outside")  # no reporter installed: nothing happens, nothing fails
    assert "outside" not in seen


def test_the_first_build_of_the_kernel_library_is_named(tmp_path, monkeypatch):
    import ember.backends.cpu.build as build

    class Stop(Exception):
        pass

    def refuse(command, cwd=None):
        raise Stop  # the step must have been reported before any compiler runs

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(build, "_run_compiler", refuse)
    seen: list[str] = []
    with reporting(seen.append), pytest.raises(Stop):
        build.build_library('#include "ember_gemm.h"\nvoid *kernel(void) { return (void *)ember_gemm; }\n')
    assert seen and seen[-1].startswith("building the kernel library (once per machine")
    assert str(tmp_path / "empty-cache") in seen[-1]


def test_terminal_shows_steps_and_a_pipe_shows_nothing(monkeypatch):
    pytest.importorskip("rich")
    monkeypatch.delenv("EMBER_QUIET", raising=False)
    terminal = io.StringIO()
    with terminal_progress(terminal, force_terminal=True):
        step("optimizing the graph [bold]x[/bold]")  # markup in a name is shown as written
        import time

        time.sleep(0.3)  # at 8 refreshes a second the spinner draws the step
    shown = terminal.getvalue()
    assert "optimizing the graph [bold]x[/bold]" in shown
    piped = io.StringIO()
    with terminal_progress(piped):
        step("lowering for cpu")
    assert piped.getvalue() == ""
    monkeypatch.setenv("EMBER_QUIET", "1")
    quiet = io.StringIO()
    with terminal_progress(quiet, force_terminal=True):
        step("lowering for cpu")
    assert quiet.getvalue() == ""


def test_the_command_in_a_pipe_prints_no_progress():
    result = subprocess.run([sys.executable, "-m", "ember", "run", LENET, "--repeat", "1", "--reference",
                             str(EXAMPLES / "lenet.ref.npz")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and "check probabilities: ok" in result.stdout
