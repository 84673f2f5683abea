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


def gemm(m: int, n: int, k: int, transposed: bool = False) -> Kernel:
    b = "B[j, k]" if transposed else "B[k, j]"
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
                                                 (1, 200, 64, False)])
def test_x86_gemm_matches_numpy(tmp_path, m, n, k, transposed):
    best = choose(gemm(m, n, k, transposed), X86)
    assert best is not None
    code = emit_gemm(best)
    (tmp_path / "gemm.c").write_text(code.source)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *code.flags.split(), str(tmp_path / "gemm.c"), "-o",
                    str(tmp_path / "gemm.so")], check=True)
    function = ctypes.CDLL(str(tmp_path / "gemm.so")).mapped_gemm
    function.argtypes = [ctypes.c_void_p] * 4
    a, b, expected = _inputs(code)
    packed = code.pack_b(b)
    c = np.full((m, n), np.nan, np.float32)
    workspace = np.full(code.workspace_floats, np.nan, np.float32)
    function(a.ctypes.data, packed.ctypes.data, c.ctypes.data, workspace.ctypes.data)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    assert code.kc <= k and code.nr % 16 == 0 and code.mr >= 1


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
    vnni = Kernel("q", parse_expr("C[i, j]:i32 += A[i, k]:u8 * B[k, j]:i8 over i:4, j:16, k:8"))
    mapping = map_kernel(vnni, X86.instruction("vpdpbusd"))[0][0]
    with pytest.raises(UnsupportedError, match=r"only a broadcast FMA, C\[j\] \+= A\[\] \* B\[j\], is emitted"):
        emit_gemm(schedule(mapping, X86))
    with pytest.raises(UnsupportedError, match="not a C identifier"):
        emit_gemm(choose(gemm(8, 16, 8), X86), name="x; system(")  # type: ignore[arg-type]


HARNESS = """
#include <stdio.h>
#include <stdlib.h>
void mapped_gemm(const float *A, const float *Bp, float *C, float *workspace);
long mapped_gemm_workspace_floats(void);
static float *load(const char *path, long count) {
    float *data = malloc(count * sizeof(float));
    FILE *f = fopen(path, "rb");
    if (!f || fread(data, sizeof(float), count, f) != (size_t)count) exit(2);
    fclose(f);
    return data;
}
int main(int argc, char **argv) {
    long m = atol(argv[1]), n = atol(argv[2]), k = atol(argv[3]), packed = atol(argv[4]);
    float *a = load("a.bin", m * k), *b = load("b.bin", packed), *c = calloc(m * n, sizeof(float));
    mapped_gemm(a, b, c, malloc(mapped_gemm_workspace_floats() * sizeof(float)));
    FILE *f = fopen("c.bin", "wb");
    fwrite(c, sizeof(float), m * n, f);
    fclose(f);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")
def test_neon_gemm_under_qemu(tmp_path):
    best = choose(gemm(13, 21, 37), NEON)
    assert best is not None and best.mapping.instruction.name == "fmla.4s.lane"
    code = emit_gemm(best)
    assert "vfmaq_n_f32" in code.source
    (tmp_path / "gemm.c").write_text(code.source)
    (tmp_path / "main.c").write_text(HARNESS)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", "-static", str(tmp_path / "gemm.c"), str(tmp_path / "main.c"),
                    "-o", str(tmp_path / "gemm")], check=True)
    a, b, expected = _inputs(code, seed=1)
    packed = code.pack_b(b)
    a.tofile(tmp_path / "a.bin")
    packed.tofile(tmp_path / "b.bin")
    subprocess.run(["qemu-aarch64", str(tmp_path / "gemm"), str(code.m), str(code.n), str(code.k),
                    str(packed.size)], check=True, cwd=tmp_path, timeout=60)
    c = np.fromfile(tmp_path / "c.bin", dtype=np.float32).reshape(code.m, code.n)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(code.k))
