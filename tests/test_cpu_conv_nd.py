"""Convolution and pooling beyond 2-D NCHW on the cpu backend, against the interpreter: 1-D
Conv (run as 2-D with H = 1), 3-D Conv (im2col-3d + GEMM), MaxPool/AveragePool in 1-D and
3-D, LpPool, MaxPool's Indices output, MaxUnpool, ConvTranspose (GEMM + col2im) and Col2Im.

Each case is an ONNX model, so the frontend's attribute resolution (auto_pad SAME_UPPER /
SAME_LOWER / VALID, output_padding, output_shape, ceil_mode, count_include_pad,
storage_order) and the graph passes (activations and residual Adds fused into FusedConv
epilogues) are part of what is checked. Seeded random geometries on top of hand-picked edge
shapes: size-1 and size-0 axes, odd sizes, padding larger than the kernel, negative
ConvTranspose pads. Every case runs on 1 and 2 threads; the GEMM-based ones also built for
AVX2 (x86-64-v3, the library's portable tile). tests/test_cpu_sanitized.py runs this file
under AddressSanitizer and UBSan."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.backends.cpu import CpuBackend
from ember.driver import compile_model

BUILDS = [(1, None), (2, None)]
AVX2 = [(2, "x86-64-v3")] if platform.machine().lower() in ("x86_64", "amd64") else []
_ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
               np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
               np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64}


def _model(nodes, inputs: dict[str, np.ndarray], initializers: dict[str, np.ndarray], outputs: list[str],
           opset: int = 19):
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info(n, _ONNX_TYPES[a.dtype], a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _error(actual: np.ndarray, expected: np.ndarray) -> float:
    """Max absolute difference relative to max(1, |expected|), NaN matching NaN."""
    if actual.size == 0:
        return 0.0
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return float("inf")
    finite = ~np.isnan(e)
    if not finite.any():
        return 0.0
    if not np.array_equal(np.isinf(a[finite]), np.isinf(e[finite])):
        return float("inf")
    both = finite & ~np.isinf(e)
    if not both.any():
        return 0.0
    return float(np.max(np.abs(a[both] - e[both]))) / max(1.0, float(np.max(np.abs(e[both]))))


def _check(model, feeds: dict[str, np.ndarray], builds=BUILDS, tolerance: float = 1e-5) -> str:
    """Every output of every build against the interpreter; returns the last build's C."""
    expected = compile_model(model, backend="interpreter").run(feeds)
    source = ""
    for threads, march in builds:
        compiled = compile_model(model, backend=CpuBackend(num_threads=threads, march=march))
        actual = compiled.run(feeds)
        for name, want in expected.items():
            got = actual[name]
            assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
            error = _error(got, want)
            assert error <= tolerance, (name, threads, march, error)
        source = compiled._executable.source
    return source


def _kernels(source: str) -> list[str]:
    return re.findall(r"\[(\w+)\] from node", source)


def _rand(rng, shape, dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)


def _out_size(size, kernel, stride, begin, end, dilation, ceil=False) -> int:
    span = size + begin + end - dilation * (kernel - 1) - 1
    return (-(-span // stride) if ceil else span // stride) + 1


def _window_attrs(rng, dims, kernel, *, max_pad=2, allow_auto=True) -> dict | None:
    """Random strides, dilations and pads (or an auto_pad) with a non-empty output."""
    n = len(dims)
    strides = [int(rng.integers(1, 4)) for _ in range(n)]
    dilations = [int(rng.integers(1, 3)) for _ in range(n)]
    auto = rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]) if allow_auto else "NOTSET"
    attrs: dict = {"strides": strides, "dilations": dilations}
    if auto == "NOTSET":
        pads = [int(rng.integers(0, max_pad + 1)) for _ in range(2 * n)]
        attrs["pads"] = pads
    else:
        pads = [0] * (2 * n)
        attrs["auto_pad"] = str(auto)
    if auto in ("NOTSET", "VALID") and any(
            _out_size(d, k, s, pads[i], pads[i + n], dl) < 1
            for i, (d, k, s, dl) in enumerate(zip(dims, kernel, strides, dilations, strict=True))):
        return None
    return attrs


