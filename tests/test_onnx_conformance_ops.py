"""Converters added for ONNX conformance, against ONNX Runtime on cases the node suite does
not cover (batch-major recurrences with sequence lengths, ConvTranspose output_shape,
per-axis quantization, control flow unrolling), and their refusals."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.frontends.onnx import load_onnx
from ember.support.errors import ModelImportError
from tests.test_onnx_frontend import assert_matches_ort, check_op, evaluate, make_model, randn, run_ort, tensor_info


@pytest.mark.parametrize("op,gates", [("RNN", 1), ("LSTM", 4), ("GRU", 3)])
def test_recurrent_batch_major(op, gates):
    # ONNX Runtime has no layout=1, so compare with its layout=0 on transposed data.
    batch, seq, inp, hidden = 2, 4, 3, 5
    x = randn(batch, seq, inp)
    weights = [randn(2, gates * hidden, inp), randn(2, gates * hidden, hidden), randn(2, 2 * gates * hidden)]
    attrs = {"hidden_size": hidden, "direction": "bidirectional"}

    def model(layout, x_shape):
        inits = [numpy_helper.from_array(w, n) for w, n in zip(weights, "wrb", strict=True)]
        node = helper.make_node(op, ["x", "w", "r", "b"], ["y", "h"], layout=layout, **attrs)
        return make_model([node], [tensor_info("x", TensorProto.FLOAT, list(x_shape))],
                          [tensor_info("y", TensorProto.FLOAT, None), tensor_info("h", TensorProto.FLOAT, None)], inits)

    y0, h0 = run_ort(model(0, (seq, batch, inp)), {"x": x.transpose(1, 0, 2)})
    graph = load_onnx(model(1, x.shape))
    assert graph.op_counts()[op] == 1 and graph.op_counts()["Transpose"] == 3
    y1, h1 = evaluate(graph, {"x": x})
    np.testing.assert_allclose(y1, y0.transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h1, h0.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)


def test_lstm_sequence_lengths_and_peepholes():
    seq, batch, inp, hidden = 4, 3, 2, 3
    args = [randn(seq, batch, inp), randn(1, 4 * hidden, inp), randn(1, 4 * hidden, hidden), randn(1, 8 * hidden),
            np.array([4, 1, 3], np.int32), randn(1, batch, hidden), randn(1, batch, hidden), randn(1, 3 * hidden)]
    check_op("LSTM", args, {"hidden_size": hidden, "direction": "reverse"}, consts=(1, 2, 3, 4, 7), n_outputs=3)


def test_rnn_activation_with_alpha():
    args = [randn(3, 2, 4), randn(1, 5, 4), randn(1, 5, 5)]
    check_op("RNN", args, {"hidden_size": 5, "activations": ["LeakyRelu"], "activation_alpha": [0.2]},
             consts=(1, 2), n_outputs=2)


def test_conv_transpose_output_shape_and_groups():
    x = randn(1, 4, 3, 3)
    check_op("ConvTranspose", [x, randn(4, 2, 3, 3)], {"strides": [3, 2], "output_shape": [10, 8]}, consts=(1,))
    check_op("ConvTranspose", [x, randn(4, 3, 2, 2), randn(6)],
             {"group": 2, "strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 1], "dilations": [2, 1]},
             consts=(1, 2))
    check_op("ConvTranspose", [x, randn(4, 1, 3, 3)], {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, consts=(1,))


def test_quantize_per_axis_and_dequantize():
    x = randn(2, 3, 4)
    scale = np.array([0.02, 0.05, 0.1], np.float32)
    zero = np.array([0, 10, -3], np.int8)
    check_op("QuantizeLinear", [x, scale, zero], {"axis": 1}, consts=(1, 2), out_types=[TensorProto.INT8], opset=13)
    q = np.random.default_rng(1).integers(0, 255, (2, 3, 4)).astype(np.uint8)
    check_op("DequantizeLinear", [q, scale, np.array([0, 10, 200], np.uint8)], {"axis": 1}, consts=(1, 2),
             out_types=[TensorProto.FLOAT], opset=13)


def test_resize_sizes_with_aspect_policy():
    x = randn(1, 2, 4, 6)
    sizes = np.array([5, 5], np.int64)
    attrs = {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}
    check_op("Resize", [x, None, None, sizes], attrs, consts=(3,), opset=18)


def test_if_on_a_constant_inlines_one_branch():
    then_graph = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                                   [tensor_info("t", TensorProto.FLOAT, [3])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [tensor_info("e", TensorProto.FLOAT, [3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph, name="if0")
    for flag in (True, False):
        model = make_model([node], [tensor_info("x", TensorProto.FLOAT, [3])],
                           [tensor_info("y", TensorProto.FLOAT, [3])], [numpy_helper.from_array(np.array(flag), "c")])
        graph = assert_matches_ort(model, {"x": randn(3)})
        assert graph.op_counts() == {"Relu" if flag else "Neg": 1}


def _loop_model(trip_count_is_input: bool):
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"])],
        "body", [tensor_info("i", TensorProto.INT64, []), tensor_info("cond_in", TensorProto.BOOL, []),
                 tensor_info("acc_in", TensorProto.FLOAT, [2])],
        [tensor_info("cond_out", TensorProto.BOOL, []), tensor_info("acc_out", TensorProto.FLOAT, [2]),
         tensor_info("sq", TensorProto.FLOAT, [2])])
    node = helper.make_node("Loop", ["M", "", "acc0"], ["acc", "squares"], body=body, name="loop0")
    inputs = [tensor_info("x", TensorProto.FLOAT, [2]), tensor_info("acc0", TensorProto.FLOAT, [2])]
    inits = []
    if trip_count_is_input:
        inputs.append(tensor_info("M", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(3, np.int64), "M"))
    return make_model([node], inputs, [tensor_info("acc", TensorProto.FLOAT, [2]),
                                       tensor_info("squares", TensorProto.FLOAT, [3, 2])], inits)


def test_loop_with_a_constant_trip_count_unrolls():
    graph = assert_matches_ort(_loop_model(False), {"x": randn(2), "acc0": randn(2)})
    assert graph.op_counts()["Add"] == 3


def test_loop_with_a_run_time_trip_count_is_refused():
    with pytest.raises(ModelImportError, match=r"input 0 \('M'.* of node 'loop0' \(Loop\) must be a constant"):
        load_onnx(_loop_model(True))


def test_scan_reverse_directions():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["scan_out"])],
        "body", [tensor_info("s_in", TensorProto.FLOAT, [3]), tensor_info("row", TensorProto.FLOAT, [3])],
        [tensor_info("s_out", TensorProto.FLOAT, [3]), tensor_info("scan_out", TensorProto.FLOAT, [3])])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1],
                            scan_output_directions=[1])
    model = make_model([node],
                       [tensor_info("s0", TensorProto.FLOAT, [3]), tensor_info("xs", TensorProto.FLOAT, [3, 4])],
                       [tensor_info("s", TensorProto.FLOAT, [3]), tensor_info("ys", TensorProto.FLOAT, [3, 4])])
    assert_matches_ort(model, {"s0": randn(3), "xs": randn(3, 4)})


def test_einsum_topk_and_scatter():
    check_op("Einsum", [randn(2, 3, 4), randn(4, 5)], {"equation": "...ij,jk->...ik"})
    check_op("TopK", [randn(3, 7), np.array([3], np.int64)], {"axis": 1, "largest": 0}, consts=(1,),
             out_types=[TensorProto.FLOAT, TensorProto.INT64], n_outputs=2)
    check_op("ScatterND", [randn(4, 3), np.array([[1], [3]], np.int64), randn(2, 3)], {"reduction": "add"}, opset=16)
