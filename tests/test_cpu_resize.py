"""Resize, GridSample and AffineGrid on the cpu backend (codegen/kernels/resize.py) against the
interpreter: every mode, coordinate transformation, nearest rounding, cubic coefficient,
exclude_outside, antialias and tf_crop_and_resize extrapolation, over float and integer
element types, resized axes anywhere (2-D planes, 1-D, 3-D volumes, channel and batch axes),
edge shapes (size-1 and size-0 dims, odd sizes, extreme scales), at 1 and 2 threads; which
variant each form selects; clean refusals; and ONNX Runtime on a few ONNX models (scales,
sizes with keep_aspect_ratio_policy and axes, antialias, tf_crop_and_resize). The tests named
*matches_interpreter* also run under the sanitizers (tests/test_cpu_sanitized.py).

Several nodes share one graph (one C build per test): each case is one output."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.graph import Graph
from ember.ops.resize import NEAREST_MODES, TRANSFORMS, ResizeAttrs
from ember.ops.sampling import AffineGridAttrs, GridSampleAttrs
from ember.support.errors import EmberError, UnsupportedError
from ember.types import DType, TensorType
from tests.helpers import single_node_graph

F32, F64 = np.float32, np.float64
THREADS = {"t1": 1, "t2": 2}
TOLERANCE = {np.dtype(F32): 2e-5, np.dtype(F64): 1e-12}


def _data(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)


def _cpu(threads: int, march: str | None = None):
    from ember.backends.cpu import CpuBackend

    return CpuBackend(num_threads=threads, **({"march": march} if march else {}))


def run_nodes(op: str, inputs: list[np.ndarray], cases: dict[str, tuple[list[int], object]], threads: int = 1,
              march: str | None = None, repeat: int = 1):
    """One graph: for each case name, node `op` over the inputs listed (indices) with the
    attributes given; returns (interpreter results, cpu results, the generated C). With
    `repeat`, the cpu runs that many times and must give the same results every time (threads
    that shared scratch would race)."""

    def build() -> tuple[Graph, dict[str, np.ndarray]]:
        g = Graph(op)
        values = [g.add_input(f"x{i}", TensorType(DType.from_numpy(a.dtype), a.shape)) for i, a in enumerate(inputs)]
        outs = []
        for name, (operands, attrs) in cases.items():
            (result,) = g.add_node(op, [values[i] for i in operands], attrs, name=name)
            outs.append((name, result))
        g.set_outputs(outs)
        return g, {f"x{i}": a for i, a in enumerate(inputs)}

    graph, feeds = build()
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = build()
    compiled = compile_graph(graph, _cpu(threads, march))
    actual = compiled.run(feeds)
    for _ in range(repeat - 1):
        again = compiled.run(feeds)
        for name, value in actual.items():
            np.testing.assert_array_equal(again[name], value, err_msg=f"{name}: differs between runs")
    return expected, actual, compiled.executable.source


def compare(expected: dict, actual: dict, exact: bool = False) -> None:
    for name, value in expected.items():
        got = actual[name]
        assert got.dtype == value.dtype and got.shape == value.shape, name
        if exact or value.dtype.kind in "iu":
            np.testing.assert_array_equal(got, value, err_msg=name)
        else:
            tol = TOLERANCE[value.dtype]
            scale = float(np.max(np.abs(value[np.isfinite(value)]), initial=0.0)) or 1.0
            np.testing.assert_allclose(got, value, rtol=tol, atol=tol * scale, err_msg=name, equal_nan=True)


def resize_attrs(shape, scales, mode="nearest", roi=(), **kw) -> ResizeAttrs:
    """As the frontend resolves `scales`: sizes = floor(scale * size)."""
    sizes = tuple(int(math.floor(s * d)) for s, d in zip(scales, shape, strict=True))
    return ResizeAttrs(sizes, tuple(float(s) for s in scales), mode, roi=tuple(roi), **kw)


def _roi(rank: int, axes=None) -> tuple[float, ...]:
    """A crop box that reaches outside the input on some axes (so extrapolation is used)."""
    axes = range(rank) if axes is None else axes
    starts, ends = [0.0] * rank, [1.0] * rank
    for k, a in enumerate(axes):
        starts[a], ends[a] = (-0.2, 0.9) if k % 2 == 0 else (0.3, 1.25)
    return tuple(starts + ends)


def transform_kwargs(transform: str, rank: int, axes) -> dict:
    kw: dict = {"coordinate_transformation_mode": transform}
    if transform == "tf_crop_and_resize":
        kw.update(roi=_roi(rank, axes), extrapolation_value=-3.5)
    return kw


# Resize: every mode over 2-D planes -------------------------------------------------------

# "mixed" (up along H, down along W) runs under the sanitizers too; the others only here.
PLANE_GEOMETRIES = {
    "up": ((2, 3, 5, 7), (1, 1, 2.3, 1.6)),
    "down": ((1, 2, 11, 9), (1, 1, 0.5, 0.37)),
    "mixed": ((2, 2, 6, 13), (1, 1, 3.0, 0.7)),
}


@pytest.mark.parametrize("dtype", [F32, np.uint8, np.int64, np.int32])
def test_resize_nearest_matches_interpreter(dtype):
    check_nearest(dtype, "mixed")


@pytest.mark.parametrize("geometry", ["up", "down"])
@pytest.mark.parametrize("dtype", [F32, np.uint8, np.int64, np.int32])
def test_resize_nearest_geometries(dtype, geometry):
    check_nearest(dtype, geometry)


@pytest.mark.parametrize("dtype", [F32, np.int8])
def test_resize_nearest_integer_factors_matches_interpreter(dtype):
    """The row patterns of integer scales: each input repeated (with a partial last group),
    every f-th input, a plain copy."""
    shape = (1, 2, 4, 6)
    cases = {}
    for transform in ("asymmetric", "half_pixel", "align_corners"):
        for w_scale in (2.0, 3.0, 0.5, 1.0):
            cases[f"{transform}_{w_scale}"] = ([0], resize_attrs(shape, (1, 1, 2.0, w_scale), "nearest",
                                                                 coordinate_transformation_mode=transform))
        # sizes one short of a whole group (a size rounded by keep_aspect_ratio_policy)
        cases[f"{transform}_tail"] = ([0], ResizeAttrs((1, 2, 8, 11), (1.0, 1.0, 2.0, 2.0), "nearest", transform))
    expected, actual, source = run_nodes("Resize", [_data(shape, dtype)], cases)
    compare(expected, actual, exact=True)
    assert "yr[i * 2 + 1] = v;" in source and "j * 2]" in source


def check_nearest(dtype, geometry: str) -> None:
    shape, scales = PLANE_GEOMETRIES[geometry]
    cases = {}
    for transform, nearest in itertools.product(TRANSFORMS, NEAREST_MODES):
        kw = transform_kwargs(transform, len(shape), (2, 3))
        cases[f"{transform}_{nearest}"] = ([0], resize_attrs(shape, scales, "nearest", nearest_mode=nearest, **kw))
    cases["exclude_outside_floor"] = ([0], resize_attrs(shape, scales, "nearest", nearest_mode="floor",
                                                        exclude_outside=True))
    expected, actual, source = run_nodes("Resize", [_data(shape, dtype)], cases)
    compare(expected, actual, exact=True)
    assert "[resize_nearest_gather]" in source and "[resize_separable]" not in source


@pytest.mark.parametrize("dtype", [F32, F64, np.uint8, np.int32])
def test_resize_linear_matches_interpreter(dtype):
    check_linear(dtype, "mixed")


@pytest.mark.parametrize("geometry", ["up", "down"])
@pytest.mark.parametrize("dtype", [F32, F64, np.uint8, np.int32])
def test_resize_linear_geometries(dtype, geometry):
    check_linear(dtype, geometry)


def check_linear(dtype, geometry: str) -> None:
    shape, scales = PLANE_GEOMETRIES[geometry]
    cases = {}
    for transform, antialias, exclude in itertools.product(TRANSFORMS, (False, True), (False, True)):
        kw = transform_kwargs(transform, len(shape), (2, 3))
        cases[f"{transform}_aa{int(antialias)}_ex{int(exclude)}"] = (
            [0], resize_attrs(shape, scales, "linear", antialias=antialias, exclude_outside=exclude, **kw))
    expected, actual, source = run_nodes("Resize", [_data(shape, dtype)], cases)
    compare(expected, actual)
    if dtype in (F32, F64):
        assert "[resize_bilinear_2d]" in source
        # downsampling along H blends rows first; upsampling interpolates input rows along W first
        assert ("rows blended first" in source) == (geometry == "down")


@pytest.mark.parametrize("dtype", [F32, F64, np.int16])
def test_resize_cubic_matches_interpreter(dtype):
    check_cubic(dtype, "mixed")


@pytest.mark.parametrize("geometry", ["up", "down"])
@pytest.mark.parametrize("dtype", [F32, F64, np.int16])
def test_resize_cubic_geometries(dtype, geometry):
    check_cubic(dtype, geometry)


def check_cubic(dtype, geometry: str) -> None:
    shape, scales = PLANE_GEOMETRIES[geometry]
    cases = {}
    for transform, antialias, exclude, a in itertools.product(TRANSFORMS, (False, True), (False, True), (-0.75, -0.5)):
        kw = transform_kwargs(transform, len(shape), (2, 3))
        cases[f"{transform}_aa{int(antialias)}_ex{int(exclude)}_a{a}"] = (
            [0], resize_attrs(shape, scales, "cubic", antialias=antialias, exclude_outside=exclude, cubic_coeff_a=a,
                              **kw))
    expected, actual, source = run_nodes("Resize", [_data(shape, dtype)], cases)
    compare(expected, actual, exact=dtype != F32)  # float64 and integers: the reference's exact operations
    assert "[resize_separable]" in source


# Resize: other axes, ranks and edge shapes ---------------------------------------------------

AXIS_GEOMETRIES = {
    "volume_5d": ((1, 2, 4, 5, 6), (1, 1, 1.5, 0.6, 2.0)),
    "rank1": ((9,), (1.7,)),
    "rank2": ((5, 8), (0.6, 2.5)),
    "rank3_last": ((2, 3, 10), (1, 1, 0.45)),
    "only_h": ((1, 3, 7, 6), (1, 1, 2.0, 1)),
    "only_w": ((1, 3, 7, 6), (1, 1, 1, 0.5)),
    "channels": ((2, 6, 3, 4), (1, 0.5, 1, 1)),
    "batch_and_w": ((3, 2, 4, 5), (2.0, 1, 1, 1.4)),
    "size1_in": ((1, 1, 1, 1), (1, 1, 3.0, 4.0)),
    "size1_out": ((1, 2, 7, 5), (1, 1, 0.15, 0.2)),
    "odd": ((1, 1, 13, 11), (1, 1, 1.37, 0.77)),
    "extreme_down": ((1, 1, 3, 250), (1, 1, 1, 0.02)),
    "extreme_up": ((1, 2, 2, 3), (1, 1, 37.0, 19.5)),
    "empty_out": ((1, 2, 3, 4), (1, 1, 0.2, 2.0)),
    "empty_in": ((0, 2, 3, 4), (1, 1, 2.0, 0.5)),
    "identity": ((1, 2, 3, 4), (1, 1, 1, 1)),
}


@pytest.mark.parametrize("geometry", AXIS_GEOMETRIES)
def test_resize_axes_and_edges_matches_interpreter(geometry):
    shape, scales = AXIS_GEOMETRIES[geometry]
    rank = len(shape)
    axes = [a for a, s in enumerate(scales) if s != 1]
    cases = {}
    for transform in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_crop_and_resize",
                      "half_pixel_symmetric"):
        kw = transform_kwargs(transform, rank, axes)
        cases[f"nearest_{transform}"] = ([0], resize_attrs(shape, scales, "nearest", nearest_mode="round_prefer_ceil",
                                                           **kw))
        cases[f"linear_{transform}"] = ([0], resize_attrs(shape, scales, "linear", **kw))
        cases[f"linear_aa_{transform}"] = ([0], resize_attrs(shape, scales, "linear", antialias=True, **kw))
        cases[f"cubic_{transform}"] = ([0], resize_attrs(shape, scales, "cubic", exclude_outside=True, **kw))
    for dtype in (F32, np.int32):
        expected, actual, _ = run_nodes("Resize", [_data(shape, dtype, seed=3)], cases)
        compare(expected, actual)


@pytest.mark.parametrize("threads", THREADS)
def test_resize_large_planes_split_across_threads_matches_interpreter(threads):
    """Enough work to split: planes among threads (and row blocks of a single plane), rows of
    the nearest gather, each separable pass; every variant and compute type, the result the
    same at 1 and 2 threads."""
    big, one = (1, 6, 40, 50), (1, 1, 200, 150)
    cases = {
        "bilinear": ([0], resize_attrs(big, (1, 1, 2.0, 2.0), "linear")),
        "bilinear_one_plane": ([1], resize_attrs(one, (1, 1, 2.0, 1.5), "linear",
                                                 coordinate_transformation_mode="align_corners")),
        "bilinear_only_w": ([1], resize_attrs(one, (1, 1, 1, 2.5), "linear")),
        "bilinear_only_h": ([1], resize_attrs(one, (1, 1, 2.5, 1), "linear")),
        "nearest": ([0], resize_attrs(big, (1, 1, 2.0, 3.0), "nearest")),
        "nearest_crop": ([0], resize_attrs(big, (1, 1, 2.0, 3.0), "nearest", roi=_roi(4, (2, 3)),
                                           coordinate_transformation_mode="tf_crop_and_resize")),
        "cubic": ([0], resize_attrs(big, (1, 1, 1.7, 2.0), "cubic")),
        "linear_antialias": ([1], resize_attrs(one, (1, 1, 0.3, 0.45), "linear", antialias=True)),
    }
    inputs = [_data(big, F32), _data(one, F32, seed=1)]
    expected, actual, source = run_nodes("Resize", inputs, cases, THREADS[threads], repeat=20)
    compare(expected, actual)
    assert ("omp parallel" in source) == (threads == "t2")
    cases = {"cubic": ([0], resize_attrs(big, (1, 1, 1.7, 2.0), "cubic")),
             "linear_three_axes": ([0], resize_attrs(big, (1, 2.0, 1.5, 1.5), "linear"))}
    for dtype in (F64, np.int32):
        expected, actual, source = run_nodes("Resize", [_data(big, dtype)], cases, THREADS[threads], repeat=20)
        compare(expected, actual, exact=True)
        assert ("omp parallel" in source) == (threads == "t2")


def test_resize_avx2_build_matches_interpreter():
    cases = {"bilinear": ([0], resize_attrs((2, 3, 9, 17), (1, 1, 2.0, 1.8), "linear")),
             "nearest": ([0], resize_attrs((2, 3, 9, 17), (1, 1, 0.6, 2.0), "nearest")),
             "cubic": ([0], resize_attrs((2, 3, 9, 17), (1, 1, 0.6, 2.0), "cubic", antialias=True))}
    expected, actual, _ = run_nodes("Resize", [_data((2, 3, 9, 17), F32)], cases, 1, march="x86-64-v3")
    compare(expected, actual)


def test_resize_nan_and_inf_in_nearest_copy():
    """Nearest copies the chosen input: non-finite neighbours do not leak in."""
    x = np.array([[[[1.0, np.nan, np.inf, -2.0]]]], np.float32)
    cases = {"up": ([0], resize_attrs(x.shape, (1, 1, 2, 2), "nearest", coordinate_transformation_mode="asymmetric",
                                      nearest_mode="floor"))}
    _, actual, _ = run_nodes("Resize", [x], cases)
    np.testing.assert_array_equal(actual["up"][0, 0, 0], np.repeat(x[0, 0, 0], 2))


def _refused(op: str, arrays: list[np.ndarray], attrs, match: str) -> None:
    graph, _ = single_node_graph(op, arrays, attrs)
    with pytest.raises(UnsupportedError, match=match):
        compile_graph(graph, _cpu(1))


def test_resize_empty_axis_to_non_empty_is_refused():
    """By the op's definition, so on every backend (tests/test_fuzz_findings_3.py)."""
    with pytest.raises(EmberError, match=r"Resize .*: an empty input axis resized to a non-empty one has no input "
                                         r"to sample"):
        single_node_graph("Resize", [np.zeros((1, 0, 4), F32)], ResizeAttrs((1, 2, 4), (1.0, 1.0, 1.0)))


