"""The bf16 precision mode (ember.compile(precision="bf16"), codegen/kernels/gemm_bf16.py and
runtime/ember_gemm_bf16.c): results against the interpreter in float32 within bf16's
precision, and against an emulation (both operands rounded to bfloat16 as vcvtne2ps2bf16
rounds, float32/64 sums) within float32 accumulation-order error; the vdpbf16ps and portable
paths of the C (the portable one built alone, forced); the packed layouts and the scratch
formulas against the C; the kernel choice in the LIR and in stats; ResNet-18's top-1; the
refusals."""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.backends.cpu import CpuBackend
from ember.backends.cpu import backend as cpu_backend_module
from ember.backends.cpu.build import build_library
from ember.backends.cpu.features import has_avx512_bf16
from ember.codegen.kernels.gemm_bf16 import (
    bf16_bits,
    gemm_bf16_scratch_bytes,
    pack_a_blocks,
    pack_b_panels,
    stored_weight_bytes,
    winograd_bf16_scratch_bytes,
)
from ember.codegen.kernels.layouts import WinogradLayout
from ember.codegen.runtime_files import RUNTIME_SOURCES, runtime_source
from ember.driver import compile_model, load_model, prepare_program
from ember.lir.text import parse_program, print_program
from ember.support.errors import EmberError
from tests.conftest import require_shared_models

needs_bf16 = pytest.mark.skipif(not has_avx512_bf16(), reason="the host has no AVX512-BF16")
EPS32 = 2.0 ** -24
# A library source naming the bf16 Winograd: the cpu backend links the kernel library files it
# names and those they call (the bf16 and float32 GEMMs, the float32 Winograd).
LINKS_BF16 = '#include "ember_gemm.h"\nvoid *ember_bf16_test_unit = (void *)ember_winograd_bf16;\n'


