"""Op conformance cases generated from the op table: for every op, a few shapes, element
types and attribute variants. Each case builds a one-node graph; backends are compared on
it (tests/test_cpu_ops.py). A new op without a case fails test_every_op_has_a_case."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.graph import Graph
from ember.ops.elementwise import (
    _BINARY_ARITH,
    _COMPARE,
    _LOGIC,
    _UNARY_FLOAT,
    _UNARY_NUMERIC,
    AlphaAttrs,
    AlphaBetaAttrs,
    CastAttrs,
    ClipAttrs,
)
from ember.ops.fused import FullyConnectedAttrs, FusedConvAttrs
from ember.ops.nn import BatchNormAttrs, ConvAttrs, GemmAttrs, PoolAttrs
from ember.ops.normalization import LayerNormAttrs, SoftmaxAttrs
from ember.ops.recurrent import GRUAttrs
from ember.ops.reduce import ArgReduceAttrs, ReduceAttrs
from ember.ops.tensor import AxisAttrs, PadAttrs, ReshapeAttrs, ShapeAttrs, SliceAttrs, TileAttrs, TransposeAttrs
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

# Ops added for ONNX conformance (ops/math.py, indexing.py, normalization.py, loss.py, attention.py,
# quant.py, conv.py, resize.py, recurrent.py, linalg.py).
from ember.ops.attention import AttentionAttrs, RotaryAttrs  # noqa: E402
from ember.ops.conv import Col2ImAttrs, ConvTransposeAttrs, LpPoolAttrs, MaxPoolIndicesAttrs, MaxUnpoolAttrs  # noqa: E402
from ember.ops.indexing import AxisAttrs as ElementsAxisAttrs  # noqa: E402
from ember.ops.indexing import (  # noqa: E402
    BlockAttrs,
    CumulativeAttrs,
    GatherNDAttrs,
    OneHotAttrs,
    ReverseSequenceAttrs,
    ScatterAttrs,
    ScatterNDAttrs,
    TensorScatterAttrs,
    TopKAttrs,
    TriluAttrs,
)
from ember.ops.linalg import EinsumAttrs  # noqa: E402
from ember.ops.loss import LossAttrs  # noqa: E402
from ember.ops.math import BitCastAttrs, BitShiftAttrs, CeluAttrs, IsInfAttrs, SeluAttrs, ShrinkAttrs, ThresholdAttrs  # noqa: E402
from ember.ops.normalization import (  # noqa: E402
    AxesAttrs,
    EpsilonAttrs,
    GroupNormAttrs,
    HardmaxAttrs,
    LpNormAttrs,
    LRNAttrs,
    RMSNormAttrs,
)
from ember.ops.quant import QuantizeAttrs  # noqa: E402
from ember.ops.recurrent import RecurrentAttrs  # noqa: E402
from ember.ops.resize import ResizeAttrs  # noqa: E402

U8, I8, U32 = DType.UINT8, DType.INT8, DType.UINT32


def _ints(*values, dtype=np.int64):
    return ("const", np.array(values, dtype=dtype))


def _unit(*shape, seed=1):
    """Values inside (-0.9, 0.9), for the inverse trigonometric functions."""
    return ("const", (np.random.default_rng(seed).random(shape) * 1.8 - 0.9).astype(np.float32))


for name in ("Atan", "Sinh", "Cosh", "Tan", "Asinh", "Mish"):
    add(Case(name, [(F32, (3, 7))]))
for name in ("Acos", "Asin", "Atanh"):
    add(Case(name, [_unit(3, 7)]))
add(Case("Acosh", [("const", np.linspace(1.0, 4.0, 12, dtype=np.float32))]))
add(Case("IsNaN", [("const", np.array([1.0, np.nan, -np.inf, 0.0], np.float32))]))
add(Case("IsInf", [("const", np.array([1.0, np.nan, -np.inf, np.inf], np.float32))], IsInfAttrs(False, True)))
add(Case("BitwiseNot", [(I32, (4, 5))]))
for name in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    add(Case(name, [(I64, (3, 4)), (I64, (4,))]))
add(Case("BitShift", [("const", np.array([1, 4, 255, 7], np.uint32)), _ints(1, 2, 33, 0, dtype=np.uint32)],
         BitShiftAttrs("LEFT")))
add(Case("BitShift", [(I32, (6,)), _ints(1, 2, 3, 0, 31, 40, dtype=np.int32)], BitShiftAttrs("RIGHT"),
         name="BitShift_signed_right"))
add(Case("BitCast", [(F32, (2, 3))], BitCastAttrs(I32)))
add(Case("Selu", [(F32, (10,))], SeluAttrs()))
add(Case("Celu", [(F32, (10,))], CeluAttrs(2.0)))
add(Case("ThresholdedRelu", [(F32, (10,))], ThresholdAttrs(0.5)))
add(Case("Shrink", [(F32, (10,))], ShrinkAttrs(0.1, 0.4)))
add(Case("PRelu", [(F32, (2, 3, 4)), _w(3, 1)]))

add(Case("GatherElements", [(F32, (3, 4)), _ints([0, 2, -1], [3, 1, 0], dtype=np.int64)], ElementsAxisAttrs(1)))
add(Case("GatherND", [(F32, (2, 3, 4)), _ints([[0, 1], [1, 2]], [[1, 0], [0, 0]])], GatherNDAttrs(0)))
add(Case("GatherND", [(F32, (2, 3, 4)), _ints([1], [2])], GatherNDAttrs(1), name="GatherND_batch"))
add(Case("ScatterElements", [(F32, (3, 4)), _ints([0, 2], [1, 1]), (F32, (2, 2))], ScatterAttrs(0, "add")))
add(Case("ScatterND", [(F32, (4, 3)), _ints([1], [3]), (F32, (2, 3))], ScatterNDAttrs("none")))
add(Case("TensorScatter", [(F32, (2, 3, 6, 4)), (F32, (2, 3, 2, 4)), _ints(1, 5)], TensorScatterAttrs(-2, "circular")))
add(Case("Trilu", [(F32, (2, 4, 5))], TriluAttrs(False, 1)))
add(Case("CumSum", [(F32, (3, 5))], CumulativeAttrs(1, True, True)))
add(Case("CumProd", [(F32, (3, 5))], CumulativeAttrs(0)))
add(Case("OneHot", [_ints(0, 3, -1, 7), ("const", np.array([0.5, 2.0], np.float32))], OneHotAttrs(5, 0)))
add(Case("TopK", [(F32, (3, 9))], TopKAttrs(4, 1, True, True)))
add(Case("TopK", [("const", np.array([3, 1, 3, 2, 1], np.int64))], TopKAttrs(3, 0, False), name="TopK_smallest_ties"))
add(Case("DepthToSpace", [(F32, (1, 8, 2, 3))], BlockAttrs(2, "CRD")))
add(Case("SpaceToDepth", [(F32, (1, 2, 4, 6))], BlockAttrs(2)))
add(Case("ReverseSequence", [(F32, (4, 3, 2)), _ints(4, 1, 3)], ReverseSequenceAttrs(1, 0)))

add(Case("InstanceNormalization", [(F32, (2, 3, 5, 4)), _w(3), _w(3, seed=2)], EpsilonAttrs(1e-5)))
add(Case("GroupNormalization", [(F32, (2, 6, 4)), _w(6), _w(6, seed=2)], GroupNormAttrs(3)))
add(Case("LRN", [(F32, (1, 5, 3, 3))], LRNAttrs(3)))
add(Case("MeanVarianceNormalization", [(F32, (2, 3, 4, 4))], AxesAttrs()))
add(Case("LpNormalization", [(F32, (3, 6))], LpNormAttrs(1, 1)))
add(Case("RMSNormalization", [(F32, (2, 5, 16)), _w(16)], RMSNormAttrs(-1, 1e-5)))
add(Case("Hardmax", [("const", np.array([[1, 3, 3], [2, 0, 1]], np.float32))], HardmaxAttrs(1)))
add(Case("NegativeLogLikelihoodLoss", [(F32, (3, 5, 2)), _ints([0, 4], [1, 1], [3, 2]), _w(5, positive=True)],
         LossAttrs("mean", 1)))
add(Case("SoftmaxCrossEntropyLoss", [(F32, (4, 6)), _ints(0, 5, 2, 2)], LossAttrs("none")))

add(Case("Attention", [(F32, (2, 4, 5, 8)), (F32, (2, 2, 6, 8)), (F32, (2, 2, 6, 8)), None, None, None, None],
         AttentionAttrs(is_causal=True), name="Attention_gqa_causal"))
add(Case("Attention", [(F32, (1, 3, 12)), (F32, (1, 4, 12)), (F32, (1, 4, 12)), (BOOL, (3, 4)),
                       (F32, (1, 2, 2, 6)), (F32, (1, 2, 2, 6)), None],
         AttentionAttrs(q_num_heads=2, kv_num_heads=2, softcap=2.0, qk_matmul_output_mode=3), name="Attention_3d_past"))
add(Case("RotaryEmbedding", [(F32, (1, 2, 3, 8)), _w(3, 4), _w(3, 4, seed=2), _ints([0, 2, 1])], RotaryAttrs(True)))

add(Case("QuantizeLinear", [(F32, (2, 6)), ("const", np.float32(0.05)), ("const", np.uint8(10))],
         QuantizeAttrs(U8)))
add(Case("QuantizeLinear", [(F32, (2, 6)), ("const", np.array([[0.1, 0.2, 0.3], [0.5, 0.4, 0.2]], np.float32)),
                            None], QuantizeAttrs(I8, 1, 2), name="QuantizeLinear_blocked"))
add(Case("DequantizeLinear", [(I8, (3, 4)), ("const", np.array([0.1, 0.2, 0.3], np.float32)),
                              ("const", np.array([0, 1, -2], np.int8))], QuantizeAttrs(F32, 0)))
add(Case("DynamicQuantizeLinear", [(F32, (3, 5))]))
add(Case("MatMulInteger", [(U8, (3, 4)), (U8, (4, 5)), ("const", np.uint8(2)), ("const", np.uint8(1))]))
add(Case("ConvInteger", [(I8, (1, 2, 5, 5)), ("const", np.ones((3, 2, 3, 3), np.int8)), ("const", np.int8(1)), None],
         ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)))
add(Case("QLinearMatMul", [(U8, (2, 4)), ("const", np.float32(0.1)), ("const", np.uint8(3)), (U8, (4, 3)),
                           ("const", np.float32(0.2)), ("const", np.uint8(1)), ("const", np.float32(0.5)),
                           ("const", np.uint8(7))]))
add(Case("QLinearConv", [(U8, (1, 2, 5, 5)), ("const", np.float32(0.1)), ("const", np.uint8(3)),
                         ("const", np.ones((4, 2, 3, 3), np.uint8)), ("const", np.float32(0.2)), ("const", np.uint8(0)),
                         ("const", np.float32(0.5)), ("const", np.uint8(7)), ("const", np.arange(4, dtype=np.int32))],
         ConvAttrs((2, 2), (1, 1, 1, 1), (1, 1), 1)))

add(Case("ConvTranspose", [(F32, (1, 4, 3, 3)), _w(4, 3, 3, 3), _w(6, seed=2)],
         ConvTransposeAttrs((2, 2), (1, 0, 0, -1), (1, 1), 2)))
add(Case("LpPool", [(F32, (1, 2, 6, 6))], LpPoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, 3)))
add(Case("MaxPoolWithIndices", [(F32, (2, 2, 5, 5))],
         MaxPoolIndicesAttrs((2, 2), (2, 2), (0, 0, 1, 1), (1, 1), False, 1)))
add(Case("MaxUnpool", [(F32, (1, 1, 2, 2)), ("const", np.array([[[[5, 7], [13, 15]]]], np.int64))],
         MaxUnpoolAttrs((5, 5), (2, 2), (2, 2), (0, 0, 0, 0))))
add(Case("Col2Im", [(F32, (1, 4, 6))], Col2ImAttrs((3, 4), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1))))
add(Case("Resize", [(F32, (1, 2, 4, 5))], ResizeAttrs((1, 2, 7, 3), (1.0, 1.0, 1.75, 0.6), "cubic",
                                                      "half_pixel", exclude_outside=True)))
add(Case("Resize", [(F32, (1, 1, 6, 6))], ResizeAttrs((1, 1, 3, 2), (1.0, 1.0, 0.5, 0.4), "linear",
                                                      "pytorch_half_pixel", antialias=True), name="Resize_antialias"))
add(Case("Resize", [(U8, (1, 1, 3, 3))], ResizeAttrs((1, 1, 6, 5), (1.0, 1.0, 2.0, 1.7), "nearest", "asymmetric",
                                                     "floor"), name="Resize_nearest_u8"))

add(Case("RNN", [(F32, (4, 2, 3)), _w(1, 5, 3), _w(1, 5, 5, seed=2), _w(1, 10, seed=3), _ints(4, 2, dtype=np.int32),
                 None], RecurrentAttrs(5, "forward", ("Tanh",))))
add(Case("LSTM", [(F32, (3, 2, 4)), _w(2, 12, 4), _w(2, 12, 3, seed=2), _w(2, 24, seed=3), None, (F32, (2, 2, 3)),
                  (F32, (2, 2, 3)), _w(2, 9, seed=4)],
         RecurrentAttrs(3, "bidirectional", ("Sigmoid", "Tanh", "Tanh") * 2, clip=5.0)))

add(Case("Einsum", [(F32, (2, 3, 4)), (F32, (2, 4, 5))], EinsumAttrs("bij,bjk->bik")))
add(Case("Einsum", [(F32, (3, 3))], EinsumAttrs("ii"), name="Einsum_trace"))
add(Case("Det", [(F32, (2, 3, 3))]))

from ember.ops.attention import LinearAttentionAttrs  # noqa: E402
from ember.ops.sampling import AffineGridAttrs, GridSampleAttrs  # noqa: E402
from ember.ops.spectral import DFTAttrs, STFTAttrs  # noqa: E402

_GRID = ("const", np.random.default_rng(7).uniform(-1.2, 1.2, (1, 3, 4, 2)).astype(np.float32))
add(Case("GridSample", [(F32, (1, 2, 5, 6)), _GRID], GridSampleAttrs("linear", "zeros", False)))
add(Case("GridSample", [(F32, (1, 2, 5, 6)), _GRID], GridSampleAttrs("cubic", "reflection", True),
         name="GridSample_cubic_reflection"))
add(Case("GridSample", [(F32, (1, 2, 5, 6)), _GRID], GridSampleAttrs("nearest", "border", False),
         name="GridSample_nearest_border"))
add(Case("AffineGrid", [(F32, (2, 2, 3))], AffineGridAttrs((2, 1, 4, 5), False)))
add(Case("DFT", [(F32, (2, 8, 1))], DFTAttrs(1, 8, False, True)))
add(Case("DFT", [(F32, (2, 5, 2))], DFTAttrs(1, 8, True, False), name="DFT_inverse_padded"))
add(Case("STFT", [(F32, (1, 20, 1)), _w(8)], STFTAttrs(4, 8, True)))
add(Case("LinearAttention", [(F32, (2, 3, 8)), (F32, (2, 3, 4)), (F32, (2, 3, 6)), None, (F32, (2, 3, 1)),
                             _unit(2, 3, 1)], LinearAttentionAttrs(2, 1, "gated_delta")))

# 1x1 convolutions over small maps take the transposed (pixels-as-rows) GEMM on cpu.
add(Case("Conv", [(F32, (2, 32, 7, 7)), _w(80, 32, 1, 1), _w(80, seed=6)], ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1),
         name="Conv_pointwise_small_map"))
add(Case("FusedConv", [(F32, (1, 40, 5, 5)), _w(96, 40, 1, 1), _w(96, seed=7), (F32, (1, 96, 5, 5))],
         FusedConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1), name="FusedConv_pointwise_small_map_residual"))
add(Case("FusedConv", [(F32, (1, 24, 7, 7)), _w(64, 24, 1, 1), None, None],
         FusedConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "clip", 0.0, 6.0), name="FusedConv_pointwise_small_map_clip"))
# Residual and activation together, batch 2: the tiles' transposed store adds the residual first.
add(Case("FusedConv", [(F32, (2, 48, 7, 7)), _w(72, 48, 1, 1), _w(72, seed=8), (F32, (2, 72, 7, 7))],
         FusedConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "relu"), name="FusedConv_pointwise_small_map_residual_relu"))

# FusedConv's channels-last forms (conv_channels_last: what assign-layouts makes of chains of
# pointwise and depthwise convolutions) for each layout pair: a pointwise one with a partial
# panel of output channels and the residual (in y's layout), depthwise ones with 3x3 and 5x5
# taps at the strides text recognizers use, over maps whose kernel rows reach the padding.
def _layout(shape: tuple[int, ...], nhwc: bool) -> tuple[int, ...]:
    return (shape[0], shape[2], shape[3], shape[1]) if nhwc else shape


for x_nhwc, y_nhwc, label in ((True, True, ""), (False, True, "_from_nchw"), (True, False, "_to_nchw")):
    add(Case("FusedConv", [(F32, _layout((2, 40, 5, 7), x_nhwc)), _w(72, 40, 1, 1, seed=21), _w(72, seed=22),
                           (F32, _layout((2, 72, 5, 7), y_nhwc))],
             FusedConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "hard_swish", 0.8, 0.1, x_nhwc, y_nhwc),
             name=f"FusedConv_channels_last_pointwise{label}"))
    for kernel, strides, activation in ((3, (1, 1), "clip"), (3, (2, 1), "relu"), (5, (1, 2), "hard_swish"),
                                        (5, (2, 2), "silu")):
        pad = kernel // 2
        add(Case("FusedConv", [(F32, _layout((1, 32, 12, 20), x_nhwc)), _w(32, 1, kernel, kernel, seed=23),
                               _w(32, seed=24), None],
                 FusedConvAttrs(strides, (pad,) * 4, (1, 1), 32, activation, 0.0 if activation != "clip" else 0.5,
                                6.0 if activation == "clip" else 0.0, x_nhwc, y_nhwc),
                 name=f"FusedConv_channels_last_depthwise{kernel}x{kernel}_s{strides[0]}{strides[1]}{label}"))

# MobileNetV2's block as one op (the cpu backend keeps both wide intermediates in its kernel):
# expand 1x1 + clip, depthwise 3x3 + clip, project 1x1 with and without the residual, strides 1
# and 2.
from ember.ops.inverted_residual import InvertedResidualAttrs  # noqa: E402

_BLOCK = [_w(96, 16, 1, 1, seed=11), _w(96, seed=12), _w(96, 1, 3, 3, seed=13), _w(96, seed=14),
          _w(16, 96, 1, 1, seed=15), _w(16, seed=16)]
add(Case("InvertedResidual", [(F32, (1, 16, 14, 14)), *_BLOCK, (F32, (1, 16, 14, 14))],
         InvertedResidualAttrs((1, 1), (1, 1, 1, 1), "clip", 0.0, 6.0, "clip", 0.0, 6.0)))
add(Case("InvertedResidual", [(F32, (2, 16, 9, 11)), *_BLOCK, None],
         InvertedResidualAttrs((2, 2), (1, 1, 1, 1), "clip", 0.0, 6.0, "relu"), name="InvertedResidual_stride2"))
# Channels last (NHWC x, residual and y; what assign-layouts makes of chains of blocks), and
# the chain's ends: NCHW x into NHWC y, NHWC x into NCHW y (the residual in y's layout).
for x_nhwc, y_nhwc, label in ((True, True, ""), (False, True, "_from_nchw"), (True, False, "_to_nchw")):
    nhwc, nchw = (1, 14, 14, 16), (1, 16, 14, 14)
    x_shape, y_shape = (nhwc if x_nhwc else nchw), (nhwc if y_nhwc else nchw)
    add(Case("InvertedResidual", [(F32, x_shape), *_BLOCK, (F32, y_shape)],
             InvertedResidualAttrs((1, 1), (1, 1, 1, 1), "clip", 0.0, 6.0, "clip", 0.0, 6.0, "relu",
                                   x_channels_last=x_nhwc, y_channels_last=y_nhwc),
             name=f"InvertedResidual_channels_last{label}"))
    x_shape = (2, 9, 11, 16) if x_nhwc else (2, 16, 9, 11)
    add(Case("InvertedResidual", [(F32, x_shape), *_BLOCK, None],
             InvertedResidualAttrs((2, 2), (1, 1, 1, 1), "clip", 0.0, 6.0, "relu", x_channels_last=x_nhwc,
                                   y_channels_last=y_nhwc),
             name=f"InvertedResidual_channels_last{label}_stride2"))

# A forest of two trees over 3 features: tree 0 splits x0 <= 0.1 then x2 < -0.3 (NaN tracked
# to the true branch), tree 1 is x1 != 0.5; leaves weigh targets 0 and 1, base values added.
from ember.ops.ml import TreeEnsembleAttrs  # noqa: E402

_FOREST = [("const", np.array([[0, 1, 1, 2], [2, 2 | 8, 3, 4], [0, 0, 0, 2], [0, 0, 2, 3], [0, 0, 3, 5],
                                [1, 6, 6, 7], [0, 0, 5, 6], [0, 0, 6, 7]], np.int32)),
           ("const", np.array([0.1, -0.3, 0, 0, 0, 0.5, 0, 0], np.float32)),
           ("const", np.array([0, 1, 0, 1, 0, 1, 0], np.int32)),
           ("const", np.array([1.5, -2.0, 0.25, 3.0, -1.0, 0.75, 2.5], np.float32)),
           ("const", np.array([0, 5], np.int32))]
add(Case("TreeEnsemble", [(F32, (6, 3)), *_FOREST], TreeEnsembleAttrs(2, "SUM", (0.5, -0.5))))
add(Case("TreeEnsemble", [(F32, (6, 3)), *_FOREST], TreeEnsembleAttrs(2, "MAX"), name="TreeEnsemble_max"))

from ember.ops.fused_attention import FusedAttentionAttrs  # noqa: E402

# Attention heads read in place: 2 batches, 3 heads of 8 (q, k) and 4 (v), a padding mask per batch.
add(Case("FusedAttention", [(F32, (2, 5, 24)), (F32, (2, 7, 24)), (F32, (2, 7, 12)), (F32, (2, 1, 1, 7))],
         FusedAttentionAttrs(3, 0.35)))
add(Case("FusedAttention", [(F32, (1, 17, 32)), (F32, (1, 17, 32)), (F32, (1, 17, 32)), None],
         FusedAttentionAttrs(2, 0.25), name="FusedAttention_unmasked"))