# GridSample, AffineGrid ------------------------------------------------------------------


def _grid(shape, seed=0, special=True) -> np.ndarray:
    """Coordinates in [-1.3, 1.3] with exact corners, centres and far-out values among them."""
    g = np.random.default_rng(seed).uniform(-1.3, 1.3, shape)
    if special:
        flat = g.reshape(-1)
        values = [-1.0, 1.0, 0.0, 0.5, -0.5, 1e10, -1e10, 3.75, -2.5, 1e-8]
        flat[:len(values)] = values[:flat.size]
    return g


GRID_GEOMETRIES = {
    "2d": ((2, 3, 5, 6), (2, 4, 7, 2)),
    "2d_size1": ((1, 2, 1, 1), (1, 3, 2, 2)),
    "3d_volume": ((1, 2, 3, 4, 5), (1, 2, 3, 4, 3)),
    "1d": ((2, 3, 7), (2, 5, 1)),
    "empty_out": ((1, 2, 4, 4), (1, 0, 3, 2)),
}


@pytest.mark.parametrize("geometry", GRID_GEOMETRIES)
@pytest.mark.parametrize("dtypes", [(F32, F32), (F64, F64), (F32, F64)], ids=["f32", "f64", "f32_f64grid"])
def test_grid_sample_matches_interpreter(dtypes, geometry):
    xshape, gshape = GRID_GEOMETRIES[geometry]
    x = _data(xshape, dtypes[0])
    grid = _grid(gshape).astype(dtypes[1])
    cases = {f"{mode}_{padding}_{int(align)}": ([0, 1], GridSampleAttrs(mode, padding, align))
             for mode, padding, align in itertools.product(("nearest", "linear", "cubic"),
                                                           ("zeros", "border", "reflection"), (False, True))}
    expected, actual, _ = run_nodes("GridSample", [x, grid], cases)
    compare(expected, actual)


