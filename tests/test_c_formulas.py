"""Every Python copy of a C formula of the kernel library (codegen/runtime/) against the C
function itself, and the constants C and Python share (codegen/c_constants.py, rendered into
ember_config.h) against the values C compiles with.

One small library is built from the runtime sources as the cpu backend ships them
(runtime_files.RUNTIME_SOURCES, ember_config.h included) plus a harness, and called through
ctypes over a grid of geometries: scratch sizes (Python may reserve more than C needs, never
less), the direct convolution's offset table (equal), the activation enum and each fused
activation's C code against its NumPy function (ops/fused.py ACTIVATION_TABLE)."""
from __future__ import annotations

import ctypes
import itertools
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

from ember.codegen import c_constants
from ember.codegen.kernels.layouts import (
    DEPTHWISE_BLOCKED_MAX_OW,
    DirectLayout,
    PixelRowsLayout,
    Winograd4Layout,
    WinogradLayout,
    depthwise_scratch_bytes,
    gemm_scratch_bytes,
    shallow_scratch_bytes,
    taps_scratch_bytes,
)
from ember.codegen.runtime_files import RUNTIME_SOURCES, runtime_source
from ember.ops import get_op
from ember.ops.fused import ACTIVATION_TABLE, ACTIVATIONS, apply_activation, epilogue_of, get_activation

# Identifiers the harness reports the compiled value of (name -> the Python value).
CONSTANTS = {
    "EMBER_NR": c_constants.NR,
    "EMBER_MR": c_constants.MR,
    "EMBER_CHUNK_BYTES": c_constants.GEMM_CHUNK_BYTES,
    "EMBER_WINO_TB": c_constants.WINOGRAD_BLOCK,
    "EMBER_WINO4_WHOLE_BYTES": c_constants.WINOGRAD4_WHOLE_BYTES,
    "EMBER_WINO4_BLOCK_BYTES": c_constants.WINOGRAD4_BLOCK_BYTES,
    "EMBER_PARALLEL_COPY_FLOATS": c_constants.PARALLEL_COPY_FLOATS,
    "EMBER_LINE_FLOATS": c_constants.LINE_FLOATS,
    "EMBER_MAX_VN_LANES": c_constants.MAX_VECTOR_LANES,
    **{a.c_enum: a.code for a in ACTIVATION_TABLE},
}

HARNESS = """
#include "ember_gemm.h"
#include "ember_simd.h"

const long ember_test_constants[] = { %(constants)s };
const long ember_test_vn_lanes = EMBER_VN_LANES;

static ember_epilogue test_epilogue(int act, float alpha, float beta)
{
    ember_epilogue ep;
    memset(&ep, 0, sizeof ep);
    ep.act = act;
    ep.alpha = alpha;
    ep.beta = beta;
    return ep;
}

/* The activation three ways: ember_activate on each value, ember_finish_span on the span,
 * and a GEMM (1 x n = [1] * row) whose tiles apply it while storing. */
void ember_test_activate(int act, float alpha, float beta, const float *x, long n, float *scalar, float *span,
                         float *tiled, float *scratch)
{
    ember_epilogue ep = test_epilogue(act, alpha, beta);
    for (long i = 0; i < n; i++) scalar[i] = ember_activate(x[i], &ep);
    memcpy(span, x, (size_t)n * sizeof(float));
    ember_finish_span(span, NULL, n, &ep);
    const float one = 1.0f;
    ember_gemm(1, n, 1, &one, 1, 1, EMBER_MR, NULL, NULL, NULL, x, n, NULL, tiled, n, &ep, scratch, 1);
}
"""


class ConvGeom(ctypes.Structure):
    """ember_conv_geom (ember_gemm.h)."""

    _fields_ = [("x", ctypes.c_void_p)] + [
        (name, ctypes.c_long) for name in ("C", "H", "W", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "OH", "OW")]


