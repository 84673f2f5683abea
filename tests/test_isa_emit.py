"""C generated from an ISA-mapper schedule (ember.isa.emit_c): the x86 AVX-512 GEMM built with
the system compiler and checked against NumPy (row and column tails, a transposed B), the
NEON one cross-compiled and run under qemu-aarch64, byte-identical output for the same
schedule, and forms the emitter does not handle refused with the reason."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ember.isa.describe import load_target
from ember.isa.emit_c import GemmCode, emit_gemm
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel
from ember.isa.mapper import map_kernel
from ember.isa.report import choose
from ember.isa.schedule import schedule
from ember.support.errors import UnsupportedError

X86 = load_target("x86-avx512")
NEON = load_target("aarch64-neon")


def pointwise_convolution(seed: int) -> tuple[np.ndarray, np.ndarray, Kernel, np.ndarray]:
    """A 1x1 convolution from the op table (40 filters over 24 channels of 14x13 pixels): its
    input, its weights, its ISA kernel and its reference result."""
    from ember.graph import Graph
    from ember.isa.kernels import kernels_of
    from ember.ops.nn import ConvAttrs
    from ember.types import TensorType

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 24, 14, 13)).astype(np.float32)
    w = rng.standard_normal((40, 24, 1, 1)).astype(np.float32)
    graph = Graph()
    graph.add("Conv", graph.add_input("x", TensorType.of(x)), graph.add_constant(w, "w"),
              attrs=ConvAttrs((1, 1), (0,) * 4, (1, 1)))
    node = graph.nodes[-1]
    (kernel,) = kernels_of(node)
    return x, w, kernel, node.opdef.evaluate(node.attrs, [x, w, None])[0]


def gemm(m: int, n: int, k: int, transposed: bool = False) -> Kernel:
    b = "B[j, k]" if transposed else "B[k, j]"
    if m == 1:  # as the op table writes a product of one row: no i
        return Kernel("gemm", parse_expr(f"C[j]:f32 += A[k]:f32 * {b}:f32 over j:{n}, k:{k}"),
                      constants=frozenset({"B"}))
    return Kernel("gemm", parse_expr(f"C[i, j]:f32 += A[i, k]:f32 * {b}:f32 over i:{m}, j:{n}, k:{k}"),
                  constants=frozenset({"B"}))


def _avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _inputs(code: GemmCode, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((code.m, code.k)).astype(np.float32)
    b = rng.standard_normal((code.n, code.k) if code.b_transposed else (code.k, code.n)).astype(np.float32)
    expected = a.astype(np.float64) @ (b.T if code.b_transposed else b).astype(np.float64)
    return a, b, expected


@pytest.mark.skipif(shutil.which("gcc") is None or not _avx512(), reason="needs gcc and an AVX-512 CPU")
@pytest.mark.parametrize("m, n, k, transposed", [(37, 45, 29, False), (5, 100, 300, True), (64, 48, 700, False),
                                                 (1, 200, 64, False), (21, 16, 50, False), (30, 300, 700, False),
                                                 (4, 400, 96, True)])
def test_x86_gemm_matches_numpy(tmp_path, m, n, k, transposed):
    """30 x 300 x 700 packs A (10 panels sweep each block, a 12-row slice of A outgrows L1);
    the others read it in place. Every tile loads each B vector once (the hold template)."""
    best = choose(gemm(m, n, k, transposed), X86)
    assert best is not None
    code = emit_gemm(best)
    assert code.packs_a == ((m, n, k) == (30, 300, 700))
    assert code.source.count('__asm__("" : "+v"(b0));') == (2 if m % code.mr else 1)
    (tmp_path / "gemm.c").write_text(code.source)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *code.flags.split(), str(tmp_path / "gemm.c"), "-o",
                    str(tmp_path / "gemm.so")], check=True)
    function = ctypes.CDLL(str(tmp_path / "gemm.so")).mapped_gemm
    function.argtypes = [ctypes.c_void_p] * 4
    a, b, expected = _inputs(code)
    packed = code.pack_b(b)
    c = np.full((m, n), np.nan, np.float32)
    workspace = np.zeros(code.workspace_elements, np.float32)
    function(a.ctypes.data, packed.ctypes.data, c.ctypes.data, workspace.ctypes.data)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    assert code.kc <= k and code.nr % 16 == 0 and code.mr >= 1


def _build(tmp_path, code: GemmCode):
    (tmp_path / "gemm.c").write_text(code.source)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *code.flags.split(), str(tmp_path / "gemm.c"), "-o",
                    str(tmp_path / "gemm.so")], check=True)
    function = ctypes.CDLL(str(tmp_path / "gemm.so")).mapped_gemm
    function.argtypes = [ctypes.c_void_p] * 4
    return function


@pytest.mark.skipif(shutil.which("gcc") is None or not _avx512(), reason="needs gcc and an AVX-512 CPU")
def test_the_pointwise_half_of_a_separable_block_runs_as_the_extracted_gemm(tmp_path):
    """A 1x1 convolution from the op table: the mapper reads it as a GEMM over channels x
    pixels (weights broadcast, pixels in the lanes, the input read in place), and the emitted
    kernel computes the op's reference result."""
    x, w, kernel, expected = pointwise_convolution(5)
    best = choose(kernel, X86)
    assert best is not None
    assert str(best.mapping).startswith("vfmadd231ps.bcst [C=O A=W B=I] j<-oh·ow (pad 182->192) | outer m,c")
    code = emit_gemm(best)
    assert code.b_in_place and (code.m, code.n, code.k) == (40, 14 * 13, 24)
    function = _build(tmp_path, code)
    out = np.full((40, 14 * 13), np.nan, np.float32)
    workspace = np.zeros(code.workspace_elements, np.float32)
    a = np.ascontiguousarray(w.reshape(40, 24))
    function(a.ctypes.data, x.ctypes.data, out.ctypes.data, workspace.ctypes.data)
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(shutil.which("gcc") is None or not _avx512(), reason="needs gcc and an AVX-512 CPU")
def test_a_run_time_b_is_read_in_place(tmp_path):
    kernel = Kernel("gemm", parse_expr("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:30, j:70, k:33"))
    best = choose(kernel, X86)
    assert best is not None
    code = emit_gemm(best)
    assert code.b_in_place and "B read in place (run time)" in code.summary()
    with pytest.raises(UnsupportedError, match="reads its run-time B in place"):
        code.pack_b(np.zeros((33, 70)))
    function = _build(tmp_path, code)
    a, b, expected = _inputs(code, seed=6)
    c = np.full((30, 70), np.nan, np.float32)
    workspace = np.zeros(code.workspace_elements, np.float32)  # kept alive across the call
    function(a.ctypes.data, b.ctypes.data, c.ctypes.data, workspace.ctypes.data)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(33))


