"""int8 AOT bundles (ember.bundle(..., quantize=profile)) and the portable int8 kernels they run
off x86 (codegen/kernels/quantized_portable.py, qportable_core.py), all bit for bit against the
interpreter running the same quantized graph:

- the fixed-point requantization against float64 rint(t * m) over random, saturating and
  near-tie accumulators, fast path and float64 path alike (a host C harness);
- the kernels natively on this machine (PortableCpuBackend: the plain C loop) for every
  uint8/int8 pairing, zero points per tensor, row and column, batches, odd K, per-channel
  scales, convolutions with groups, strides, dilations and padding, ties to even;
- which kernel each target gets (LIR and generated C), and the int8 weights' size;
- the quantized MLP (shared mlp.onnx) and a small CNN bundled for Cortex-M4, built with
  arm-none-eabi-gcc (SMLAD inner loop) and run on QEMU's mps2-an386, and for aarch64-linux
  under qemu-aarch64; the firmware's flash (text + data) against the float bundle's.

Bundles are written and built once per module. Missing tools skip and name the package."""
from __future__ import annotations

import ctypes
import re
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.backends.cpu import CpuBackend
from ember.backends.cpu.portable import PortableCpuBackend, bundle_backend
from ember.cli import main as cli_main
from ember.codegen.bundle import get_target
from ember.codegen.kernels.qportable_core import PQ_C, pack_rows, requant_params, unpack_rows
from ember.codegen.kernels.quantized_portable import portable_kernels
from ember.driver import compile_graph, load_model, prepare_program, quantize_loaded
from ember.lir.text import print_program
from ember.ops.nn import ConvAttrs
from tests.conftest import require_shared_models
from tests.helpers import single_node_graph
from tests.test_bundle import AARCH64_SYSROOT, make, require, require_newlib, run_bundle

U8, I8, I32, F32 = np.uint8, np.int8, np.int32, np.float32
PAIRS = [(U8, I8), (U8, U8), (I8, I8), (I8, U8)]
INT_OPS = ("MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv")


def _ints(shape, dtype, seed, low=None, high=None) -> np.ndarray:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min if low is None else low, info.max if high is None else high, shape,
                        endpoint=True).astype(dtype)


# the requantization -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def requant_library(tmp_path_factory):
    require("cc", package="gcc")
    folder = tmp_path_factory.mktemp("requant")
    source = folder / "requant.c"
    source.write_text("#include <stdint.h>\n#include <string.h>\n" + PQ_C + """
void requant_all(long n, const int32_t *acc, const int32_t *bias, const int32_t *q, const float *s, int32_t yz,
                 int32_t lo, int32_t hi, int32_t *out)
{
    for (long i = 0; i < n; i++) out[i] = ember_pq_requant(acc[i], bias[i], q, s, s + 1, s + 2, yz, lo, hi);
}
""")
    library = folder / "requant.so"
    # -ffp-contract=fast as bundles build: the float64 path must not fuse its product.
    subprocess.run(["cc", "-O2", "-ffp-contract=fast", "-shared", "-fPIC", str(source), "-o", str(library)],
                   check=True)
    lib = ctypes.CDLL(str(library))

    def requant(t: np.ndarray, q: np.ndarray, scales: tuple, yz: int, lo: int, hi: int) -> np.ndarray:
        """t = acc + bias, each int32: t split in halves where it is beyond int32."""
        acc = np.ascontiguousarray(np.clip(t, -2**31, 2**31 - 1), np.int32)
        bias = np.ascontiguousarray(t - acc, np.int32)
        q = np.ascontiguousarray(q, np.int32)
        s = np.array(scales, np.float32)
        out = np.zeros(t.size, np.int32)
        pointer = ctypes.c_void_p
        lib.requant_all(ctypes.c_long(t.size), pointer(acc.ctypes.data), pointer(bias.ctypes.data),
                        pointer(q.ctypes.data), pointer(s.ctypes.data), ctypes.c_int32(yz), ctypes.c_int32(lo),
                        ctypes.c_int32(hi), pointer(out.ctypes.data))
        return out

    return requant


