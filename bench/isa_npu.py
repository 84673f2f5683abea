"""Array utilisation of the described NPUs on DeepBench's inference GEMMs, against a roofline.

For each GEMM (M, N, K) and each matrix instruction of each target (npu-systolic16 by default;
--target adds others, e.g. npu-systolic32), the mapper's mappings are scheduled as the NPU
backend schedules them (the fastest of the best few per instruction) and compared with:

- ideal MAC cycles: M*N*K / (R*C), every processing element busy every cycle;
- the roofline (our definition; the bound a schedule is judged against):
  max(compute roof, memory roof), where
    compute roof = min over which of M, N is streamed of
                   ceil(K/R) * ceil(S/C) * max(T, R)     (S the other of M, N, T the streamed one)
      i.e. folds padded to whole array tiles (a GEMM with N or M below the array's width
      cannot fill it) and no fold shorter than loading its R weight rows; the fill and drain
      that the description charges per fold beyond that is the schedule's loss;
    memory roof  = compulsory bytes (A, B and C once each, in the instruction's element
                   types) / the DMA's bandwidth;
- utilisation = ideal / scheduled cycles; roofline utilisation = ideal / roofline;
  of roofline = roofline / scheduled (the figure the issue asks to be >= 0.85).

The i8 instruction is the array's native mode (the fp32 kernels reach it only through lossy
quantizing fix-ups, which the NPU backend never uses); the f32 mode is what float models run
on. Every schedule's compute cycles are checked against the fold simulator's count
(ember.isa.fold_sim.count_cycles) for the same stream length.

--exhaustive also searches every power-of-two tile of the scratchpad level for the chosen
mapping with the same cost model (schedule.exhaustive_first_level) and prints its best cycles
beside the scheduler's (a check on the greedy search; slower).

    python bench/isa_npu.py [--target npu-systolic32 ...] [--exhaustive]
"""
from __future__ import annotations

import argparse
import math

from ember.isa.describe import Instruction, Target, load_target
from ember.isa.expr import parse_expr
from ember.isa.fold_sim import count_cycles
from ember.isa.kernels import Kernel
from ember.isa.mapper import map_kernel
from ember.isa.schedule import Schedule, exhaustive_first_level, schedule

# DeepBench inference GEMMs (baidu-research/DeepBench code/kernels/gemm_problems.h): M, N, K.
GEMMS = [(5124, 700, 2048), (35, 8457, 2560), (1, 7680, 2560), (1760, 128, 1760), (7680, 16, 2560)]
SCHEDULED = 8  # mappings scheduled per instruction, the mapper's best first


def best_schedule(kernel: Kernel, target: Target, instruction: Instruction) -> Schedule:
    mappings, rejections = map_kernel(kernel, instruction)
    if not mappings:
        raise SystemExit(f"{target.name} {instruction.name}: no mapping: {rejections}")
    return min((schedule(m, target) for m in mappings[:SCHEDULED]), key=lambda s: (s.cycles, str(s.mapping)))


def roofline(m: int, n: int, k: int, instruction: Instruction, target: Target) -> tuple[float, str]:
    rows, cols = instruction.semantics.dim("r").extent or 1, instruction.semantics.dim("c").extent or 1
    compute = min(math.ceil(k / rows) * math.ceil(s / cols) * max(t, rows) for s, t in ((n, m), (m, n)))
    sizes = {a.tensor: a.dtype.itemsize for a in instruction.semantics.operands}
    compulsory = m * k * sizes["A"] + k * n * sizes["B"] + m * n * sizes["C"]
    bandwidth = min(min((d.bandwidth * d.channels for d in target.dma), default=math.inf), target.memory[-1].bandwidth)
    memory = compulsory / bandwidth
    return (compute, "compute") if compute >= memory else (memory, "memory")


def stream_of(plan: Schedule) -> int | None:
    streamed = [a for a in plan.mapping.axes if a.width is None]
    if not streamed or len(plan.levels) < 2:
        return None
    return dict(plan.levels[1].tile).get(f"{streamed[0].dim}'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", default=None,
                        help="a described NPU by name or .toml path (repeatable; default npu-systolic16)")
    parser.add_argument("--exhaustive", action="store_true",
                        help="also the best power-of-two scratchpad tile by exhaustive search (slower)")
    args = parser.parse_args()
    names = args.target or ["npu-systolic16"]
    print(f"{'target':15} {'instruction':16} {'M,N,K':>17} {'scheduled':>13} {'ideal':>12} {'roofline':>12} "
          f"{'bound':>7} {'util':>5} {'roof util':>9} {'of roof':>7}  mapping (stream)")
    for name in names:
        target = load_target(name)
        for instruction in target.instructions:
            if instruction.cycles is None:
                continue
            element = instruction.semantics.a.dtype.value
            accumulator = instruction.semantics.output.dtype.value
            rows = instruction.semantics.dim("r").extent or 1
            cols = instruction.semantics.dim("c").extent or 1
            below = []
            for m, n, k in GEMMS:
                kernel = Kernel("gemm", parse_expr(f"C[i, j]:{accumulator} += A[i, k]:{element} * B[k, j]:{element} "
                                                   f"over i:{m}, j:{n}, k:{k}"), constants=frozenset({"B"}))
                plan = best_schedule(kernel, target, instruction)
                stream = stream_of(plan)
                simulated = count_cycles(plan.mapping, stream)[1]
                assert simulated == plan.compute_cycles, (simulated, plan.compute_cycles)
                ideal = m * n * k / (rows * cols)
                roof, bound = roofline(m, n, k, instruction, target)
                of_roof = roof / plan.cycles
                if of_roof < 0.85:
                    below.append(f"{m}x{n}x{k}")
                mapping = str(plan.mapping).split(" | ")[0].split("] ", 1)[1]
                shape = f"{m},{n},{k}"
                print(f"{target.name:15} {instruction.name:16} {shape:>17} {plan.cycles:13,.0f} {ideal:12,.0f} "
                      f"{roof:12,.0f} {bound:>7} {ideal / plan.cycles:5.2f} {ideal / roof:9.2f} {of_roof:7.2f}  "
                      f"{mapping} ({stream}; {plan.bound}-bound)")
                if args.exhaustive:
                    searched, tile = exhaustive_first_level(plan.mapping, target)
                    level = max(plan.compute_cycles, plan.levels[1].cycles)
                    print(f"{'':15} exhaustive first-level tile {tile}: {searched:,.0f} cycles "
                          f"(the scheduler's: {level:,.0f}, {searched / level:.3f}x)")
            print(f"# {target.name} {instruction.name}: {len(GEMMS) - len(below)} of {len(GEMMS)} GEMMs at >= 0.85 of "
                  f"the roofline{'; below: ' + ', '.join(below) if below else ''}")


if __name__ == "__main__":
    main()