def test_generated_source_is_deterministic_and_follows_the_schedule():
    best = choose(gemm(1760, 128, 1760), X86)
    assert best is not None
    first, second = emit_gemm(best).source, emit_gemm(choose(gemm(1760, 128, 1760), X86)).source  # type: ignore[arg-type]
    assert first == second
    tile = dict(best.levels[0].tile)
    code = emit_gemm(best)
    assert (code.mr, code.nr) == (tile["i"], tile["j'"])
    assert first.count("_mm512_fmadd_ps(_mm512_set1_ps(") == code.mr * code.nr // 16 + (1760 % code.mr) * code.nr // 16
    # KC x NR of B plus MR x KC of A within L2's usable share, MC x KC of A within half of it.
    assert (code.nr + code.mr) * code.kc * 4 <= X86.memory[1].usable_bytes and code.kc == 1760
    assert code.mc * code.kc * 4 <= X86.memory[1].usable_bytes / 2 and code.mc % code.mr == 0


def test_unsupported_forms_are_refused_with_the_reason():
    conv = Kernel("conv", parse_expr("O[m, oh, ow]:f32 += I[c, oh + kh, ow + kw]:f32 * W[m, c, kh, kw]:f32 "
                                     "over m:16, c:4, oh:8, ow:8, kh:3, kw:3"))
    best = choose(conv, X86)
    assert best is not None
    with pytest.raises(UnsupportedError, match="no C emitter for vfmadd231ps.bcst on x86-avx512"):
        emit_gemm(best)
    signed = Kernel("q", parse_expr("C[i, j]:i32 += A[i, k]:i8 * B[k, j]:i8 over i:4, j:16, k:8"))
    shifted = map_kernel(signed, X86.instruction("vpdpbusd"))[0][0]  # the s8 -> u8 shift has no C rewrite
    with pytest.raises(UnsupportedError, match="fix-ups without a C rewrite"):
        emit_gemm(schedule(shifted, X86))
    npu = load_target("npu-systolic16")
    systolic = map_kernel(gemm(4, 16, 8), npu.instruction("systolic.ws"))[0][0]
    with pytest.raises(UnsupportedError, match="no C emitter for systolic.ws on npu-systolic16"):
        emit_gemm(schedule(systolic, npu))
    lanes = map_kernel(Kernel("v", parse_expr("C[j]:f32 += A[j]:f32 * B[j]:f32 over j:32")),
                       X86.instruction("vfmadd231ps"))[0][0]
    with pytest.raises(UnsupportedError, match=r"only C\[j\] \+= A\[\] \* B\[j\] or C\[j\] \+= A\[k\]"):
        emit_gemm(schedule(lanes, X86))
    with pytest.raises(UnsupportedError, match="not a C identifier"):
        emit_gemm(choose(gemm(8, 16, 8), X86), name="x; system(")  # type: ignore[arg-type]