def _compiler() -> str:
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    pytest.skip("no C compiler")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    folder = tmp_path_factory.mktemp("c_formulas")
    for name in RUNTIME_SOURCES:
        (folder / name).write_text(runtime_source(name))
    constants = ", ".join(f"{name}" for name in CONSTANTS)
    unit = "".join(f'#include "{name}"\n' for name in RUNTIME_SOURCES if name.endswith(".c"))
    (folder / "harness.c").write_text(unit + HARNESS % {"constants": constants})
    flags = ["-O1", "-std=gnu11", "-fPIC", "-shared", "-fopenmp", "-fno-math-errno"]
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags.append("-march=native")  # as the cpu backend builds: the host's vector width
    so = folder / "harness.so"
    result = subprocess.run([_compiler(), *flags, f"-I{folder}", str(folder / "harness.c"), "-o", str(so), "-lm"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    lib = ctypes.CDLL(str(so))
    geom = ctypes.POINTER(ConvGeom)
    lib.ember_gemm_scratch_bytes.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_int]
    lib.ember_gemm_scratch_bytes.restype = ctypes.c_long
    lib.ember_conv_direct_scratch_bytes.argtypes = [geom, ctypes.c_long]
    lib.ember_conv_direct_scratch_bytes.restype = ctypes.c_long
    lib.ember_conv_direct_offsets.argtypes = [geom, ctypes.c_void_p]
    lib.ember_conv_direct_offsets.restype = None
    lib.ember_conv_rows_scratch_floats.argtypes = [geom]
    lib.ember_conv_rows_scratch_floats.restype = ctypes.c_long
    lib.ember_conv_rows.argtypes = [geom, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.ember_conv_rows.restype = None
    lib.ember_winograd4_scratch_bytes.argtypes = [geom, ctypes.c_long, ctypes.c_int]
    lib.ember_winograd4_scratch_bytes.restype = ctypes.c_long
    lib.ember_winograd4_block_tiles.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_int]
    lib.ember_winograd4_block_tiles.restype = ctypes.c_long
    lib.ember_winograd4_tile_split.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_int]
    lib.ember_winograd4_tile_split.restype = ctypes.c_int
    lib.ember_winograd_scratch_bytes.argtypes = [geom, ctypes.c_long, ctypes.c_int]
    lib.ember_winograd_scratch_bytes.restype = ctypes.c_long
    lib.ember_conv_taps_scratch_bytes.argtypes = [geom]
    lib.ember_conv_taps_scratch_bytes.restype = ctypes.c_long
    lib.ember_conv_shallow_scratch_bytes.argtypes = [geom, ctypes.c_int]
    lib.ember_conv_shallow_scratch_bytes.restype = ctypes.c_long
    lib.ember_depthwise_scratch_bytes.argtypes = [geom, ctypes.c_int]
    lib.ember_depthwise_scratch_bytes.restype = ctypes.c_long
    lib.ember_test_activate.argtypes = [ctypes.c_int, ctypes.c_float, ctypes.c_float, ctypes.c_void_p, ctypes.c_long,
                                        *[ctypes.c_void_p] * 4]
    lib.ember_test_activate.restype = None
    return lib


def _geom(channels, hw, kernel, stride, pads) -> ConvGeom:
    """A convolution geometry as the emitters build it; pads (top, left, bottom, right)."""
    (h, w), (kh, kw) = hw, kernel
    oh = (h + pads[0] + pads[2] - kh) // stride + 1
    ow = (w + pads[1] + pads[3] - kw) // stride + 1
    return ConvGeom(None, channels, h, w, kh, kw, stride, stride, pads[0], pads[1], 1, 1, oh, ow)


def _pads(kernel, pad):
    return (pad, pad, pad, pad)


# Convolution geometries: channels, (H, W), kernel, stride, pad (all sides).
CONVS = [case for case in itertools.product((1, 3, 16, 33), ((1, 1), (5, 5), (14, 14), (17, 9), (28, 28)),
                                            (1, 3, 5, 7), (1, 2), (0, 1, 3))
         if case[1][0] + 2 * case[4] >= case[2] and case[1][1] + 2 * case[4] >= case[2]]
THREADS = (1, 2, 4)


# -- the header and the constants ----------------------------------------------------------------