def rounded(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 (nearest even; denormals to zero) and back, independently of
    bf16_bits: through ml_dtypes."""
    x = np.where(np.abs(x) < 2.0 ** -126, 0.0, x).astype(np.float32)
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def model_of(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              initializer=[numpy_helper.from_array(w, n) for n, w in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check(y: np.ndarray, exact: np.ndarray, magnitude: np.ndarray, k: int) -> None:
    """y against the emulation: within float32 accumulation-order error, k * eps * sum |a b|."""
    bound = 2 * (k + 2) * EPS32 * magnitude + 1e-30
    excess = np.abs(y.astype(np.float64) - exact) / bound
    assert excess.max() <= 1.0, f"off the emulation by {excess.max():.2f}x the accumulation bound"


def relative(y: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(y - reference).max() / max(1e-30, np.abs(reference).max()))


# Layouts and the scratch formula against the C --------------------------------------------


def test_bf16_bits_round_as_the_instruction():
    # Halfway cases go to even, denormals flush to signed zero, NaN stays NaN (quiet).
    x = np.array([1.00390625, 1.01171875, 1e-39, -1e-39, 3.0, -2.5, np.inf, np.nan], np.float32)
    bits = bf16_bits(x)
    assert list(bits[:7]) == [0x3F80, 0x3F82, 0x0000, 0x8000, 0x4040, 0xC020, 0x7F80]
    assert bits[7] & 0x7F80 == 0x7F80 and bits[7] & 0x7F


@needs_bf16
def test_packed_layouts_and_scratch_match_the_c():
    library = ctypes.CDLL(str(build_library(LINKS_BF16)))
    library.ember_gemm_bf16_scratch_bytes.restype = ctypes.c_long
    library.ember_gemm_bf16_scratch_bytes.argtypes = [ctypes.c_long] * 3 + [ctypes.c_int] * 4
    for m, n, k, threads in [(1, 1, 1, 1), (9, 33, 7, 2), (64, 3136, 576, 1), (512, 49, 4608, 2), (5, 40, 0, 1)]:
        for a_packed, b_packed, repacked in [(1, 0, 1), (1, 0, 0), (0, 1, 0)]:
            c = library.ember_gemm_bf16_scratch_bytes(m, n, k, a_packed, b_packed, repacked, threads)
            assert gemm_bf16_scratch_bytes(m, n, k, bool(a_packed), bool(b_packed), bool(repacked), threads) == c
    class Geometry(ctypes.Structure):
        _fields_ = [("x", ctypes.c_void_p)] + [
            (f, ctypes.c_long) for f in ("C", "H", "W", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "OH", "OW")]

    library.ember_winograd_bf16_scratch_bytes.restype = ctypes.c_long
    for c, m, size, threads in [(32, 40, 13, 1), (64, 64, 56, 2), (33, 512, 14, 2)]:
        layout = WinogradLayout(c, m, (size, size))
        g = Geometry(None, c, size, size, 3, 3, 1, 1, 1, 1, 1, 1, size, size)
        expected = library.ember_winograd_bf16_scratch_bytes(ctypes.byref(g), ctypes.c_long(m), ctypes.c_int(threads))
        # As the float32 Winograd's (test_c_formulas): Python may reserve more, never less.
        assert expected <= winograd_bf16_scratch_bytes(layout, threads) <= expected + 64 * threads
    rng = np.random.default_rng(1)
    for m, k in [(1, 1), (9, 7), (17, 64), (8, 33)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        expected = pack_a_blocks(a).reshape(-1)
        got = np.zeros(expected.size, np.uint32)
        ptr = ctypes.POINTER(ctypes.c_uint32)
        library.ember_bf16_pack_a(got.ctypes.data_as(ptr), a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                  ctypes.c_long(k), ctypes.c_long(m), ctypes.c_long(k), ctypes.c_long(0),
                                  ctypes.c_long(-(-m // 8)))
        np.testing.assert_array_equal(got, expected)
        b = a.T.copy()  # [k, m]: one panel when m <= 32
        if m <= 32:
            panel = pack_b_panels(b).reshape(-1)
            got = np.zeros(panel.size, np.uint32)
            library.ember_bf16_pack_panel(got.ctypes.data_as(ptr), b.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                          ctypes.c_long(m), ctypes.c_long(k), ctypes.c_int(m))
            np.testing.assert_array_equal(got, panel)


@pytest.fixture(scope="module")
def portable(tmp_path_factory) -> ctypes.CDLL:
    """The bf16 GEMM with its portable path forced (what a CPU without AVX512-BF16 runs), built
    alone: ember_gemm_bf16.c and the ember_gemm.c it calls."""
    folder: Path = tmp_path_factory.mktemp("portable")
    for name in RUNTIME_SOURCES:
        (folder / name).write_text(runtime_source(name))
    library = folder / "portable.so"
    subprocess.run(["gcc", "-O1", "-std=gnu11", "-fPIC", "-shared", "-DEMBER_BF16_PORTABLE", f"-I{folder}",
                    str(folder / "ember_gemm.c"), str(folder / "ember_gemm_bf16.c"), "-o", str(library), "-lm"],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(library))


@needs_bf16
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (13, 37, 45), (8, 64, 96)])
def test_both_paths_of_the_c_match_the_emulation(portable, m, k, n):
    """ember_gemm_bf16 called directly, A from float rows and B from compile-time panels or
    float rows, on the vdpbf16ps path (the host) and the portable one."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    panels = pack_b_panels(b)
    ra, rb = rounded(a).astype(np.float64), rounded(b).astype(np.float64)
    native = ctypes.CDLL(str(build_library(LINKS_BF16)))
    assert (native.ember_bf16_native(), portable.ember_bf16_native()) == (1, 0)
    for library in (native, portable):
        for packed in (True, False):
            c = np.full((m, n), np.nan, np.float32)
            scratch = np.zeros(gemm_bf16_scratch_bytes(m, n, k, False, packed, False, 1) // 4 + 1, np.uint32)
            pointer = ctypes.c_void_p
            library.ember_gemm_bf16(
                ctypes.c_long(m), ctypes.c_long(n), ctypes.c_long(k), None, pointer(a.ctypes.data), ctypes.c_long(k),
                pointer(panels.ctypes.data) if packed else None, None, None,
                None if packed else pointer(b.ctypes.data), ctypes.c_long(n), pointer(c.ctypes.data),
                ctypes.c_long(n), None, pointer(scratch.ctypes.data), ctypes.c_int(1))
            check(c, ra @ rb, np.abs(ra) @ np.abs(rb), k)


# MatMul, Gemm and Conv against the interpreter and the emulation -------------------------


@needs_bf16
@pytest.mark.parametrize("shape,k,n", [((1,), 5, 7), ((2, 37), 51, 70), ((64,), 128, 32), ((2, 3), 1, 40),
                                       ((130,), 257, 97), ((), 33, 65)])
@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_bf16(shape, k, n, threads):
    # A MatMul by a 2-D weight becomes FullyConnected; with a 1-D left operand it stays MatMul.
    rng = np.random.default_rng(len(shape) * 1000 + k)
    w = rng.standard_normal((k, n)).astype(np.float32)
    a = rng.standard_normal((*shape, k)).astype(np.float32)
    model = model_of([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", list(a.shape))], ["y"], {"w": w})
    compiled = compile_model(model, CpuBackend(num_threads=threads, precision="bf16"))
    kernel = "matmul_bf16" if not shape else "fully_connected_bf16"
    assert list(compiled.stats["precision"]["nodes"].values()) == [f"bf16 ({kernel})"]
    y = compiled.run({"a": a})["y"]
    reference = ember.compile(model, backend="interpreter").run({"a": a})["y"]
    assert relative(y, reference) < 1e-2
    ra, rw = rounded(a).astype(np.float64), rounded(w).astype(np.float64)
    check(y, ra @ rw, np.abs(ra) @ np.abs(rw), k)


@needs_bf16
def test_gemm_with_epilogue_bf16():
    # Gemm (transB, bias) + Relu + a residual Add: FullyConnected with its fused epilogue.
    rng = np.random.default_rng(3)
    m, k, n = 19, 45, 67
    w = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("Add", ["r", "s"], ["y"])]
    model = model_of(nodes, [("x", [m, k]), ("s", [m, n])], ["y"], {"w": w, "b": bias})
    feeds = {"x": rng.standard_normal((m, k)).astype(np.float32), "s": rng.standard_normal((m, n)).astype(np.float32)}
    compiled = compile_model(model, CpuBackend(num_threads=1, precision="bf16"))
    assert set(compiled.stats["precision"]["nodes"].values()) == {"bf16 (fully_connected_bf16)"}
    y = compiled.run(feeds)["y"]
    assert relative(y, ember.compile(model, backend="interpreter").run(feeds)["y"]) < 1e-2
    rx, rw = rounded(feeds["x"]).astype(np.float64), rounded(w).astype(np.float64)
    exact = np.maximum(rx @ rw.T + bias, 0) + feeds["s"]
    check(y, exact, np.abs(rx) @ np.abs(rw).T + np.abs(bias) + np.abs(feeds["s"]), k)


CONVS = [  # (C, H, W, M, kernel, stride, pad, group)
    (3, 17, 15, 16, 3, 1, 1, 1),     # odd K (27)
    (8, 9, 9, 12, 1, 1, 0, 1),       # 1x1: the input read in place
    (6, 20, 20, 70, 5, 2, 2, 1),     # strided, M not a multiple of 8
    (8, 12, 10, 8, 3, 1, 1, 2),      # grouped
    (64, 8, 8, 64, 3, 1, 1, 1),      # 3x3 with channels (Winograd's shape in fp32)
]


@needs_bf16
@pytest.mark.parametrize("case", CONVS, ids=[f"c{c[0]}_{c[1]}x{c[2]}_m{c[3]}_k{c[4]}s{c[5]}g{c[7]}" for c in CONVS])
def test_conv_bf16(case):
    c, h, wd, m, kernel, stride, pad, group = case
    rng = np.random.default_rng(sum(case))
    w = rng.standard_normal((m, c // group, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    x = rng.standard_normal((2, c, h, wd)).astype(np.float32)

    def conv_model(weights: np.ndarray) -> onnx.ModelProto:
        node = helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride] * 2, pads=[pad] * 4, group=group)
        return model_of([node, helper.make_node("Relu", ["c"], ["y"])], [("x", list(x.shape))], ["y"],
                        {"w": weights, "b": bias})

    compiled = compile_model(conv_model(w), CpuBackend(num_threads=2, precision="bf16"))
    assert set(compiled.stats["precision"]["nodes"].values()) == {"bf16 (conv_bf16)"}
    y = compiled.run({"x": x})["y"]
    assert relative(y, ember.compile(conv_model(w), backend="interpreter").run({"x": x})["y"]) < 1e-2
    # The emulation: the interpreter (float32) on the rounded operands, and on their magnitudes.
    exact = ember.compile(conv_model(rounded(w)), backend="interpreter").run({"x": rounded(x)})["y"]
    plain = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride] * 2, pads=[pad] * 4, group=group)
    magnitude_model = model_of([plain], [("x", list(x.shape))], ["y"], {"w": np.abs(rounded(w)), "b": np.abs(bias)})
    magnitude = ember.compile(magnitude_model, backend="interpreter").run({"x": np.abs(rounded(x))})["y"]
    check(y, exact.astype(np.float64), magnitude.astype(np.float64) * 1.001, c // group * kernel * kernel)


@needs_bf16
def test_conv1d_and_dilated_bf16():
    # 1-D convolutions run as 2-D ones with H = 1; dilation goes through im2col.
    rng = np.random.default_rng(11)
    w1, w2 = rng.standard_normal((24, 6, 5)).astype(np.float32), rng.standard_normal((16, 6, 3, 3)).astype(np.float32)
    x1, x2 = rng.standard_normal((2, 6, 50)).astype(np.float32), rng.standard_normal((1, 6, 15, 15)).astype(np.float32)
    cases = [(w1, x1, {"pads": [2, 2], "strides": [1]}), (w2, x2, {"pads": [2] * 4, "dilations": [2, 2]})]
    for w, x, attrs in cases:
        node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
        model = model_of([node], [("x", list(x.shape))], ["y"], {"w": w})
        compiled = compile_model(model, CpuBackend(num_threads=2, precision="bf16"))
        assert list(compiled.stats["precision"]["nodes"].values()) == ["bf16 (conv_bf16)"]
        y = compiled.run({"x": x})["y"]
        exact = ember.compile(model_of([node], [("x", list(x.shape))], ["y"], {"w": rounded(w)}),
                              backend="interpreter").run({"x": rounded(x)})["y"]
        assert relative(y, ember.compile(model, backend="interpreter").run({"x": x})["y"]) < 1e-2
        assert relative(y, exact) < 1e-5


def winograd_emulation(x: np.ndarray, w: np.ndarray, bias: np.ndarray, pad: int):
    """F(2x2, 3x3) as conv_winograd_bf16 computes it: the input transform in float32 in the C's
    order, U = G g G^T and V rounded to bf16, the 16 products summed exactly, the output
    transform; returns the result and its magnitude (the same sums over absolute values)."""
    n, c, h, wd = x.shape
    m = w.shape[0]
    oh, ow = h + 2 * pad - 2, wd + 2 * pad - 2
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    padded = np.zeros((n, c, 2 * th + 2, 2 * tw + 2), np.float32)
    padded[:, :, pad:pad + h, pad:pad + wd] = x
    rows = np.arange(th)[:, None] * 2 + np.arange(4)[None, :]
    cols = np.arange(tw)[:, None] * 2 + np.arange(4)[None, :]
    d = padded[:, :, rows[:, None, :, None], cols[None, :, None, :]]  # [n, c, th, tw, 4, 4]

    def b_t(t: np.ndarray, axis: int) -> np.ndarray:
        r = [np.take(t, i, axis=axis) for i in range(4)]
        return np.stack([r[0] - r[2], r[1] + r[2], r[2] - r[1], r[1] - r[3]], axis=axis)

    v = rounded(b_t(b_t(d, 4), 5)).astype(np.float64)  # [n, c, th, tw, 4, 4]
    u = rounded(WinogradLayout(c, m, (oh, ow)).transformed_weights(w).reshape(4, 4, m, c)).astype(np.float64)
    products = np.einsum("ijmc,nctsij->nmtsij", u, v)
    magnitude = np.einsum("ijmc,nctsij->nmtsij", np.abs(u), np.abs(v))
    a_t = np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]])
    out = np.einsum("pi,nmtsij,qj->nmtpsq", a_t, products, a_t).reshape(n, m, 2 * th, 2 * tw)
    mag = np.einsum("pi,nmtsij,qj->nmtpsq", np.abs(a_t), magnitude, np.abs(a_t)).reshape(n, m, 2 * th, 2 * tw)
    bias = bias.reshape(1, m, 1, 1)
    return out[:, :, :oh, :ow] + bias, mag[:, :, :oh, :ow] + np.abs(bias)


