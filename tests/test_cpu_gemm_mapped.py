"""The cpu backend's mapped GEMM kernel (codegen/kernels/gemm_mapped.py): FullyConnected (a
MatMul with a constant weight) on 2 to 4 rows, on one thread, run on the ISA Mapper's kernel, every
accepted shape class and epilogue against the interpreter; elsewhere the hand-written GEMM
stays; the choice shows in the generated C and in `ember dump`, and the C is deterministic."""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401
from ember.backends.cpu import CpuBackend
from ember.backends.cpu.features import mapped_target
from ember.codegen.kernels.gemm_mapped import (
    MAPPED_MAX_ROWS,
    MAPPED_MAX_WEIGHT_BYTES,
    MAPPED_MIN_COLUMNS,
    mapped_gemm,
)
from ember.driver import compile_graph, prepare_program
from ember.graph.ir import Graph
from ember.ops.activations import GeluAttrs
from ember.ops.elementwise import AlphaAttrs, AlphaBetaAttrs, ClipAttrs
from ember.types import DType, TensorType
from tests.helpers import relative_error

pytestmark = pytest.mark.skipif(mapped_target() is None, reason="the host runs no ISA Mapper target (AVX-512)")

ACTIVATIONS = {"Relu": None, "Sigmoid": None, "Tanh": None, "Gelu": GeluAttrs("none"),
               "LeakyRelu": AlphaAttrs(0.1), "Clip": ClipAttrs(-0.5, 0.5), "HardSigmoid": AlphaBetaAttrs(0.3, 0.4)}


def _fc_graph(rows: tuple[int, ...], k: int, n: int, bias: bool, residual: bool, activation: str | None):
    rng = np.random.default_rng(sum(rows) * 1000 + k * 10 + n)
    w, b = rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)

    def build() -> Graph:
        g = Graph("fc")
        x = g.add_input("x", TensorType(DType.FLOAT32, (*rows, k)))
        y = g.add("MatMul", x, g.add_constant(w, "w"))
        if bias:
            y = g.add("Add", y, g.add_constant(b, "b"))
        if residual:
            y = g.add("Add", y, g.add_input("r", TensorType(DType.FLOAT32, (*rows, n))))
        if activation:
            y = g.add(activation, y, attrs=ACTIVATIONS[activation])
        g.set_outputs([("y", y)])
        return g
    return build


def _run_both(build, feeds, backend: CpuBackend) -> tuple[np.ndarray, np.ndarray, str]:
    expected = compile_graph(build(), "interpreter").run(feeds)["y"]
    compiled = compile_graph(build(), backend)
    return compiled.run(feeds)["y"], expected, compiled.executable.source


def _feeds(rows: tuple[int, ...], k: int, n: int, residual: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((*rows, k)).astype(np.float32)}
    if residual:
        feeds["r"] = rng.standard_normal((*rows, n)).astype(np.float32)
    return feeds


# Rows 2..4 (a 2-D and a 3-D activation), N with a partial last panel of the register tile, or
# a whole one, K odd or even.
SHAPES = [((2,), 512, 1024), ((4,), 96, 200), ((3,), 77, 40), ((2,), 33, 384), ((1, 2), 64, 33)]
EPILOGUES = [(True, False, None), (True, True, "Sigmoid"), (False, True, "Tanh"), (True, False, "Gelu"),
             (True, False, "Relu"), (False, False, "LeakyRelu"), (True, True, "Clip"), (True, False, "HardSigmoid"),
             (False, False, None)]


# Each epilogue on one shape, each shape under two or more epilogues (a full product takes minutes).
CASES = [(*SHAPES[i % len(SHAPES)], *epilogue) for i, epilogue in enumerate(EPILOGUES)] + [
    (*SHAPES[i], *EPILOGUES[-1 - i]) for i in range(len(SHAPES))]


def test_a_packed_per_block_through_scratch():
    """Long rows and many panels: the kernel packs A into its workspace (the plan's scratch)."""
    rows, k, n = (4,), 1600, 768
    actual, expected, source = _run_both(_fc_graph(rows, k, n, True, True, "Relu"), _feeds(rows, k, n, True),
                                         CpuBackend(num_threads=1))
    assert "[fully_connected_mapped]" in source and "_pack_a(workspace" in source
    assert "(float *)(A + " in source.split("ember_mapped_f32_4x768x1600(((")[-1].split(";")[0]
    assert relative_error(actual, expected) <= 1e-5 * k / 128