# Conv: 1-D (as 2-D with H = 1) and 3-D ---------------------------------------------------


def _conv_model(rng, x_shape, w_shape, attrs, *, bias=True, const_w=True, activation=None, residual=False,
                dtype=np.float32):
    x = _rand(rng, x_shape, dtype)
    w = _rand(rng, w_shape, dtype)
    inputs, inits = {"x": x}, {}
    (inits if const_w else inputs)["w"] = w
    names = ["x", "w"]
    if bias:
        inits["b"] = _rand(rng, (w_shape[0],), dtype)
        names.append("b")
    nodes = [helper.make_node("Conv", names, ["c"], **attrs)]
    last = "c"
    if residual:
        from ember.ops import get_op
        from ember.ops.nn import ConvAttrs
        from ember.types import TensorType

        spatial = len(x_shape) - 2
        pads = attrs.get("pads", [0] * (2 * spatial))
        shape_attrs = ConvAttrs(tuple(attrs.get("strides", [1] * spatial)), tuple(pads),
                                tuple(attrs.get("dilations", [1] * spatial)), attrs.get("group", 1))
        if "auto_pad" in attrs:
            return None
        (out,) = get_op("Conv").infer_types(shape_attrs, [TensorType.of(x), TensorType.of(w), None])
        inputs["r"] = _rand(rng, out.shape, dtype)
        nodes.append(helper.make_node("Add", [last, "r"], ["a"]))
        last = "a"
    if activation is not None:
        op, extra = activation
        nodes.append(helper.make_node(op, [last], ["y"], **extra))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    return _model(nodes, inputs, inits, ["y"]), inputs


