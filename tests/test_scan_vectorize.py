"""Scan whose iterations are independent (states pass through) runs as one batched body
(frontends/onnx/converters/vectorize.py); every other Scan unrolls. Both against ONNX Runtime
on the interpreter and cpu, and the graph shows which happened."""
from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontends.onnx import load_onnx

ort = pytest.importorskip("onnxruntime")
F = TensorProto.FLOAT


def _info(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _scan_model(body_nodes, body_inputs, body_outputs, scan_inputs, outputs, initializers=(), **scan_attrs):
    body = helper.make_graph(body_nodes, "body", body_inputs, body_outputs)
    node = helper.make_node("Scan", [i.name for i in scan_inputs], [o.name for o in outputs], body=body,
                            **scan_attrs)
    graph = helper.make_graph([node], "scan", [i for i in scan_inputs if i.name not in
                                               {t.name for t in initializers}], outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, feeds, rtol=1e-5):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    for backend in ("interpreter", "cpu"):
        compiled = ember.compile(model, backend=backend)
        actual = compiled.run(feeds)
        for name, e in zip(compiled.output_names, expected, strict=True):
            np.testing.assert_allclose(actual[name], e, rtol=rtol, atol=1e-5, err_msg=f"{backend}: {name}")


def _distance_body():
    """Distances of every query row (the state, passed through) to one scanned row."""
    nodes = [helper.make_node("Identity", ["q_in"], ["q_out"]),
             helper.make_node("Sub", ["q_in", "row"], ["diff"]),
             helper.make_node("Mul", ["diff", "diff"], ["sq"]),
             helper.make_node("ReduceSum", ["sq", "axes"], ["d"], keepdims=0),
             helper.make_node("Sqrt", ["d"], ["dist"])]
    inputs = [_info("q_in", [5, 8]), _info("row", [8])]
    outputs = [_info("q_out", [5, 8]), _info("dist", [5])]
    return nodes, inputs, outputs


@pytest.mark.parametrize("constant_rows", [False, True])
@pytest.mark.parametrize("directions", [(0, 0, 1), (1, 1, 0)])
def test_independent_iterations_run_as_one_batched_body(constant_rows, directions):
    rng = np.random.default_rng(0)
    nodes, inputs, outputs = _distance_body()
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    body_nodes = [helper.make_node("Constant", [], ["axes"], value=axes), *nodes]
    rows = rng.standard_normal((8, 40)).astype(np.float32)  # scanned along axis 1
    in_dir, out_dir, out_axis = directions
    inits = [numpy_helper.from_array(rows, "rows")] if constant_rows else []
    model = _scan_model(body_nodes, inputs, outputs, [_info("q", [5, 8]), _info("rows", [8, 40])],
                        [_info("q_final", [5, 8]), _info("dists", None)], inits, num_scan_inputs=1,
                        scan_input_axes=[1], scan_input_directions=[in_dir], scan_output_directions=[out_dir],
                        scan_output_axes=[out_axis])
    graph = load_onnx(model)
    assert graph.op_counts().get("Sub") == 1 and graph.op_counts().get("ReduceSum") == 1  # not unrolled
    feeds = {"q": rng.standard_normal((5, 8)).astype(np.float32)}
    if not constant_rows:
        feeds["rows"] = rows
    _check(model, feeds)


def test_a_carried_state_unrolls():
    """A running sum depends on the previous iteration: no batching, one copy per step."""
    nodes = [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
             helper.make_node("Identity", ["acc_out"], ["seen"])]
    model = _scan_model(nodes, [_info("acc_in", [3]), _info("x", [3])], [_info("acc_out", [3]), _info("seen", [3])],
                        [_info("acc", [3]), _info("xs", [6, 3])], [_info("total", [3]), _info("partial", [6, 3])],
                        num_scan_inputs=1)
    assert load_onnx(model).op_counts().get("Add") == 6
    rng = np.random.default_rng(1)
    _check(model, {"acc": rng.standard_normal(3).astype(np.float32),
                   "xs": rng.standard_normal((6, 3)).astype(np.float32)})


def test_a_body_op_without_a_batching_rule_unrolls():
    """MatMul has no batching rule here: the scan unrolls and still computes the same."""
    nodes = [helper.make_node("Identity", ["w_in"], ["w_out"]),
             helper.make_node("Unsqueeze", ["x", "zero"], ["row"]),
             helper.make_node("MatMul", ["row", "w_in"], ["y"])]
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    body_nodes = [helper.make_node("Constant", [], ["zero"], value=zero), *nodes]
    model = _scan_model(body_nodes, [_info("w_in", [4, 2]), _info("x", [4])],
                        [_info("w_out", [4, 2]), _info("y", [1, 2])],
                        [_info("w", [4, 2]), _info("xs", [5, 4])], [_info("w_final", [4, 2]), _info("ys", [5, 1, 2])],
                        num_scan_inputs=1)
    assert load_onnx(model).op_counts().get("MatMul") == 5
    rng = np.random.default_rng(2)
    _check(model, {"w": rng.standard_normal((4, 2)).astype(np.float32),
                   "xs": rng.standard_normal((5, 4)).astype(np.float32)})


def test_nearest_neighbours_export_compiles_fast_and_matches():
    """scikit-learn's k-nearest-neighbours export scans its 1,500 training rows; it used to
    unroll into 6,000 nodes and take tens of seconds to compile."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.datasets import load_digits
    from sklearn.neighbors import KNeighborsClassifier

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    clf = KNeighborsClassifier(3).fit(x[:1500], y[:1500])
    model = skl2onnx.to_onnx(clf, x[:1], options={id(clf): {"zipmap": False}}, target_opset=17)
    queries = x[1500:1520]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    labels, probabilities = session.run(None, {"X": queries})
    for backend in ("interpreter", "cpu"):
        start = time.perf_counter()
        compiled = ember.compile(model, backend=backend, input_shapes={"X": queries.shape})
        seconds = time.perf_counter() - start
        assert seconds < 30, f"{backend}: compiled in {seconds:.1f} s"  # generous: a shared machine
        assert compiled.stats["ops"]["imported"].get("ReduceSumSquare", 0) <= 1
        out = compiled.run({"X": queries})
        np.testing.assert_array_equal(out[compiled.output_names[0]], labels)
        np.testing.assert_allclose(out[compiled.output_names[1]], probabilities, atol=1e-6)
