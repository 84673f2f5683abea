"""Tests of the ONNX frontend (ember.frontends.onnx): loading and its errors, input shapes,
the unsupported-op scan, import-time constant folding, and every converter family compared
numerically with ONNX Runtime (the imported graph is evaluated with the ops' NumPy
references by a tiny local interpreter)."""
from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontends.onnx import CONVERTERS, load_onnx
from ember.graph.ir import Graph
from ember.support.errors import EmberError, EmberWarning, ModelImportError, UnsupportedError, UnsupportedOpError
from ember.support.limits import ResourceLimitError

ort = pytest.importorskip("onnxruntime")

SHARED_MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min

_ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
              np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint8): TensorProto.UINT8}


# helpers ------------------------------------------------------------------------------------

def evaluate(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Runs an imported graph with each op's NumPy reference."""
    env = {p: np.asarray(feeds[p.name]) for p in graph.inputs}
    env.update({c: c.data for c in graph.constants.values()})
    for node in graph.nodes:
        results = node.opdef.evaluate(node.attrs, [None if v is None else env[v] for v in node.inputs])
        env.update(zip(node.outputs, results, strict=True))
    return [env[o.value] for o in graph.outputs]


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def tensor_info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_matches_ort(model, feeds, rtol=1e-5, input_shapes=None) -> Graph:
    graph = load_onnx(model, input_shapes=input_shapes)
    expected = run_ort(model, feeds)
    actual = evaluate(graph, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape, (a.shape, e.shape)
        assert a.dtype == e.dtype, (a.dtype, e.dtype)
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(a, e)
        else:
            scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
            np.testing.assert_allclose(a, e, rtol=0, atol=rtol * scale)
    return graph


def check_op(op, inputs, attrs=None, *, consts=(), opset=17, out_types=None, n_outputs=1, rtol=1e-5):
    """One-node model: inputs[i] is an array (a graph input, or an initializer when i is in
    `consts`) or None (an absent optional input). Compares with ONNX Runtime."""
    names, graph_inputs, inits, feeds = [], [], [], {}
    for i, array in enumerate(inputs):
        if array is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        array = np.asarray(array)
        if i in consts:
            inits.append(numpy_helper.from_array(array, name))
        else:
            graph_inputs.append(tensor_info(name, _ONNX_TYPE[array.dtype], array.shape))
            feeds[name] = array
    first = np.asarray(next(a for a in inputs if a is not None))
    out_types = out_types or [_ONNX_TYPE[first.dtype]] * n_outputs
    out_names = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, out_names, name=f"the_{op.lower()}", **(attrs or {}))
    outputs = [tensor_info(n, t, None) for n, t in zip(out_names, out_types, strict=True)]
    model = make_model([node], graph_inputs, outputs, inits, opset)
    return assert_matches_ort(model, feeds, rtol=rtol)


RNG = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def ints(*values):
    return np.array(values, dtype=np.int64)


# elementwise ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Neg", "Abs", "Floor", "Ceil", "Round",
                                "Sin", "Cos", "Softplus", "Softsign", "Sign"])
def test_unary(op):
    check_op(op, [randn(2, 3, 4) * 3])


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Reciprocal"])
def test_unary_positive(op):
    check_op(op, [np.abs(randn(3, 4)) + 0.1])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_binary_broadcast(op):
    check_op(op, [randn(2, 3, 4), randn(3, 1) + 3.0])


def test_pow_and_integer_division():
    check_op("Pow", [np.abs(randn(3, 4)) + 0.5, np.array(2.5, np.float32)])
    check_op("Div", [ints(7, -7, 9, -9), ints(2, 2, -4, -4)])


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_compare(op):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    check_op(op, [a, np.array([3, 2, 1], np.float32)], out_types=[TensorProto.BOOL])


def test_logic():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    for op in ("And", "Or", "Xor"):
        check_op(op, [a, b])
    check_op("Not", [a])


def test_variadic_and_mean():
    args = [randn(2, 3), randn(3), randn(1, 3)]
    for op in ("Max", "Min", "Sum", "Mean"):
        graph = check_op(op, args)
    assert graph.op_counts() == {"Add": 2, "Div": 1}
    check_op("Sum", [randn(2, 3)])