ACTIVATIONS = [None, ("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("Sigmoid", {}), ("HardSigmoid", {})]


def _random_conv(seed: int, spatial: int):
    rng = np.random.default_rng(seed)
    max_dim = {1: 40, 3: 9}[spatial]
    while True:
        group = int(rng.choice([1, 1, 2, 3]))
        depthwise = rng.random() < 0.2
        cg = 1 if depthwise else int(rng.integers(1, 5))
        mg = 1 if depthwise else int(rng.integers(1, 6))
        dims = [int(rng.integers(1, max_dim + 1)) for _ in range(spatial)]
        kernel = [int(rng.integers(1, 4)) for _ in range(spatial)]
        attrs = _window_attrs(rng, dims, kernel)
        if attrs is None:
            continue
        attrs["group"] = group
        x_shape = (int(rng.integers(1, 3)), group * cg, *dims)
        w_shape = (group * mg, cg, *kernel)
        activation = ACTIVATIONS[int(rng.integers(0, len(ACTIVATIONS)))]
        built = _conv_model(rng, x_shape, w_shape, attrs, bias=bool(rng.random() < 0.7),
                            const_w=bool(rng.random() < 0.7), activation=activation,
                            residual=bool(rng.random() < 0.3))
        if built is not None:
            return built


@pytest.mark.parametrize("seed", range(10))
def test_random_conv1d_matches_interpreter(seed):
    model, feeds = _random_conv(100 + seed, 1)
    source = _check(model, feeds, BUILDS + (AVX2 if seed < 2 else []))
    assert not set(_kernels(source)) & {"conv3d_gemm"}


@pytest.mark.parametrize("seed", range(8))
def test_random_conv3d_matches_interpreter(seed):
    model, feeds = _random_conv(200 + seed, 3)
    source = _check(model, feeds, BUILDS + (AVX2 if seed < 2 else []))
    assert _kernels(source)[0] in ("conv3d_direct", "conv3d_gemm")


CONV_EDGES = [
    # x shape, w shape, attrs, bias, constant w
    ((1, 1, 1), (1, 1, 1), {}, True, True),                                      # all size 1
    ((0, 3, 9), (4, 3, 3), {"pads": [1, 1]}, True, True),                       # empty batch
    ((2, 3, 5), (4, 3, 3), {"pads": [4, 5]}, True, False),                      # pads > kernel
    ((1, 2, 7), (3, 2, 7), {"strides": [3], "dilations": [2], "pads": [6, 6]}, False, True),
    ((1, 4, 33), (8, 2, 3), {"group": 2, "strides": [2], "pads": [1, 0]}, True, True),
    ((1, 3, 1), (5, 3, 1), {"pads": [0, 0]}, True, True),                       # 1x1 over one column
    ((1, 1, 1, 1, 1), (1, 1, 1, 1, 1), {}, True, True),
    ((0, 2, 3, 3, 3), (2, 2, 2, 2, 2), {}, True, True),
    ((1, 2, 3, 4, 5), (3, 2, 2, 2, 2), {"pads": [3, 3, 3, 4, 4, 4]}, True, False),
    ((1, 3, 5, 7, 9), (6, 1, 3, 3, 3), {"group": 3, "strides": [1, 2, 3], "dilations": [2, 1, 2],
                                        "pads": [2, 1, 0, 2, 1, 3]}, True, True),
    ((2, 4, 3, 5, 7), (8, 4, 1, 1, 1), {}, True, True),                         # pointwise: B in place
    ((1, 2, 2, 3, 35), (3, 2, 1, 1, 3), {"dilations": [1, 1, 2], "pads": [0, 0, 9, 0, 0, 9]}, True, True),
    # 2-D dilated (im2col): panels end inside a row that starts in padding wider than the segment.
    ((1, 1, 3, 18), (2, 1, 1, 3), {"dilations": [1, 2], "pads": [0, 8, 0, 8]}, True, True),
    ((1, 1, 18), (2, 1, 3), {"dilations": [2], "pads": [8, 8]}, True, True),
]


@pytest.mark.parametrize("case", CONV_EDGES, ids=lambda c: f"{'x'.join(map(str, c[0]))}w{'x'.join(map(str, c[1]))}")
def test_conv_edges_matches_interpreter(case):
    x_shape, w_shape, attrs, bias, const_w = case
    model, feeds = _conv_model(np.random.default_rng(3), x_shape, w_shape, attrs, bias=bias, const_w=const_w)
    _check(model, feeds)


def test_conv1d_runs_on_the_2d_kernels_with_fused_epilogues():
    rng = np.random.default_rng(5)
    model, feeds = _conv_model(rng, (1, 8, 50), (16, 8, 3), {"pads": [1, 1]}, activation=("Relu", {}),
                               residual=True)
    source = _check(model, feeds)
    assert _kernels(source) == ["conv_direct"]
    assert "EMBER_ACT_RELU" in source
    model, feeds = _conv_model(rng, (1, 8, 50), (8, 1, 5), {"group": 8, "auto_pad": "SAME_LOWER"})
    assert _kernels(_check(model, feeds)) == ["conv_depthwise"]
    model, feeds = _conv_model(rng, (1, 8, 50), (16, 8, 3), {"dilations": [3]}, const_w=False)
    assert _kernels(_check(model, feeds)) == ["conv_gemm"]


def test_conv3d_fuses_activation_and_residual():
    rng = np.random.default_rng(6)
    model, feeds = _conv_model(rng, (1, 4, 5, 6, 7), (8, 4, 3, 3, 3), {"pads": [1] * 6},
                               activation=("Relu", {}), residual=True)
    source = _check(model, feeds, BUILDS + AVX2)
    assert _kernels(source) == ["conv3d_direct"] and "EMBER_ACT_RELU" in source
    model, feeds = _conv_model(rng, (1, 4, 5, 6, 7), (8, 4, 3, 3, 3), {"pads": [1] * 6, "strides": [1, 2, 1]},
                               activation=("Sigmoid", {}), residual=True)
    source = _check(model, feeds, BUILDS + AVX2)
    assert _kernels(source) == ["conv3d_gemm"] and "EMBER_ACT_SIGMOID" in source


DIRECT3D = [
    # x shape, w shape, attrs, constant w: stride 1 (conv3d_direct)
    ((1, 3, 4, 5, 6), (5, 3, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}, True),
    ((2, 4, 3, 7, 9), (6, 2, 2, 3, 2), {"group": 2, "dilations": [2, 1, 3], "pads": [1, 0, 2, 0, 2, 1]}, False),
    ((1, 2, 2, 3, 3), (3, 2, 3, 3, 3), {"pads": [4, 4, 4, 5, 5, 5]}, True),          # pads past the kernel
    ((1, 1, 1, 1, 40), (2, 1, 1, 1, 5), {"pads": [0, 0, 2, 0, 0, 2]}, True),         # one row of a volume
    ((1, 3, 6, 5, 33), (9, 3, 1, 2, 1), {"auto_pad": "SAME_LOWER"}, True),
]


@pytest.mark.parametrize("case", DIRECT3D, ids=lambda c: f"{'x'.join(map(str, c[0]))}w{'x'.join(map(str, c[1]))}")
def test_conv3d_direct_matches_interpreter(case):
    x_shape, w_shape, attrs, const_w = case
    model, feeds = _conv_model(np.random.default_rng(7), x_shape, w_shape, attrs, const_w=const_w,
                               activation=("LeakyRelu", {"alpha": 0.2}))
    assert _kernels(_check(model, feeds)) == ["conv3d_direct"]


# Pooling: MaxPool and AveragePool beyond 2-D, LpPool, Indices, MaxUnpool ------------------


def _pool_model(op, x, attrs, outputs=("y",)):
    return _model([helper.make_node(op, ["x"], list(outputs), **attrs)], {"x": x}, {}, list(outputs))


def _random_pool(seed: int, spatial: int, op: str):
    rng = np.random.default_rng(seed)
    max_dim = {1: 30, 2: 12, 3: 8}[spatial]
    while True:
        dims = [int(rng.integers(1, max_dim + 1)) for _ in range(spatial)]
        kernel = [int(rng.integers(1, 4)) for _ in range(spatial)]
        attrs = _window_attrs(rng, dims, kernel, max_pad=1)
        if attrs is None or any(p >= k for p, k in zip(attrs.get("pads", []), kernel * 2, strict=False)):
            continue
        attrs["kernel_shape"] = kernel
        if op in ("MaxPool", "AveragePool", "LpPool") and rng.random() < 0.4 and "auto_pad" not in attrs:
            attrs["ceil_mode"] = 1
        if op == "AveragePool":
            attrs["count_include_pad"] = int(rng.integers(0, 2))
        if op == "LpPool":
            attrs["p"] = int(rng.choice([1, 2, 3]))
        x = _rand(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *dims))
        return x, attrs


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("spatial", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_random_pool_matches_interpreter(op, spatial, seed):
    x, attrs = _random_pool(300 + 10 * seed + spatial, spatial, op)
    opset = 18 if op == "LpPool" else 19
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, {}, ["y"], opset=opset)
    _check(model, {"x": x})


def test_lppool_2d_matches_interpreter():
    for seed in range(3):
        x, attrs = _random_pool(400 + seed, 2, "LpPool")
        _check(_model([helper.make_node("LpPool", ["x"], ["y"], **attrs)], {"x": x}, {}, ["y"], opset=18),
               {"x": x})


POOL_EDGES = [
    # op, x shape, dtype, attrs
    ("MaxPool", (1, 1, 1), np.float32, {"kernel_shape": [1]}),
    ("MaxPool", (0, 2, 5), np.float32, {"kernel_shape": [2]}),
    ("MaxPool", (2, 3, 9), np.int8, {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "ceil_mode": 1}),
    ("MaxPool", (1, 2, 4, 5, 3), np.uint8, {"kernel_shape": [2, 2, 2], "dilations": [1, 2, 1]}),
    ("MaxPool", (1, 2, 5), np.float32, {"kernel_shape": [2], "pads": [3, 4]}),          # pads > kernel
    ("AveragePool", (1, 2, 5), np.float32, {"kernel_shape": [2], "pads": [3, 4], "count_include_pad": 1}),
    ("AveragePool", (1, 2, 5), np.float64, {"kernel_shape": [3], "pads": [3, 3]}),      # empty windows: NaN
    ("AveragePool", (1, 1, 3, 4, 5), np.float32, {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2],
                                                  "ceil_mode": 1, "count_include_pad": 1, "pads": [1, 1, 0, 0, 1, 1]}),
    ("AveragePool", (0, 1, 3, 4, 5), np.float32, {"kernel_shape": [1, 1, 1]}),
    ("LpPool", (1, 2, 7), np.float64, {"kernel_shape": [3], "pads": [4, 4], "p": 3}),
    ("LpPool", (1, 1, 1, 1, 1), np.float32, {"kernel_shape": [1, 1, 1], "p": 1}),
]