@needs_bf16
@pytest.mark.parametrize("channels,out_channels,size", [(32, 40, 13), (33, 32, 16)])
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_bf16(channels, out_channels, size, threads):
    rng = np.random.default_rng(channels + size)
    w = rng.standard_normal((out_channels, channels, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    x = rng.standard_normal((2, channels, size, size)).astype(np.float32)
    model = model_of([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4)], [("x", list(x.shape))], ["y"],
                     {"w": w, "b": bias})
    compiled = compile_model(model, CpuBackend(num_threads=threads, precision="bf16"))
    assert list(compiled.stats["precision"]["nodes"].values()) == ["bf16 (conv_winograd_bf16)"]
    y = compiled.run({"x": x})["y"]
    assert relative(y, ember.compile(model, backend="interpreter").run({"x": x})["y"]) < 1e-2
    exact, magnitude = winograd_emulation(x, w, bias, 1)
    check(y, exact, magnitude, channels + 8)
    # Winograd off: the im2col bf16 kernel.
    plain = compile_model(model, CpuBackend(num_threads=threads, precision="bf16", winograd=False))
    assert list(plain.stats["precision"]["nodes"].values()) == ["bf16 (conv_bf16)"]


# Kernel choice: the LIR, stats, what stays float32 ----------------------------------------


@needs_bf16
def test_choice_is_in_the_lir_and_stats(capsys, tmp_path):
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("Conv", ["c", "d"], ["y"], pads=[1] * 4, group=8)]  # depthwise: stays fp32
    model = model_of(nodes, [("x", [1, 4, 10, 10])], ["y"], {
        "w": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
        "d": rng.standard_normal((8, 1, 3, 3)).astype(np.float32)})
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    from ember.cli import main

    assert main(["dump", path, "--stage", "lir", "--backend", "cpu", "--precision", "bf16"]) == 0
    lir = capsys.readouterr().out
    assert "kernel conv_bf16(" in lir and "packed bf16_blocks of @w" in lir and "kernel conv_depthwise(" in lir
    assert main(["run", path, "--backend", "cpu", "--precision", "bf16", "--repeat", "1"]) == 0
    assert "backend cpu" in capsys.readouterr().out
    compiled = ember.compile(path, backend="cpu", precision="bf16")
    decisions = list(compiled.stats["precision"]["nodes"].values())
    assert decisions[0] == "bf16 (conv_bf16)" and decisions[1].startswith("fp32 (conv_depthwise): depthwise")
    assert "precision" not in ember.compile(path, backend="cpu").stats
    # Deterministic: the same model and options give the same C.
    sources = []
    for _ in range(2):
        backend = CpuBackend(precision="bf16")
        program, _, _ = prepare_program(load_model(path), backend)
        sources.append(backend.generate(program).source)
    assert sources[0] == sources[1] and "ember_gemm_bf16(" in sources[0]
    # The LIR with bf16 kernels and packed weights round-trips through its text.
    text = print_program(program)
    assert print_program(parse_program(text, {b.name: b.data for b in program.weights})) == text