@pytest.mark.parametrize("threads", THREADS)
def test_grid_sample_large_matches_interpreter(threads):
    x = _data((2, 8, 30, 40), F32)
    grid = _grid((2, 50, 60, 2), special=False).astype(F32)
    cases = {"linear": ([0, 1], GridSampleAttrs("linear", "zeros", False)),
             "cubic": ([0, 1], GridSampleAttrs("cubic", "border", True)),
             "nearest": ([0, 1], GridSampleAttrs("nearest", "reflection", False))}
    expected, actual, source = run_nodes("GridSample", [x, grid], cases, THREADS[threads], repeat=20)
    compare(expected, actual)
    assert ("omp parallel" in source) == (threads == "t2")


def test_grid_sample_threads_get_disjoint_scratch():
    """Each thread's scratch holds a block of points' offsets and weights (int32 + float per
    tap), and the next thread's starts after it (runs cannot show a race on a loaded machine)."""
    x, grid = _data((1, 64, 30, 30), F32), _grid((1, 40, 40, 2), special=False).astype(F32)
    for mode, taps in (("linear", 4), ("cubic", 16)):
        _, _, source = run_nodes("GridSample", [x, grid], {"y": ([0, 1], GridSampleAttrs(mode))}, 2)
        block = max(16, 4096 // taps)
        assert "omp parallel" in source
        assert f"(scratch + c * {block * taps * (4 + 4)})" in source


def test_grid_sample_non_finite_grid_matches_interpreter():
    x = _data((1, 2, 4, 5), F32)
    grid = np.array([[[[np.nan, 0.1], [np.inf, -0.3], [0.2, -np.inf], [1e300, 0.0]]]], F64)
    cases = {f"{mode}_{padding}": ([0, 1], GridSampleAttrs(mode, padding, False))
             for mode, padding in itertools.product(("nearest", "linear", "cubic"), ("zeros", "border", "reflection"))}
    expected, actual, _ = run_nodes("GridSample", [x, grid], cases)
    compare(expected, actual)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 1, 1, 6), (2, 1, 3, 4, 2), (1, 2, 1, 1, 1)])