@pytest.mark.parametrize("case", POOL_EDGES, ids=lambda c: f"{c[0]}{'x'.join(map(str, c[1]))}{np.dtype(c[2]).name}")
def test_pool_edges_matches_interpreter(case):
    op, shape, dtype, attrs = case
    x = _rand(np.random.default_rng(4), shape, dtype)
    _check(_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, {}, ["y"], opset=18), {"x": x})


def test_pool_beyond_2d_picks_the_nd_loops():
    x = _rand(np.random.default_rng(1), (1, 2, 9))
    source = _check(_pool_model("MaxPool", x, {"kernel_shape": [3], "auto_pad": "SAME_UPPER"}), {"x": x})
    assert _kernels(source) == ["maxpool_nd_loops"]


INDICES = [
    # x shape, attrs (storage_order 0 and 1, with padding, dilation, ceil mode)
    ((1, 2, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((2, 3, 6, 7), {"kernel_shape": [2, 3], "strides": [2, 1], "storage_order": 1}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "dilations": [2, 1], "ceil_mode": 1,
                    "strides": [2, 2]}),
    ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2], "storage_order": 1,
                       "pads": [0, 1, 1, 1, 0, 1]}),
    ((1, 1, 4), {"kernel_shape": [2], "pads": [3, 3]}),                               # all-padding windows
    ((0, 2, 5), {"kernel_shape": [2]}),
]


