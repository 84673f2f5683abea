"""The `ember` command line: run with a reference check and latency, dump every stage."""
from __future__ import annotations

import subprocess
import sys

from ember.cli import main
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")


def test_run_checks_reference_and_prints_latency(capsys):
    status = main(["run", LENET, "--reference", str(EXAMPLES / "lenet.ref.npz"), "--repeat", "3"])
    out = capsys.readouterr().out
    assert status == 0
    assert "check probabilities: ok" in out
    assert "latency: median" in out


def test_run_fails_when_reference_disagrees(tmp_path, capsys):
    import numpy as np

    ref = dict(np.load(EXAMPLES / "lenet.ref.npz"))
    ref["out_0"] = ref["out_0"] + 0.5
    bad = tmp_path / "bad.npz"
    np.savez(bad, **ref)
    assert main(["run", LENET, "--reference", str(bad), "--repeat", "1"]) == 1
    assert "check probabilities: FAIL" in capsys.readouterr().out


def test_dump_stages(capsys):
    assert main(["dump", LENET, "--stage", "graph"]) == 0
    graph = capsys.readouterr().out
    assert 'graph "lenet" {' in graph and "Gemm(" in graph
    assert main(["dump", LENET, "--stage", "lowered"]) == 0
    assert "Gemm(" not in capsys.readouterr().out
    assert main(["dump", LENET, "--stage", "lir"]) == 0
    lir = capsys.readouterr().out
    assert 'program "lenet" {' in lir
    assert "Conv @out %" in lir and "@in %image" in lir and "alloc %" in lir
    assert main(["dump", LENET, "--stage", "graph", "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith('digraph "lenet"')


def test_errors_are_one_line_without_traceback(tmp_path, capsys):
    missing = tmp_path / "nope.onnx"
    assert main(["run", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember: error:") and "Traceback" not in err


def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "ember", "dump", LENET, "--stage", "lir"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "MatMul @out %" in result.stdout


def test_dump_c_shows_generated_source(capsys):
    assert main(["dump", LENET, "--stage", "c"]) == 0
    source = capsys.readouterr().out
    assert "int ember_run(" in source and "ember_conv_direct(" in source
    assert "from node relu1" in source  # the fused conv keeps the name of the node it replaced


def test_bench_reports_latency_and_compile_time(capsys):
    assert main(["bench", LENET, "--rounds", "1", "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "ember:" in out and " ms" in out and "compile:" in out