HARNESS = """
#include <stdio.h>
#include <stdlib.h>
void mapped_gemm(const void *A, const void *Bp, void *C, void *workspace);
long mapped_gemm_workspace_floats(void);
static void *load(const char *path, long bytes) {
    void *data = malloc(bytes);
    FILE *f = fopen(path, "rb");
    if (!f || fread(data, 1, bytes, f) != (size_t)bytes) exit(2);
    fclose(f);
    return data;
}
int main(int argc, char **argv) {
    long a_bytes = atol(argv[1]), b_bytes = atol(argv[2]), c_bytes = atol(argv[3]);
    void *a = load("a.bin", a_bytes), *b = load("b.bin", b_bytes), *c = calloc(c_bytes, 1);
    mapped_gemm(a, b, c, malloc(mapped_gemm_workspace_floats() * 4));
    FILE *f = fopen("c.bin", "wb");
    fwrite(c, 1, c_bytes, f);
    fclose(f);
    return 0;
}
"""


def _int8_inputs(code: GemmCode, a_dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0 if a_dtype == np.uint8 else -128, 256 if a_dtype == np.uint8 else 128,
                     size=(code.m, code.k)).astype(a_dtype)
    b = rng.integers(-128, 128, size=(code.k, code.n)).astype(np.int8)
    return a, b, a.astype(np.int64) @ b.astype(np.int64)


def _vnni() -> bool:
    try:
        return "avx512_vnni" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("gcc") is None or not _vnni(), reason="needs gcc and AVX512-VNNI")
@pytest.mark.parametrize("m, n, k", [(7, 40, 30), (33, 64, 256), (19, 16, 64), (5, 16, 18), (13, 260, 2112)])
def test_x86_vnni_gemm_is_exact(tmp_path, m, n, k):
    """K not a multiple of 4 packs A (groups padded with zeros), so does 13 x 260 x 2112 (9
    panels, a 12-row slice of 2112 bytes each outgrows L1); the others read A in place."""
    kernel = Kernel("q", parse_expr(f"C[i, j]:i32 += A[i, k]:u8 * B[k, j]:i8 over i:{m}, j:{n}, k:{k}"),
                    constants=frozenset({"B"}))
    best = choose(kernel, X86)
    assert best is not None and best.mapping.instruction.name == "vpdpbusd"
    code = emit_gemm(best)
    assert code.group == 4 and "vpdpbusd %2, %1, %0" in code.source
    assert code.packs_a == (k % 4 != 0 or k == 2112)
    (tmp_path / "gemm.c").write_text(code.source)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *code.flags.split(), str(tmp_path / "gemm.c"), "-o",
                    str(tmp_path / "gemm.so")], check=True)
    function = ctypes.CDLL(str(tmp_path / "gemm.so")).mapped_gemm
    function.argtypes = [ctypes.c_void_p] * 4
    a, b, expected = _int8_inputs(code, np.uint8)
    packed = code.pack_b(b)
    c = np.zeros((m, n), np.int32)
    workspace = np.zeros(code.workspace_elements, np.uint8)
    function(a.ctypes.data, packed.ctypes.data, c.ctypes.data, workspace.ctypes.data)
    np.testing.assert_array_equal(c, expected)


