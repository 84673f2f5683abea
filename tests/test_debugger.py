"""The network debugger: a weight flipped in the compiled program's weight blob is found at
its node (lenet always, ResNet-18 from the shared models), with the local check blaming the
kernel; clean models pass against the interpreter and ONNX Runtime; `ember debug`."""
from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ember.cli import main
from ember.codegen.emitter import WeightBlob, stored_weights
from ember.lir.ir import BufferKind
from ember.tools.debugger import compile_for_debug, debug_program
from tests.conftest import EXAMPLES, require_shared_models

LENET = str(EXAMPLES / "lenet.onnx")


def _feeds(session, seed=0):
    rng = np.random.default_rng(seed)
    return {b.external_name: rng.standard_normal(b.type.shape).astype(b.type.dtype.numpy)
            for b in session.program.inputs}


def _corrupt(session, node: str) -> str:
    """Adds 4.0 to the first float of the weight the kernel of `node`'s instruction reads, in
    the native program's blob (its packed copy where it reads one). Returns the weight's name."""
    program = session.program
    instr = next(i for i in program.compute_instrs() if i.source == node)
    packed = [b for b in instr.kernel_operands if b.packing is not None and b.packing.source is not None]
    weight = packed[0] if packed else next(b for b in instr.base_operands[1:]
                                           if b is not None and b.kind is BufferKind.WEIGHT)
    offset = WeightBlob(stored_weights(program)).offsets[id(weight)]
    blob = session.executable._weights  # the bytes the native code reads: flipped in place
    blob.flags.writeable = True  # the program keeps its blob read-only; this test corrupts it on purpose
    blob[offset:offset + 4].view(np.float32)[0] += 4.0
    return weight.name


def test_clean_model_has_no_divergence():
    session = compile_for_debug(LENET, "cpu", backend_options={"num_threads": 1})
    report = debug_program(session.program, session.executable, session.inputs_in_order(_feeds(session)), "cpu")
    assert report.first_divergence is None
    assert all(check.checked for check in report.checks)
    assert "every compared output is within tolerance" in report.format()


@pytest.mark.parametrize("node", ["relu2", "relu3"])
def test_a_flipped_weight_is_found_at_its_node(node):
    session = compile_for_debug(LENET, "cpu", backend_options={"num_threads": 1})
    _corrupt(session, node)
    report = debug_program(session.program, session.executable, session.inputs_in_order(_feeds(session)), "cpu")
    first = report.first_divergence
    assert first is not None and first.step.node == node
    # Run alone on the backend's own inputs, the reference still differs: the kernel is wrong.
    assert first.local and not first.local[0].ok
    text = report.format()
    assert f"first divergence: node '{node}'" in text and "the kernel itself computes wrong results" in text
    # Steps after it diverge through their inputs, not their kernels.
    later = [c for c in report.checks if not c.ok and c is not first]
    assert all(c.local and all(local.ok for local in c.local) for c in later)


def test_resnet18_flipped_weight_found_at_its_node():
    models = require_shared_models()
    session = compile_for_debug(str(models / "resnet18.onnx"), "cpu")
    convs = [i.source for i in session.program.compute_instrs() if i.name == "FusedConv"]
    node = convs[len(convs) // 2]
    _corrupt(session, node)
    report = debug_program(session.program, session.executable, session.inputs_in_order(_feeds(session)), "cpu")
    assert report.first_divergence is not None and report.first_divergence.step.node == node


def test_ember_debug_command(tmp_path, capsys):
    assert main(["debug", LENET, "--threads", "1"]) == 0
    captured = capsys.readouterr()
    assert "every compared output is within tolerance" in captured.out and "random" in captured.err
    assert main(["debug", LENET, "--inputs", str(EXAMPLES / "lenet.ref.npz"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["first_divergence"] is None and len(summary["steps"]) == 8
    # An absurd tolerance makes every step "diverge": exit code 4, the first step named.
    assert main(["debug", LENET, "--rtol", "0", "--atol", "-1"]) == 4
    assert "first divergence: node 'relu1'" in capsys.readouterr().out


def test_ember_debug_against_onnxruntime(capsys):
    pytest.importorskip("onnxruntime")
    assert main(["debug", LENET, "--reference", "ort", "--inputs", str(EXAMPLES / "lenet.ref.npz")]) == 0
    out = capsys.readouterr().out
    assert "8 of 8 steps compared (cpu against ort" in out


def test_infinities_on_both_sides_are_no_divergence():
    from ember.tools.debugger import compare

    same = np.array([np.inf, -np.inf, 1.0, np.nan])
    assert compare(same, same.copy(), 1e-3, 1e-4).ok
    assert compare(same, same.copy(), 1e-3, 1e-4).max_abs_error == 0.0
    assert not compare(same, np.array([-np.inf, -np.inf, 1.0, np.nan]), 1e-3, 1e-4).ok


def test_unnamed_onnx_nodes_are_compared_against_onnxruntime(tmp_path, capsys):
    """Nodes without names (as many exporters write them) are matched by the names the importer
    gives them; a report with nothing compared says so rather than 'within tolerance'."""
    pytest.importorskip("onnxruntime")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["e"]),
                               helper.make_node("Add", ["e", "x"], ["y"])], "unnamed",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "unnamed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["debug", str(path), "--backend", "interpreter", "--reference", "ort"]) == 0
    out = capsys.readouterr().out
    compared, total = map(int, re.search(r"(\d+) of (\d+) steps compared", out).groups())
    assert compared >= 1 and "within tolerance" in out

    from ember.tools.debugger import DebugReport

    empty = DebugReport("cpu", "ort", 1e-3, 1e-4, [])
    assert "no step could be compared" in empty.format()
