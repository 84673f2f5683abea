"""TopK, DFT, STFT, CumProd, TensorScatter and Det on the cpu backend (codegen/kernels/
sorting.py, spectral.py, indexing.py, linalg.py) against the interpreter: random shapes,
negative and middle axes, size-0 and size-1 dims, ties and NaN (TopK), padded, cut, odd,
prime and smooth lengths (DFT), every attribute form, at 1 and 2 threads and in an AVX2
build; plus a clean run-time failure for TensorScatter's out-of-range writes."""
from __future__ import annotations

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.ops.indexing import CumulativeAttrs, TensorScatterAttrs, TopKAttrs
from ember.ops.spectral import DFTAttrs, STFTAttrs
from ember.support.errors import EmberError
from tests.helpers import single_node_graph

F32, F64 = np.float32, np.float64
BACKENDS = {"t1": {"num_threads": 1}, "t2": {"num_threads": 2}, "avx2": {"num_threads": 1, "march": "x86-64-v3"}}


def _rand(shape, dtype=F32, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -50), min(info.max, 50), shape, endpoint=True).astype(dtype)


def _cpu(graph, backend: str):
    from ember.backends.cpu import CpuBackend

    return compile_graph(graph, CpuBackend(**BACKENDS[backend]))


def check(op: str, arrays: list, attrs, backend: str = "t1", tol: float = 0.0, parallel: bool = False) -> None:
    """cpu against the interpreter: exact unless `tol` (relative to each result's largest
    magnitude); `parallel`: the kernel must have been split across threads (at t2)."""
    graph, feeds = single_node_graph(op, arrays, attrs)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs)
    compiled = _cpu(graph, backend)
    if parallel and backend == "t2":
        assert "omp parallel" in compiled.executable.source
    actual = compiled.run(feeds)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        if tol:
            scale = float(np.max(np.abs(value), initial=0.0)) or 1.0
            np.testing.assert_allclose(actual[name], value, rtol=tol, atol=tol * scale, err_msg=name)
        else:
            np.testing.assert_array_equal(actual[name], value, err_msg=name)


# TopK -------------------------------------------------------------------------------------


def _ties(shape, dtype, seed=0, nan=False) -> np.ndarray:
    """Few distinct values (many ties), and NaNs among them when `nan`."""
    x = np.random.default_rng(seed).integers(-3, 4, shape).astype(dtype)
    if nan:
        x[x == 3] = np.nan
    return x


TOPK = {
    "last_axis": lambda: ([_rand((4, 9))], TopKAttrs(3)),
    "middle_axis_smallest": lambda: ([_rand((3, 11, 5), seed=1)], TopKAttrs(4, axis=1, largest=False)),
    "negative_axis": lambda: ([_rand((2, 7, 3), F64, seed=2)], TopKAttrs(7, axis=-2)),
    "k_is_size_unsorted": lambda: ([_rand((5, 6), seed=3)], TopKAttrs(6, sorted=False)),
    "k_zero": lambda: ([_rand((3, 5))], TopKAttrs(0)),
    "k_one_size_one": lambda: ([_rand((1, 1, 4))], TopKAttrs(1, axis=1)),
    "empty_rows": lambda: ([_rand((0, 5))], TopKAttrs(2)),
    "ties_largest": lambda: ([_ties((6, 40), F32)], TopKAttrs(13)),
    "ties_smallest_inner": lambda: ([_ties((3, 25, 4), F32, seed=1)], TopKAttrs(9, axis=1, largest=False)),
    "nan_largest": lambda: ([_ties((5, 30), F32, seed=2, nan=True)], TopKAttrs(12)),
    "nan_smallest": lambda: ([_ties((5, 30), F64, seed=3, nan=True)], TopKAttrs(30, largest=False)),
    "int64_ties": lambda: ([_ties((4, 17), np.int64, seed=4)], TopKAttrs(5)),
    "uint8_smallest": lambda: ([_rand((3, 20), np.uint8, seed=5)], TopKAttrs(6, largest=False)),
    "int32_axis0": lambda: ([_rand((15, 3), np.int32, seed=6)], TopKAttrs(4, axis=0)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", TOPK)
def test_topk_matches_interpreter(case, backend):
    arrays, attrs = TOPK[case]()
    check("TopK", arrays, attrs, backend)


@pytest.mark.parametrize("backend", ["t1", "t2"])
def test_topk_many_rows_matches_interpreter(backend):
    check("TopK", [_ties((300, 200, 2), F32, nan=True)], TopKAttrs(20, axis=1), backend, parallel=True)


# CumProd (CumSum shares the kernel) -------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis, shape, dtype", [
    (0, (7,), F32), (-1, (3, 5), F64), (1, (2, 4, 3), np.int32), (-3, (3, 1, 2), np.int64),
    (0, (0, 3), F32), (1, (2, 1), np.uint8)])
