"""The ISA mapper's tensor-expression IR (ember.isa.expr) and the op table's expressions
(ember.isa.kernels): text round trips, refused text, and each compute op's expression checked
numerically by evaluating it with NumPy against the op's own reference."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from ember.graph import Graph
from ember.isa.expr import Affine, ExprError, TensorExpr, parse_affine, parse_expr
from ember.isa.kernels import KERNELS, kernels_of
from ember.ops.nn import ConvAttrs, GemmAttrs
from ember.ops.recurrent import GRUAttrs
from ember.types import DType, TensorType

ROUND_TRIPS = [
    "C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:4, j:8, k:16",
    "O[n, m, oh, ow]:f32 += I[n, c, oh*2 + kh, ow*2 + kw*3]:f32 * W[m, c, kh, kw]:f32 "
    "over n:1, m:8, c:3, oh:5, ow:5, kh:3, kw:3",
    "C[j]:i32 += A[k]:u8 * B[j, k]:i8 over j:16, k:4",
    "C[j]:f32 += A[]:f32 * B[j]:f32 over j:<=8",
    "C[t, c]:i32 += A[t, r]:i8 * B[r, c]:i8 over r:16, c:16, t:*",
    "Y[i - j + 3]:f32 += X[-i]:bf16 * Z[j]:bf16 over i:2, j:2",
]


@pytest.mark.parametrize("text", ROUND_TRIPS)
def test_text_round_trips(text):
    expr = parse_expr(text)
    assert str(expr) == text
    assert parse_expr(str(expr)) == expr


def test_structure_of_a_convolution():
    expr = parse_expr(ROUND_TRIPS[1])
    assert expr.reduction_dims == ("c", "kh", "kw")
    window = expr.a.indices[2]
    assert window.dims == ("oh", "kh") and window.coefficient("oh") == 2 and window.plain is None
    assert expr.a.indices[1].plain == "c"
    assert window.span({"oh": 5, "kh": 3}) == 11
    assert parse_affine("oh*2 + kh - 1").evaluate({"oh": 3, "kh": 2}) == 7
    assert expr.dim("oh").fixed and not parse_expr(ROUND_TRIPS[4]).dim("t").fixed


@pytest.mark.parametrize("text, message", [
    ("C[i]:f33 += A[i]:f32 * B[i]:f32 over i:4", "unknown element type 'f33'"),
    ("C[i]:f32 += A[i, k]:f32 * B[k]:f32 over i:4", "undeclared dimension(s) k"),
    ("C[i]:f32 += A[i]:f32 * B[i]:f32 over i:4, j:2", "j index no operand"),
    ("C[i]:f32 += A[i]:f32 * C[i]:f32 over i:4", "distinct tensors"),
    ("C[i]:f32 += A[i]:f32 * B[i]:f32 over i:4, i:2", "declared twice"),
    ("C[i]:f32 += A[i]:f32 * B[i]:f32 over i:0", "extents are positive"),
    ("C[i]:f32 = A[i]:f32 * B[i]:f32 over i:4", "unexpected character '='"),
    ("C[i]:f32 * A[i]:f32 * B[i]:f32 over i:4", "expected '+=', got '*'"),
    ("C[i]:f32 += A[i]:f32 * B[i]:f32 over i:4 extra", "unexpected 'extra'"),
    ("C[i]:f32 += A[i]:f32 * B[i]:f32 with i:4", "expected 'over'"),
    ("C[i]:f32 += A[i]:f32 * B[i]:f32 over i:4 ;", "unexpected character ';'"),
])
def test_bad_text_is_refused(text, message):
    with pytest.raises(ExprError, match=re.escape(message)):
        parse_expr(text)


def evaluate(expr: TensorExpr, arrays: dict[str, np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray:
    """The expression run literally, point by point: the semantics the mapper relies on
    (inputs read as zero past their edges)."""
    out = np.zeros(out_shape, dtype=np.float64)
    names = [d.name for d in expr.domain]
    for point in itertools.product(*(range(d.extent or 1) for d in expr.domain)):
        values = dict(zip(names, point, strict=True))
        factors = []
        for access in (expr.a, expr.b):
            index = tuple(i.evaluate(values) for i in access.indices)
            array = arrays[access.tensor]
            inside = all(0 <= i < s for i, s in zip(index, array.shape, strict=True))
            factors.append(float(array[index]) if inside else 0.0)
        out[tuple(i.evaluate(values) for i in expr.output.indices)] += factors[0] * factors[1]
    return out


def _node(graph: Graph, op: str, inputs, attrs=None):
    values = [graph.add_input(f"in{i}", TensorType.of(a)) for i, a in enumerate(inputs)]
    graph.add_node(op, values, attrs)
    return graph.nodes[-1]


def test_matmul_expression_broadcasts_batch_axes():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1, 3, 4)).astype(np.float32), rng.standard_normal((3, 4, 5)).astype(np.float32)
    node = _node(Graph(), "MatMul", [a, b])
    (kernel,) = kernels_of(node)
    assert str(kernel.expr) == ("C[b0, b1, i, j]:f32 += A[b0, i, k]:f32 * B[b1, k, j]:f32 "
                                "over b0:2, b1:3, i:3, j:5, k:4")
    got = evaluate(kernel.expr, {"A": a.reshape(2, 3, 4), "B": b}, (2, 3, 3, 5))
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5)


def test_gemm_transposes_are_index_orders():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    node = _node(Graph(), "Gemm", [a, b], GemmAttrs(transA=True, transB=True))
    (kernel,) = kernels_of(node)
    assert str(kernel.expr) == "C[i, j]:f32 += A[k, i]:f32 * B[j, k]:f32 over i:3, j:5, k:4"
    np.testing.assert_allclose(evaluate(kernel.expr, {"A": a, "B": b}, (3, 5)), a.T @ b.T, rtol=1e-5)


@pytest.mark.parametrize("group, stride, dilation, pads", [(1, 1, 1, 0), (1, 2, 1, 1), (2, 1, 2, 1), (4, 2, 1, 1)])
def test_conv_expression_matches_the_op_reference(group, stride, dilation, pads):
    rng = np.random.default_rng(2)
    channels = 4
    x = rng.standard_normal((1, channels, 6, 5)).astype(np.float32)
    w = rng.standard_normal((4, channels // group, 3, 2)).astype(np.float32)
    attrs = ConvAttrs((stride, stride), (pads, pads, pads, pads), (dilation, dilation), group)
    node = _node(Graph(), "Conv", [x, w], attrs)
    (kernel,) = kernels_of(node)
    assert kernel.padded == (frozenset({"I"}) if pads else frozenset())
    # The expression reads the padded input: pad here, as the kernel's zero-padding says.
    padded = np.pad(x, [(0, 0), (0, 0), (pads, pads), (pads, pads)])
    expected = node.opdef.evaluate(attrs, [x, w, None])[0]
    got = evaluate(kernel.expr, {"I": padded.reshape(padded.shape[1:]), "W": w.reshape(w.shape[0], -1, 3, 2)
                                 if group < channels else w.reshape(w.shape[0], 3, 2)}, expected.shape[1:])
    np.testing.assert_allclose(got, expected[0], rtol=1e-4, atol=1e-5)


def test_depthwise_and_pointwise_forms():
    x = np.zeros((1, 8, 5, 5), np.float32)
    depthwise = _node(Graph(), "Conv", [x, np.zeros((8, 1, 3, 3), np.float32)],
                      ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 8))
    pointwise = _node(Graph(), "Conv", [x, np.zeros((16, 8, 1, 1), np.float32)], ConvAttrs((1, 1), (0,) * 4, (1, 1)))
    assert str(kernels_of(depthwise)[0].expr) == ("O[g, oh, ow]:f32 += I[g, oh + kh, ow + kw]:f32 * "
                                                  "W[g, kh, kw]:f32 over g:8, oh:5, ow:5, kh:3, kw:3")
    assert str(kernels_of(pointwise)[0].expr) == ("O[m, oh, ow]:f32 += I[c, oh, ow]:f32 * W[m, c]:f32 "
                                                  "over m:16, c:8, oh:5, ow:5")


def test_gru_has_two_gate_gemms():
    x = np.zeros((7, 2, 6), np.float32)
    node = _node(Graph(), "GRU", [x, np.zeros((1, 12, 6), np.float32), np.zeros((1, 12, 4), np.float32)],
                 GRUAttrs(hidden_size=4))
    inputs, recurrent = kernels_of(node)
    assert str(inputs.expr) == "XW[t, b, g]:f32 += X[t, b, i]:f32 * W[g, i]:f32 over t:7, b:2, g:12, i:6"
    assert str(recurrent.expr) == "HR[b, g]:f32 += H[b, j]:f32 * R[g, j]:f32 over b:2, g:12, j:4"
    assert recurrent.repeat == 7 and inputs.repeat == 1


def test_integer_matmul_accumulates_in_i32():
    node = _node(Graph(), "MatMulInteger", [np.zeros((3, 8), np.uint8), np.zeros((8, 4), np.int8)])
    (kernel,) = kernels_of(node)
    assert [a.dtype for a in kernel.expr.operands] == [DType.INT32, DType.UINT8, DType.INT8]


def test_table_names_ops_that_exist():
    from ember.ops import OPS

    assert set(KERNELS) <= set(OPS)
    assert {"MatMul", "Gemm", "FullyConnected", "Conv", "FusedConv", "GRU", "LSTM"} <= set(KERNELS)
    assert Affine.of("x").plain == "x"
