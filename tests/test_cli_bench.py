"""`ember bench`: the same compile options as `run` (threads default to all cores, --shape,
--input), latency percentiles, throughput and first-run time, --json, and a ratio line that
agrees with the medians it prints."""
from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ember.cli import main
from ember.support.host import default_threads
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")
QUICK = ["--rounds", "2", "--seconds", "0.05"]


def _symbolic_model(path) -> str:
    """y = Relu(x) * 2 with x: f32[batch, 4]."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])], "symbolic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return str(path)


def test_bench_json_has_percentiles_throughput_first_run_and_default_threads(capsys):
    assert main(["bench", LENET, *QUICK, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["threads"] == default_threads()  # as `ember run`: all cores unless told
    stats = result["latency"]["ember"]
    assert 0 < stats["min"] <= stats["median"] <= stats["p90"] <= stats["p99"]
    assert stats["runs"] >= 2 * 5 and stats["throughput"] > 0
    # Throughput is runs per second of run time: 1000 / mean latency in ms.
    assert stats["throughput"] == pytest.approx(1e3 / stats["mean"], rel=1e-6)
    assert result["first_run"]["ember"] > 0 and result["compile_first"] > 0


def test_bench_ratio_line_is_the_ratio_of_the_printed_medians(capsys):
    pytest.importorskip("onnxruntime")
    assert main(["bench", LENET, *QUICK, "--threads", "1", "--compare", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    medians = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+)\s+[\d.]+\s+([\d.]+)\s", out, re.M)}
    assert set(medians) == {"ember", "onnxruntime"}
    printed = float(re.search(r"^ember/onnxruntime: ([\d.]+) \(ratio of the medians above\)", out, re.M).group(1))
    assert printed == pytest.approx(medians["ember"] / medians["onnxruntime"], abs=0.006)
    assert "per-block ratios: median" in out and "1 thread(s)" in out


def test_bench_binds_symbolic_dimensions_with_shape_or_input(tmp_path, capsys):
    model = _symbolic_model(tmp_path / "symbolic.onnx")
    # Neither: the user is told which option to use (a usage error, not a crash in a worker).
    assert main(["bench", model, *QUICK]) == 2
    assert "--shape x=D0,D1,..." in capsys.readouterr().err
    assert main(["bench", model, *QUICK, "--shape", "x=3,4", "--json"]) == 0
    captured = capsys.readouterr()
    assert "input(s) x are random" in captured.err
    assert json.loads(captured.out)["latency"]["ember"]["runs"] >= 10
    np.save(tmp_path / "x.npy", np.ones((5, 4), np.float32))
    assert main(["bench", model, *QUICK, "--input", f"x={tmp_path / 'x.npy'}", "--json"]) == 0
    captured = capsys.readouterr()
    assert "random" not in captured.err and json.loads(captured.out)["latency"]["ember"]["median"] > 0
    assert main(["bench", model, *QUICK, "--input", f"nope={tmp_path / 'x.npy'}"]) == 2
    assert "the model has no input 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--threads", "0"], ["--threads", "-1"], ["--seconds", "-1"],
                                    ["--rounds", "0"], ["--load", "-2"], ["--compare", "tensorrt"]])
def test_bench_refuses_bad_arguments_as_usage_errors(option, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", LENET, *option])
    assert exit_.value.code == 2
    assert "Traceback" not in capsys.readouterr().err
