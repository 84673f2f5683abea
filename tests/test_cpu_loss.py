"""The loss ops lowered for the cpu backend (lowering/loss.py) against the interpreter, which
runs their NumPy references whole: SoftmaxCrossEntropyLoss (both outputs) and
NegativeLogLikelihoodLoss with every reduction, with and without class weights,
ignore_index (in range, negative, past the classes), i32 and i64 targets, [N, C] and
N-D inputs, size-1 dims and float64; at 1 and 2 threads and in an AVX2 build. Also:
lowering keeps the numbers on the graph and leaves primitives only, and a target out of
range fails cleanly at run time."""
from __future__ import annotations

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.graph import verify_graph
from ember.lowering import lower_graph
from ember.ops.loss import LossAttrs
from ember.support.errors import EmberError
from tests.helpers import evaluate_graph, single_node_graph

F32, F64 = np.float32, np.float64
BACKENDS = {"t1": {"num_threads": 1}, "t2": {"num_threads": 2}, "avx2": {"num_threads": 1, "march": "x86-64-v3"}}
OPS = ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")


def _operands(shape, ignore_index=None, weight=False, itype=np.int64, dtype=F32, seed=0) -> list:
    """scores [N, C, d...], targets [N, d...] in [0, C) with some set to ignore_index, weight?"""
    rng = np.random.default_rng(seed)
    classes = shape[1]
    target_shape = (shape[0],) + tuple(shape[2:])
    target = rng.integers(0, classes, target_shape)
    if ignore_index is not None and target.size:
        target.reshape(-1)[::3] = ignore_index
    arrays = [rng.standard_normal(shape).astype(dtype), target.astype(itype)]
    arrays.append(rng.random(classes).astype(dtype) + 0.1 if weight else None)
    return arrays


def check(op: str, arrays: list, attrs, backend: str = "t1", constant: tuple[int, ...] = ()) -> dict:
    """cpu (lowered) against the interpreter (the reference); returns the interpreter's results."""
    from ember.backends.cpu import CpuBackend

    graph, feeds = single_node_graph(op, arrays, attrs, constant=constant)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs, constant=constant)
    actual = compile_graph(graph, CpuBackend(**BACKENDS[backend])).run(feeds)
    tol = 1e-5 if arrays[0].dtype == F32 else 1e-12
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        np.testing.assert_allclose(actual[name], value, rtol=tol, atol=tol, err_msg=name)
    return expected


# name: (input shape, operand options, attribute options)
FORMS = {
    "nc_mean": ((5, 4), {}, {}),
    "nc_sum_weight_i32": ((6, 3), {"weight": True, "itype": np.int32}, {"reduction": "sum"}),
    "ncd_none_ii": ((2, 5, 3), {"ignore_index": 1}, {"reduction": "none", "ignore_index": 1}),
    "ncd_mean_weight_negative_ii": ((3, 4, 5), {"ignore_index": -1, "weight": True},
                                    {"reduction": "mean", "ignore_index": -1}),
    "ncd1d2_mean_ii_no_weight": ((2, 3, 4, 2), {"ignore_index": 2}, {"ignore_index": 2}),
    "ncd1d2d3_sum_high_ii": ((2, 3, 2, 3, 2), {"ignore_index": 10, "weight": True},
                             {"reduction": "sum", "ignore_index": 10}),
    "ii_never_hit": ((4, 3), {"weight": True}, {"reduction": "mean", "ignore_index": -7}),
    "one_sample_one_class": ((1, 1), {}, {"reduction": "mean"}),
    "empty_batch_mean": ((0, 3), {"weight": True}, {"reduction": "mean", "ignore_index": 1}),
    "empty_spatial_sum": ((2, 3, 0), {"ignore_index": 1}, {"reduction": "sum", "ignore_index": 1}),
    "empty_spatial_none": ((2, 3, 0), {}, {"reduction": "none"}),
    "size_one_dims_none_f64": ((1, 3, 1, 2), {"dtype": F64, "weight": True, "ignore_index": 0},
                               {"reduction": "none", "ignore_index": 0}),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_loss_matches_interpreter(op, form):
    shape, operands, attrs = FORMS[form]
    check(op, _operands(shape, **operands), LossAttrs(**attrs))


@pytest.mark.parametrize("backend", ["t2", "avx2"])
@pytest.mark.parametrize("op", OPS)
def test_loss_matches_interpreter_threads_and_avx2(op, backend):
    arrays = _operands((4, 5, 6, 3), ignore_index=-100, weight=True, seed=3)
    check(op, arrays, LossAttrs("mean", -100), backend)


def test_loss_weights_as_constant_matches_interpreter():
    arrays = _operands((3, 4, 2), ignore_index=3, weight=True)
    check("SoftmaxCrossEntropyLoss", arrays, LossAttrs("mean", 3), constant=(2,))


def test_every_element_ignored_matches_interpreter():
    """The mean of no weight is 0/0: NaN, as in the reference."""
    arrays = _operands((2, 3), weight=True)
    arrays[1][:] = 1
    expected = check("NegativeLogLikelihoodLoss", arrays, LossAttrs("mean", 1))
    assert np.isnan(expected["y0"])


@pytest.mark.parametrize("bad", [3, -2])
@pytest.mark.parametrize("op", OPS)
def test_target_out_of_range_fails_cleanly(op, bad):
    """A target outside [0, C) that is not ignore_index is an error (negative ones too: they
    must not wrap around to count from the last class)."""
    from ember.backends.cpu import CpuBackend

    arrays = _operands((3, 3), weight=True)
    arrays[1][1] = bad
    graph, feeds = single_node_graph(op, arrays, LossAttrs("sum", -1))
    compiled = compile_graph(graph, CpuBackend(num_threads=1))
    with pytest.raises(EmberError, match="index out of range"):
        compiled.run(feeds)


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")  # the empty mean: 0 / 0
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_lowering_keeps_the_numbers(op, form):
    shape, operands, attrs = FORMS[form]
    graph, feeds = single_node_graph(op, _operands(shape, **operands), LossAttrs(**attrs))
    before = evaluate_graph(graph, feeds)
    assert lower_graph(graph)
    verify_graph(graph)
    assert all(node.opdef.primitive for node in graph.nodes)
    after = evaluate_graph(graph, feeds)
    for name, value in before.items():
        np.testing.assert_allclose(after[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