def _bf16() -> bool:
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("gcc") is None or not _bf16(), reason="needs gcc and AVX512-BF16")
@pytest.mark.parametrize("m, n, k", [(13, 40, 31), (24, 64, 64)])
def test_x86_bf16_gemm_rounds_as_described(tmp_path, m, n, k):
    """An f32 GEMM on vdpbf16ps (the lossy fix-ups: A rounded while packed, B at compile time,
    both to nearest even): products of bf16 values are exact in f32, so the result is the
    GEMM of the rounded operands up to f32 summation order."""
    import ml_dtypes

    mapping = map_kernel(gemm(m, n, k), X86.instruction("vdpbf16ps"))[0][0]
    assert mapping.lossy and [f.operand for f in mapping.fixups] == ["A", "B"]
    code = emit_gemm(schedule(mapping, X86))
    assert code.group == 2 and "ember_isa_bf16(A[" in code.source and "_mm512_dpbf16_ps" in code.source
    function = _build(tmp_path, code)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[0, 0] = 1.00390625  # halfway between two bf16 values: ties go to even
    c = np.full((m, n), np.nan, np.float32)
    workspace = np.zeros(code.workspace_elements, np.uint16)
    packed = code.pack_b(b)  # kept alive across the call
    function(a.ctypes.data, packed.ctypes.data, c.ctypes.data, workspace.ctypes.data)
    rounded = [x.astype(ml_dtypes.bfloat16).astype(np.float64) for x in (a, b)]
    np.testing.assert_allclose(c, rounded[0] @ rounded[1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(c, a.astype(np.float64) @ b, rtol=1e-6, atol=1e-6)  # it did round


def _run_qemu(tmp_path, code: GemmCode, a: np.ndarray, b: np.ndarray, out_dtype) -> np.ndarray:
    (tmp_path / "gemm.c").write_text(code.source)
    (tmp_path / "main.c").write_text(HARNESS)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", "-static", *code.flags.split(), str(tmp_path / "gemm.c"),
                    str(tmp_path / "main.c"), "-o", str(tmp_path / "gemm")], check=True)
    packed = code.pack_b(b)
    a.tofile(tmp_path / "a.bin")
    packed.tofile(tmp_path / "b.bin")
    c_bytes = code.m * code.n * np.dtype(out_dtype).itemsize
    subprocess.run(["qemu-aarch64", str(tmp_path / "gemm"), str(a.nbytes), str(packed.nbytes), str(c_bytes)],
                   check=True, cwd=tmp_path, timeout=60)
    return np.fromfile(tmp_path / "c.bin", dtype=out_dtype).reshape(code.m, code.n)


QEMU = pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None or shutil.which("qemu-aarch64") is None,
                          reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")


@QEMU
def test_neon_gemm_under_qemu(tmp_path):
    best = choose(gemm(13, 21, 37), NEON)
    assert best is not None and best.mapping.instruction.name == "fmla.4s.lane"
    code = emit_gemm(best)
    assert "vfmaq_n_f32" in code.source
    a, b, expected = _inputs(code, seed=1)
    c = _run_qemu(tmp_path, code, a, b, np.float32)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(code.k))


@QEMU
def test_neon_sdot_gemm_under_qemu(tmp_path):
    kernel = Kernel("q", parse_expr("C[i, j]:i32 += A[i, k]:i8 * B[k, j]:i8 over i:9, j:14, k:23"),
                    constants=frozenset({"B"}))
    best = choose(kernel, NEON)
    assert best is not None and best.mapping.instruction.name == "sdot.4s.lane"
    code = emit_gemm(best)
    assert "vdotq_s32" in code.source and code.group == 4
    a, b, expected = _int8_inputs(code, np.int8, seed=2)
    np.testing.assert_array_equal(_run_qemu(tmp_path, code, a, b, np.int32), expected)


@QEMU
def test_neon_pointwise_convolution_under_qemu(tmp_path):
    """The pointwise half of a separable block on NEON: a 1x1 convolution from the op table,
    its input read in place as the run-time B (the last panel copied and padded)."""
    x, w, kernel, expected = pointwise_convolution(7)
    best = choose(kernel, NEON)
    assert best is not None and str(best.mapping).startswith("fmla.4s.lane [C=O A=W B=I] j<-oh·ow")
    code = emit_gemm(best)
    assert code.b_in_place and (code.m, code.n, code.k) == (40, 14 * 13, 24)
    (tmp_path / "gemm.c").write_text(code.source)
    (tmp_path / "main.c").write_text(HARNESS)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", "-static", *code.flags.split(), str(tmp_path / "gemm.c"),
                    str(tmp_path / "main.c"), "-o", str(tmp_path / "gemm")], check=True)
    a = np.ascontiguousarray(w.reshape(40, 24))
    a.tofile(tmp_path / "a.bin")
    x.tofile(tmp_path / "b.bin")
    subprocess.run(["qemu-aarch64", str(tmp_path / "gemm"), str(a.nbytes), str(x.nbytes), str(40 * 14 * 13 * 4)],
                   check=True, cwd=tmp_path, timeout=60)
    out = np.fromfile(tmp_path / "c.bin", dtype=np.float32).reshape(1, 40, 14, 13)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
