"""RISC-V Vector code from ISA-mapper schedules (ember.isa.emit_c with emit_vla's length-agnostic
tiles): cross-compiled with riscv64-linux-gnu-gcc -march=rv64gcv and run under qemu-riscv64 with
the vector extension, checked against NumPy: GEMMs with row and column tails, a transposed B and
one row, the same binary on three vector lengths, and the pointwise half of a separable block
(a 1x1 convolution from the op table, its input read in place as B). Also: the description's
assembly templates are validated, the source is deterministic, other forms are refused."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from ember.isa.describe import TARGETS_DIR, DescriptionError, load_target, parse_target
from ember.isa.emit_c import GemmCode, emit_gemm
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel
from ember.isa.mapper import map_kernel
from ember.isa.report import choose
from ember.isa.schedule import schedule
from ember.support.errors import UnsupportedError
from tests.test_isa_emit import pointwise_convolution

RVV = load_target("riscv-rvv")
CC = "riscv64-linux-gnu-gcc"
QEMU = pytest.mark.skipif(shutil.which(CC) is None or shutil.which("qemu-riscv64") is None,
                          reason="needs riscv64-linux-gnu-gcc (apt: gcc-riscv64-linux-gnu libc6-dev-riscv64-cross) "
                                 "and qemu-riscv64 (apt: qemu-user)")

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
    void *a = load("a.bin", a_bytes), *b = load("b.bin", b_bytes), *c = malloc(c_bytes);
    for (long i = 0; i < c_bytes; i++) ((unsigned char *)c)[i] = 0xff;  /* NaN where nothing is written */
    mapped_gemm(a, b, c, malloc(mapped_gemm_workspace_floats() * 4 + 4));
    FILE *f = fopen("c.bin", "wb");
    fwrite(c, 1, c_bytes, f);
    fclose(f);
    return 0;
}
"""


def gemm(m: int, n: int, k: int, transposed: bool = False) -> Kernel:
    b = "B[j, k]" if transposed else "B[k, j]"
    if m == 1:  # as the op table writes a product of one row: no i
        return Kernel("gemm", parse_expr(f"C[j]:f32 += A[k]:f32 * {b}:f32 over j:{n}, k:{k}"),
                      constants=frozenset({"B"}))
    return Kernel("gemm", parse_expr(f"C[i, j]:f32 += A[i, k]:f32 * {b}:f32 over i:{m}, j:{n}, k:{k}"),
                  constants=frozenset({"B"}))


def _build(tmp_path, code: GemmCode):
    (tmp_path / "gemm.c").write_text(code.source)
    (tmp_path / "main.c").write_text(HARNESS)
    subprocess.run([CC, "-O2", "-static", "-Wall", "-Werror", *code.flags.split(), str(tmp_path / "gemm.c"),
                    str(tmp_path / "main.c"), "-o", str(tmp_path / "gemm")], check=True)


def _run(tmp_path, code: GemmCode, a: np.ndarray, b: np.ndarray, vlen: int = 256) -> np.ndarray:
    """C from the built program under qemu with VLEN = vlen bits; b as the kernel takes it
    (packed, or the run-time B itself)."""
    a.tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    c_bytes = code.m * code.n * 4
    subprocess.run(["qemu-riscv64", "-cpu", f"rv64,v=true,vlen={vlen},vext_spec=v1.0", "-L",
                    "/usr/riscv64-linux-gnu", str(tmp_path / "gemm"), str(a.nbytes), str(b.nbytes), str(c_bytes)],
                   check=True, cwd=tmp_path, timeout=60)
    return np.fromfile(tmp_path / "c.bin", dtype=np.float32).reshape(code.m, code.n)