def test_cumprod_matches_interpreter(axis, shape, dtype, exclusive, reverse, backend):
    x = _rand(shape, dtype)
    if np.dtype(dtype).kind == "f":
        x = (1 + 0.3 * x).astype(dtype)  # products that neither vanish nor explode
    check("CumProd", [x], CumulativeAttrs(axis, exclusive, reverse), backend, tol=1e-6 if dtype == F32 else 0.0)


def test_cumprod_integers_wrap_like_numpy():
    x = np.full((40,), 7, np.int32)
    check("CumProd", [x], CumulativeAttrs(0))


@pytest.mark.parametrize("exclusive, reverse", [(False, False), (True, True)])
def test_cumsum_still_matches_interpreter(exclusive, reverse):
    check("CumSum", [_rand((3, 6), np.int16)], CumulativeAttrs(1, exclusive, reverse))


# TensorScatter ----------------------------------------------------------------------------

TENSOR_SCATTER = {
    "linear": lambda: ([_rand((2, 3, 6, 4)), _rand((2, 3, 2, 4), seed=1), np.array([1, 4])], TensorScatterAttrs()),
    "linear_no_indices": lambda: ([_rand((2, 5, 3), F64), _rand((2, 5, 3), F64, seed=1), None],
                                  TensorScatterAttrs(axis=1)),
    "circular_wraps": lambda: ([_rand((3, 2, 5, 2)), _rand((3, 2, 4, 2), seed=1), np.array([3, -7, 9], np.int32)],
                               TensorScatterAttrs(axis=2, mode="circular")),
    "last_axis": lambda: ([_rand((2, 3, 8), np.int64), _rand((2, 3, 3), np.int64, seed=1), np.array([0, 5])],
                          TensorScatterAttrs(axis=-1)),
    "empty_update": lambda: ([_rand((2, 4, 3)), _rand((2, 0, 3), seed=1), np.array([4, 0])], TensorScatterAttrs(1)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", TENSOR_SCATTER)
def test_tensor_scatter_matches_interpreter(case, backend):
    arrays, attrs = TENSOR_SCATTER[case]()
    check("TensorScatter", arrays, attrs, backend)


@pytest.mark.parametrize("start", [-1, 5])
def test_tensor_scatter_linear_out_of_range_fails_cleanly(start):
    graph, feeds = single_node_graph("TensorScatter", [_rand((2, 6, 3)), _rand((2, 2, 3)), np.array([0, start])],
                                     TensorScatterAttrs(axis=1))
    compiled = _cpu(graph, "t1")
    with pytest.raises(EmberError, match=r"node 'node' \(TensorScatter\): write_indices place 2 rows outside"):
        compiled.run(feeds)


# Det --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, dtype", [((4, 4), F32), ((2, 3, 5, 5), F64), ((1, 1), F32), ((3, 0, 0), F64),
                                           ((0, 3, 3), F32), ((7, 2, 2), F32)])
def test_det_matches_interpreter(shape, dtype, backend):
    check("Det", [_rand(shape, dtype)], None, backend, tol=1e-5 if dtype == F32 else 1e-12)


