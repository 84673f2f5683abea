"""Residual Adds join the integer domain (quant/integer_ops.py, then fold-qdq): in a small
ResNet-style block (Conv, Relu, MaxPool, Conv, Add of the pool, Relu, Conv, Add, Relu, global
mean, Gemm) every tensor between the first QuantizeLinear and the Gemm is 8-bit in the
optimized graph; cpu matches the interpreter exactly and both stay close to float. Adds that
feed float-only ops (a Softmax, as an attention mask does) stay float."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.driver import load_model, prepare_program, quantize_loaded
from ember.quant import profile_graph, quantize_graph
from ember.types import DType


def _residual_model(path) -> None:
    from onnx import TensorProto, helper, numpy_helper, save

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w1", r.standard_normal((16, 3, 3, 3)) * 0.3), ("b1", r.standard_normal(16) * 0.1),
        ("w2", r.standard_normal((16, 16, 3, 3)) * 0.1), ("b2", r.standard_normal(16) * 0.1),
        ("w3", r.standard_normal((16, 16, 3, 3)) * 0.1), ("b3", r.standard_normal(16) * 0.1),
        ("wf", r.standard_normal((10, 16)) * 0.3), ("bf", r.standard_normal(10) * 0.1)]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c3", "r2"], ["a2"]),
             helper.make_node("Relu", ["a2"], ["r3"]),
             helper.make_node("ReduceMean", ["r3"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("Gemm", ["m", "wf", "bf"], ["y"], transB=1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    graph = helper.make_graph(nodes, "residual", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def _feeds(n, seed=0):
    r = np.random.default_rng(seed)
    return [{"x": r.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


def test_the_residual_block_stays_integer_from_the_first_quantize(tmp_path):
    _residual_model(tmp_path / "m.onnx")
    profile = ember.profile(tmp_path / "m.onnx", _feeds(6))
    graph = load_model(tmp_path / "m.onnx")
    quantize_loaded(graph, profile)
    adds = [n for n in graph.nodes if n.op == "Add" and all(v.producer is not None for v in n.inputs)]
    assert len(adds) == 2
    for add in adds:  # both operands of both residual Adds arrive through Q/DQ
        assert all(v.producer.op == "DequantizeLinear" for v in add.inputs), add.name
    stages = {}
    prepare_program(graph, ember.backends.get_backend("cpu"), lambda s, a: stages.setdefault(s, a) if s == "optimized"
                    else None)
    optimized = stages["optimized"]
    ops = optimized.op_counts()
    assert ops["QLinearConv"] == 3 and ops["MaxPool"] == 1 and "Conv" not in ops and "FusedConv" not in ops
    first_q = next(n for n in optimized.nodes if n.op == "QuantizeLinear")
    pool = next(n for n in optimized.nodes if n.op == "MaxPool")
    assert pool.input(0).type.dtype is DType.UINT8
    # every value computed after the first Q and before the global mean is 8-bit or lives only
    # inside an elementwise chain (a float temporary of a Cast ... Cast expansion)
    order = optimized.nodes
    for node in order[order.index(first_q):]:
        if node.op in ("ReduceMean", "ReduceSum"):
            break
        for v in node.outputs:
            if v.type.dtype is DType.FLOAT32:
                assert node.op in ("Cast", "Sub", "Mul", "Add", "Relu", "Div", "Round", "Clip"), node.name


def test_cpu_matches_the_interpreter_exactly_and_both_stay_close_to_float(tmp_path):
    _residual_model(tmp_path / "m.onnx")
    profile = ember.profile(tmp_path / "m.onnx", _feeds(6))
    floating = ember.compile(tmp_path / "m.onnx", backend="interpreter")
    interp = ember.compile(tmp_path / "m.onnx", backend="interpreter", quantize=profile)
    cpu = ember.compile(tmp_path / "m.onnx", backend="cpu", quantize=profile)
    for feed in _feeds(3, seed=9):
        expected, a, b = floating.run(feed)["y"], interp.run(feed)["y"], cpu.run(feed)["y"]
        np.testing.assert_array_equal(a, b)
        assert np.abs(a - expected).max() <= 0.05 * np.abs(expected).max()


MASKED = """graph "g" {
  input %x: f32[1,4,8]
  input %mask: f32[1,4,8]
  const @w: f32[8,8] = WEIGHTS
  %m: f32[1,4,8] = MatMul(%x, @w) name="m"
  %a: f32[1,4,8] = Add(%m, %mask) name="a"
  %s: f32[1,4,8] = Softmax(%a) {axis=-1} name="s"
  output "y" = %s
}"""


def test_an_add_read_by_a_softmax_stays_float():
    from ember.graph import parse_graph

    text = MASKED.replace("WEIGHTS", str(np.round(np.random.default_rng(1).standard_normal(64), 3).tolist()))
    graph = parse_graph(text)
    r = np.random.default_rng(2)
    feeds = [{"x": r.standard_normal((1, 4, 8)).astype(np.float32),
              "mask": np.where(r.random((1, 4, 8)) < 0.3, -1e9, 0.0).astype(np.float32)} for _ in range(4)]
    quantize_graph(graph, profile_graph(graph, feeds))
    add = next(n for n in graph.nodes if n.op == "Add")
    assert add.input(1).producer is None  # the mask, as it came
    with pytest.raises(StopIteration):
        next(n for n in graph.nodes if n.op == "QuantizeLinear" and n.input(0) is add.outputs[0])