def _scales() -> list[tuple[float, float, float]]:
    """(a_scale, b_scale, y_scale) float32 triples as quantizers make them; exact ties at every
    odd t (m = 0.5), powers of two, 1/3, 0.7, and multipliers too small or too large for the
    fixed-point form (the float64 path alone)."""
    rng = np.random.default_rng(0)
    made = [(a, b, c) for a, b, c in zip(rng.random(12) * 0.1, rng.random(12) * 0.01, rng.random(12) * 0.1 + 1e-3,
                                         strict=True)]
    special = [(m, 1.0, 1.0) for m in (0.5, 0.25, 1.0, 1 / 3, 0.7, 7.0, 1e-3, 2.0**-40, 2.0**-60, 3e8)]
    return [tuple(float(F32(v)) for v in triple) for triple in special + made]


def _m(scales: tuple[float, float, float]) -> float:
    sa, sb, sy = (np.float64(v) for v in scales)
    return float(sa * sb / sy)  # the interpreter's order


def test_requant_params_fixed_point_form():
    q = requant_params(np.array([0.5, 0.2, 2.0**-60, 0.0, np.nan, 1.0, 3e8, 1e-3])).reshape(-1, 2)
    multipliers = q[:, 0].view(np.uint32)
    assert (multipliers[0], q[0, 1]) == (2**31, 0)  # 0.5 = 2**31 / 2**32: 32 bits of M for m in [1/4, 1)
    assert 2**30 <= multipliers[1] < 2**31 and q[1, 1] == 1
    assert (q[2:7, 1] == -1).all()  # no fixed-point form: the float64 product alone
    multiplier, k = int(multipliers[7]), int(q[7, 1])
    assert 2**30 <= multiplier < 2**31 and abs(Fraction(multiplier, 2**(32 + k)) - Fraction(1e-3)) <= \
        Fraction(1, 2**(33 + k))
    assert requant_params(np.array([2.0**-40]))[1] == 20  # capped: fewer bits of M, the same exactness


@pytest.mark.parametrize("yz,lo,hi", [(0, 0, 255), (128, 0, 255), (-5, -128, 127), (255, 0, 255)])
def test_requant_matches_float64_rounding(requant_library, yz, lo, hi):
    """clamp(rint(fl(t * m)) + yz): the fixed-point path and, forced (k = -1), the float64 one."""
    rng = np.random.default_rng(yz & 0xFF)
    for scales in _scales():
        m = _m(scales)
        q = requant_params(np.array([m]))
        ties = rng.integers(-400, 400, 3000)
        near = np.round((ties + 0.5) / m).astype(np.int64) if m > 1e-12 else ties
        t = np.concatenate([rng.integers(-2**31, 2**31, 4000), rng.integers(-3000, 3000, 4000),
                            *(near + d for d in (-2, -1, 0, 1, 2))]).clip(-2**32 + 2, 2**32 - 2)
        expected = np.clip(np.rint(t.astype(np.float64) * m) + yz, lo, hi).astype(np.int32)
        np.testing.assert_array_equal(requant_library(t, q, scales, yz, lo, hi), expected, err_msg=f"{scales}")
        float_only = q.copy()
        float_only[1] = -1
        np.testing.assert_array_equal(requant_library(t, float_only, scales, yz, lo, hi), expected,
                                      err_msg=f"{scales}")


def test_weight_rows_pack_for_sxtb16():
    w = _ints((3, 10), U8, 1)
    packed = pack_rows(w)
    assert packed.dtype == np.int8 and packed.size == 3 * 12  # K rounded up to 4, no more
    np.testing.assert_array_equal(unpack_rows(packed, 3, 10), (w.astype(np.int16) - 128).astype(np.int8))
    row = packed[:4].astype(np.int16).tolist()
    expected = (w[0, :4].astype(np.int16) - 128).tolist()
    assert row == [expected[0], expected[2], expected[1], expected[3]]
    assert (packed.reshape(3, 12)[:, [9, 11]] == 0).all()  # the padding k = 10, 11, stored as w8 w10 w9 w11


# the kernels, natively --------------------------------------------------------------------

_PORTABLE = PortableCpuBackend(num_threads=1)


def check(op: str, arrays: list, attrs=None, constant: tuple[int, ...] = (), kernel: str = "") -> dict:
    """Runs `op` on the portable kernels and on the interpreter: identical results, and the
    kernel the LIR selected (`kernel`: the expected one, by default the portable one)."""
    graph, feeds = single_node_graph(op, arrays, attrs, constant)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs, constant)
    chosen: set[str] = set()

    def observe(stage, artifact):
        if stage == "lir":
            chosen.update(i.kernel.name for i in artifact.instrs if i.name == op and i.kernel is not None)

    actual = compile_graph(graph, _PORTABLE, observe).run(feeds)
    assert chosen == {kernel or ("qconv_portable" if "Conv" in op else "qgemm_portable")}, chosen
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype and actual[name].shape == value.shape, name
        np.testing.assert_array_equal(actual[name], value, err_msg=name)
    return expected