@pytest.mark.parametrize("rows,k,n,bias,residual,activation", CASES)
def test_fully_connected_on_the_mapped_kernel_matches_interpreter(rows, k, n, bias, residual, activation):
    actual, expected, source = _run_both(_fc_graph(rows, k, n, bias, residual, activation),
                                         _feeds(rows, k, n, residual), CpuBackend(num_threads=1))
    assert "[fully_connected_mapped]" in source
    assert "[fully_connected_gemm]" not in source and "ember_gemm(" not in source
    # float32 sums over K in the kernel's order, not the interpreter's: error grows with K
    assert relative_error(actual, expected) <= 1e-5 * max(1.0, k / 128)


def test_shared_weight_and_shape_define_the_kernel_once():
    """Two GEMMs of one shape call one generated function, defined once before its first use."""
    w = np.random.default_rng(2).standard_normal((64, 48)).astype(np.float32)

    def build() -> Graph:
        g = Graph("twice")
        x = g.add_input("x", TensorType(DType.FLOAT32, (2, 64)))
        h = g.add("MatMul", x, g.add_constant(w, "w"))
        z = g.add("Relu", g.add("MatMul", g.add("Tanh", x), g.add_constant(w, "w")))
        g.set_outputs([("y", g.add("Add", h, z))])
        return g
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)}
    actual, expected, source = _run_both(build, feeds, CpuBackend(num_threads=1))
    assert source.count("void ember_mapped_f32_2x48x64(") == 1
    assert source.count("#include <immintrin.h>") == 1
    assert source.count("ember_mapped_f32_2x48x64(((") == 2
    assert relative_error(actual, expected) <= 1e-5


@pytest.mark.parametrize("threads,rows,k,n,mapped", [
    (2, 2, 256, 128, True),     # 64K multiply-adds: below GEMM_PARALLEL_MIN_MACS, one thread anyway
    (2, 2, 512, 512, False),    # 512K multiply-adds: the hand-written kernel runs it on both cores
    (1, 4, 1024, 512, True),
    (1, 1, 512, 1024, False),   # one row: the hand-written kernel splits K, as fast
    (1, MAPPED_MAX_ROWS + 1, 64, 64, False),
    (1, 4, 64, MAPPED_MIN_COLUMNS - 1, False),
])
def test_selection_rule(threads, rows, k, n, mapped):
    backend = CpuBackend(num_threads=threads)
    program, _, _ = prepare_program(_fc_graph((rows,), k, n, True, False, None)(), backend)
    chosen = {i.kernel.name for i in program.instrs if i.kernel is not None}
    assert ("fully_connected_mapped" in chosen) == mapped, chosen
    assert ("fully_connected_gemm" in chosen) == (not mapped), chosen


def test_hand_written_kernels_where_asked_or_not_the_host():
    graph = _fc_graph((2,), 64, 64, True, False, "Relu")
    for backend in (CpuBackend(num_threads=1, mapped_kernels=False), CpuBackend(num_threads=1, march="x86-64-v3")):
        program, _, _ = prepare_program(graph(), backend)
        assert {i.kernel.name for i in program.instrs if i.kernel is not None} == {"fully_connected_gemm"}


def test_weights_beyond_the_cache_bound_stay_hand_written():
    n = MAPPED_MAX_WEIGHT_BYTES // (4 * 1024) + 32
    assert mapped_gemm("x86-avx512", 2, n, 1024) is not None  # a mapping exists: the rule refuses it
    program, _, _ = prepare_program(_matmul_graph(2, 1024, n)(), CpuBackend(num_threads=1))
    assert {i.kernel.name for i in program.instrs if i.kernel is not None} == {"fully_connected_gemm"}


def _matmul_graph(m: int, k: int, n: int):
    w = np.ones((k, n), np.float32)

    def build() -> Graph:
        g = Graph("mm")
        x = g.add_input("x", TensorType(DType.FLOAT32, (m, k)))
        g.set_outputs([("y", g.add("MatMul", x, g.add_constant(w, "w")))])
        return g
    return build


def test_generated_c_is_deterministic_and_dump_names_the_kernel():
    sources = []
    for _ in range(2):
        backend = CpuBackend(num_threads=1)
        program, _, _ = prepare_program(_fc_graph((2,), 96, 200, True, True, "Sigmoid")(), backend)
        sources.append(backend.generate(program).source)
    assert sources[0] == sources[1]
    from ember.lir.text import print_program

    text = print_program(program)
    assert "fully_connected_mapped" in text and "mapped_panels" in text