@pytest.mark.parametrize("fmod,dtype", [(0, np.int64), (1, np.int64), (1, np.float32)])
def test_mod(fmod, dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 0], dtype)
    b = np.array([3, 3, -3, -3, 3, -3, 5], dtype)
    check_op("Mod", [a, b], {"fmod": fmod})


def test_mod_float_without_fmod_is_rejected():
    model = make_model([helper.make_node("Mod", ["a", "b"], ["y"], name="m")],
                       [tensor_info("a", TensorProto.FLOAT, [2]), tensor_info("b", TensorProto.FLOAT, [2])],
                       [tensor_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ModelImportError, match=r"node 'm' \(Mod\): .*fmod=0"):
        load_onnx(model)


def test_where_clip_cast():
    check_op("Where", [randn(3, 4) > 0, randn(3, 4), randn(4)], out_types=[TensorProto.FLOAT])
    x = randn(3, 4) * 3
    graph = check_op("Clip", [x, np.array(-1, np.float32), np.array(0.5, np.float32)], consts=(1, 2))
    assert graph.op_counts() == {"Clip": 1}
    check_op("Clip", [x, None, np.array(0.5, np.float32)], consts=(2,))
    check_op("Clip", [x])
    check_op("Cast", [x], {"to": TensorProto.INT32}, out_types=[TensorProto.INT32])
    check_op("CastLike", [x, np.zeros(1, np.int64)], consts=(1,), out_types=[TensorProto.INT64])


def test_clip_with_computed_bound():
    # A bound computed at run time becomes Max (and Min) with the bound tensor.
    model = make_model([helper.make_node("Clip", ["x", "lo"], ["y"], name="clip0")],
                       [tensor_info("x", TensorProto.FLOAT, [5]), tensor_info("lo", TensorProto.FLOAT, [])],
                       [tensor_info("y", TensorProto.FLOAT, [5])])
    graph = assert_matches_ort(model, {"x": randn(5), "lo": np.array(0.25, np.float32)})
    assert graph.op_counts() == {"Max": 1}


def test_activations():
    x = randn(2, 3, 5) * 4
    check_op("LeakyRelu", [x], {"alpha": 0.1})
    check_op("Elu", [x], {"alpha": 0.7})
    check_op("HardSigmoid", [x], {"alpha": 0.3, "beta": 0.4})
    graph = check_op("HardSwish", [x])
    assert graph.op_counts() == {"HardSigmoid": 1, "Mul": 1}


# shape, constants and indexing ---------------------------------------------------------------

def test_reshape_zero_and_minus_one():
    x = randn(2, 3, 4)
    graph = check_op("Reshape", [x, ints(0, -1)], consts=(1,))
    assert graph.outputs[0].value.type.shape == (2, 12)
    check_op("Reshape", [x, ints(-1, 0, 2)], consts=(1,))
    check_op("Reshape", [randn(0, 3), ints(3, 0)], {"allowzero": 1}, consts=(1,), opset=14)


def test_reshape_needs_constant_shape():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
                       [tensor_info("x", TensorProto.FLOAT, [2, 3]), tensor_info("s", TensorProto.INT64, [2])],
                       [tensor_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(ModelImportError, match=r"input 1 .*node 'r' \(Reshape\) must be a constant: Ember compiles "
                                           r"static shapes"):
        load_onnx(model)


def test_flatten_squeeze_unsqueeze_transpose():
    x = randn(2, 1, 3, 1)
    check_op("Flatten", [x], {"axis": 2})
    check_op("Flatten", [x], {"axis": -1})
    check_op("Squeeze", [x], opset=11)
    check_op("Squeeze", [x], {"axes": [1]}, opset=11)
    check_op("Squeeze", [x, ints(-1)], consts=(1,), opset=13)
    check_op("Unsqueeze", [x], {"axes": [0, -1]}, opset=11)
    check_op("Unsqueeze", [x, ints(0, 5)], consts=(1,), opset=13)
    check_op("Transpose", [x])
    check_op("Transpose", [x], {"perm": [3, 1, 0, 2]})


def test_concat_gather_expand_tile():
    check_op("Concat", [randn(2, 3), randn(2, 1), randn(2, 2)], {"axis": -1})
    check_op("Gather", [randn(5, 4), ints(0, -1, 3, 3)], {"axis": 0}, consts=(1,))
    check_op("Gather", [randn(3, 5), np.array([[4, -5], [1, 0]], np.int32)], {"axis": 1})
    check_op("Expand", [randn(3, 1), ints(2, 1, 4)], consts=(1,))
    check_op("Tile", [randn(2, 3), ints(2, 3)], consts=(1,))


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [INT64_MAX], [1], [1]),                  # huge end
    ([-1], [INT64_MIN], [1], [-1]),                # full reverse
    ([INT64_MAX], [-INT64_MAX], [0], [-2]),        # start past the end, negative step
    ([-100, 1], [100, -1], [0, 2], [1, 1]),        # out-of-range both sides
    ([3, 4], [0, 1], [-1, 1], [-1, -2]),           # negative steps on two axes
    ([5], [2], [1], [1]),                          # empty result
    ([0], [10], [2], [3]),                         # step larger than one
])
def test_slice_clamping(starts, ends, axes, steps):
    x = randn(4, 6, 5)
    check_op("Slice", [x, ints(*starts), ints(*ends), ints(*axes), ints(*steps)], consts=(1, 2, 3, 4))


