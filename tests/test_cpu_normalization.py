"""The primitive normalization kernels on the cpu backend (codegen/kernels/normalization.py):
InstanceNormalization, GroupNormalization, MeanVarianceNormalization, LpNormalization,
RMSNormalization, LRN and Hardmax against the interpreter, in float32 and float64, over
shapes and attributes, with inputs at run time or constant, rows split across threads, and
edge values (constant rows, large magnitudes, zero rows, ties, NaN)."""
from __future__ import annotations

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.graph import Graph
from ember.lir.text import print_program
from ember.ops.normalization import (
    AxesAttrs,
    EpsilonAttrs,
    GroupNormAttrs,
    HardmaxAttrs,
    LpNormAttrs,
    LRNAttrs,
    RMSNormAttrs,
)
from ember.support.errors import UnsupportedError
from tests.helpers import relative_error, single_node_graph

F32, F64 = np.float32, np.float64
TOLERANCE = {np.dtype(F32): 1e-6, np.dtype(F64): 1e-12}  # both round double statistics once


def _data(shape, dtype=F32, seed=0, scale=1.0, offset=0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale + offset).astype(dtype)


def _cpu(graph: Graph, threads: int = 2):
    from ember.backends.cpu import CpuBackend

    programs = []
    compiled = compile_graph(graph, CpuBackend(num_threads=threads),
                             observer=lambda stage, artifact: programs.append(artifact) if stage == "lir" else None)
    return compiled, programs[0]


def check(op: str, arrays: list[np.ndarray], attrs, constant: tuple[int, ...] = (), threads: int = 2):
    """Runs `op` on cpu and the interpreter; returns the cpu program's LIR text."""
    graph, feeds = single_node_graph(op, arrays, attrs, constant)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs, constant)
    compiled, program = _cpu(graph, threads)
    actual = compiled.run(feeds)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        assert np.array_equal(np.isnan(actual[name]), np.isnan(value)), name
        finite = ~np.isnan(value)
        assert relative_error(actual[name][finite], value[finite]) <= TOLERANCE[value.dtype], name
    return print_program(program)


def _kernel_line(lir: str, kernel: str) -> str:
    lines = [line for line in lir.splitlines() if f"kernel {kernel}" in line]
    assert len(lines) == 1, lir
    return lines[0]


# InstanceNormalization, GroupNormalization ------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape", [(1, 1, 7), (2, 3, 5, 4), (2, 4, 3, 2, 2), (3, 2, 1, 1)])
def test_instance_norm(shape, dtype):
    c = shape[1]
    lir = check("InstanceNormalization", [_data(shape, dtype), _data(c, dtype, 1), _data(c, dtype, 2)],
                EpsilonAttrs(1e-3))
    assert "threads=1" in _kernel_line(lir, "instance_norm_rows")


def test_instance_norm_constant_params_mixed_widths_and_edge_rows():
    x = _data((2, 3, 6, 5), F32, scale=1e4, offset=3e5)  # large magnitudes, small spread
    x[0, 1] = 7.25  # a constant row: variance 0, the result is the bias
    x[1, 2] = -2e30
    check("InstanceNormalization", [x, _data(3, F64, 1), _data(3, F32, 2)], EpsilonAttrs(1e-5), constant=(1, 2))


def test_instance_norm_splits_rows_across_threads():
    x = _data((2, 16, 48, 48))
    lir = check("InstanceNormalization", [x, _data(16, seed=1), _data(16, seed=2)], EpsilonAttrs(1e-5))
    assert "threads=2" in _kernel_line(lir, "instance_norm_rows")


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape, groups", [((2, 6, 4), 3), ((2, 6, 4), 1), ((2, 6, 4), 6), ((1, 8, 3, 5), 2),
                                           ((3, 4, 2, 2, 3), 4)])
def test_group_norm(shape, groups, dtype):
    c = shape[1]
    check("GroupNormalization", [_data(shape, dtype), _data(c, dtype, 1), _data(c, dtype, 2)],
          GroupNormAttrs(groups, 1e-2), constant=(1, 2))


def test_group_norm_edge_rows_and_threads():
    x = _data((4, 32, 32, 32), scale=100.0, offset=-1e6)
    x[2, 8:16] = 3.0  # one whole group constant
    lir = check("GroupNormalization", [x, _data(32, seed=1), _data(32, seed=2)], GroupNormAttrs(4))
    assert "threads=2" in _kernel_line(lir, "group_norm_rows")


# MeanVarianceNormalization ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape, axes", [((2, 3, 4, 4), (0, 2, 3)), ((2, 3, 4, 4), (1,)), ((2, 3, 4, 4), (2, 3)),
                                         ((2, 3, 4, 4), (0, 1, 2, 3)), ((3, 5, 2), (0, 2)), ((3, 5, 2), (-1,)),
                                         ((6,), (0,))])
def test_mvn(shape, axes, dtype):
    check("MeanVarianceNormalization", [_data(shape, dtype)], AxesAttrs(axes))


def test_mvn_edge_values_and_threads():
    x = _data((4, 8, 64, 64), scale=10.0)
    x[:, 3] = 1024.0  # constant over the reduced axes: std 0, the result 0
    x[:, 5] *= 1e6
    lir = check("MeanVarianceNormalization", [x], AxesAttrs((0, 2, 3)))
    assert "threads=2" in _kernel_line(lir, "mvn_rows")