# ResNet-18 --------------------------------------------------------------------------------


@needs_bf16
def test_resnet18_top1_agrees():
    shared_models = require_shared_models()
    reference = np.load(shared_models / "resnet18.ref.npz")
    compiled = ember.compile(str(shared_models / "resnet18.onnx"), backend="cpu", precision="bf16")
    assert all(v.startswith("bf16") for v in compiled.stats["precision"]["nodes"].values())
    # The library stores bf16 pairs in place of the float32 weights: about half the bytes,
    # but for the 3x3 convolutions' F(2x2, 3x3) copies, 16/9 of theirs (float32 measured here
    # without Winograd, whose F(4x4, 3x3) copies are 4x).
    program, _, _ = prepare_program(load_model(str(shared_models / "resnet18.onnx")), CpuBackend(winograd=False))
    assert 0.5 < compiled.stats["precision"]["stored_weight_bytes"] / stored_weight_bytes(program) < 0.62
    feeds = {s.name: reference[f"in_{s.name}"] for s in compiled.inputs}
    y = next(iter(compiled.run(feeds).values()))
    expected = reference["out_0"]
    assert np.array_equal(y.reshape(len(y), -1).argmax(1), expected.reshape(len(expected), -1).argmax(1))
    assert relative(y, expected) < 3e-2


