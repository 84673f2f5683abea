"""The indexing kernels on the cpu backend (codegen/kernels/indexing.py) against the
interpreter: every mode and attribute, negative indices, each scatter reduction, integer and
float element types, and out-of-range indices failing cleanly at run time."""
from __future__ import annotations

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.graph import Graph
from ember.ops.indexing import (
    BlockAttrs,
    CumulativeAttrs,
    GatherNDAttrs,
    OneHotAttrs,
    ReverseSequenceAttrs,
    ScatterAttrs,
    ScatterNDAttrs,
    TriluAttrs,
)
from ember.ops.tensor import AxisAttrs
from ember.support.errors import EmberError
from tests.helpers import single_node_graph

F32, F64 = np.float32, np.float64


def _data(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)


def _cpu(graph: Graph):
    from ember.backends.cpu import CpuBackend

    return compile_graph(graph, CpuBackend(num_threads=1))


def check(op: str, arrays: list[np.ndarray], attrs) -> None:
    graph, feeds = single_node_graph(op, arrays, attrs)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs)
    actual = _cpu(graph).run(feeds)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        np.testing.assert_array_equal(actual[name], value, err_msg=name)  # exact: data movement and sums


def fails(op: str, arrays: list[np.ndarray], attrs) -> None:
    graph, feeds = single_node_graph(op, arrays, attrs)
    compiled = _cpu(graph)
    with pytest.raises(EmberError, match=rf"node 'node' \({op}\): index out of range"):
        compiled.run(feeds)


# DepthToSpace, SpaceToDepth ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("b, dtype", [(2, F32), (3, np.int64), (2, np.uint8), (1, F64), (2, np.bool_)])
def test_depth_to_space(mode, b, dtype):
    check("DepthToSpace", [_data((2, 2 * b * b, 3, 2), dtype)], BlockAttrs(b, mode))


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("b, dtype", [(2, F32), (3, np.int16), (1, np.int32)])
def test_space_to_depth(mode, b, dtype):
    check("SpaceToDepth", [_data((2, 3, 2 * b, 3 * b), dtype)], BlockAttrs(b, mode))


# Gathers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype, itype", [(F32, np.int64), (np.int32, np.int32), (F64, np.int64), (np.bool_, np.int32)])
def test_gather_elements(axis, dtype, itype):
    data = _data((4, 5, 3), dtype)
    shape = [3, 4, 2]  # smaller than data off the axis
    shape[axis] = 6
    size = data.shape[axis]
    indices = np.random.default_rng(1).integers(-size, size, shape).astype(itype)
    check("GatherElements", [data, indices], AxisAttrs(axis))


@pytest.mark.parametrize("bad", [3, -4])
def test_gather_elements_out_of_range(bad):
    indices = np.array([[0, 1], [bad, 0]], np.int64)
    fails("GatherElements", [_data((3, 2), F32), indices], AxisAttrs(0))


@pytest.mark.parametrize("batch_dims, index_shape", [(0, (4, 1)), (0, (2, 3, 2)), (0, (5, 3)), (1, (2, 3, 1)),
                                                     (1, (2, 2)), (2, (2, 3, 2, 1))])
@pytest.mark.parametrize("dtype, itype", [(F32, np.int64), (np.int64, np.int32), (np.uint8, np.int64)])
def test_gather_nd(batch_dims, index_shape, dtype, itype):
    data = _data((2, 3, 4, 5), dtype)
    depth = index_shape[-1]
    sizes = np.array(data.shape[batch_dims:batch_dims + depth])
    raw = np.random.default_rng(2).integers(0, 1 << 30, index_shape)
    indices = (raw % (2 * sizes) - sizes).astype(itype)  # in [-size, size) per component
    check("GatherND", [data, indices], GatherNDAttrs(batch_dims))


@pytest.mark.parametrize("bad", [[1, 4], [-3, 0], [0, -5]])
def test_gather_nd_out_of_range(bad):
    indices = np.array([[0, 0], bad], np.int64)
    fails("GatherND", [_data((2, 4, 3), F32), indices], GatherNDAttrs(0))


# Scatters ---------------------------------------------------------------------------------

REDUCTIONS = ["none", "add", "mul", "max", "min"]
SCATTER_TYPES = [F32, F64, np.int32, np.int64, np.int8, np.uint16, np.bool_]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", SCATTER_TYPES)
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(reduction, dtype, axis):
    data = _data((4, 5), dtype)
    if np.dtype(dtype).kind == "f":
        data[1, 2] = np.nan  # max and min propagate NaN like np.maximum/np.minimum
    shape = [3, 3]
    size = data.shape[axis]
    # Duplicates and negative indices: repeated targets reduce in order (none: the last wins).
    indices = np.random.default_rng(3).integers(-size, size, shape).astype(np.int64)
    updates = _data(shape, dtype, seed=4)
    check("ScatterElements", [data, indices, updates], ScatterAttrs(axis, reduction))


