"""The default pipeline on whole models: every shared reference model gets smaller (the MLP
may only stay equal) and still matches its reference outputs; batch norm after convolutions
and dense layers disappears (a small ONNX model checked against ONNX Runtime, since the shared
models come with batch norm pre-folded)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from tests.conftest import require_shared_models, shared_model_names
from tests.helpers import relative_error

TOLERANCE = 1e-4


def _total(counts: dict[str, int]) -> int:
    return sum(counts.values())


@pytest.mark.parametrize("name", shared_model_names() or ["<no shared models>"])
def test_shared_model_shrinks_and_matches_reference(name):
    folder = require_shared_models()
    model = ember.compile(str(folder / f"{name}.onnx"), backend="interpreter")
    ops = model.stats["ops"]
    if name == "mlp":
        assert _total(ops["optimized"]) <= _total(ops["imported"])
    else:
        assert _total(ops["optimized"]) < _total(ops["imported"]), ops
    reference = dict(np.load(folder / f"{name}.ref.npz"))
    inputs = {key[3:]: value for key, value in reference.items() if key.startswith("in_")}
    outputs = list(model.run(inputs).values())
    for index, actual in enumerate(outputs):
        expected = reference[f"out_{index}"]
        assert relative_error(actual, expected) <= TOLERANCE, f"{name} output {index}"


def test_optimized_op_counts_show_the_fusions():
    folder = require_shared_models()
    resnet = ember.compile(str(folder / "resnet18.onnx"), backend="interpreter").stats["ops"]["optimized"]
    # Every Relu and residual Add of ResNet-18 joins a convolution.
    assert "Relu" not in resnet and "Add" not in resnet and resnet["FusedConv"] == 17
    bert = ember.compile(str(folder / "bert_synthetic.onnx"), backend="interpreter").stats["ops"]["optimized"]
    # Each Gelu, recognized from its Erf form, joins the FullyConnected before it.
    assert "Gelu" not in bert and "Erf" not in bert and bert["FullyConnected"] == 24


def _bn_model() -> onnx.ModelProto:
    """Conv -> BN -> Relu -> Conv(bias) -> BN -> Add(skip) -> Flatten -> Gemm -> BN(rank 2)."""
    rng = np.random.default_rng(3)

    def tensor(name, *shape, positive=False):
        data = rng.standard_normal(shape).astype(np.float32)
        data = np.abs(data) + 0.5 if positive else data
        return numpy_helper.from_array(data, name)

    inits = [tensor("w1", 4, 3, 3, 3), tensor("w2", 4, 4, 3, 3), tensor("b2", 4), tensor("fc", 5, 64)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1])]
    for i, (src, channels) in enumerate([("c1", 4), ("c2", 4), ("g", 5)], start=1):
        names = [f"s{i}", f"t{i}", f"m{i}", f"v{i}"]
        inits += [tensor(names[0], channels, positive=True), tensor(names[1], channels),
                  tensor(names[2], channels), tensor(names[3], channels, positive=True)]
        nodes.append(helper.make_node("BatchNormalization", [src, *names], [f"n{i}"], epsilon=1e-3))
        if i == 1:
            nodes.append(helper.make_node("Relu", ["n1"], ["r1"]))
            nodes.append(helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]))
        elif i == 2:
            nodes.append(helper.make_node("Add", ["n2", "r1"], ["sum"]))
            nodes.append(helper.make_node("Flatten", ["sum"], ["flat"]))
            nodes.append(helper.make_node("Gemm", ["flat", "fc"], ["g"], transB=1))
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("n3", TensorProto.FLOAT, [1, 5])], inits)
    # IR version 8 is what opset 17 needs and what every ONNX Runtime release reads.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_batchnorm_after_conv_and_gemm_is_folded_and_matches_onnxruntime():
    onnxruntime = pytest.importorskip("onnxruntime")
    model = _bn_model()
    onnx.checker.check_model(model)
    compiled = ember.compile(model, backend="interpreter")
    ops = compiled.stats["ops"]
    assert ops["imported"]["BatchNormalization"] == 3
    assert "BatchNormalization" not in ops["optimized"], ops["optimized"]
    assert ops["optimized"] == {"FullyConnected": 1, "FusedConv": 2, "Reshape": 1}
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    (actual,) = compiled.run({"x": x}).values()
    assert relative_error(actual, expected) <= TOLERANCE
