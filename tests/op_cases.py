"""Op conformance cases generated from the op table: for every op, a few shapes, element
types and attribute variants. Each case builds a one-node graph; backends are compared on
it (tests/test_cpu_ops.py). A new op without a case fails test_every_op_has_a_case."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.graph import Graph
from ember.ops.elementwise import _BINARY_ARITH, _COMPARE, _LOGIC, _UNARY_FLOAT, _UNARY_NUMERIC
from ember.ops.elementwise import AlphaAttrs, AlphaBetaAttrs, CastAttrs, ClipAttrs
from ember.ops.fused import FullyConnectedAttrs, FusedConvAttrs
from ember.ops.nn import BatchNormAttrs, ConvAttrs, GemmAttrs, PoolAttrs
from ember.ops.reduce import ArgReduceAttrs, LayerNormAttrs, ReduceAttrs, SoftmaxAttrs
from ember.ops.rnn import GRUAttrs
from ember.ops.tensor import (AxisAttrs, PadAttrs, ReshapeAttrs, ShapeAttrs, SliceAttrs, TileAttrs,
                              TransposeAttrs)
from ember.types import DType, TensorType

F32, I64, I32, BOOL, F64 = DType.FLOAT32, DType.INT64, DType.INT32, DType.BOOL, DType.FLOAT64


@dataclass
class Case:
    """A one-node graph: operand specs are (dtype, shape) inputs or ('const', array)."""

    op: str
    operands: list
    attrs: object = None
    name: str = ""
    positive: bool = False  # draw float inputs from (0.5, 2.5), for Log, Sqrt, Pow and the like

    @property
    def id(self) -> str:
        return self.name or self.op

    def build(self, seed: int = 0) -> tuple[Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        g = Graph(self.id)
        values, feeds = [], {}
        for i, spec in enumerate(self.operands):
            if spec is None:
                values.append(None)
            elif spec[0] == "const":
                values.append(g.add_constant(np.asarray(spec[1]), f"c{i}"))
            else:
                dtype, shape = spec
                p = g.add_input(f"x{i}", TensorType(dtype, tuple(shape)))
                values.append(p)
                feeds[p.name] = _random(rng, dtype, shape)
                if self.positive and dtype.is_float:
                    feeds[p.name] = np.abs(feeds[p.name]) + np.asarray(0.5, dtype.numpy)
        outs = g.add_node(self.op, values, self.attrs, name="node")
        g.set_outputs([(f"y{i}", v) for i, v in enumerate(outs)])
        return g, feeds


def _random(rng, dtype: DType, shape) -> np.ndarray:
    if dtype is BOOL:
        return rng.random(shape) > 0.5
    if dtype.is_float:
        return rng.standard_normal(shape).astype(dtype.numpy)
    return rng.integers(-5, 6, shape).astype(dtype.numpy)


def _w(*shape, positive=False, seed=1):
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return ("const", np.abs(data) + 0.5 if positive else data)


CASES: list[Case] = []
add = CASES.append

for name in _UNARY_FLOAT:
    add(Case(name, [(F32, (3, 17))], positive=name in ("Log", "Sqrt")))
for name in _UNARY_NUMERIC:
    add(Case(name, [(F32, (2, 9))]))
    add(Case(name, [(I64, (5,))], name=f"{name}_i64"))
add(Case("Not", [(BOOL, (4, 5))]))
for name in _BINARY_ARITH:
    add(Case(name, [(F32, (2, 3, 4)), (F32, (3, 1))], name=f"{name}_broadcast"))
    add(Case(name, [(F32, (35,)), (F32, (35,))]))
add(Case("Add", [(I64, (4, 3)), (I64, (3,))], name="Add_i64"))
add(Case("Mul", [(I32, (4, 3)), (I32, (4, 3))], name="Mul_i32"))
add(Case("Div", [(I64, (6,)), ("const", np.array([3, -2, 5, 7, -4, 1], np.int64))], name="Div_i64"))
add(Case("Mod", [(I64, (6,)), ("const", np.array([3, -2, 5, 7, -4, 1], np.int64))], name="Mod_i64"))
add(Case("Pow", [("const", np.abs(np.arange(1, 7, dtype=np.float32))), (F32, (6,))]))
for name in _COMPARE:
    add(Case(name, [(F32, (4, 6)), (F32, (1, 6))]))
for name in _LOGIC:
    add(Case(name, [(BOOL, (4, 6)), (BOOL, (6,))]))
add(Case("Where", [(BOOL, (3, 1)), (F32, (3, 4)), (F32, (4,))]))
add(Case("Clip", [(F32, (20,))], ClipAttrs(-0.5, 0.7)))
add(Case("Clip", [(F32, (20,))], ClipAttrs(None, 0.0), name="Clip_max_only"))
add(Case("Cast", [(F32, (12,))], CastAttrs(I64)))
add(Case("Cast", [(I64, (12,))], CastAttrs(F32), name="Cast_i64_f32"))
add(Case("Cast", [(F32, (12,))], CastAttrs(BOOL), name="Cast_f32_bool"))
add(Case("LeakyRelu", [(F32, (10,))], AlphaAttrs(0.1)))
add(Case("Elu", [(F32, (10,))], AlphaAttrs(1.0)))
add(Case("HardSigmoid", [(F32, (10,))], AlphaBetaAttrs(0.2, 0.5)))

add(Case("Reshape", [(F32, (2, 3, 4))], ReshapeAttrs((4, 6))))
add(Case("Transpose", [(F32, (2, 3, 4, 5))], TransposeAttrs((0, 2, 3, 1))))
add(Case("Transpose", [(I64, (3, 4))], TransposeAttrs((1, 0)), name="Transpose_i64"))
add(Case("Concat", [(F32, (2, 3)), (F32, (2, 5)), (F32, (2, 1))], AxisAttrs(1)))
add(Case("Concat", [(F32, (1, 3)), (F32, (2, 3))], AxisAttrs(0), name="Concat_axis0"))
add(Case("Slice", [(F32, (6, 7))], SliceAttrs((0, 1), (1, 6), (5, -1), (2, -2))))
add(Case("Gather", [(F32, (5, 4)), ("const", np.array([[4, 0], [-1, 2]], np.int64))], AxisAttrs(0)))
add(Case("Gather", [(F32, (3, 5, 2)), ("const", np.array([1, 3], np.int32))], AxisAttrs(1), name="Gather_axis1"))
add(Case("Expand", [(F32, (3, 1))], ShapeAttrs((2, 3, 4))))
add(Case("Pad", [(F32, (3, 4))], PadAttrs((1, 0, 2, 1), "constant", 1.5)))
add(Case("Pad", [(F32, (3, 4))], PadAttrs((1, 2, 2, 1), "reflect"), name="Pad_reflect"))
add(Case("Pad", [(F32, (3, 4))], PadAttrs((2, 1, 0, 3), "edge"), name="Pad_edge"))
add(Case("Pad", [(F32, (3, 4))], PadAttrs((2, 1, 0, 3), "wrap"), name="Pad_wrap"))
add(Case("Tile", [(F32, (2, 3))], TileAttrs((2, 3))))

for name in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceL2",
             "ReduceSumSquare", "ReduceLogSumExp"):
    add(Case(name, [(F32, (3, 4, 5))], ReduceAttrs((1,), True)))
    add(Case(name, [(F32, (3, 4, 40))], ReduceAttrs((2,), False), name=f"{name}_inner"))
add(Case("ReduceLogSum", [("const", np.arange(1, 13, dtype=np.float32).reshape(3, 4))], ReduceAttrs((0,), True)))
add(Case("ReduceSum", [(I64, (3, 4))], ReduceAttrs((0, 1), False), name="ReduceSum_i64"))
add(Case("ArgMax", [(F32, (3, 7))], ArgReduceAttrs(1, True, False)))
add(Case("ArgMin", [(F32, (3, 7))], ArgReduceAttrs(0, False, True)))
add(Case("Softmax", [(F32, (2, 3, 20))], SoftmaxAttrs(-1)))
add(Case("LogSoftmax", [(F32, (2, 3, 20))], SoftmaxAttrs(1)))
add(Case("LayerNormalization", [(F32, (2, 5, 16)), _w(16), _w(16, seed=2)], LayerNormAttrs(-1, 1e-5)))

add(Case("MatMul", [(F32, (3, 50)), _w(50, 40)], name="MatMul_const"))
add(Case("MatMul", [(F32, (2, 3, 5, 7)), (F32, (2, 3, 7, 33))], name="MatMul_batched"))
add(Case("MatMul", [(F32, (2, 1, 5, 7)), (F32, (3, 7, 4))], name="MatMul_broadcast"))
add(Case("MatMul", [(F32, (7,)), (F32, (7, 4))], name="MatMul_vector"))
add(Case("MatMul", [(I64, (3, 4)), (I64, (4, 2))], name="MatMul_i64"))
add(Case("Gemm", [(F32, (3, 20)), _w(36, 20), _w(36, seed=3)], GemmAttrs(0.5, 2.0, False, True)))
add(Case("FullyConnected", [(F32, (2, 9, 20)), _w(20, 70), _w(70, seed=3), (F32, (2, 9, 70))],
         FullyConnectedAttrs("relu")))
add(Case("FullyConnected", [(F32, (1, 20)), _w(20, 3), None, None], FullyConnectedAttrs("sigmoid"),
         name="FullyConnected_gemv"))
add(Case("Conv", [(F32, (1, 3, 11, 9)), _w(10, 3, 3, 3), _w(10, seed=4)],
         ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)))
add(Case("Conv", [(F32, (2, 4, 12, 12)), _w(6, 2, 3, 2)],
         ConvAttrs((2, 1), (1, 0, 2, 1), (2, 1), 2), name="Conv_grouped_strided_dilated"))
add(Case("Conv", [(F32, (1, 8, 7, 7)), _w(8, 1, 3, 3), _w(8, seed=4)],
         ConvAttrs((2, 2), (1, 1, 1, 1), (1, 1), 8), name="Conv_depthwise"))
add(Case("Conv", [(F32, (1, 16, 5, 6)), _w(24, 16, 1, 1)], ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1),
         name="Conv_pointwise"))
add(Case("FusedConv", [(F32, (1, 5, 9, 9)), _w(12, 5, 3, 3), _w(12, seed=5), (F32, (1, 12, 9, 9))],
         FusedConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "relu")))
add(Case("FusedConv", [(F32, (1, 6, 8, 8)), _w(6, 1, 3, 3), _w(6, seed=5), None],
         FusedConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 6, "clip", 0.0, 6.0), name="FusedConv_depthwise_clip"))
add(Case("MaxPool", [(F32, (1, 3, 9, 9))], PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False)))
add(Case("MaxPool", [(F32, (1, 2, 8, 8))], PoolAttrs((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),
         name="MaxPool_ceil"))
add(Case("AveragePool", [(F32, (1, 3, 9, 9))], PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False)))
add(Case("AveragePool", [(F32, (1, 2, 8, 8))], PoolAttrs((3, 3), (2, 2), (1, 1, 0, 0), (1, 1), True, True),
         name="AveragePool_include_pad_ceil"))
add(Case("BatchNormalization", [(F32, (2, 3, 4, 4)), _w(3), _w(3, seed=2), _w(3, seed=3),
                                _w(3, positive=True, seed=4)], BatchNormAttrs(1e-5)))
add(Case("GRU", [(F32, (4, 2, 3)), _w(1, 15, 3), _w(1, 15, 5, seed=2), _w(1, 30, seed=3), (F32, (1, 2, 5))],
         GRUAttrs(5, "forward", True)))

from ember.ops.activations import GeluAttrs  # noqa: E402  (defined by the optimizer's pattern passes)

add(Case("Gelu", [(F32, (4, 33))], GeluAttrs("none")))
add(Case("Gelu", [(F32, (4, 33))], GeluAttrs("tanh"), name="Gelu_tanh"))
add(Case("HardSwish", [(F32, (4, 33))]))
add(Case("Silu", [(F32, (4, 33))]))
