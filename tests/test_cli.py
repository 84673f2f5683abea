"""The `ember` command line: run with a reference check and latency, dump every stage."""
from __future__ import annotations

import re
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
    assert main(["run", LENET, "--reference", str(bad), "--repeat", "1"]) == 4  # an accuracy failure
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
    # The default is the cpu backend's pipeline: every instruction shows its kernel.
    assert "FullyConnected @out %" in result.stdout and "kernel fully_connected_gemm(@in @" in result.stdout


def test_dump_c_shows_generated_source(capsys):
    assert main(["dump", LENET, "--stage", "c"]) == 0
    source = capsys.readouterr().out
    assert "int ember_run(" in source and "ember_conv_direct(" in source
    assert "from node relu1" in source  # the fused conv keeps the name of the node it replaced


def test_bench_reports_latency_and_compile_time(capsys):
    assert main(["bench", LENET, "--rounds", "1", "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ember\s+[\d.]+\s+[\d.]+", out, re.M) and "(latencies in ms)" in out and "compile:" in out


# -- ember opt ----------------------------------------------------------------------------------

OPT_GRAPH = """// RUN: ember opt %s --passes cse,dce
graph "g" {
  input %x: f32[4]
  %a: f32[4] = Exp(%x) name="a"
  %b: f32[4] = Exp(%x) name="b"
  %y: f32[4] = Add(%a, %b) name="y"
  output "y" = %y
}
"""


def test_opt_runs_named_passes_over_graph_text(tmp_path, capsys):
    path = tmp_path / "g.ir"
    path.write_text(OPT_GRAPH)
    assert main(["opt", str(path), "--passes", "cse,dce"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('graph "g" {') and out.count("Exp(") == 1 and "Add(%a, %a)" in out
    # -o writes the result instead, and the result parses back.
    assert main(["opt", str(path), "--passes", "cse", "-o", str(tmp_path / "out.ir")]) == 0
    assert capsys.readouterr().out == ""
    assert main(["opt", str(tmp_path / "out.ir"), "--passes", "dce"]) == 0
    assert "%b" not in capsys.readouterr().out


def test_opt_reads_lir_dumps_with_random_weights_and_instruments_passes(tmp_path, capsys):
    assert main(["dump", LENET, "--stage", "lir"]) == 0
    path = tmp_path / "lenet.lir"
    path.write_text(capsys.readouterr().out)
    # Dumped weights carry no data: a clear error, then --random-weights.
    assert main(["opt", str(path), "--passes", "dse"]) == 1
    err = capsys.readouterr().err
    assert "has no inline data" in err and "--random-weights" in err and "Traceback" not in err
    assert main(["opt", str(path), "--passes", "dse,fuse-elementwise,select-kernels", "--backend", "cpu",
                 "--random-weights", "--print-after-all", "--time-passes"]) == 0
    captured = capsys.readouterr()
    assert re.findall(r"^// after ([\w-]+)$", captured.out, re.MULTILINE) == ["dse", "fuse-elementwise",
                                                                            "select-kernels"]
    assert " kernel " in captured.out.rsplit("// after select-kernels", 1)[1]
    assert re.search(r"^select-kernels\s.*\slir$", captured.err, re.MULTILINE)


def test_opt_errors_name_the_known_passes_without_traceback(tmp_path, capsys):
    path = tmp_path / "g.ir"
    path.write_text(OPT_GRAPH)
    assert main(["opt", str(path), "--passes", "cse,no-such-pass"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember: error: unknown pass 'no-such-pass' (known passes: ") and "dce" in err
    assert "Traceback" not in err
    assert main(["opt", str(path), "--passes", "share-buffers"]) == 1
    assert "'share-buffers' is a pass over the lir IR" in capsys.readouterr().err
    assert main(["opt", str(path), "--ir", "lir"]) == 1  # graph text read as LIR: a parse error
    assert "line 2" in capsys.readouterr().err
    (tmp_path / "odd.ir").write_text("network {}\n")
    assert main(["opt", str(tmp_path / "odd.ir")]) == 1
    assert "cannot tell the IR" in capsys.readouterr().err


def test_opt_as_a_command_reads_standard_input():
    result = subprocess.run([sys.executable, "-m", "ember", "opt", "-", "--passes", "cse,dce"], input=OPT_GRAPH,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Exp(") == 1