def _zero(kind, dtype, size, seed):
    return None if kind is None else _ints((size,) if kind == "v" else (), dtype, seed)


@pytest.mark.parametrize("a_t,b_t", PAIRS)
@pytest.mark.parametrize("m,k,n,za,zb", [(1, 1, 1, None, None), (7, 13, 70, "t", "t"), (12, 8, 64, "v", "v"),
                                         (5, 31, 3, "t", "v"), (2, 0, 3, "t", "t")])
def test_matmul_integer_matches_interpreter(a_t, b_t, m, k, n, za, zb):
    arrays = [_ints((m, k), a_t, 1), _ints((k, n), b_t, 2), _zero(za, a_t, m, 3), _zero(zb, b_t, n, 4)]
    check("MatMulInteger", arrays, constant=(1,))


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 5, 9), (9, 6)), ((10,), (10, 3))])
def test_matmul_integer_batches_matches_interpreter(a_shape, b_shape):
    check("MatMulInteger", [_ints(a_shape, I8, 8), _ints(b_shape, U8, 9), np.array(-5, I8), np.array(200, U8)],
          constant=(1,))
    a = _ints((2, 6, 11), U8, 10)  # a zero point per row of each matrix of the batch
    check("MatMulInteger", [a, _ints((11, 5), U8, 11), _ints((6,), U8, 12), _ints((5,), U8, 13)], constant=(1,))


_MIDDLE = {U8: (100, 150), I8: (-10, 10)}  # zero points that leave sums of both signs


def _qlinear(a, b, per_col_b, y_dtype, seed, y_scale=None):
    n = b.shape[-1]
    rng = np.random.default_rng(seed)
    sa = (rng.random(1) * 0.05 + 0.01).astype(F32)
    sb = (rng.random(n if per_col_b else 1) * 0.05 + 0.01).astype(F32)
    sy = np.array([y_scale if y_scale is not None else 0.02 * a.shape[-1] ** 0.5], F32)
    za = _ints((1,), a.dtype, seed + 1, *_MIDDLE[a.dtype.type])
    zb = _ints(sb.shape, b.dtype, seed + 2, *_MIDDLE[b.dtype.type])
    zy = _ints((1,), y_dtype, seed + 3, -20 if y_dtype == I8 else 100, 20 if y_dtype == I8 else 150)
    return [a, sa, za, b, sb, zb, sy, zy]


SCALES_AND_B = (1, 3, 4, 6)  # a_scale, b, b_scale, y_scale: constants (zero points at run time)


@pytest.mark.parametrize("a_t,b_t", PAIRS)
@pytest.mark.parametrize("m,k,n,per_col", [(1, 1, 1, False), (7, 13, 70, True), (6, 64, 64, False)])
def test_qlinear_matmul_matches_interpreter(a_t, b_t, m, k, n, per_col):
    check("QLinearMatMul", _qlinear(_ints((m, k), a_t, 20), _ints((k, n), b_t, 21), per_col, a_t, 22),
          constant=SCALES_AND_B)


def test_qlinear_matmul_saturates_and_rounds_ties_to_even():
    arrays = _qlinear(_ints((3, 20, 70), U8, 30), _ints((70, 90), I8, 31), True, U8, 32, y_scale=0.05)
    y = check("QLinearMatMul", arrays, constant=SCALES_AND_B)["y0"]
    assert (y == 0).any() and (y == 255).any()
    arrays = _qlinear(_ints((20, 70), I8, 33), _ints((70, 9), I8, 34), False, I8, 35, y_scale=0.04)
    y = check("QLinearMatMul", arrays, constant=SCALES_AND_B)["y0"]
    assert (y == -128).any() and (y == 127).any()
    a, b = np.array([[1], [3], [5], [2]], U8), np.array([[1]], U8)
    arrays = [a, np.array([0.5], F32), np.array([0], U8), b, np.array([1.0], F32), np.array([0], U8),
              np.array([1.0], F32), np.array([10], U8)]
    assert check("QLinearMatMul", arrays, constant=SCALES_AND_B)["y0"].ravel().tolist() == [10, 12, 12, 11]


