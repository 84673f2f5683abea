"""The ISA mapper (ember.isa.mapper): which mappings it finds, what each costs to make legal
(padding, packing, im2col, fix-ups), and that every mapping it returns computes the kernel
when run one instruction issue at a time (ember.isa.simulate)."""
from __future__ import annotations

import numpy as np
import pytest

from ember.isa.describe import load_target
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel
from ember.isa.mapper import gemm_view, map_kernel
from ember.isa.simulate import evaluate_expr, padded_issue_count, run_mapping

X86 = load_target("x86-avx512")
RVV = load_target("riscv-rvv")
NEON = load_target("aarch64-neon")
NPU = load_target("npu-systolic16")


def kernel(text: str, **notes) -> Kernel:
    return Kernel("test", parse_expr(text), **notes)


def first_lines(mappings) -> list[str]:
    return [str(m).splitlines()[0] for m in mappings]


GEMM = kernel("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:5, j:32, k:7")


def test_gemm_on_the_broadcast_fma():
    mappings, rejections = map_kernel(GEMM, X86.instruction("vfmadd231ps.bcst"))
    assert rejections == []
    best = mappings[0]
    # j (the output and B, not A) goes to the lanes; A is broadcast; k is split across issues.
    assert str(best).splitlines()[0] == ("vfmadd231ps.bcst [C=C A=A B=B] j<-j | outer i,k | util 100% | "
                                         "split-reduction k")
    assert best.layout == () and best.issues == 5 * 2 * 7
    # The other way round (A's rows in the lanes) needs A and C transposed.
    swapped = next(m for m in mappings if m.role("A") == "B")
    assert {(c.tensor, c.kind) for c in swapped.layout} == {("A", "pack"), ("C", "pack")}


def test_vector_fma_has_no_gemm_mapping_and_says_why():
    mappings, rejections = map_kernel(GEMM, X86.instruction("vfmadd231ps"))
    assert mappings == []
    assert "no kernel dimension has the class of any instruction dimension" in rejections[0].reason


def test_padding_and_length_agnostic_tails():
    narrow = kernel("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:3, j:10, k:4")
    padded = map_kernel(narrow, X86.instruction("vfmadd231ps.bcst"))[0][0]
    assert str(padded.axes[0]) == "j<-j (pad 10->16)" and padded.utilisation == pytest.approx(10 / 16)
    agnostic = map_kernel(narrow, RVV.instruction("vfmacc.vf"))[0][0]
    assert str(agnostic.axes[0]) == "j<-j" and agnostic.utilisation == 1.0  # vl covers the tail
    assert agnostic.axes[0].issues == 2


def test_vnni_types_fixups_and_packing():
    u8 = kernel("C[i, j]:i32 += A[i, k]:u8 * B[k, j]:i8 over i:2, j:16, k:8", constants=frozenset({"B"}))
    best = map_kernel(u8, X86.instruction("vpdpbusd"))[0][0]
    assert str(best).splitlines()[0] == ("vpdpbusd [C=C A=A B=B] j<-j, k<-k | outer i | util 100% | "
                                         "split-reduction k")
    # B is [k][j] in memory; the instruction reads 16 x 4 blocks [j][k]: packed once, at compile time.
    assert [str(c) for c in best.layout] == ["pack B (compile time): reorder into contiguous B blocks (j<-j,k<-k)"]
    s8 = kernel("C[i, j]:i32 += A[i, k]:i8 * B[k, j]:i8 over i:2, j:16, k:8")
    fixed = map_kernel(s8, X86.instruction("vpdpbusd"))[0][0]
    assert [f.how.split(";")[0] for f in fixed.fixups] == ["A' = A ^ 0x80 (A + 128 as u8)"] and not fixed.lossy
    f32 = map_kernel(GEMM, X86.instruction("vpdpbusd"))
    assert f32[0] == [] and "element types differ: C is i32, kernel C is f32" in f32[1][0].reason
    lossy = map_kernel(GEMM, X86.instruction("vdpbf16ps"), allow_lossy=False)
    assert lossy[0] == [] and "only a lossy fix-up" in lossy[1][0].reason


POINTWISE = kernel("O[m, oh, ow]:f32 += I[c, oh, ow]:f32 * W[m, c]:f32 over m:24, c:8, oh:7, ow:7",
                   constants=frozenset({"W"}))
DEPTHWISE = kernel("O[g, oh, ow]:f32 += I[g, oh + kh, ow + kw]:f32 * W[g, kh, kw]:f32 "
                   "over g:16, oh:5, ow:5, kh:3, kw:3", padded=frozenset({"I"}), constants=frozenset({"W"}))


def test_the_matmul_inside_a_depthwise_separable_block():
    # Pointwise: a GEMM over channels x pixels, found from the dimension classes alone.
    assert gemm_view(POINTWISE.expr) == "GEMM M=oh·ow (49) N=m (24) K=c (8)"
    lanes = first_lines(map_kernel(POINTWISE, X86.instruction("vfmadd231ps.bcst"))[0])
    assert lanes[0] == "vfmadd231ps.bcst [C=O A=W B=I] j<-oh·ow (pad 49->64) | outer m,c | util 77% | split-reduction c"
    systolic = map_kernel(POINTWISE, NPU.instruction("systolic.ws"))[0]
    assert any(str(m.axes) for m in systolic)
    assert {"r<-c (pad 8->16)", "c<-m (pad 24->32)", "t<-oh·ow"} <= {str(a) for m in systolic for a in m.axes}
    # Depthwise: the channel indexes all three operands (a batch), so per channel it is a
    # matrix-vector product over windows, or a vector op with channels in the lanes.
    assert gemm_view(DEPTHWISE.expr).startswith("batched over g (16): GEMM M=oh·ow (25) N=1 K=kh·kw (9)")
    per_channel = first_lines(map_kernel(DEPTHWISE, X86.instruction("vfmadd231ps.bcst"))[0])
    assert per_channel[0].startswith("vfmadd231ps.bcst [C=O A=W B=I] j<-oh·ow")
    channels = map_kernel(DEPTHWISE, X86.instruction("vfmadd231ps"))[0]
    assert all(m.axes[0].fused == ("g",) for m in channels)
    assert {(c.tensor, c.kind) for c in channels[0].layout} >= {("I", "pack"), ("O", "pack")}