# Refusals ---------------------------------------------------------------------------------


MATMUL = model_of([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", [2, 3])], ["y"],
                  {"w": np.ones((3, 4), np.float32)})


def test_bad_precision_is_refused():
    with pytest.raises(EmberError, match=r"precision='fp8': expected one of 'fp32', 'bf16', 'int8'"):
        ember.compile(MATMUL, backend="cpu", precision="fp8")
    with pytest.raises(EmberError, match="computes in fp32 or bf16"):
        CpuBackend(precision="int4")


def test_bf16_on_a_backend_without_it_is_refused():
    with pytest.raises(EmberError, match="backend 'interpreter' has no bf16 kernels"):
        ember.compile(MATMUL, backend="interpreter", precision="bf16")
    with pytest.raises(EmberError, match="needs one backend by name"):
        ember.compile(MATMUL, backend=["cpu", "interpreter"], precision="bf16")


def test_int8_needs_a_profile_and_profiles_mean_int8():
    with pytest.raises(EmberError, match="precision='int8' needs a quantization profile: pass quantize="):
        ember.compile(MATMUL, backend="cpu", precision="int8")
    with pytest.raises(EmberError, match="a profile quantizes to int8"):
        ember.compile(MATMUL, backend="cpu", precision="bf16", quantize="profile.json")


def test_bf16_on_a_cpu_without_it_is_refused(monkeypatch):
    monkeypatch.setattr(cpu_backend_module, "has_avx512_bf16", lambda: False)
    with pytest.raises(EmberError, match=r"precision='bf16' needs a CPU with AVX512-BF16 \(vdpbf16ps\)"):
        ember.compile(MATMUL, backend="cpu", precision="bf16")
    assert ember.compile(MATMUL, backend="cpu").run({"a": np.ones((2, 3), np.float32)})["y"][0, 0] == 3.0