def test_slice_without_axes_and_steps():
    check_op("Slice", [randn(4, 6), ints(1, -3), ints(-1, INT64_MAX)], consts=(1, 2))


def test_pad():
    x = randn(1, 2, 3, 4)
    pads = ints(0, 0, 1, 2, 0, 0, 2, 1)
    check_op("Pad", [x, pads, np.array(1.5, np.float32)], consts=(1, 2))
    check_op("Pad", [x, pads], {"mode": "reflect"}, consts=(1,))
    check_op("Pad", [x, pads], {"mode": "edge"}, consts=(1,))
    check_op("Pad", [x, ints(0, 0, -1, 1, 0, 0, 1, -2)], consts=(1,))  # negative pads crop
    check_op("Pad", [x, ints(1, -1, 2, 0), None, ints(-1, 2)], consts=(1, 3), opset=18)


def test_shape_size_constant_of_shape_range():
    x = randn(2, 3, 4)
    check_op("Shape", [x], out_types=[TensorProto.INT64])
    check_op("Shape", [x], {"start": 1, "end": -1}, out_types=[TensorProto.INT64], opset=15)
    check_op("Size", [x], out_types=[TensorProto.INT64])
    value = numpy_helper.from_array(np.array([7], np.int32), "value")
    check_op("ConstantOfShape", [ints(2, 3)], {"value": value}, consts=(0,), out_types=[TensorProto.INT32])
    check_op("Range", [np.array(1, np.int64), np.array(10, np.int64), np.array(3, np.int64)], consts=(0, 1, 2))
    check_op("Range", [np.array(0.5, np.float32), np.array(-2, np.float32), np.array(-0.3, np.float32)],
             consts=(0, 1, 2))


def test_constant_identity_dropout():
    value = numpy_helper.from_array(randn(2, 3), "v")
    nodes = [helper.make_node("Constant", [], ["c"], value=value),
             helper.make_node("Constant", [], ["f"], value_floats=[1.0, 2.0, 3.0]),
             helper.make_node("Add", ["x", "c"], ["s"]),
             helper.make_node("Mul", ["s", "f"], ["m"]),
             helper.make_node("Dropout", ["m"], ["d", "mask"]),
             helper.make_node("Identity", ["d"], ["y"])]
    model = make_model(nodes, [tensor_info("x", TensorProto.FLOAT, [2, 3])],
                       [tensor_info("y", TensorProto.FLOAT, [2, 3])])
    graph = assert_matches_ort(model, {"x": randn(2, 3)})
    assert graph.op_counts() == {"Add": 1, "Mul": 1}
    # Nodes without names get deterministic names from their op type and index.
    assert [n.name for n in graph.nodes] == ["Add_2", "Mul_3"]
    assert graph.outputs[0].value.name == "m"


def test_dropout_mask_is_all_true():
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop")]
    model = make_model(nodes, [tensor_info("x", TensorProto.FLOAT, [2])],
                       [tensor_info("y", TensorProto.FLOAT, [2]), tensor_info("mask", TensorProto.BOOL, [2])])
    graph = load_onnx(model)
    assert graph.outputs[1].value.data.tolist() == [True, True]


def test_dropout_training_with_a_ratio_is_rejected():
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "r"), numpy_helper.from_array(np.array(True), "t")]
    model = make_model(nodes, [tensor_info("x", TensorProto.FLOAT, [2])], [tensor_info("y", TensorProto.FLOAT, [2])],
                       inits)
    with pytest.raises(UnsupportedOpError, match=r"node 'drop' \(Dropout\): .*training mode .*non-zero ratio"):
        load_onnx(model)


