"""DeepBench inference GEMMs (C[M x N] = A[M x K] * B, B a constant weight), three engines at one
thread, timed in interleaved rounds: the ISA mapper's kernel (ember.isa: mapped, scheduled and
emitted as C with AVX-512 intrinsics, built with the system compiler), Ember's hand-written
cpu GEMM (ember.compile of a MatMul) and ONNX Runtime. --int8: u8 x i8 -> i32 on VNNI
(vpdpbusd) against MatMulInteger on Ember's cpu backend and on ONNX Runtime. --gru: the gate
GEMMs of DeepBench's GRU sizes (hidden 512 and 1024, batch 1 and 4, 25 steps): all steps' input
projections at once (M = 25 x batch) and one step's recurrent projection (M = batch), weights
[3 hidden, hidden] as the GRU stores them (the mapped kernel packs them; Ember and ONNX Runtime
get their transpose as a MatMul constant). The gate arithmetic between steps is not mapped.
Prints GFLOP/s, the fraction of this CPU's FMA peak (measured: 16 independent chains of
vfmadd231ps, or of vpdpbusd for --int8, timed on this core; the description's figure is printed
beside it) and the per-round median ratios mapped / hand-written and mapped / ONNX Runtime,
with the mapper's cost model's prediction. The whole GRU, gates included: bench/isa_gru.py.

    python bench/isa_gemm.py [--rounds 5] [--sizes M,N,K ...] [--int8 | --gru] [--tune]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.isa.describe import load_target
from ember.isa.emit_c import emit_gemm
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel
from ember.isa.report import choose
from ember.isa.tune import tune_gemm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from single_op import cpu_name  # noqa: E402

# baidu-research/DeepBench code/kernels/gemm_problems.h, inference sets (M, N, K), no transposes.
DEEPBENCH = [(5124, 700, 2048), (35, 8457, 2560), (1, 7680, 2560), (1760, 128, 1760), (7680, 16, 2560)]
# baidu-research/DeepBench code/kernels/rnn_problems.h, GRU inference: (hidden, batch), 25 steps.
GRU = [(512, 1), (512, 4), (1024, 1), (1024, 4)]


def gru_gemms() -> list[tuple[int, int, int, bool]]:
    """(M, N, K, weights transposed) of each GRU size's input-gate and recurrent-gate GEMMs."""
    shapes = []
    for hidden, batch in GRU:
        shapes += [(25 * batch, 3 * hidden, hidden, True), (batch, 3 * hidden, hidden, True)]
    return shapes


