"""Lowering: every non-primitive op has a rule; each rule keeps the numbers and leaves only
primitives; the Gemm rule's output text is pinned."""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401
from ember.graph import Graph, print_graph, verify_graph
from ember.lir.ir import INSTRS
from ember.lowering import LOWERINGS, lower_graph
from ember.ops import OPS
from ember.ops.nn import BatchNormAttrs, GemmAttrs
from ember.ops.normalization import LayerNormAttrs, SoftmaxAttrs
from ember.ops.recurrent import GRUAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.tensor import ReshapeAttrs
from ember.types import DType, TensorType
from tests.helpers import evaluate_graph, random_inputs, relative_error

F32 = DType.FLOAT32
rng = np.random.default_rng(1)


def test_every_op_is_executable_or_lowerable():
    for name, op in OPS.items():
        assert name in INSTRS, f"{name} has no instruction"
        if not op.primitive:
            assert name in LOWERINGS, f"non-primitive {name} has no lowering rule"


def _const(g: Graph, *shape: int, positive: bool = False):
    data = rng.standard_normal(shape).astype(np.float32)
    return g.add_constant(np.abs(data) + 0.1 if positive else data, "w")


def _single(op: str, in_shape, attrs, *extra) -> Graph:
    g = Graph(op)
    x = g.add_input("x", TensorType(F32, in_shape))
    outs = g.add_node(op, [x, *[e(g) if callable(e) else e for e in extra]], attrs, name=op.lower())
    g.set_outputs([(f"out{i}", v) for i, v in enumerate(outs)])
    return g


CASES = {
    "gemm": lambda: _single("Gemm", (3, 5), GemmAttrs(alpha=0.5, beta=2.0, transB=True),
                            lambda g: _const(g, 4, 5), lambda g: _const(g, 4)),
    "gemm_transA": lambda: _single("Gemm", (5, 3), GemmAttrs(transA=True), lambda g: _const(g, 5, 2), None),
    "batchnorm": lambda: _single("BatchNormalization", (2, 3, 4, 4), BatchNormAttrs(1e-3),
                                 lambda g: _const(g, 3), lambda g: _const(g, 3), lambda g: _const(g, 3),
                                 lambda g: _const(g, 3, positive=True)),
    "softmax": lambda: _single("Softmax", (2, 3, 5), SoftmaxAttrs(1)),
    "logsoftmax": lambda: _single("LogSoftmax", (2, 7), SoftmaxAttrs(-1)),
    "layernorm": lambda: _single("LayerNormalization", (2, 3, 8), LayerNormAttrs(-2, 1e-5),
                                 lambda g: _const(g, 3, 8), lambda g: _const(g, 8)),
    "reduce_mean": lambda: _single("ReduceMean", (2, 3, 4), ReduceAttrs((0, 2), False)),
    "reduce_l2": lambda: _single("ReduceL2", (2, 3, 4), ReduceAttrs((1,), True)),
    "reduce_l1": lambda: _single("ReduceL1", (2, 3, 4), ReduceAttrs((1, 2), True)),
    "reduce_sum_square": lambda: _single("ReduceSumSquare", (2, 3), ReduceAttrs((1,), False)),
    "reduce_logsumexp": lambda: _single("ReduceLogSumExp", (2, 3, 4), ReduceAttrs((2,), False)),
    "gru_forward": lambda: _single("GRU", (4, 2, 3), GRUAttrs(5, "forward", True),
                                   lambda g: _const(g, 1, 15, 3), lambda g: _const(g, 1, 15, 5),
                                   lambda g: _const(g, 1, 30), lambda g: _const(g, 1, 2, 5)),
    "gru_bidirectional": lambda: _single("GRU", (3, 1, 2), GRUAttrs(4, "bidirectional", False),
                                         lambda g: _const(g, 2, 12, 2), lambda g: _const(g, 2, 12, 4),
                                         None, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_preserves_numbers(case):
    g = CASES[case]()
    lowered_op = g.nodes[0].op
    inputs = random_inputs(g)
    before = evaluate_graph(g, inputs)
    assert lower_graph(g)
    verify_graph(g)
    assert all(node.opdef.primitive for node in g.nodes)
    assert lowered_op not in g.op_counts()
    after = evaluate_graph(g, inputs)
    for name in before:
        assert relative_error(after[name], before[name]) < 1e-5, name


def test_should_lower_can_keep_a_node():
    g = CASES["softmax"]()
    assert not lower_graph(g, should_lower=lambda node: node.op != "Softmax")
    assert g.op_counts() == {"Softmax": 1}


def test_gemm_lowering_text():
    g = Graph("fc")
    x = g.add_input("x", TensorType(F32, (1, 4)))
    w = g.add_constant(np.ones((2, 4), np.float32), "w")
    b = g.add_constant(np.ones(2, np.float32), "b")
    g.set_outputs([("y", g.add("Gemm", x, w, b, attrs=GemmAttrs(transB=True), name="fc"))])
    lower_graph(g)
    body = [line.strip() for line in print_graph(g).splitlines() if " = " in line and "const" not in line]
    assert body == [
        '%fc.transB: f32[4,2] = Transpose(@w) {perm=[1, 0]} name="fc.transB"',
        '%fc.matmul: f32[1,2] = MatMul(%x, %fc.transB) name="fc.matmul"',
        '%fc.bias: f32[1,2] = Add(%fc.matmul, @b) name="fc.bias"',
        'output "y" = %fc.bias',
    ]


def test_fused_ops_unfuse_to_their_parts():
    from ember.ops.fused import FullyConnectedAttrs, FusedConvAttrs

    g = Graph("fused")
    x = g.add_input("x", TensorType(F32, (1, 2, 5, 5)))
    w = _const(g, 3, 2, 3, 3)
    b = _const(g, 3)
    res = g.add_input("res", TensorType(F32, (1, 3, 5, 5)))
    y = g.add("FusedConv", x, w, b, res,
              attrs=FusedConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "clip", 0.0, 6.0), name="fc")
    flat = g.add("Reshape", y, attrs=ReshapeAttrs((3, 25)))
    z = g.add("FullyConnected", flat, _const(g, 25, 4), _const(g, 4), None,
              attrs=FullyConnectedAttrs("leaky_relu", 0.1), name="fully")
    g.set_outputs([("z", z)])
    inputs = random_inputs(g)
    before = evaluate_graph(g, inputs)
    lower_graph(g)
    assert g.op_counts() == {"Add": 2, "Clip": 1, "Conv": 1, "LeakyRelu": 1, "MatMul": 1, "Reshape": 1}
    assert relative_error(evaluate_graph(g, inputs)["z"], before["z"]) < 1e-5