def test_shape_subgraph_folds():
    # y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): a typical exported flatten.
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
             helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
             helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
             helper.make_node("Cast", ["target"], ["target64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "target64"], ["y"], name="flatten")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(ints(0), "axes0"),
             numpy_helper.from_array(ints(-1), "minus1")]
    model = make_model(nodes, [tensor_info("x", TensorProto.FLOAT, [2, 3, 4])],
                       [tensor_info("y", TensorProto.FLOAT, [2, 12])], inits)
    graph = assert_matches_ort(model, {"x": randn(2, 3, 4)})
    assert graph.op_counts() == {"Reshape": 1}
    assert not graph.constants
    assert graph.nodes[0].attrs.shape == (2, 12)
    assert graph.nodes[0].name == "flatten"


# neural-network ops ----------------------------------------------------------------------------

def test_matmul_gemm():
    check_op("MatMul", [randn(2, 3, 4), randn(4, 5)])
    check_op("MatMul", [randn(4), randn(3, 4, 2)])
    check_op("Gemm", [randn(3, 4), randn(5, 4), randn(5)], {"transB": 1, "alpha": 0.5, "beta": 2.0}, consts=(1, 2))
    check_op("Gemm", [randn(4, 3), randn(4, 5)], {"transA": 1})


@pytest.mark.parametrize("out_channels,attrs", [
    (6, {"auto_pad": "SAME_UPPER", "strides": [2, 2], "group": 2}),
    (8, {"auto_pad": "SAME_LOWER", "strides": [2, 1], "group": 4}),
    (6, {"auto_pad": "SAME_UPPER", "strides": [3, 2]}),
    (6, {"auto_pad": "VALID", "dilations": [2, 1]}),
    (6, {"pads": [1, 0, 2, 1], "strides": [1, 2], "dilations": [1, 2], "kernel_shape": [3, 2]}),
])
def test_conv(out_channels, attrs):
    group = attrs.get("group", 1)
    graph = check_op("Conv", [randn(1, 4, 9, 8), randn(out_channels, 4 // group, 3, 2), randn(out_channels)],
                     attrs, consts=(1, 2), rtol=1e-4)
    assert graph.op_counts() == {"Conv": 1}


def test_conv_depthwise_without_bias():
    graph = check_op("Conv", [randn(1, 3, 7, 7), randn(3, 1, 3, 3)], {"group": 3, "pads": [1, 1, 1, 1]},
                     consts=(1,), rtol=1e-4)
    assert graph.nodes[0].attrs.group == 3


def test_pools():
    x = randn(1, 2, 7, 8)
    check_op("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1})
    check_op("MaxPool", [x], {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]})
    check_op("MaxPool", [x], {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]})
    check_op("AveragePool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1})
    check_op("AveragePool", [x], {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 2], "ceil_mode": 1})
    graph = check_op("GlobalAveragePool", [x])
    assert graph.op_counts() == {"ReduceMean": 1}
    check_op("GlobalMaxPool", [x])


def test_maxpool_indices():
    for storage_order in (0, 1):
        node = helper.make_node("MaxPool", ["x"], ["y", "idx"], name="pool", kernel_shape=[2, 2], strides=[2, 1],
                                pads=[0, 1, 1, 0], storage_order=storage_order)
        model = make_model([node], [tensor_info("x", TensorProto.FLOAT, [2, 2, 5, 4])],
                           [tensor_info("y", TensorProto.FLOAT, None), tensor_info("idx", TensorProto.INT64, None)])
        graph = assert_matches_ort(model, {"x": randn(2, 2, 5, 4)})
        assert graph.op_counts() == {"MaxPoolWithIndices": 1}


def test_batch_norm():
    c = 3
    args = [randn(2, c, 4, 5), randn(c), randn(c), randn(c), np.abs(randn(c)) + 0.5]
    check_op("BatchNormalization", args, {"epsilon": 1e-3}, consts=(1, 2, 3, 4))


# reductions and normalizations -------------------------------------------------------------------

def test_reduce_sum_axes_input_vs_attribute():
    x = randn(2, 3, 4)
    graph13 = check_op("ReduceSum", [x, ints(-1, 0)], {"keepdims": 0}, consts=(1,), opset=13)
    graph11 = check_op("ReduceSum", [x], {"axes": [-1, 0], "keepdims": 0}, opset=11)
    assert graph13.nodes[0].attrs == graph11.nodes[0].attrs
    assert graph13.nodes[0].attrs.axes == (0, 2)
    check_op("ReduceSum", [x], opset=13)  # no axes: all
    graph = check_op("ReduceSum", [x, np.zeros(0, np.int64)], {"noop_with_empty_axes": 1}, consts=(1,), opset=13)
    assert not graph.nodes


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceSumSquare", "ReduceLogSumExp"])
def test_reductions_attr_and_input_forms(op):
    x = randn(2, 3, 4)
    check_op(op, [x], {"axes": [1]}, opset=17)
    check_op(op, [x, ints(0, 2)], {"keepdims": 0}, consts=(1,), opset=18)


def test_reduce_log_sum():
    check_op("ReduceLogSum", [np.abs(randn(2, 3)) + 0.1], {"axes": [1]}, opset=13)


def test_arg_reduce():
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
    check_op("ArgMax", [x], {"axis": 1}, out_types=[TensorProto.INT64])
    check_op("ArgMax", [x], {"axis": -1, "select_last_index": 1, "keepdims": 0}, out_types=[TensorProto.INT64])
    check_op("ArgMin", [x], {"axis": 0}, out_types=[TensorProto.INT64])


def test_softmax_opset11_vs_13():
    x = randn(2, 3, 4) * 2
    old = check_op("Softmax", [x], {"axis": 1}, opset=11)  # over axes 1 and 2 together
    assert old.op_counts() == {"Reshape": 2, "Softmax": 1}
    new = check_op("Softmax", [x], {"axis": 1}, opset=13)  # over axis 1 only
    assert new.op_counts() == {"Softmax": 1}
    assert not np.allclose(evaluate(old, {"in0": x})[0], evaluate(new, {"in0": x})[0])
    check_op("Softmax", [x], opset=11)
    check_op("LogSoftmax", [x], {"axis": 0}, opset=12)
    check_op("LogSoftmax", [x], opset=13)


def test_layer_norm():
    x = randn(2, 3, 4)
    check_op("LayerNormalization", [x, randn(4), randn(4)], {"epsilon": 1e-3}, consts=(1, 2))
    check_op("LayerNormalization", [x, randn(3, 4)], {"axis": 1}, consts=(1,))


# recurrent -----------------------------------------------------------------------------------

@pytest.mark.parametrize("direction,linear_before_reset", [("forward", 0), ("reverse", 1), ("bidirectional", 1)])
def test_gru(direction, linear_before_reset):
    seq, batch, inp, hidden = 5, 2, 3, 4
    d = 2 if direction == "bidirectional" else 1
    args = [randn(seq, batch, inp), randn(d, 3 * hidden, inp), randn(d, 3 * hidden, hidden), randn(d, 6 * hidden),
            np.full(batch, seq, np.int32), randn(d, batch, hidden)]
    attrs = {"hidden_size": hidden, "direction": direction, "linear_before_reset": linear_before_reset}
    graph = check_op("GRU", args, attrs, consts=(1, 2, 3, 4), n_outputs=2)
    assert graph.op_counts() == {"GRU": 1}


def test_gru_unsupported_attributes():
    x = tensor_info("x", TensorProto.FLOAT, [2, 1, 3])
    inits = [numpy_helper.from_array(randn(1, 6, 3), "w"), numpy_helper.from_array(randn(1, 6, 2), "r")]
    for attrs, pattern in (({"clip": 1.0}, "clip"), ({"activations": ["Relu", "Tanh"]}, "activations")):
        node = helper.make_node("GRU", ["x", "w", "r"], ["", "h"], name="gru", hidden_size=2, **attrs)
        model = make_model([node], [x], [tensor_info("h", TensorProto.FLOAT, None)], inits)
        with pytest.raises(UnsupportedOpError, match=rf"node 'gru' \(GRU\): .*{pattern}"):
            load_onnx(model)


# model-level behaviour and errors ----------------------------------------------------------------

def _relu_model(path_or_none=None, shape=("N", 3)):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", TensorProto.FLOAT, list(shape))],
                       [tensor_info("y", TensorProto.FLOAT, None)])
    if path_or_none is not None:
        onnx.save(model, path_or_none)
    return model


def test_symbolic_dim_needs_binding():
    model = _relu_model()
    with pytest.raises(EmberError, match=r"input 'x'.*'N' at dimension 0.*input_shapes=\{'x'"):
        load_onnx(model)
    graph = load_onnx(model, input_shapes={"x": [5, 3]})
    assert graph.inputs[0].type.shape == (5, 3)
    with pytest.raises(ModelImportError, match="fixes it to 3"):
        load_onnx(model, input_shapes={"x": [5, 4]})
    with pytest.raises(ModelImportError, match="'y'.*not a model input"):
        load_onnx(model, input_shapes={"x": [5, 3], "y": [1]})


def test_unsupported_ops_are_listed_together():
    nodes = [helper.make_node("Foo", ["x"], ["a"], name="foo1"),
             helper.make_node("Relu", ["a"], ["b"], name="ok"),
             helper.make_node("Bar", ["b"], ["c"], name="bar1"),
             helper.make_node("Foo", ["c"], ["y"], name="foo2")]
    model = make_model(nodes, [tensor_info("x", TensorProto.FLOAT, [2])], [tensor_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(UnsupportedError) as info:
        load_onnx(model)
    assert str(info.value) == "unsupported ONNX ops (opset 17): Foo (nodes: foo1, foo2); Bar (nodes: bar1)"


def test_unknown_op_is_an_unsupported_error():
    """An op Ember does not know is refused as ember.UnsupportedError (not merely as a model
    that cannot be read) naming the node and the op, at the top level and inside a subgraph
    that is inlined at import; it is also a ModelImportError, like every import failure."""
    model = make_model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob")],
                       [tensor_info("x", TensorProto.FLOAT, [2])], [tensor_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ember.UnsupportedError, match=r"Frobnicate \(nodes: frob\)") as info:
        load_onnx(model)
    assert isinstance(info.value, ember.ModelImportError)

    then_branch = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["t"], name="inner")], "then", [],
                                    [tensor_info("t", TensorProto.FLOAT, [2])])
    else_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["e"])], "else", [],
                                    [tensor_info("e", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch)
    model = make_model([node], [tensor_info("x", TensorProto.FLOAT, [2])], [tensor_info("y", TensorProto.FLOAT, [2])],
                       [numpy_helper.from_array(np.array(True), "c")])
    with pytest.raises(ember.UnsupportedError,
                       match=r"node 'branch' \(If\): .*Frobnicate \(nodes: branch/then/inner\)"):
        load_onnx(model)


def test_other_domain_and_opset_range():
    node = helper.make_node("QAttention", ["x"], ["y"], name="g", domain="com.microsoft")  # a contrib op Ember lacks
    model = make_model([node], [tensor_info("x", TensorProto.FLOAT, [2])], [tensor_info("y", TensorProto.FLOAT, [2])])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedError, match=r"com\.microsoft\.QAttention \(nodes: g\)"):
        load_onnx(model)
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")
    model = make_model([node], [tensor_info("x", TensorProto.FLOAT, [2]), tensor_info("s", TensorProto.FLOAT, [2])],
                       [tensor_info("y", TensorProto.FLOAT, [2])], opset=16)
    with pytest.raises(UnsupportedError, match=r"LayerNormalization \(nodes: ln; supported in opset 17\+\)"):
        load_onnx(model)
    assert CONVERTERS["Conv"].supports(11)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", TensorProto.FLOAT, [2])],
                       [tensor_info("y", TensorProto.FLOAT, [2])], opset=28)
    model.opset_import[0].version = 99
    with pytest.raises(UnsupportedOpError, match="opset 99; Ember supports opsets 1 to 28"):
        load_onnx(model)


