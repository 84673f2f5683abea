"""Everyday use of the `ember` command (issue 19): the default backend, --version, help with
examples, argument checks, exit codes, the allclose-style reference check and its name
checks, the random-input notice, --json, latency percentiles, the cache folder's one-line
error and the first-compile notice."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ember.cli import main
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")
REF = str(EXAMPLES / "lenet.ref.npz")


def test_run_defaults_to_cpu_and_reports_latency_percentiles(capsys):
    assert main(["run", LENET, "--reference", REF, "--repeat", "5"]) == 0
    out = capsys.readouterr().out
    assert "(backend cpu," in out
    line = next(line for line in out.splitlines() if line.startswith("latency:"))
    for part in ("median", "min", "p90", "p99", "over 5 runs", "runs/s", "first run"):
        assert part in line


def test_run_without_a_compiler_falls_back_to_the_interpreter(monkeypatch, capsys):
    monkeypatch.setenv("CC", "ember-no-such-compiler")
    assert main(["run", LENET, "--reference", REF, "--repeat", "1"]) == 0
    captured = capsys.readouterr()
    assert "(backend interpreter," in captured.out and "no C compiler found" in captured.err


def test_version_and_help_with_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("ember 0.")
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "exit codes:" in text and "profile" in text and "debug" in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "interpreter (NumPy, the reference)" in text and "ONNX model file" in text


@pytest.mark.parametrize("command", ["run", "profile", "debug"])
@pytest.mark.parametrize("threads", ["0", "-1", "two"])
def test_thread_counts_are_checked(command, threads, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, LENET, "--threads", threads])
    assert exit_info.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_exit_codes_tell_compile_refusals_from_errors(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "unknown_op.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["run", str(path)]) == 3
    assert "NoSuchOp" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.onnx")]) == 1


def test_reference_check_uses_absolute_and_relative_tolerance(tmp_path, capsys):
    import ember

    model = ember.compile(LENET, backend="cpu")
    feeds = {"image": np.load(REF)["in_image"]}
    expected = model.run(feeds)["probabilities"]
    # A reference off by 1e-3 absolute on values ~0.1: the old max(1, max|ref|) scale with
    # tolerance 1e-4 judged relative to 1, so 1e-5 off an all-zero output passed.
    off = tmp_path / "off.npz"
    np.savez(off, in_image=feeds["image"], out_0=expected + 1e-3)
    assert main(["run", LENET, "--reference", str(off), "--repeat", "1"]) == 4
    assert "check probabilities: FAIL" in capsys.readouterr().out
    assert main(["run", LENET, "--reference", str(off), "--repeat", "1", "--atol", "2e-3"]) == 0
    capsys.readouterr()
    zeros = tmp_path / "zeros.npz"
    np.savez(zeros, in_image=feeds["image"], out_0=np.zeros_like(expected))
    assert main(["run", LENET, "--reference", str(zeros), "--repeat", "1"]) == 4


def test_reference_with_unknown_names_is_refused(tmp_path, capsys):
    data = dict(np.load(REF))
    bad = tmp_path / "misnamed.npz"
    np.savez(bad, in_images=data["in_image"], out_0=data["out_0"])
    assert main(["run", LENET, "--reference", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "in_images" in err and "in_image" in err and "match no input or output" in err
    assert main(["run", LENET, "--input", f"nope={tmp_path / 'x.npy'}"]) == 2
    assert "has no input 'nope'" in capsys.readouterr().err


def test_random_inputs_are_announced(capsys):
    assert main(["run", LENET, "--repeat", "1"]) == 0
    assert "input(s) image are random" in capsys.readouterr().err
    assert main(["run", LENET, "--repeat", "1", "--reference", REF]) == 0
    assert "random" not in capsys.readouterr().err


def test_run_json(capsys):
    assert main(["run", LENET, "--reference", REF, "--repeat", "3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["backend"] == "cpu" and summary["checks"][0]["ok"]
    assert set(summary["latency_ms"]) >= {"min", "median", "p90", "p99"} and summary["latency_ms"]["runs"] == 3
    assert summary["compile_seconds"] > 0 and summary["first_run_ms"] > 0
    assert summary["outputs"]["probabilities"]["shape"] == [1, 10]


def test_unusable_cache_folder_is_one_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(blocker))
    assert main(["run", LENET, "--repeat", "1"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith("ember: error: cannot use the cache folder") and "EMBER_CACHE_DIR" in err


def test_dump_takes_threads_like_every_compiling_command(capsys):
    from tests.conftest import require_shared_models

    model = str(require_shared_models() / "resnet18.onnx")
    assert main(["dump", model, "--stage", "lir", "--threads", "1"]) == 0
    lir = capsys.readouterr().out
    assert "threads=1" in lir and "threads=2" not in lir
    with pytest.raises(SystemExit):
        main(["dump", model, "--threads", "0"])