def test_scatter_elements_int8_wraps():
    data = np.array([120, -120, 5], np.int8)
    indices = np.array([0, 0, 1, 1, 2], np.int32)
    updates = np.array([100, 7, -100, -9, 3], np.int8)
    for reduction in ("add", "mul"):
        check("ScatterElements", [data, indices, updates], ScatterAttrs(0, reduction))


@pytest.mark.parametrize("bad", [4, -5])
def test_scatter_elements_out_of_range(bad):
    indices = np.array([[0, 1], [2, bad]], np.int64)
    fails("ScatterElements", [_data((4, 2), F32), indices, _data((2, 2), F32)], ScatterAttrs(0, "add"))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", SCATTER_TYPES)
@pytest.mark.parametrize("index_shape", [(3, 1), (2, 2, 2), (4, 3)])
def test_scatter_nd(reduction, dtype, index_shape):
    data = _data((4, 3, 2), dtype)
    depth = index_shape[-1]
    sizes = np.array(data.shape[:depth])
    raw = np.random.default_rng(5).integers(0, 1 << 30, index_shape)
    indices = (raw % (2 * sizes) - sizes).astype(np.int64)
    updates = _data(index_shape[:-1] + data.shape[depth:], dtype, seed=6)
    check("ScatterND", [data, indices, updates], ScatterNDAttrs(reduction))


def test_scatter_nd_duplicates_and_int32_indices():
    data = _data((5, 3), np.int64)
    indices = np.array([[1], [-4], [3], [1]], np.int32)
    for reduction in REDUCTIONS:
        check("ScatterND", [data, indices, _data((4, 3), np.int64, seed=7)], ScatterNDAttrs(reduction))


@pytest.mark.parametrize("bad", [[0, 3], [-5, 0], [4, 1]])
def test_scatter_nd_out_of_range(bad):
    indices = np.array([[1, 1], bad], np.int64)
    fails("ScatterND", [_data((4, 3), F32), indices, _data((2,), F32)], ScatterNDAttrs("none"))


# Trilu, CumSum ----------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("k", [-7, -2, 0, 1, 3, 9])
@pytest.mark.parametrize("shape, dtype", [((4, 6), F32), ((2, 3, 5, 4), np.int64), ((3, 1, 3), np.bool_)])
def test_trilu(upper, k, shape, dtype):
    check("Trilu", [_data(shape, dtype)], TriluAttrs(upper, k))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [F32, F64, np.int32, np.int64])
def test_cumsum(exclusive, reverse, axis, dtype):
    check("CumSum", [_data((3, 4, 5), dtype)], CumulativeAttrs(axis, exclusive, reverse))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_cumsum_wraps_in_the_element_type(dtype):
    data = np.full((2, 9), 100, dtype)
    check("CumSum", [data], CumulativeAttrs(1, False, False))
    check("CumSum", [data], CumulativeAttrs(0, True, True))


# OneHot, ReverseSequence ------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("itype, vtype", [(np.int64, F32), (np.int32, np.int64), (np.uint8, np.bool_),
                                          (F32, F32), (F64, np.int32)])
def test_one_hot(axis, itype, vtype):
    # Negative indices count from the end; out-of-range ones (7, -6) give all-off rows.
    raw = np.array([[0, 3, -1, 7, -5, 4], [2, -6, 1, 0, 4, -2]])
    if np.dtype(itype).kind == "f":
        indices = (raw + np.where(raw >= 0, 0.7, -0.6)).astype(itype)  # truncates toward zero
    else:
        indices = (raw % 256 if np.dtype(itype).kind == "u" else raw).astype(itype)
    values = np.array([2, 9], vtype) if vtype is not np.bool_ else np.array([False, True])
    check("OneHot", [indices, values], OneHotAttrs(5, axis))


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
@pytest.mark.parametrize("dtype, ltype", [(F32, np.int64), (np.int16, np.int32), (F64, np.int64)])
def test_reverse_sequence(batch_axis, time_axis, dtype, ltype):
    shape = [0, 0, 3]
    shape[batch_axis], shape[time_axis] = 5, 4
    lens = np.array([4, 1, 0, 2, 3], ltype)
    check("ReverseSequence", [_data(tuple(shape), dtype), lens], ReverseSequenceAttrs(batch_axis, time_axis))


def test_reverse_sequence_clamps_lengths():
    lens = np.array([9, -2, 3], np.int64)  # clamped to [0, 4], as in the reference
    check("ReverseSequence", [_data((3, 4), F32), lens], ReverseSequenceAttrs(0, 1))