def test_affine_grid_matches_interpreter(size, dtype):
    spatial = len(size) - 2
    theta = _data((size[0], spatial, spatial + 1), dtype)
    cases = {f"align{int(a)}": ([0], AffineGridAttrs(size, a)) for a in (False, True)}
    expected, actual, source = run_nodes("AffineGrid", [theta], cases)
    compare(expected, actual)
    assert "[affine_grid_loops]" in source


def test_grid_sample_of_empty_input_is_refused():
    """Refused by the op itself (the interpreter raised NumPy's IndexError; fuzz seed 91)."""
    with pytest.raises(EmberError, match="GridSample input .* has an empty spatial axis: no pixel to sample"):
        single_node_graph("GridSample", [np.zeros((1, 1, 0, 3), F32), np.zeros((1, 2, 2, 2), F32)], GridSampleAttrs())


# ONNX Runtime ---------------------------------------------------------------------------------


def _onnx_resize(shape, opset=19, roi=None, scales=None, sizes=None, **attributes):
    from onnx import TensorProto, helper, numpy_helper

    inits, names = [], ["x"]
    for name, value, dtype in (("roi", roi, np.float32), ("scales", scales, np.float32), ("sizes", sizes, np.int64)):
        if value is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        names.append(name)
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], **attributes)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


