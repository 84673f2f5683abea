"""The CI slice of the mutation fuzzer (bench/fuzz_models.py; the long mode runs 10,000+ cases
per backend from there): a fixed seed, a few hundred mutated models on each backend, each in
a time-limited worker process. None may crash, hang, raise a non-Ember exception, raise an
"internal error", or give results that differ from ONNX Runtime's where both run it (unless
Ember's match ONNX's reference implementation, the tie-break).

Plus a property test (hypothesis) over the attributes of a few window, axis and data-movement
ops: whatever the attribute values, Ember either refuses with a plain EmberError or computes
what ONNX Runtime computes."""
from __future__ import annotations

import math
import warnings

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ember
from bench.fuzz_compare import compare
from bench.fuzz_models import FINDINGS, fuzz
from ember.support.errors import EmberError

ort = pytest.importorskip("onnxruntime")

SLICE_SEED = 20  # issue 20; the long runs use other seeds
SLICE = {"interpreter": 2000, "cpu": 800}


@pytest.mark.parametrize("backend", sorted(SLICE))
def test_fuzz_slice_has_no_findings(backend, tmp_path):
    records = fuzz(SLICE[backend], backend, seed=SLICE_SEED, jobs=2, timeout=60.0, out=tmp_path)
    assert len(records) == SLICE[backend]
    findings = [r for r in records if r.status in FINDINGS]
    report = "\n".join(f"case {r.index} ({r.seed}; {'; '.join(r.mutations)}): {r.status}: {r.detail[:400]}"
                       for r in findings)
    assert not findings, (f"{len(findings)} findings; reproduce one with `python bench/fuzz_models.py --seed "
                          f"{SLICE_SEED} --start I --cases 1 --backend {backend}`:\n{report}")
    # The slice reaches past import: some cases compile, run and match ONNX Runtime.
    assert sum(r.status == "match" for r in records) >= SLICE[backend] // 10


# ---------------------------------------------------------------------------------------------
# Attribute properties