def test_windows_with_strides_need_im2col_and_straddling_rows_are_caught():
    strided = kernel("O[oh, ow]:f32 += I[oh*2 + kh, ow*2 + kw]:f32 * W[kh, kw]:f32 over oh:4, ow:16, kh:3, kw:3")
    best = map_kernel(strided, X86.instruction("vfmadd231ps.bcst"))[0][0]
    assert [c.kind for c in best.layout] == ["im2col"]
    # Stride 1, rows of 16: each 16-lane block is one row of the (padded) input: read in place.
    rows = kernel("O[oh, ow]:f32 += I[oh + kh, ow + kw]:f32 * W[kh, kw]:f32 over oh:4, ow:16, kh:3, kw:3",
                  padded=frozenset({"I"}))
    fused = next(m for m in map_kernel(rows, X86.instruction("vfmadd231ps.bcst"))[0] if len(m.axes[0].fused) == 2)
    assert [c.kind for c in fused.layout] == ["pad"]
    # Rows of 12: a block of 16 spans two rows, whose input rows are 14 apart, not 12.
    short = kernel("O[oh, ow]:f32 += I[oh + kh, ow + kw]:f32 * W[kh, kw]:f32 over oh:4, ow:12, kh:3, kw:3")
    fused = next(m for m in map_kernel(short, X86.instruction("vfmadd231ps.bcst"))[0] if len(m.axes[0].fused) == 2)
    assert [c.kind for c in fused.layout] == ["im2col"]


CASES = [
    (GEMM, X86, "vfmadd231ps.bcst"),
    (kernel("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:3, j:10, k:5"), X86, "vdpbf16ps"),
    (kernel("C[i, j]:i32 += A[i, k]:u8 * B[k, j]:i8 over i:2, j:20, k:7"), X86, "vpdpbusd"),
    (kernel("C[i, j]:i32 += A[i, k]:i8 * B[j, k]:i8 over i:3, j:6, k:9"), NEON, "sdot.4s.lane"),
    (kernel("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:3, j:11, k:4"), RVV, "vfmacc.vf"),
    (POINTWISE, X86, "vfmadd231ps.bcst"),
    (DEPTHWISE, X86, "vfmadd231ps"),
    (DEPTHWISE, X86, "vfmadd231ps.bcst"),
    (kernel("O[m, oh, ow]:f32 += I[c, oh*2 + kh, ow*2 + kw]:f32 * W[m, c, kh, kw]:f32 "
            "over m:5, c:3, oh:3, ow:3, kh:2, kw:2"), NPU, "systolic.ws"),
    (kernel("C[b, i, j]:f32 += A[b, i, k]:f32 * B[k, j]:f32 over b:2, i:3, j:17, k:5"), NPU, "systolic.ws"),
]


@pytest.mark.parametrize("case, target, name", CASES, ids=[f"{c[1].name}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_every_mapping_computes_the_kernel(case, target, name):
    """Each mapping (the first 6), run issue by issue through the instruction's own semantics,
    gives the kernel's result."""
    rng = np.random.default_rng(3)
    expr = case.expr
    extents = expr.extents
    arrays = {}
    for access in (expr.a, expr.b):
        shape = tuple(i.span(extents) for i in access.indices)
        arrays[access.tensor] = rng.integers(-4, 5, size=shape).astype(np.float64)
    out_shape = tuple(i.span(extents) for i in expr.output.indices)
    expected = evaluate_expr(expr, arrays, out_shape)
    mappings, _ = map_kernel(case, target.instruction(name))
    assert mappings
    for mapping in mappings[:6]:
        simulation = run_mapping(mapping, arrays, out_shape)
        np.testing.assert_array_equal(simulation.out, expected, err_msg=str(mapping))
        assert simulation.issues == padded_issue_count(mapping)


def test_simulated_cycles_agree_with_the_schedule():
    """On the NPU, the functional simulator's busy cycles (a fold per issue, 2R + C + T - 2
    each) are the scheduler's compute term when the stream fits the scratchpad in one tile."""
    from ember.isa.schedule import schedule

    case = kernel("C[i, j]:i32 += A[i, k]:i8 * B[k, j]:i8 over i:40, j:20, k:24")
    rng = np.random.default_rng(4)
    arrays = {"A": rng.integers(-3, 4, (40, 24)).astype(np.float64), "B": rng.integers(-3, 4, (24, 20)).astype(float)}
    for mapping in map_kernel(case, NPU.instruction("systolic.ws"))[0]:
        simulation = run_mapping(mapping, arrays, (40, 20))
        np.testing.assert_array_equal(simulation.out, arrays["A"] @ arrays["B"])
        assert schedule(mapping, NPU).compute_cycles == simulation.cycles, str(mapping)
    fma = map_kernel(GEMM, X86.instruction("vfmadd231ps.bcst"))[0][0]
    extents = GEMM.expr.extents
    simulation = run_mapping(fma, {"A": np.ones((5, 7)), "B": np.ones((7, 32))}, (extents["i"], extents["j"]))
    assert simulation.cycles == fma.issues / 2  # two FMAs issued per cycle