ORT_CASES = {
    "bilinear_2x": dict(scales=[1, 1, 2, 2], mode="linear"),
    "nearest_asymmetric_floor": dict(scales=[1, 1, 2, 3], mode="nearest", coordinate_transformation_mode="asymmetric",
                                     nearest_mode="floor"),
    "nearest_half_pixel_down": dict(scales=[1, 1, 0.5, 0.5], mode="nearest"),
    "cubic_align_corners": dict(sizes=[1, 3, 13, 9], mode="cubic", coordinate_transformation_mode="align_corners"),
    "cubic_exclude_outside": dict(scales=[1, 1, 1.5, 0.8], mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5),
    "linear_antialias_down": dict(scales=[1, 1, 0.4, 0.55], mode="linear", antialias=1),
    "cubic_antialias_down": dict(sizes=[1, 3, 5, 4], mode="cubic", antialias=1),
    "axes_not_larger": dict(sizes=[9, 20], axes=[2, 3], keep_aspect_ratio_policy="not_larger", mode="linear"),
    "axes_not_smaller": dict(sizes=[20, 9], axes=[3, 2], keep_aspect_ratio_policy="not_smaller", mode="nearest"),
    "tf_crop_and_resize": dict(roi=[0, 0, 0.1, -0.2, 1, 1, 0.8, 1.1], sizes=[1, 3, 6, 7], mode="linear",
                               coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5),
    "pytorch_half_pixel": dict(sizes=[1, 3, 1, 5], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
}


@pytest.mark.parametrize("case", ORT_CASES)
def test_resize_matches_onnxruntime(case):
    ort = pytest.importorskip("onnxruntime")
    import ember

    shape = (1, 3, 10, 12)
    model = _onnx_resize(shape, **ORT_CASES[case])
    x = _data(shape, F32, seed=5)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    compiled = ember.compile(model, backend="cpu", num_threads=1)
    assert "Resize" in compiled.executable.source
    actual = compiled.run({"x": x})["y"]
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)