def test_output_type_mismatch():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", TensorProto.FLOAT, [2])],
                       [tensor_info("y", TensorProto.INT32, [2])])
    with pytest.raises(ModelImportError, match="graph output 'y' is declared int32"):
        load_onnx(model)


@pytest.mark.parametrize("declared, text", [([3], "[3]"), ([2, 1], "[2, 1]"), ([], "[]"), ([0], "[0]")])
def test_declared_output_shape_is_a_hint(declared, text):
    """Exporters declare wrong output shapes (a wrong rank, 0 for unknown): Ember's inference
    wins, with a warning that names both shapes (ONNX Runtime only warns too)."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", TensorProto.FLOAT, [2])],
                       [tensor_info("y", TensorProto.FLOAT, declared)])
    with pytest.warns(EmberWarning, match=re.escape(f"graph output 'y' is declared with shape {text}, but Ember "
                                                    "infers [2]")):
        graph = load_onnx(model)
    assert graph.outputs[0].value.type.shape == (2,)


def test_unknown_output_dims_are_silent():
    """-1 and symbolic dims declare nothing to contradict."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, "M"])
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", TensorProto.FLOAT, [2, 3])], [y])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_onnx(model).outputs[0].value.type.shape == (2, 3)


def test_input_dims_of_minus_one_are_unknown():
    """paddle2onnx writes unknown input dims as -1 (and names them all '?'): binding them is
    no contradiction, and each is a dimension of its own; a real contradiction names both shapes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, -1, "?"])
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [x], [tensor_info("y", TensorProto.FLOAT, None)])
    assert load_onnx(model, input_shapes={"x": [1, 3, 48, 192]}).inputs[0].type.shape == (1, 3, 48, 192)
    with pytest.raises(ModelImportError, match=re.escape("fixes it to 3 (declared shape [1, 3, ?, ?])")):
        load_onnx(model, input_shapes={"x": [1, 4, 48, 192]})
    from ember.frontends.onnx.signature import input_signature
    (signature,) = input_signature(model)
    assert signature.dims == (1, 3, "x[2]", "x[3]")


def test_unsupported_input_type():
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [tensor_info("x", TensorProto.STRING, [2])],
                       [tensor_info("y", TensorProto.STRING, [2])])
    with pytest.raises(UnsupportedOpError, match="input 'x' has element type STRING"):
        load_onnx(model)


def test_bfloat16_initializer():
    data = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor_info("x", TensorProto.BFLOAT16, [3])],
                       [tensor_info("y", TensorProto.BFLOAT16, [3])], [numpy_helper.from_array(data, "w")])
    graph = load_onnx(model)
    assert graph.constants["w"].data.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(graph.constants["w"].data, data)


def test_missing_truncated_and_non_onnx_files(tmp_path):
    with pytest.raises(ModelImportError, match="does not exist"):
        load_onnx(tmp_path / "missing.onnx")
    with pytest.raises(ModelImportError, match="is not a file"):
        load_onnx(tmp_path)
    full = tmp_path / "full.onnx"
    model = _relu_model(shape=(2, 3))
    model.graph.initializer.append(numpy_helper.from_array(randn(64), "unused"))
    onnx.save(model, full)
    blob = full.read_bytes()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ModelImportError, match=r"truncated\.onnx.*(truncated|not an ONNX model)"):
        load_onnx(truncated)
    text = tmp_path / "notes.onnx"
    text.write_text("this is not an onnx model, just some text\n" * 20)
    with pytest.raises(ModelImportError, match=r"notes\.onnx.*(truncated|not an ONNX model)"):
        load_onnx(text)
    assert load_onnx(full).op_counts() == {"Relu": 1}


def _save_external(tmp_path: Path) -> tuple[Path, np.ndarray]:
    weight = randn(32, 32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor_info("x", TensorProto.FLOAT, [1, 32])],
                       [tensor_info("y", TensorProto.FLOAT, [1, 32])], [numpy_helper.from_array(weight, "w")])
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=0)
    return path, weight


def _set_location(path: Path, location: str) -> None:
    model = onnx.load(path, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(model, path)


def test_external_data_inside_folder(tmp_path):
    path, weight = _save_external(tmp_path)
    graph = load_onnx(path)
    np.testing.assert_array_equal(graph.constants["w"].data, weight)
    x = randn(1, 32)
    np.testing.assert_allclose(evaluate(graph, {"x": x})[0], x @ weight, rtol=1e-5)
    with pytest.raises(ModelImportError, match="folder is unknown"):
        load_onnx(onnx.load(path, load_external_data=False))
    assert load_onnx(onnx.load(path)).op_counts() == {"MatMul": 1}


def test_external_data_escaping_folder_is_rejected(tmp_path):
    path, _ = _save_external(tmp_path)
    (tmp_path / "evil.bin").write_bytes((path.parent / "w.bin").read_bytes())
    _set_location(path, "../evil.bin")
    with pytest.raises(ModelImportError, match=r"'\.\./evil\.bin' escapes the model's folder"):
        load_onnx(path)
    _set_location(path, str(tmp_path / "evil.bin"))
    with pytest.raises(ModelImportError, match="absolute path"):
        load_onnx(path)
    (path.parent / "link.bin").symlink_to(tmp_path / "evil.bin")
    _set_location(path, "link.bin")
    with pytest.raises(ModelImportError, match="escapes the model's folder"):
        load_onnx(path)


def test_external_data_bad_length(tmp_path):
    path, _ = _save_external(tmp_path)
    model = onnx.load(path, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "length":
            entry.value = str(10**6)
    onnx.save(model, path)
    with pytest.raises(ModelImportError, match="do not fit"):
        load_onnx(path)


_FLIPPER = """
import os, shutil, sys, time
inside, outside, real = sys.argv[1:]
end = time.monotonic() + 60
tmp = inside + ".tmp"
while time.monotonic() < end:
    os.symlink(outside, tmp)
    os.replace(tmp, inside)
    shutil.copyfile(real, tmp)
    os.replace(tmp, inside)