def test_config_header_is_generated_and_first():
    text = runtime_source("ember_config.h")
    assert text == c_constants.config_header() == c_constants.config_header()
    assert "Generated from src/ember/codegen/c_constants.py" in text
    assert RUNTIME_SOURCES[0] == "ember_config.h"
    assert '#include "ember_config.h"' in runtime_source("ember_gemm.h")


def test_constants_are_defined_only_in_the_generated_header():
    """No hand-written copy of a shared constant is left in the library."""
    pattern = re.compile(r"#define\s+(EMBER_(?:NR|MR|CHUNK_BYTES|WINO_TB|LINE_FLOATS|MAX_VN_LANES))\b|"
                         r"\b(EMBER_ACT_\w+)\s*=")
    for name in RUNTIME_SOURCES[1:]:
        assert not pattern.search(runtime_source(name)), f"{name} defines a constant of ember_config.h"


def test_c_sees_the_python_constants(lib):
    values = (ctypes.c_long * len(CONSTANTS)).in_dll(lib, "ember_test_constants")
    assert dict(zip(CONSTANTS, values, strict=True)) == CONSTANTS
    assert ctypes.c_long.in_dll(lib, "ember_test_vn_lanes").value <= c_constants.MAX_VECTOR_LANES


def test_activation_enum_names():
    assert [a.name for a in ACTIVATION_TABLE] == list(ACTIVATIONS)
    assert [a.code for a in ACTIVATION_TABLE] == list(range(len(ACTIVATION_TABLE)))
    assert c_constants.c_activation("relu") == "EMBER_ACT_RELU"
    assert c_constants.c_activation("hard_sigmoid") == "EMBER_ACT_HARD_SIGMOID"
    assert c_constants.activation_codes()["leaky_relu"] == get_activation("leaky_relu").code
    for a in ACTIVATION_TABLE:
        assert f"{a.c_enum} = {a.code}," in c_constants.config_header()


# -- the fused activations: C code, NumPy function and graph op agree ----------------------------

ACTIVATION_PARAMS = {"clip": [(-0.5, 0.75), (0.0, 6.0)], "leaky_relu": [(0.1, 0.0), (0.01, 0.0)],
                     "hard_sigmoid": [(0.2, 0.5), (1.0 / 6.0, 0.5)],
                     "hard_swish": [(1.0, 0.0), (0.406, -0.2786), (-1.5, 0.07)]}
VALUES = np.array([-100.0, -20.0, -9.5, -3.0, -2.5, -1.0, -0.7, -0.5, -0.3, -1e-3, -1e-6, 0.0, 1e-6, 1e-3, 0.2,
                   0.5, 0.62, 0.63, 1.0, 2.5, 3.0, 5.9, 6.1, 9.5, 20.0, 88.0, 100.0], np.float32)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_c_activation_matches_numpy(lib, name):
    activation = get_activation(name)
    # Enough values for two full 32-column panels (the register epilogue) and a partial one.
    x = np.concatenate([VALUES, np.linspace(-8, 8, 90, dtype=np.float32)])
    n = len(x)
    for alpha, beta in ACTIVATION_PARAMS.get(name, [(0.0, 0.0)]):
        expected = activation.reference(x.astype(np.float64), alpha, beta)
        assert np.array_equal(expected, apply_activation(x.astype(np.float64), name, alpha, beta))
        outs = [np.full(n, np.nan, np.float32) for _ in range(3)]
        scratch = np.zeros(n * c_constants.NR + 64, np.float32)
        lib.ember_test_activate(activation.code, alpha, beta, x.ctypes.data, n,
                                *(o.ctypes.data for o in outs), scratch.ctypes.data)
        for how, out in zip(("ember_activate", "ember_finish_span", "the GEMM tile"), outs, strict=True):
            # ember_math.h's exp and tanh are within a few ulp. Gelu's 1 + erf(x / sqrt 2)
            # cancels for x < -3 (as in ONNX Runtime's and oneDNN's Gelu): its error is absolute,
            # within erf's 3.3e-7 times x / 2 there.
            atol = 5e-7 if name == "gelu" else 1e-7
            np.testing.assert_allclose(out, expected, rtol=2e-6, atol=atol,
                                       err_msg=f"{name}({alpha}, {beta}) through {how}")