def _inputs(code: GemmCode, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((code.m, code.k)).astype(np.float32)
    b = rng.standard_normal((code.n, code.k) if code.b_transposed else (code.k, code.n)).astype(np.float32)
    return a, b, a.astype(np.float64) @ (b.T if code.b_transposed else b).astype(np.float64)


@QEMU
@pytest.mark.parametrize("m, n, k, transposed", [(13, 21, 37, False), (37, 45, 29, False), (5, 100, 300, True),
                                                 (1, 200, 64, False), (2, 24, 16000, False), (20, 24, 16000, False),
                                                 (13, 200, 500, False)])
def test_rvv_gemm_under_qemu(tmp_path, m, n, k, transposed):
    """20 x 24 x 16000 blocks K in two (the second block adds to the first's sums), 2 x 24 x
    16000 (one row block: B is read once) keeps K whole; 13 x 200 x 500 packs A (13 panels
    sweep each block and a 13-row slice of A outgrows L1); the others read A in place."""
    best = choose(gemm(m, n, k, transposed), RVV)
    assert best is not None and best.mapping.instruction.name == "vfmacc.vf"
    code = emit_gemm(best)
    assert (code.kc < k) == (m == 20) and code.packs_a == ((m, n, k) == (13, 200, 500))
    assert code.length_agnostic and "vfmacc.vf v" in code.source and "vsetvli" in code.source
    _build(tmp_path, code)
    a, b, expected = _inputs(code, seed=m)
    c = _run(tmp_path, code, a, code.pack_b(b))
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@QEMU
def test_one_rvv_binary_runs_on_every_vector_length(tmp_path):
    """Written for VLEN 256 (8 lanes), the strips take what vsetvli grants: half as many lanes
    (two strips per panel) or twice as many (one vector covers a panel) give the same GEMM."""
    code = emit_gemm(choose(gemm(19, 45, 23), RVV))  # type: ignore[arg-type]
    assert code.nr > 8 and 45 % code.nr != 0  # several vectors per strip and a partial last panel
    _build(tmp_path, code)
    a, b, expected = _inputs(code, seed=3)
    packed = code.pack_b(b)
    for vlen in (128, 256, 512, 1024):
        c = _run(tmp_path, code, a, packed, vlen)
        np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(23), err_msg=f"VLEN {vlen}")


@QEMU
def test_the_pointwise_half_of_a_separable_block_runs_on_rvv(tmp_path):
    """A 1x1 convolution from the op table, mapped with its pixels in the lanes and its input
    read in place (a run-time B): no padded copy of the last panel, the tile takes its width."""
    x, w, kernel, expected = pointwise_convolution(5)
    best = choose(kernel, RVV)
    assert best is not None
    assert str(best.mapping).startswith("vfmacc.vf [C=O A=W B=I] j<-oh·ow | outer m,c")  # no padding: vl tails
    code = emit_gemm(best)
    assert code.b_in_place and (code.m, code.n, code.k) == (40, 14 * 13, 24)
    assert code.workspace_elements == code.mc * code.kc and "memset" not in code.source
    _build(tmp_path, code)
    out = _run(tmp_path, code, np.ascontiguousarray(w.reshape(40, 24)), x)
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)


def test_rvv_source_is_deterministic_and_follows_the_schedule():
    best = choose(gemm(37, 45, 29), RVV)
    assert best is not None
    code = emit_gemm(best)
    assert code.source == emit_gemm(choose(gemm(37, 45, 29), RVV)).source  # type: ignore[arg-type]
    tile = dict(best.levels[0].tile)
    assert (code.mr, code.nr) == (tile["i"], tile["j'"])
    vectors, tail = code.nr // 8, 37 % code.mr
    assert code.source.count('"vfmacc.vf v') == (code.mr + tail) * vectors  # one asm tile per row count
    assert code.source.count("__asm__ volatile(\n") == (2 if tail else 1)
    assert code.mr * vectors + vectors <= 32  # accumulators and B vectors within the register file


def test_other_rvv_forms_are_refused_with_the_reason():
    lanes = map_kernel(Kernel("v", parse_expr("C[j]:f32 += A[j]:f32 * B[j]:f32 over j:32")),
                       RVV.instruction("vfmacc.vv"))[0][0]
    with pytest.raises(UnsupportedError, match=r"no C emitter for vfmacc.vv on riscv-rvv.*only C\[j\] \+= A\[\]"):
        emit_gemm(schedule(lanes, RVV))
    text = (TARGETS_DIR / "riscv-rvv.toml").read_text()
    line = text[text.index("asm.f32"):text.index("\n", text.index("asm.f32"))]
    without = parse_target(text.replace(line, ""))
    mapping = map_kernel(gemm(8, 16, 8), without.instruction("vfmacc.vf"))[0][0]
    with pytest.raises(UnsupportedError, match="must be fixed, or its register file must have asm templates"):
        emit_gemm(schedule(mapping, without))
    with pytest.raises(UnsupportedError, match="a 20 x 1 tile does not fit the vector and scalar registers"):
        emit_gemm(choose(gemm(40, 8, 8), RVV), register_tile={"i": 20, "j'": 8})  # type: ignore[arg-type]


def test_assembly_templates_are_validated_naming_the_field():
    text = (TARGETS_DIR / "riscv-rvv.toml").read_text()
    quoted = text.replace('store = "vse32.v {v}, ({p})"', 'store = "vse32.v {v}, ({p})\\\\n\\" : : \\"r\\"(0)"')
    with pytest.raises(DescriptionError, match=r"registers\[0\]\.asm\.f32\.store.*not one assembly instruction"):
        parse_target(quoted, "rvv.toml")
    unknown = text.replace('setvl = "', 'vsetvl = "')
    with pytest.raises(DescriptionError, match=r"registers\[0\]\.asm\.f32"):
        parse_target(unknown, "rvv.toml")