CONVS = [  # x shape, w shape, strides, pads, dilations, group
    ((1, 1, 3, 3), (1, 1, 2, 2), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 3, 9, 8), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 4, 10, 11), (6, 2, 3, 2), (2, 3), (1, 0, 2, 1), (1, 2), 2),
    ((1, 8, 5, 5), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),   # depthwise: direct
    ((2, 5, 4, 3), (7, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),   # pointwise: no bounds checks
    ((1, 6, 5, 5), (6, 1, 2, 3), (2, 1), (0, 1, 1, 0), (2, 1), 6),   # depthwise strided, dilated
]


@pytest.mark.parametrize("x_t,w_t", PAIRS)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv_integer_matches_interpreter(x_t, w_t, case):
    xs, ws, strides, pads, dilations, group = CONVS[case]
    zw = _ints((ws[0],), w_t, 3) if case % 2 else np.array(7, w_t)  # per output channel, per tensor
    check("ConvInteger", [_ints(xs, x_t, 1), _ints(ws, w_t, 2), np.array(100, x_t), zw],
          ConvAttrs(strides, pads, dilations, group), constant=(1,))


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("y_t", [U8, I8])
def test_qlinear_conv_matches_interpreter(case, y_t):
    xs, ws, strides, pads, dilations, group = CONVS[case]
    rng = np.random.default_rng(case)
    m = ws[0]
    w_scale = (rng.random(m if case % 2 else 1) * 0.05 + 0.01).astype(F32)
    bias = _ints((m,), I32, 7, -3000, 3000) if case != 1 else None
    x_t = U8 if y_t == U8 else I8
    arrays = [_ints(xs, x_t, 8), np.array(0.04, F32), np.array(3, x_t), _ints(ws, I8, 9), w_scale,
              _ints(w_scale.shape, I8, 6), np.array(0.5, F32), np.array(5, y_t), bias]
    y = check("QLinearConv", arrays, ConvAttrs(strides, pads, dilations, group), constant=SCALES_AND_B)["y0"]
    if case == 1:
        assert (y == np.iinfo(y_t).min).any() and (y == np.iinfo(y_t).max).any()


def test_forms_it_refuses_fall_back_to_the_x86_kernels_portable_path():
    """B or a scale known only at run time: the portable kernel says why, and the other
    kernel (whose C compiles anywhere) runs it."""
    registry = portable_kernels()
    graph, _ = single_node_graph("MatMulInteger", [_ints((2, 5), U8, 1), _ints((5, 3), I8, 2), None, None])
    from ember.codegen.kernels import OpView

    view = OpView.of_node(graph.nodes[0])
    assert "packs B at compile time" in (registry["qgemm_portable"].accepts(view) or "")
    check("MatMulInteger", [_ints((2, 5), U8, 1), _ints((5, 3), I8, 2), None, None], kernel="qgemm")
    arrays = _qlinear(_ints((4, 9), U8, 40), _ints((9, 5), I8, 41), True, U8, 42)
    check("QLinearMatMul", arrays, constant=(3,), kernel="qgemm")  # run-time scales


# models and targets ------------------------------------------------------------------------

