"""The GEMM kernel library (codegen/runtime/) at a base revision against the working tree, called
directly: each version's runtime sources are compiled with the cpu backend's flags, together
with a small harness, into a shared library of its own (loaded side by side, RTLD_LOCAL), and
the two take turns, round after round, on the same shapes. Prints per shape the median time of
each, the median per-round ratio working tree / base, and whether C came out bit-identical.

The harness times ember_gemm with compile-time packed B, a per-column bias and the activation
named by --act (fp32), or ember_gemm_bf16 with row-major float operands (--bf16). Shapes are
MxNxK; the CPU is named in the header. An activation the base revision does not know yet
falls to its default case there (no activation), so compare such epilogues within one side.

    python bench/gemm_revisions.py --base HEAD~1 --shapes 64x10x256,64x256x256 [--act gelu] [--threads 1]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ember.backends.cpu.build import BASE_FLAGS, find_compiler, target_flags  # noqa: E402
from ember.codegen import RUNTIME_SOURCES, runtime_source  # noqa: E402
from ember.codegen.runtime_files import CONFIG_HEADER  # noqa: E402
from ember.ops.fused import get_activation  # noqa: E402
from ember.support.host import cpu_name  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

HARNESS = r"""
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void fill(float *x, long n, unsigned *s)
{
    for (long i = 0; i < n; i++) { *s = *s * 1103515245u + 12345u; x[i] = ((*s >> 9) % 2000) / 1000.0f - 1.0f; }
}
/* Seconds per call over `reps` calls; C's weighted sum in *sum (bit-identity across versions). */
double bench_gemm(long M, long N, long K, int reps, int threads, int act, int bf16, double *sum)
{
    long panels = (N + EMBER_NR - 1) / EMBER_NR;
    float *a = malloc(M * K * 4), *b = malloc(K * N * 4), *c = malloc(M * N * 4 + 64), *bias = malloc(N * 4);
    float *bp = malloc(panels * K * EMBER_NR * 4);
    unsigned s = 1;
    fill(a, M * K, &s);
    fill(b, K * N, &s);
    for (long i = 0; i < N; i++) bias[i] = i * 0.01f;
    for (long p = 0; p < panels; p++) ember_pack_panel(bp + p * K * EMBER_NR, b, N, K, N, p * EMBER_NR);
    long bytes = bf16 ? ember_gemm_bf16_scratch_bytes(M, N, K, 0, 0, 0, threads) : 0;
    void *scratch = malloc(bytes + 64);
    ember_epilogue ep = { .bias = bias, .act = act };
    double t = 0;
    for (int r = -1; r < reps; r++) {  /* r = -1: warm-up */
        if (r == 0) t = now();
        if (bf16) ember_gemm_bf16(M, N, K, NULL, a, K, NULL, NULL, NULL, b, N, c, N, &ep, scratch, threads);
        else ember_gemm(M, N, K, a, K, 1, EMBER_MR * K, bp, NULL, NULL, NULL, N, NULL, c, N, &ep, NULL, threads);
    }
    t = (now() - t) / reps;
    double acc = 0;
    for (long i = 0; i < M * N; i++) acc += c[i] * (double)((i % 7) + 1);
    *sum = acc;
    free(a); free(b); free(c); free(bias); free(bp); free(scratch);
    return t;
}
"""


def _sources(revision: str | None) -> dict[str, str]:
    """The runtime sources as the cpu backend ships them: the working tree's, or a revision's
    (ember_config.h is generated from the working tree's constants either way)."""
    texts = {}
    for name in RUNTIME_SOURCES:
        if revision is None or name == CONFIG_HEADER:
            texts[name] = runtime_source(name)
        else:
            spec = f"{revision}:src/ember/codegen/runtime/{name}"
            texts[name] = subprocess.run(["git", "-C", str(REPO), "show", spec], capture_output=True, text=True,
                                         check=True).stdout
    return texts


def _build(folder: Path, texts: dict[str, str]) -> ctypes.CDLL:
    folder.mkdir()
    for name, text in texts.items():
        (folder / name).write_text(text)
    unit = folder / "bench_unit.c"
    unit.write_text("".join(f'#include "{n}"\n' for n in texts if n.endswith(".c")) + HARNESS)
    library = folder / "bench.so"
    subprocess.run([*find_compiler().split(), *BASE_FLAGS, *target_flags(), f"-I{folder}", str(unit), "-o",
                    str(library), "-lm"], check=True)
    lib = ctypes.CDLL(str(library))
    lib.bench_gemm.restype = ctypes.c_double
    lib.bench_gemm.argtypes = [ctypes.c_long] * 3 + [ctypes.c_int] * 4 + [ctypes.POINTER(ctypes.c_double)]
    return lib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git revision of the runtime sources to compare with")
    parser.add_argument("--shapes", default="64x10x256,64x256x64,64x256x256,64x1000x512", help="MxNxK, comma-separated")
    parser.add_argument("--act", default="relu", help="the epilogue activation (ops/fused.py ACTIVATION_TABLE)")
    parser.add_argument("--bf16", action="store_true", help="time ember_gemm_bf16 instead of ember_gemm")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    act = get_activation(args.act).code
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    print(f"# {cpu_name()}; kernel library of the working tree vs {args.base}; {'bf16' if args.bf16 else 'fp32'}, "
          f"bias + {args.act}, {args.threads} thread(s); ratio < 1: the working tree is faster")
    with tempfile.TemporaryDirectory() as folder:
        libs = {"base": _build(Path(folder) / "base", _sources(args.base)),
                "head": _build(Path(folder) / "head", _sources(None))}
        for m, n, k in shapes:
            reps = max(3, int(2e6 / max(m * n * k, 1) * 10))
            times: dict[str, list[float]] = {label: [] for label in libs}
            sums: dict[str, float] = {}
            for round_ in range(args.rounds):
                for label, lib in (libs.items() if round_ % 2 == 0 else reversed(libs.items())):
                    total = ctypes.c_double()
                    times[label].append(lib.bench_gemm(m, n, k, reps, args.threads, act, int(args.bf16),
                                                       ctypes.byref(total)))
                    sums[label] = total.value
            ratio = statistics.median(h / b for h, b in zip(times["head"], times["base"], strict=True))
            same = "bit-identical C" if sums["head"] == sums["base"] else "C differs"
            print(f"{m}x{n}x{k:<6} base {statistics.median(times['base']) * 1e6:9.2f} us  "
                  f"head {statistics.median(times['head']) * 1e6:9.2f} us  head/base {ratio:.3f}  {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