@pytest.mark.parametrize("case", INDICES, ids=lambda c: "x".join(map(str, c[0])))
def test_maxpool_indices_matches_interpreter(case):
    shape, attrs = case
    rng = np.random.default_rng(8)
    x = _rand(rng, shape)
    if x.size:  # ties (the first one wins), and in 2-D a NaN (the maximum from where it appears)
        x.reshape(-1)[rng.integers(0, x.size, 2)] = np.nan if len(shape) == 4 else x.reshape(-1)[0]
    model = _pool_model("MaxPool", x, attrs, outputs=("y", "i"))
    source = _check(model, {"x": x})
    assert "maxpool_indices_loops" in _kernels(source) or not x.size  # empty results need no kernel


UNPOOL = [
    # x shape, kernel, strides, pads, output_shape (None: the default)
    ((1, 2, 8), [2], [2], [0, 0], None),
    ((1, 2, 9), [3], [2], [1, 1], [1, 2, 12]),
    ((2, 3, 4, 4), [2, 2], [2, 2], [0, 0, 0, 0], [2, 3, 9, 11]),
    ((1, 2, 4, 4, 4), [2, 2, 2], [2, 2, 2], [0, 0, 0, 0, 0, 0], None),
]


@pytest.mark.parametrize("case", UNPOOL, ids=lambda c: "x".join(map(str, c[0])))
def test_maxpool_then_unpool_matches_interpreter(case):
    shape, kernel, strides, pads, output_shape = case
    x = _rand(np.random.default_rng(9), shape)
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], **attrs),
             helper.make_node("MaxUnpool", ["p", "i"] + (["s"] if output_shape else []), ["y"], **attrs)]
    inits = {"s": np.array(output_shape, np.int64)} if output_shape else {}
    source = _check(_model(nodes, {"x": x}, inits, ["y"]), {"x": x})
    assert "maxunpool_loops" in _kernels(source)