# LpNormalization ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape, axis", [((3, 6), 1), ((3, 6), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((5,), 0)])
def test_lp_norm(shape, axis, p, dtype):
    check("LpNormalization", [_data(shape, dtype)], LpNormAttrs(axis, p))


@pytest.mark.parametrize("p", [1, 2])
def test_lp_norm_zero_rows_large_values_and_threads(p):
    x = _data((256, 512), scale=1e18)  # squares beyond float32's range: the norm is in double
    x[3] = 0.0
    x[7, 1:] = 0.0
    lir = check("LpNormalization", [x], LpNormAttrs(-1, p))
    assert "threads=2" in _kernel_line(lir, "lp_norm_rows")


# RMSNormalization ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape, axis, scale_shape", [
    ((2, 5, 16), -1, (16,)),
    ((2, 5, 16), 1, (5, 16)),
    ((2, 5, 16), 1, (16,)),           # broadcast over the normalized axes
    ((2, 5, 16), 1, (5, 1)),
    ((2, 5, 16), 0, (1,)),
    ((2, 5, 16), -1, (2, 5, 16)),     # a scale per element, outer axes included
    ((2, 3, 4, 5), 2, (3, 1, 5)),     # broadcast over outer and normalized axes
    ((2, 3, 4, 5), 3, (2, 1, 1, 5)),
])
def test_rms_norm(shape, axis, scale_shape, dtype):
    check("RMSNormalization", [_data(shape, dtype), _data(scale_shape, dtype, 1)], RMSNormAttrs(axis, 1e-3))


def test_rms_norm_constant_scale_edge_rows_and_threads():
    x = _data((64, 8, 256), scale=1e20)
    x[5] = 0.0  # all zero: rms = sqrt(epsilon)
    x[6] = -3.5
    scale = _data((8, 1), F64, 1)
    lir = check("RMSNormalization", [x, scale], RMSNormAttrs(1, 1e-6), constant=(1,))
    assert "threads=2" in _kernel_line(lir, "rms_norm_rows")


# LRN ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape, attrs", [
    ((1, 5, 3, 3), LRNAttrs(3)),
    ((2, 5, 3, 3), LRNAttrs(1, 1e-2, 0.5, 2.0)),
    ((2, 4, 3, 2), LRNAttrs(4, 1e-3, 0.75, 1.0)),  # even size: one more channel after than before
    ((1, 3, 7), LRNAttrs(7, 0.5, 1.0, 0.5)),        # window wider than the channels
    ((1, 6, 2, 2, 2), LRNAttrs(5, 2e-4, 0.6, 1.5)),
])
def test_lrn(shape, attrs, dtype):
    check("LRN", [_data(shape, dtype, scale=3.0)], attrs)


def test_lrn_large_values_and_threads():
    x = _data((2, 64, 32, 32), scale=1e3)
    x[1, 10] = 0.0
    lir = check("LRN", [x], LRNAttrs(5, 1e-4, 0.75, 2.0))
    assert "threads=2" in _kernel_line(lir, "lrn_rows")


# Hardmax --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape, axis", [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), 0),
                                         ((7,), 0)])
def test_hardmax(shape, axis, dtype):
    x = np.round(_data(shape, dtype) * 2) / 2  # ties: the first maximum wins
    check("Hardmax", [x], HardmaxAttrs(axis))


def test_hardmax_ties_infinities_nan_and_threads():
    x = np.round(_data((128, 1024), scale=4.0))
    x[0] = 5.0
    x[1, :] = -np.inf
    x[2, 10] = np.inf
    x[2, 20] = np.inf
    x[3, 40] = np.nan  # NaN counts as the maximum (np.argmax)
    x[4, 0] = np.nan
    x[4, 2] = np.nan
    lir = check("Hardmax", [x.astype(F32)], HardmaxAttrs(-1))
    assert "threads=2" in _kernel_line(lir, "hardmax_rows")


# refusals -----------------------------------------------------------------------------------


def test_non_float_hardmax_is_refused():
    graph, _ = single_node_graph("Hardmax", [np.arange(6, dtype=np.int32).reshape(2, 3)], HardmaxAttrs(1))
    with pytest.raises(UnsupportedError, match="Hardmax kernel runs float32 and float64"):
        _cpu(graph)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((3, 7), -1), ((2, 16), 1), ((5, 37), -1), ((2, 4, 128), -1), ((2, 9, 5), 1)])
def test_softmax_rows_lanes_tails_and_strided(op, shape, axis):
    """Contiguous rows go through lane-wise peak and sum (whole blocks of 16 and a tail, or
    rows shorter than a block); a non-last axis keeps the strided loop. Large offsets, a
    -inf (a huge negative for LogSoftmax, whose -inf output the error measure cannot take)
    and a NaN row check the peak."""
    from ember.ops.normalization import SoftmaxAttrs

    x = _data(shape, scale=30.0, offset=50.0)
    x.reshape(-1, shape[-1])[0, -1] = -np.inf if op == "Softmax" else -1e30
    x.reshape(-1, shape[-1])[-1, shape[-1] // 2] = np.nan
    lir = check(op, [x], SoftmaxAttrs(axis=axis))
    assert "softmax_rows" in lir