def matmul_model(b: np.ndarray, m: int) -> onnx.ModelProto:
    k, n = b.shape
    integer = b.dtype == np.int8
    graph = helper.make_graph([helper.make_node("MatMulInteger" if integer else "MatMul", ["A", "B"], ["C"])], "gemm",
                              [helper.make_tensor_value_info("A", TensorProto.UINT8 if integer else TensorProto.FLOAT,
                                                             [m, k])],
                              [helper.make_tensor_value_info("C", TensorProto.INT32 if integer else TensorProto.FLOAT,
                                                             [m, n])],
                              [numpy_helper.from_array(b, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def mapped_runner(m: int, n: int, k: int, b: np.ndarray, a: np.ndarray, folder: Path, transposed: bool = False,
                  tune: bool = False):
    """b is [k, n], or [n, k] when transposed (a GRU's weights)."""
    target = load_target("x86-avx512")
    types = ("i32", "u8", "i8") if b.dtype == np.int8 else ("f32", "f32", "f32")
    b_index = "B[j, k]" if transposed else "B[k, j]"
    kernel = Kernel("gemm", parse_expr(f"C[i, j]:{types[0]} += A[i, k]:{types[1]} * {b_index}:{types[2]} "
                                       f"over i:{m}, j:{n}, k:{k}"), constants=frozenset({"B"}))
    best = choose(kernel, target)
    assert best is not None
    code = tune_gemm(best).code if tune else emit_gemm(best)
    source, library = folder / f"gemm_{m}_{n}_{k}.c", folder / f"gemm_{m}_{n}_{k}.so"
    source.write_text(code.source)
    subprocess.run(["cc", "-O3", "-march=native", "-shared", "-fPIC", *code.flags.split(), str(source), "-o",
                    str(library)], check=True)
    function = ctypes.CDLL(str(library)).mapped_gemm
    function.argtypes = [ctypes.c_void_p] * 4
    packed = code.pack_b(b)
    c = np.empty((m, n), np.int32 if b.dtype == np.int8 else np.float32)
    workspace = np.empty(code.workspace_elements, a.dtype)

    def run() -> np.ndarray:
        function(a.ctypes.data, packed.ctypes.data, c.ctypes.data, workspace.ctypes.data)
        return c

    return run, best, code


_PEAK_C = r"""
#include <immintrin.h>
void peak(long n) {  /* 16 independent accumulator chains of one FMA (or vpdpbusd) each */
    %(type)s acc[16], x = %(one)s, y = %(one)s;
    for (int i = 0; i < 16; i++) acc[i] = %(one)s;
    for (long r = 0; r < n; r++) {
        #pragma GCC unroll 16
        for (int i = 0; i < 16; i++) %(op)s;
    }
    for (int i = 1; i < 16; i++) acc[0] = %(add)s;
    __asm__ volatile("" : : "v"(acc[0]));
}
"""


def peak_probe(int8: bool, folder: Path) -> Callable[[], float]:
    """A function that times one call of this core's FMA (or VNNI) peak loop (16 independent
    chains, so neither latency nor loads limit it) and returns its GFLOP/s (GOP/s), in thread
    CPU time: called between a workload's runs, the peak is measured in the same moments."""
    if int8:
        code = _PEAK_C % {"type": "__m512i", "one": "_mm512_set1_epi8(1)", "add": "_mm512_add_epi32(acc[0], acc[i])",
                          "op": "acc[i] = _mm512_dpbusd_epi32(acc[i], x, y)"}
    else:
        code = _PEAK_C % {"type": "__m512", "one": "_mm512_set1_ps(1.0f)", "add": "_mm512_add_ps(acc[0], acc[i])",
                          "op": "acc[i] = _mm512_fmadd_ps(acc[i], x, y)"}
    source, library = folder / "peak.c", folder / "peak.so"
    source.write_text(code)
    subprocess.run(["cc", "-O2", "-march=native", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    function = ctypes.CDLL(str(library)).peak
    function.argtypes = [ctypes.c_long]
    rounds = 2_000_000
    return lambda: rounds * 16 * 16 * (8 if int8 else 2) / _timed(lambda: function(rounds)) / 1e9


def measured_peak(int8: bool, folder: Path) -> float:
    """This core's FMA (or VNNI) peak in GFLOP/s (GOP/s): the best of 5 calls of peak_probe's."""
    probe = peak_probe(int8, folder)
    return max(probe() for _ in range(5))


def _timed(run) -> float:
    start = time.thread_time()
    run()
    return time.thread_time() - start


def seconds(run, budget: float = 0.25) -> float:
    """Best of the calls that fit in `budget` seconds (at least 2), after one warm-up, in this
    thread's CPU time: all three engines compute in the calling thread at one thread, and on a
    shared machine CPU time is what another process's load disturbs least."""
    run()
    best, spent, calls = float("inf"), 0.0, 0
    while calls < 2 or spent < budget:
        start = time.thread_time()
        run()
        elapsed = time.thread_time() - start
        best, spent, calls = min(best, elapsed), spent + elapsed, calls + 1
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", nargs="*", default=None, metavar="M,N,K")
    parser.add_argument("--int8", action="store_true", help="u8 x i8 GEMMs on VNNI against MatMulInteger")
    parser.add_argument("--gru", action="store_true", help="the gate GEMMs of DeepBench's GRU sizes")
    parser.add_argument("--tune", action="store_true",
                        help="the mapped kernel's register tile chosen by measurement (ember.isa.tune, cached)")
    args = parser.parse_args()
    sizes = [(*(int(x) for x in s.split(",")), False) for s in args.sizes] if args.sizes else \
        gru_gemms() if args.gru else [(m, n, k, False) for m, n, k in DEEPBENCH]
    target = load_target("x86-avx512")
    # The description's figure: 2 FMAs x 16 lanes x 2 flops per cycle; int8: x 4 products.
    described = (4 if args.int8 else 1) * 2 * 16 * 2 * target.frequency_ghz
    with tempfile.TemporaryDirectory() as folder:
        peak = measured_peak(args.int8, Path(folder))
    print(f"CPU: {cpu_name()}; 1 thread; {'int8 (VNNI) GOP/s' if args.int8 else 'f32 GFLOP/s'}; "
          f"peak {peak:.1f} measured on this core (the description's {target.frequency_ghz} GHz x 2 FMA pipes "
          f"says {described:.1f}); best thread CPU time of ~0.25 s per engine per round, "
          f"{args.rounds} interleaved rounds")
    print(f"{'M,N,K':>18} {'mapped':>8} {'ember':>8} {'ort':>8} {'peak%':>6} {'mapped/ember':>13} "
          f"{'mapped/ort':>11} {'predicted':>10} {'tile':>9}")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        for m, n, k, transposed in sizes:
            if args.int8:
                a = rng.integers(0, 256, size=(m, k)).astype(np.uint8)
                b = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
            else:
                a = rng.standard_normal((m, k)).astype(np.float32)
                b = rng.standard_normal((k, n)).astype(np.float32)
            weights = np.ascontiguousarray(b.T) if transposed else b
            mapped, best, code = mapped_runner(m, n, k, weights, a, Path(folder), transposed, args.tune)
            model = matmul_model(b, m)
            compiled = ember.compile(model, backend="cpu", num_threads=1)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            expected = a.astype(np.float64) @ b.astype(np.float64)
            scale = 0.0 if args.int8 else np.sqrt(k)  # int8 results are exact
            for name, out in (("mapped", mapped()), ("ember", compiled.run({"A": a})["C"]),
                              ("ort", session.run(None, {"A": a})[0])):
                error = float(np.abs(out.astype(np.float64) - expected).max())
                if error > 1e-3 * scale:
                    raise SystemExit(f"{name} is wrong on {m},{n},{k}: max error {error}")
            feed = {"A": a}
            runs = {"mapped": mapped, "ember": lambda c=compiled, f=feed: c.run(f),
                    "ort": lambda s=session, f=feed: s.run(None, f)}
            times: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, run in runs.items():
                    times[name].append(seconds(run))
            flops = 2.0 * m * n * k
            gflops = {name: flops / statistics.median(values) / 1e9 for name, values in times.items()}
            vs_ember = statistics.median(e / p for p, e in zip(times["mapped"], times["ember"], strict=True))
            vs_ort = statistics.median(o / p for p, o in zip(times["mapped"], times["ort"], strict=True))
            print(f"{f'{m},{n},{k}':>18} {gflops['mapped']:8.1f} {gflops['ember']:8.1f} {gflops['ort']:8.1f} "
                  f"{100 * gflops['mapped'] / peak:5.1f}% {vs_ember:13.2f} {vs_ort:11.2f} "
                  f"{best.gflops:10.1f} {code.mr}x{code.nr}")
    print("ratios are speed-ups of the mapped kernel (>1: faster); predicted: the cost model's GFLOP/s")


if __name__ == "__main__":
    main()