@pytest.mark.parametrize("activation", [a for a in ACTIVATION_TABLE if a.op is not None], ids=lambda a: a.name)
def test_activation_graph_op_matches_numpy(activation):
    """Unfusing (op_attrs) and fusing (epilogue_of) round-trip, and the graph op computes the
    table's NumPy function."""
    x = VALUES.astype(np.float64)
    for alpha, beta in ACTIVATION_PARAMS.get(activation.name, [(0.0, 0.0)]):
        if activation.affine and (alpha, beta) != (1.0, 0.0):
            continue  # the op alone is the identity affine; test_affine_activation_unfuses has the rest
        op = get_op(activation.op)
        attrs = activation.op_attrs(alpha, beta) if activation.op_attrs else op.attrs()
        assert epilogue_of(activation.op, attrs) == (activation.name, alpha, beta)
        (y,) = op.reference(attrs, [x])
        np.testing.assert_allclose(y, activation.reference(x, alpha, beta), rtol=1e-12, atol=0)
        nonneg = activation.non_negative(alpha, beta)
        assert nonneg == bool(np.all(activation.reference(np.linspace(-1e3, 1e3, 2001), alpha, beta) >= 0))


def test_affine_activation_unfuses():
    """hard_swish's alpha and beta scale and shift HardSwish's result: unfused, a Mul and an
    Add by those scalars follow the op, and the graph computes what the fused node does."""
    from ember.graph import parse_graph
    from ember.lowering.engine import lower_graph
    from tests.helpers import evaluate_graph

    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 2, 5, 5)).astype(np.float32), rng.standard_normal((3, 2, 1, 1)).astype(np.float32)
    for alpha, beta in ACTIVATION_PARAMS["hard_swish"]:
        attrs = (f'strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], activation="hard_swish", '
                 f'alpha={alpha!r}, beta={beta!r}')
        ir = f"""graph "g" {{
          input %x: f32[1,2,5,5]
          const @w: f32[3,2,1,1]
          %y: f32[1,3,5,5] = FusedConv(%x, @w, none, none) {{{attrs}}} name="y"
          output "y" = %y
        }}"""
        fused = parse_graph(ir, {"w": w})
        expected = evaluate_graph(fused, {"x": x})["y"]
        unfused = parse_graph(ir, {"w": w})
        lower_graph(unfused, lambda node: node.op == "FusedConv")
        ops = [n.op for n in unfused.nodes]
        assert ops == ["Conv", "HardSwish"] + (["Mul"] if alpha != 1.0 else []) + (["Add"] if beta != 0.0 else [])
        got = evaluate_graph(unfused, {"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
        act = get_activation("hard_swish")
        np.testing.assert_allclose(expected, act.reference(_conv_1x1(x, w), alpha, beta), rtol=1e-5, atol=1e-6)


def _conv_1x1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("nchw,mc->nmhw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))


def test_clip_fusion_forms():
    clip = get_op("Clip").attrs
    assert epilogue_of("Clip", clip(0.0, None)) == ("relu", 0.0, 0.0)
    assert epilogue_of("Clip", clip(0.5, None)) is None
    assert epilogue_of("Clip", clip(None, 6.0)) is None
    assert epilogue_of("Clip", clip(0, 6)) == ("clip", 0.0, 6.0)
    assert epilogue_of("Exp", None) is None


# -- scratch sizes and offsets ------------------------------------------------------------------

def test_gemm_scratch_bytes(lib):
    cases = itertools.product((1, 31, 32, 33, 64, 100, 1000, 4096), (1, 3, 27, 64, 288, 1000, 3072, 5000), THREADS)
    for n, k, threads in cases:
        c = lib.ember_gemm_scratch_bytes(n, k, threads)
        assert gemm_scratch_bytes(n, k, threads) == c, (n, k, threads)


def test_conv_direct_scratch_and_offsets(lib):
    assert len(CONVS) > 200
    for channels, hw, kernel, stride, pad in CONVS:
        g = _geom(channels, hw, (kernel, kernel), stride, _pads(kernel, pad))
        layout = DirectLayout(channels, (g.OH, g.OW), (kernel, kernel), stride)
        case = (channels, hw, kernel, stride, pad)
        c_bytes = lib.ember_conv_direct_scratch_bytes(ctypes.byref(g), 8)
        assert layout.scratch_bytes() >= c_bytes, f"Python reserves less scratch than C needs: {case}"
        assert layout.scratch_bytes() == c_bytes, f"Python's direct-conv scratch differs from C's: {case}"
        koff = np.full(channels * kernel * kernel, -1, np.int32)
        lib.ember_conv_direct_offsets(ctypes.byref(g), koff.ctypes.data)
        np.testing.assert_array_equal(layout.offsets(), koff, err_msg=str(case))


def test_conv_direct_offsets_rectangular_kernels(lib):
    for channels, hw, kernel, stride in itertools.product((2, 5), ((9, 13), (16, 7)), ((1, 3), (3, 1), (5, 3)), (1, 2)):
        g = _geom(channels, hw, kernel, stride, (1, 0, 1, 2))
        layout = DirectLayout(channels, (g.OH, g.OW), kernel, stride)
        assert layout.scratch_bytes() == lib.ember_conv_direct_scratch_bytes(ctypes.byref(g), 4)
        koff = np.full(channels * kernel[0] * kernel[1], -1, np.int32)
        lib.ember_conv_direct_offsets(ctypes.byref(g), koff.ctypes.data)
        np.testing.assert_array_equal(layout.offsets(), koff)


def test_conv_shallow_scratch(lib):
    for (channels, hw, kernel, stride, pad), threads in itertools.product(CONVS, THREADS):
        g = _geom(channels, hw, (kernel, kernel), stride, _pads(kernel, pad))
        python = shallow_scratch_bytes(channels, (kernel, kernel), stride, g.OW, threads)
        assert python == lib.ember_conv_shallow_scratch_bytes(ctypes.byref(g), threads), (channels, hw, kernel, stride)


def test_conv_taps_scratch(lib):
    for channels, hw, kernel, stride, pad in CONVS:
        for pads in (_pads(kernel, pad), (0, 1, 1, 0)):
            g = _geom(channels, hw, (kernel, kernel), stride, pads)
            python = taps_scratch_bytes(channels, (kernel, kernel), (stride, stride), (g.OH, g.OW))
            assert python == lib.ember_conv_taps_scratch_bytes(ctypes.byref(g)), (channels, hw, kernel, stride, pads)


def test_conv_rows_scratch_and_rows(lib):
    """ember_conv_rows (conv_pixel_rows' im2row) against NumPy's, and its scratch against
    PixelRowsLayout's; a dilated case and the 1x1 case that skips the channel-last copy."""
    rng = np.random.default_rng(3)
    cases = [case + (1,) for case in CONVS[::7]] + [(5, (9, 11), 3, 1, 2, 2), (16, (7, 7), 1, 1, 0, 1)]
    for channels, hw, kernel, stride, pad, dilation in cases:
        g = _geom(channels, hw, (kernel, kernel), stride, _pads(kernel, pad))
        g.DH = g.DW = dilation
        g.OH = (hw[0] + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
        g.OW = (hw[1] + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
        if g.OH < 1 or g.OW < 1:
            continue
        trivial = kernel == 1 and stride == 1 and pad == 0
        layout = PixelRowsLayout(channels, 32, hw, (g.OH, g.OW), (kernel, kernel), trivial)
        hwc_floats = lib.ember_conv_rows_scratch_floats(ctypes.byref(g))
        assert layout.scratch_bytes() == (hwc_floats + g.OH * g.OW * (layout.depth + 32)) * 4
        x = rng.standard_normal((channels, *hw)).astype(np.float32)
        padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
        expected = np.empty((g.OH * g.OW, kernel, kernel, channels), np.float32)
        for p in range(g.OH * g.OW):
            oh, ow = divmod(p, g.OW)
            for u in range(kernel):
                for v in range(kernel):
                    expected[p, u, v] = padded[:, oh * stride + u * dilation, ow * stride + v * dilation]
        g.x = x.ctypes.data
        hwc = np.zeros(max(hwc_floats, 1), np.float32)
        rows = np.full(expected.size, np.nan, np.float32)
        lib.ember_conv_rows(ctypes.byref(g), hwc.ctypes.data, rows.ctypes.data, 2)
        np.testing.assert_array_equal(rows, expected.reshape(-1), err_msg=str((channels, hw, kernel, stride, pad)))


def test_winograd_scratch_bytes(lib):
    cases = itertools.product((1, 3, 32, 33, 64), (1, 8, 32, 65), ((2, 2), (5, 5), (11, 11), (14, 14), (17, 9),
                                                                     (28, 28), (56, 56)), (0, 1), THREADS)
    count = 0
    for channels, out_channels, out_hw, pad, threads in cases:
        hw = (out_hw[0] + 2 - 2 * pad, out_hw[1] + 2 - 2 * pad)
        g = _geom(channels, hw, (3, 3), 1, (pad,) * 4)
        assert (g.OH, g.OW) == out_hw
        c = lib.ember_winograd_scratch_bytes(ctypes.byref(g), out_channels, threads)
        py = WinogradLayout(channels, out_channels, out_hw).scratch_bytes(threads)
        assert py >= c, f"Python reserves less Winograd scratch than C needs: {(channels, out_channels, out_hw)}"
        assert py == c, (channels, out_channels, out_hw, threads)
        count += 1
    assert count > 200


def test_winograd4_scratch_bytes_and_blocks(lib):
    cases = itertools.product((1, 3, 32, 33, 64, 256), (1, 8, 32, 65, 512), ((2, 2), (5, 5), (12, 12), (14, 14),
                                                                               (17, 9), (28, 28), (56, 56)), (0, 1),
                              (1, 2, 3))
    blocked = split = 0
    for channels, out_channels, out_hw, pad, threads in cases:
        hw = (out_hw[0] + 2 - 2 * pad, out_hw[1] + 2 - 2 * pad)
        g = _geom(channels, hw, (3, 3), 1, (pad,) * 4)
        layout = Winograd4Layout(channels, out_channels, out_hw, threads)
        case = (channels, out_channels, out_hw, pad, threads)
        assert layout.block == lib.ember_winograd4_block_tiles(layout.tiles, channels, out_channels, threads), case
        assert layout.tile_split == bool(lib.ember_winograd4_tile_split(layout.tiles, channels, out_channels,
                                                                         threads)), case
        assert layout.scratch_bytes() == lib.ember_winograd4_scratch_bytes(ctypes.byref(g), out_channels,
                                                                           threads), case
        blocked += layout.block < layout.tiles
        split += layout.tile_split
    assert blocked > 10 and split > 10  # large maps go in several blocks; thin ones split by tiles


def test_depthwise_scratch_bytes(lib):
    lanes = ctypes.c_long.in_dll(lib, "ember_test_vn_lanes").value
    for channels, hw, kernel, stride, pad in CONVS:
        for threads in THREADS:
            g = _geom(channels, hw, (kernel, kernel), stride, _pads(kernel, pad))
            c = lib.ember_depthwise_scratch_bytes(ctypes.byref(g), threads)
            py = depthwise_scratch_bytes((g.OH, g.OW), (kernel, kernel), (stride, stride), (1, 1), threads)
            # Python reserves the channel-blocked path's scratch wherever a 16-lane build would
            # take it (C for the vector width it was built for): it may reserve more, never less.
            assert py >= c, f"Python reserves less depthwise scratch than C needs: {(hw, kernel, stride, pad)}"
            if g.OW > DEPTHWISE_BLOCKED_MAX_OW:
                assert (c, py) == (0, 0)  # the direct path reads the input in place, nothing else
            elif lanes == 16:  # the blocked path where its padded input is small enough
                assert py == c, (hw, kernel, stride, pad)