"""


def test_external_data_symlink_race_never_reads_outside(tmp_path):
    """A file that flips between a regular file inside the folder and a symlink to a file
    outside it while models load: every load reads the inside bytes or refuses cleanly (the
    check is made on the opened descriptor, so no window lets the outside file through)."""
    path, weight = _save_external(tmp_path)
    inside = path.parent / "w.bin"
    secret = np.full_like(weight, 7.0)
    (tmp_path / "secret.bin").write_bytes(secret.tobytes())
    (path.parent / "real.bin").write_bytes(inside.read_bytes())
    # The flipping runs in another process, truly in parallel with the loads (a thread would
    # only run when the loader releases the GIL and would rarely hit the window).
    flipper = subprocess.Popen([sys.executable, "-c", _FLIPPER, str(inside), str(tmp_path / "secret.bin"),
                                str(path.parent / "real.bin")])
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        for _ in range(400):
            try:
                data = load_onnx(path).constants["w"].data
            except ModelImportError as err:
                assert "escapes the model's folder" in str(err) or "does not exist" in str(err), err
                outcomes["refused"] += 1
                continue
            np.testing.assert_array_equal(data, weight)
            outcomes["read"] += 1
    finally:
        flipper.kill()
        flipper.wait()
    assert outcomes["refused"] > 0 and outcomes["read"] > 0, outcomes


def test_external_data_that_is_not_a_regular_file(tmp_path):
    """A FIFO must not hang the import, a folder must not raise a raw OSError."""
    path, _ = _save_external(tmp_path)
    (path.parent / "w.bin").unlink()
    os.mkfifo(path.parent / "w.bin")
    with pytest.raises(ModelImportError, match="'w.bin' is not a regular file"):
        load_onnx(path)
    (path.parent / "w.bin").unlink()
    (path.parent / "w.bin").mkdir()
    with pytest.raises(ModelImportError, match="w.bin"):
        load_onnx(path)


def test_external_data_over_the_tensor_limit_is_not_read(tmp_path, monkeypatch):
    path, _ = _save_external(tmp_path)
    monkeypatch.setenv("EMBER_MAX_TENSOR_BYTES", "1000")
    with pytest.raises(ResourceLimitError, match=r"tensor 'w'.*needs 4096 bytes, more than the tensor size limit "
                                                 r"of 1000 bytes"):
        load_onnx(path)


# the shared reference models ---------------------------------------------------------------------

def _shared_models() -> list[Path]:
    return sorted(SHARED_MODELS.glob("*.onnx")) if SHARED_MODELS.is_dir() else []


@pytest.mark.parametrize("path", _shared_models() or [None], ids=lambda p: p.stem if p else "absent")
def test_shared_models(path):
    if path is None:
        pytest.skip(f"no shared reference models at {SHARED_MODELS}")
    graph = load_onnx(path)
    ref = np.load(path.with_name(path.stem + ".ref.npz"))
    outputs = evaluate(graph, {p.name: ref[f"in_{p.name}"] for p in graph.inputs})
    for i, actual in enumerate(outputs):
        expected = ref[f"out_{i}"]
        assert actual.shape == expected.shape
        scale = max(1.0, float(np.max(np.abs(expected))))
        assert float(np.max(np.abs(actual.astype(np.float64) - expected))) <= 1e-4 * scale