def test_maxunpool_of_runtime_indices_matches_interpreter_and_checks_them():
    rng = np.random.default_rng(10)
    x = _rand(rng, (2, 3, 4))
    indices = rng.permutation(2 * 3 * 9)[:24].reshape(2, 3, 4).astype(np.int64)  # into [2, 3, 9], repeats none
    indices[0, 0, 1] = indices[0, 0, 0]                                             # one repeat: the last wins
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[3], strides=[2], pads=[0, 0])
    model = _model([node], {"x": x, "i": indices}, {}, ["y"])
    _check(model, {"x": x, "i": indices})
    bad = indices.copy()
    bad[1, 2, 3] = 54
    compiled = compile_model(model, backend=CpuBackend(num_threads=1))
    with pytest.raises(Exception, match="index out of range"):
        compiled.run({"x": x, "i": bad})


# ConvTranspose and Col2Im ------------------------------------------------------------------


def _convt_model(rng, x_shape, w_shape, attrs, *, bias=True, const_w=True):
    x, w = _rand(rng, x_shape), _rand(rng, w_shape)
    inputs, inits = {"x": x}, {}
    (inits if const_w else inputs)["w"] = w
    names = ["x", "w"]
    if bias:
        inits["b"] = _rand(rng, (w_shape[1] * attrs.get("group", 1),))
        names.append("b")
    return _model([helper.make_node("ConvTranspose", names, ["y"], **attrs)], inputs, inits, ["y"]), inputs