def small_cnn():
    """Conv + Relu, depthwise Conv + Relu, pointwise Conv + Relu, a strided Conv without bias, a
    MatMul without bias (QLinearMatMul once quantized) and a Gemm with one (MatMulInteger +
    float bias)."""
    rng = np.random.default_rng(3)

    def weight(name, *shape, s=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)

    inits = [weight("c1w", 8, 1, 3, 3), weight("c1b", 8), weight("c2w", 8, 1, 3, 3), weight("c2b", 8),
             weight("pw", 12, 8, 1, 1), weight("pb", 12), weight("c3w", 16, 12, 3, 3, s=0.1),
             weight("mw", 144, 24, s=0.1), weight("gw", 10, 24, s=0.2),
             weight("gb", 10), numpy_helper.from_array(np.array([1, 144], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1], group=8, name="depthwise"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "pw", "pb"], ["pc"], name="pointwise"),
             helper.make_node("Relu", ["pc"], ["rp"], name="relu_pw"),
             helper.make_node("Conv", ["rp", "c3w"], ["c3"], pads=[1, 0, 1, 1], strides=[2, 2], name="conv3"),
             helper.make_node("Reshape", ["c3", "shape"], ["flat"], name="flatten"),
             helper.make_node("MatMul", ["flat", "mw"], ["mm"], name="matmul"),
             helper.make_node("Relu", ["mm"], ["rm"], name="relu3"),
             helper.make_node("Gemm", ["rm", "gw", "gb"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "small cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _model(name: str):
    """`name`: mlp (the shared model) or cnn, with ':SCHEMA' for a quantization schema."""
    return small_cnn() if name.startswith("cnn") else str(require_shared_models() / "mlp.onnx")


def _options(name: str) -> dict | None:
    return {"schema": name.split(":")[1]} if ":" in name else None


_PROFILES: dict[str, object] = {}


def profile_of(name: str):
    """The model's profile on random calibration data (seeded), and its input's name and shape."""
    name = name.split(":")[0]
    shape = (1, 1, 6, 6) if name == "cnn" else (1, 784)
    if name not in _PROFILES:
        rng = np.random.default_rng(0)
        feeds = [{"x" if name == "cnn" else "input": rng.standard_normal(shape).astype(F32)} for _ in range(16)]
        _PROFILES[name] = ember.profile(_model(name), feeds)
    return _PROFILES[name], ("x" if name == "cnn" else "input"), shape


@pytest.mark.parametrize("schema", ["asymmetric", "symmetric", "power2"])
def test_native_portable_model_matches_interpreter(schema):
    """uint8 activations (asymmetric), int8 ones (symmetric) and power-of-2 scales."""
    profile, input_name, shape = profile_of("cnn")
    options = {"schema": schema}
    graph = load_model(small_cnn())
    quantize_loaded(graph, profile, options)
    reference = ember.compile(small_cnn(), quantize=profile, quantize_options=options, backend="interpreter")
    assert {"QLinearConv", "QLinearMatMul"} <= set(reference.stats["ops"]["optimized"])
    kernels: set[str] = set()

    def observe(stage, artifact):
        if stage == "lir":
            kernels.update(i.kernel.name for i in artifact.instrs if i.name in INT_OPS and i.kernel is not None)

    portable = compile_graph(graph, PortableCpuBackend(num_threads=1), observe)
    assert kernels <= {"qconv_portable", "qgemm_portable"} and "qconv_portable" in kernels
    rng = np.random.default_rng(5)
    for _ in range(20):
        feeds = {input_name: (rng.standard_normal(shape) * 1.5).astype(F32)}
        np.testing.assert_array_equal(portable.run(feeds)["y"], reference.run(feeds)["y"])


def test_targets_choose_their_int8_kernels(tmp_path):
    """Off x86 the integer ops get the portable kernels (named in the LIR and the C); x86
    targets keep the VNNI/AVX2 GEMM; float models are unchanged."""
    assert get_target("cortex-m4").int8_kernels == get_target("aarch64-linux").int8_kernels == "portable"
    assert get_target("x86_64-linux").int8_kernels == "x86"
    assert isinstance(bundle_backend(get_target("cortex-m7")), PortableCpuBackend)
    assert type(bundle_backend(get_target("x86_64-linux"))) is CpuBackend
    profile, _, _ = profile_of("cnn")
    graph = load_model(small_cnn())
    quantize_loaded(graph, profile)
    program, _, _ = prepare_program(graph, bundle_backend(get_target("riscv64-linux")))
    text = print_program(program)
    assert re.search(r"^\s*QLinearConv .* kernel qconv_portable\(@in @\S+\.pq_rows, @in @pq_requant\.\w+, @scratch",
                     text, re.M), text
    assert re.search(r"^\s*QLinearMatMul .* kernel qgemm_portable\(", text, re.M)
    kernels = {i.kernel.name for i in program.instrs if i.name in INT_OPS and i.kernel is not None}
    assert kernels == {"qconv_portable", "qgemm_portable"}
    arm = ember.bundle(small_cnn(), target="cortex-m4", output_dir=tmp_path / "m4", quantize=profile)
    x86 = ember.bundle(small_cnn(), target="x86_64-linux", output_dir=tmp_path / "x86", quantize=profile)
    arm_c, x86_c = ((b.directory / "model.c").read_text() for b in (arm, x86))
    assert "[qgemm_portable]" in arm_c and "[qconv_portable]" in arm_c and "vpdpbusd" not in arm_c
    x86_kernels = set(re.findall(r"\[(q\w+)\]", x86_c))
    assert x86_kernels and "_portable]" not in x86_c, x86_kernels  # the VNNI/AVX2 integer kernels
    first = ember.bundle(small_cnn(), target="cortex-m4", output_dir=tmp_path / "again", quantize=profile)
    for name in first.files:  # deterministic
        assert (first.directory / name).read_bytes() == (arm.directory / name).read_bytes(), name


def test_cli_writes_an_int8_bundle(tmp_path, capsys):
    profile, _, _ = profile_of("cnn")
    model = tmp_path / "cnn.onnx"
    model.write_bytes(small_cnn().SerializeToString())
    profile.save(tmp_path / "cnn.profile.json")
    assert cli_main(["bundle", str(model), "--target", "cortex-m7", "-o", str(tmp_path / "out"),
                     "--quantize", str(tmp_path / "cnn.profile.json")]) == 0
    assert "bundle 'model' for cortex-m7" in capsys.readouterr().out
    assert "[qconv_portable]" in (tmp_path / "out" / "model.c").read_text()


def test_int8_weights_take_a_quarter_of_the_float_ones(tmp_path):
    """The int8 rows hold each weight once (K rounded up to 4): the quantized MLP's weight
    region is close to its parameter count, against 4 bytes a parameter for float."""
    profile, _, _ = profile_of("mlp")
    int8 = ember.bundle(_model("mlp"), target="cortex-m4", output_dir=tmp_path / "int8", quantize=profile)
    float32 = ember.bundle(_model("mlp"), target="cortex-m4", output_dir=tmp_path / "f32")
    params = 784 * 512 + 512 * 512 + 512 * 10
    assert params <= int8.layout.constant_bytes < 1.02 * params
    assert int8.layout.constant_bytes < 0.26 * float32.layout.constant_bytes


# built and run under emulation -------------------------------------------------------------

_BUILT: dict[tuple[str, str, bool], object] = {}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    def get(name: str, target: str, quantized: bool = True, *make_args: str):
        key = (name, target, quantized)
        if key not in _BUILT:
            folder = tmp_path_factory.mktemp(f"{name.replace(':', '-')}-{target}-{'int8' if quantized else 'f32'}")
            profile = profile_of(name)[0] if quantized else None
            bundle = ember.bundle(_model(name), target=target, output_dir=folder, quantize=profile,
                                  quantize_options=_options(name) if quantized else None)
            make(folder, *make_args)
            _BUILT[key] = bundle
        return _BUILT[key]

    return get


def _inputs(name: str, count: int) -> list[np.ndarray]:
    _, _, shape = profile_of(name)
    rng = np.random.default_rng(11)
    return [(rng.standard_normal(shape) * (1.0 + 0.5 * i)).astype(F32) for i in range(count)]


def _check_runs(name: str, bundle, **run) -> None:
    profile, input_name, _ = profile_of(name)
    reference = ember.compile(_model(name), quantize=profile, quantize_options=_options(name), backend="interpreter")
    for x in _inputs(name, 3):
        (actual,) = run_bundle(bundle, [x], **run)
        expected = reference.run({input_name: x})[reference.output_names[0]]
        np.testing.assert_array_equal(actual, expected)


def _firmware_flash(bundle) -> int:
    report = make(bundle.directory, "firmware")
    text, data = re.search(r"^\s*(\d+)\s+(\d+)\s+\d+\s+\d+\s+\w+\s+bundle_main.elf", report, re.M).groups()
    return int(text) + int(data)


@pytest.mark.parametrize("name", ["mlp", "cnn", "cnn:symmetric"])  # uint8 and int8 activations
def test_int8_bundle_on_cortex_m4_matches_interpreter(build, name):
    require_newlib()
    require("qemu-system-arm", package="qemu-system-arm")
    bundle = build(name, "cortex-m4")
    source = (bundle.directory / "model.c").read_text()
    assert "_portable]" in source and "#include <arm_acle.h>" in source
    _check_runs(name, bundle, firmware=True)


def test_int8_mlp_firmware_flash_against_float(build):
    require_newlib()
    int8 = _firmware_flash(build("mlp", "cortex-m4"))
    float32 = _firmware_flash(build("mlp", "cortex-m4", False))
    print(f"cortex-m4 mlp firmware flash (text + data): int8 {int8} B, float {float32} B, "
          f"{float32 / int8:.2f}x less")
    assert int8 < 0.27 * float32


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_int8_bundle_on_aarch64_matches_interpreter(build, name):
    require("aarch64-linux-gnu-gcc", package="gcc-aarch64-linux-gnu")
    require("qemu-aarch64", package="qemu-user")
    if not Path(AARCH64_SYSROOT).is_dir():
        pytest.skip(f"{AARCH64_SYSROOT} not found: install libc6-dev-arm64-cross")
    bundle = build(name, "aarch64-linux")
    _check_runs(name, bundle, runner=["qemu-aarch64", "-L", str(AARCH64_SYSROOT)])