def _single_node_model(op, inputs, attrs, initializers=(), opset=18):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(inputs["x"].shape))
    node = helper.make_node(op, ["x", *[t.name for t in initializers]], ["y"])
    for name, value in attrs.items():  # lists typed explicitly: an empty one has no type to infer
        kind = onnx.AttributeProto.INTS if isinstance(value, list) else None
        node.attribute.append(helper.make_attribute(name, value, attr_type=kind))
    graph = helper.make_graph([node], "prop", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ember_or_refusal(model, feeds):
    """Ember's outputs, or None when it refuses with a plain EmberError (anything else fails)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compiled = ember.compile(model, backend="interpreter")
            outputs = compiled.run(feeds)
        except EmberError as err:
            assert "internal error" not in str(err) and "an Ember bug" not in str(err), str(err)
            return None
    return [outputs[name] for name in compiled.output_names]


def _ort_or_refusal(model, feeds):
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    except Exception:  # noqa: BLE001  (ONNX Runtime refuses)
        return None


def _check(model, feeds):
    mine = _ember_or_refusal(model, feeds)
    if mine is None:
        return
    theirs = _ort_or_refusal(model, feeds)
    if theirs is not None:
        problem = compare(mine, theirs, 1e-4, 1e-5)
        assert problem is None, problem


small_ints = st.integers(min_value=-3, max_value=4)
wild_ints = st.one_of(small_ints, st.sampled_from([2**31 - 1, -2**31, 2**62, -2**63, 1 << 40]))
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
                    database=None)


@PROPERTY
@given(op=st.sampled_from(["MaxPool", "AveragePool", "LpPool"]),
       kernel=st.lists(small_ints, min_size=1, max_size=3), strides=st.none() | st.lists(small_ints, max_size=3),
       pads=st.none() | st.lists(small_ints, max_size=5), dilations=st.none() | st.lists(small_ints, max_size=3),
       ceil_mode=st.none() | st.integers(0, 1),
       auto_pad=st.none() | st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "bogus"]))
def test_pool_attributes(op, kernel, strides, pads, dilations, ceil_mode, auto_pad):
    attrs = {"kernel_shape": kernel}
    for name, value in (("strides", strides), ("pads", pads), ("dilations", dilations), ("ceil_mode", ceil_mode),
                        ("auto_pad", auto_pad)):
        if value is not None and not (op != "MaxPool" and name == "dilations" and op == "LpPool"):
            attrs[name] = value
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 6)).astype(np.float32)
    _check(_single_node_model(op, {"x": x}, attrs), {"x": x})


@PROPERTY
@given(op=st.sampled_from(["Softmax", "LogSoftmax", "Hardmax", "Flatten", "ArgMax", "ArgMin", "CumSum", "Gather",
                           "Concat", "Split"]),
       axis=wild_ints, keepdims=st.none() | st.integers(-1, 2), rank=st.integers(0, 4))
def test_axis_attributes(op, axis, keepdims, rank):
    shape = (2, 3, 1, 4)[:rank]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    attrs = {"axis": axis}
    initializers = []
    if op in ("ArgMax", "ArgMin") and keepdims is not None:
        attrs["keepdims"] = keepdims
    if op == "CumSum":
        attrs = {}
        initializers = [numpy_helper.from_array(np.array(axis, np.int64), "axis")]
    if op == "Gather":
        initializers = [numpy_helper.from_array(np.array([0, 1], np.int64), "indices")]
    model = _single_node_model(op, {"x": x}, attrs, initializers)
    if op in ("ArgMax", "ArgMin"):
        model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    _check(model, {"x": x})


@PROPERTY
@given(perm=st.lists(wild_ints, max_size=5), rank=st.integers(0, 4))
def test_transpose_perm(perm, rank):
    x = np.random.default_rng(2).standard_normal((2, 3, 1, 4)[:rank]).astype(np.float32)
    _check(_single_node_model("Transpose", {"x": x}, {"perm": perm}), {"x": x})


@PROPERTY
@given(starts=st.lists(wild_ints, min_size=1, max_size=3), ends=st.lists(wild_ints, min_size=1, max_size=3),
       axes=st.none() | st.lists(small_ints, min_size=1, max_size=3),
       steps=st.none() | st.lists(st.one_of(small_ints, st.just(-2**63)), min_size=1, max_size=3))
def test_slice_bounds(starts, ends, axes, steps):
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    inits = [numpy_helper.from_array(np.array(starts, np.int64), "starts"),
             numpy_helper.from_array(np.array(ends, np.int64), "ends")]
    if axes is not None or steps is not None:
        inits.append(numpy_helper.from_array(np.array(axes if axes is not None else range(len(starts)), np.int64),
                                             "axes"))
    if steps is not None:
        inits.append(numpy_helper.from_array(np.array(steps, np.int64), "steps"))
    _check(_single_node_model("Slice", {"x": x}, {}, inits), {"x": x})


@PROPERTY
@given(pads=st.lists(wild_ints, max_size=8), mode=st.sampled_from(["constant", "reflect", "edge", "wrap", "x"]),
       value=st.sampled_from([0.0, 1.5, math.nan, math.inf]))
def test_pad_amounts(pads, mode, value):
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads"),
             numpy_helper.from_array(np.array(value, np.float32), "value")]
    _check(_single_node_model("Pad", {"x": x}, {"mode": mode}, inits), {"x": x})


@PROPERTY
@given(op=st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp", "ReduceProd"]),
       axes=st.none() | st.lists(wild_ints, max_size=4), keepdims=st.none() | st.integers(-1, 2),
       noop=st.none() | st.integers(0, 1))
def test_reduce_axes(op, axes, keepdims, noop):
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    attrs = {k: v for k, v in (("keepdims", keepdims), ("noop_with_empty_axes", noop)) if v is not None}
    inits = [] if axes is None else [numpy_helper.from_array(np.array(axes, np.int64), "axes")]
    _check(_single_node_model(op, {"x": x}, attrs, inits), {"x": x})