def _random_convt(seed: int, spatial: int):
    rng = np.random.default_rng(seed)
    max_dim = {1: 20, 2: 9, 3: 5}[spatial]
    group = int(rng.choice([1, 1, 2, 3]))
    cg, mg = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    dims = [int(rng.integers(1, max_dim + 1)) for _ in range(spatial)]
    kernel = [int(rng.integers(1, 5)) for _ in range(spatial)]
    strides = [int(rng.integers(1, 4)) for _ in range(spatial)]
    dilations = [int(rng.integers(1, 3)) for _ in range(spatial)]
    attrs: dict = {"strides": strides, "dilations": dilations, "group": group}
    mode = rng.choice(["pads", "pads", "auto", "output_shape"])
    full = [s * (d - 1) + dl * (k - 1) + 1 for s, d, dl, k in zip(strides, dims, dilations, kernel, strict=True)]
    if mode == "pads":
        pads = [int(rng.integers(0, (f - 1) // 2 + 1)) for f in full * 2]
        attrs["pads"] = pads
        attrs["output_padding"] = [int(rng.integers(0, max(s, dl))) for s, dl in zip(strides, dilations, strict=True)]
    elif mode == "auto":
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["output_shape"] = [max(1, f + int(rng.integers(-2, 3))) for f in full]
    return _convt_model(rng, (int(rng.integers(1, 3)), group * cg, *dims), (group * cg, mg, *kernel), attrs,
                        bias=bool(rng.random() < 0.7), const_w=bool(rng.random() < 0.6))


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("seed", range(5))
def test_random_conv_transpose_matches_interpreter(spatial, seed):
    model, feeds = _random_convt(500 + 10 * seed + spatial, spatial)
    source = _check(model, feeds, BUILDS + (AVX2 if seed == 0 else []))
    assert _kernels(source) == ["conv_transpose_gemm"]


CONVT_EDGES = [
    # x shape, w shape, attrs, bias, constant w
    ((1, 1, 1), (1, 1, 1), {}, True, True),
    ((0, 2, 4), (2, 3, 3), {"strides": [2]}, True, True),
    ((1, 3, 4, 5), (3, 2, 1, 1), {}, True, True),                                   # 1x1: the GEMM alone
    ((2, 4, 3, 3), (4, 3, 1, 1), {"group": 2}, False, False),
    ((1, 2, 5), (2, 3, 3), {"pads": [4, 1]}, True, True),                           # crop past the kernel
    ((1, 2, 5), (2, 3, 3), {"strides": [3], "output_padding": [2], "dilations": [2]}, True, False),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"output_shape": [1, 2, 9, 12], "strides": [2, 2]}, True, True),
    ((1, 2, 2, 3, 3), (2, 1, 2, 2, 2), {"strides": [2, 2, 2], "output_padding": [1, 0, 1]}, True, True),
    ((1, 64, 7, 7), (64, 32, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True, True),
    ((1, 0, 3), (0, 2, 3), {}, True, True),                                         # no input channels
]


@pytest.mark.parametrize("case", CONVT_EDGES, ids=lambda c: f"{'x'.join(map(str, c[0]))}w{'x'.join(map(str, c[1]))}")
def test_conv_transpose_edges_matches_interpreter(case):
    x_shape, w_shape, attrs, bias, const_w = case
    model, feeds = _convt_model(np.random.default_rng(11), x_shape, w_shape, attrs, bias=bias, const_w=const_w)
    _check(model, feeds, tolerance=2e-5)


@pytest.mark.parametrize("case", [
    ((1, 3, 9, 11), (3, 4, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),          # stride-2 tap pairs
    ((2, 4, 5, 13), (4, 2, 3, 3), {"strides": [2, 2], "pads": [0, 2, 1, 0], "group": 2}),  # and a lone tap
    ((1, 2, 3, 4, 17), (2, 3, 2, 3, 5), {"strides": [1, 2, 2], "output_padding": [0, 1, 1],
                                         "pads": [1, 0, 2, 0, 1, 1]}),
    ((1, 2, 77), (2, 3, 4), {"strides": [3], "dilations": [2], "pads": [2, 1]}),
], ids=lambda c: "x".join(map(str, c[0])))
def test_conv_transpose_in_chunks_matches_interpreter(case, monkeypatch):
    """Columns a few panels at a time (large images): chunks that end mid-row."""
    from ember.codegen.kernels import conv_transpose

    monkeypatch.setattr(conv_transpose, "COLS_CHUNK_BYTES", 2000)
    x_shape, w_shape, attrs = case
    model, feeds = _convt_model(np.random.default_rng(13), x_shape, w_shape, attrs)
    source = _check(model, feeds)
    assert re.search(r"q0 \+= \d+", source)


COL2IM = [
    # channels, image, block, attrs, dtype
    (2, [5], [2], {}, np.float32),
    (3, [5, 6], [2, 3], {"strides": [1, 2], "pads": [1, 0, 1, 1], "dilations": [2, 1]}, np.float32),
    (1, [4, 3, 5], [2, 1, 2], {"strides": [2, 1, 1], "pads": [1, 0, 0, 0, 1, 1]}, np.float64),
    (2, [6, 6], [3, 3], {"strides": [3, 3]}, np.int32),
    (1, [1, 1], [1, 1], {}, np.float32),
    (0, [3, 3], [2, 2], {}, np.float32),
]


@pytest.mark.parametrize("case", COL2IM, ids=lambda c: "x".join(map(str, c[1])) + np.dtype(c[4]).name)
def test_col2im_matches_interpreter(case):
    channels, image, block, attrs, dtype = case
    n = len(image)
    strides, dilations = attrs.get("strides", [1] * n), attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * (2 * n))
    blocks = [_out_size(image[i], block[i], strides[i], pads[i], pads[i + n], dilations[i]) for i in range(n)]
    x = _rand(np.random.default_rng(12), (2, channels * int(np.prod(block)), int(np.prod(blocks))), dtype)
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    model = _model([node], {"x": x}, {"image": np.array(image, np.int64), "block": np.array(block, np.int64)},
                   ["y"])
    assert _kernels(_check(model, {"x": x})) == (["col2im_loops"] if channels else [])