@pytest.mark.parametrize("backend", ["t1", "t2"])
def test_det_singular_and_many_matches_interpreter(backend):
    x = _rand((8000, 6, 6), F64)
    x[::3, 2] = x[::3, 4]  # exactly singular (after pivoting): +0
    x[1::3, :, 1] = 0.0  # a zero column: LU skips it
    check("Det", [x], None, backend, tol=1e-11, parallel=True)


# DFT, STFT --------------------------------------------------------------------------------

DFT = {
    "real_forward": lambda: ([_rand((2, 8, 1))], DFTAttrs(1, 8)),
    "complex_forward_axis0": lambda: ([_rand((12, 3, 2), F64)], DFTAttrs(0, 12)),
    "onesided_odd": lambda: ([_rand((3, 9, 1))], DFTAttrs(1, 9, onesided=True)),
    "onesided_complex_padded": lambda: ([_rand((2, 5, 2))], DFTAttrs(1, 10, onesided=True)),
    "cut_prime": lambda: ([_rand((2, 20, 2), F64)], DFTAttrs(1, 13)),
    "inverse_smooth": lambda: ([_rand((2, 3, 60, 2))], DFTAttrs(2, 60, inverse=True)),
    "inverse_real_padded_middle": lambda: ([_rand((2, 7, 3, 1), F64)], DFTAttrs(1, 16, inverse=True)),
    "irfft_even": lambda: ([_rand((2, 5, 2))], DFTAttrs(1, 8, inverse=True, onesided=True)),
    "irfft_odd_cut": lambda: ([_rand((3, 9, 2), F64)], DFTAttrs(1, 7, inverse=True, onesided=True)),
    "irfft_real_padded": lambda: ([_rand((2, 3, 1))], DFTAttrs(1, 10, inverse=True, onesided=True)),
    "length_one": lambda: ([_rand((3, 4, 2))], DFTAttrs(1, 1)),
    "mixed_radix": lambda: ([_rand((2, 90, 2), F64)], DFTAttrs(1, 90)),
    "empty_batch": lambda: ([_rand((0, 4, 2))], DFTAttrs(1, 4)),
    "bluestein_prime": lambda: ([_rand((3, 127, 2), F64)], DFTAttrs(1, 127)),
    "bluestein_inverse_cut": lambda: ([_rand((2, 150, 2))], DFTAttrs(1, 127, inverse=True)),
    "bluestein_irfft": lambda: ([_rand((2, 70, 2), F64)], DFTAttrs(1, 131, inverse=True, onesided=True)),
    "bluestein_rfft_axis0": lambda: ([_rand((254, 2, 1), F64)], DFTAttrs(0, 254, onesided=True)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", DFT)
def test_dft_matches_interpreter(case, backend):
    arrays, attrs = DFT[case]()
    check("DFT", arrays, attrs, backend, tol=1e-5 if arrays[0].dtype == F32 else 1e-12)


@pytest.mark.parametrize("backend", ["t1", "t2"])
@pytest.mark.parametrize("n", [1024, 1009])
def test_dft_long_signals_matches_interpreter(n, backend):
    """A power of two and a prime (Bluestein), many signals split over threads."""
    check("DFT", [_rand((64, n, 2), F64)], DFTAttrs(1, n), backend, tol=1e-11, parallel=True)


STFT = {
    "real_window": lambda: ([_rand((2, 32, 1)), np.hanning(8).astype(F32)], STFTAttrs(4, 8)),
    "real_no_window": lambda: ([_rand((1, 30, 1), F64), None], STFTAttrs(5, 9)),
    "complex_two_sided": lambda: ([_rand((2, 20, 2)), _rand((6,), seed=1)], STFTAttrs(3, 6, onesided=False)),
    "one_frame": lambda: ([_rand((3, 7, 1), F64), _rand((7,), F64, seed=1)], STFTAttrs(2, 7)),
    "bluestein_frames": lambda: ([_rand((2, 300, 2), F64), _rand((127,), F64, seed=1)], STFTAttrs(50, 127)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", STFT)
def test_stft_matches_interpreter(case, backend):
    arrays, attrs = STFT[case]()
    check("STFT", arrays, attrs, backend, tol=1e-5 if arrays[0].dtype == F32 else 1e-12)
