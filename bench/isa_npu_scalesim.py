"""The described NPU (src/ember/isa/targets/npu-systolic16.toml, or --target FILE) against
SCALE-Sim, an independent systolic-array simulator, on the same array: per layer, the compute
cycles of Ember's schedule for the weight-stationary mapping SCALE-Sim models (weights
[K x N] stationary, the K rows on the array's rows, N on its columns, the M output rows
streamed) and SCALE-Sim's cycles (CALC bandwidth mode: no memory stalls), with their ratio.

SCALE-Sim 3.0.0 needs numpy < 2.4, so it runs in a virtual environment of its own:

    python -m venv /tmp/scalesim-venv
    /tmp/scalesim-venv/bin/pip install scalesim==3.0.0 'numpy<2.4'
    python bench/isa_npu_scalesim.py --scalesim-python /tmp/scalesim-venv/bin/python

Layers are ResNet-18's as GEMMs (M = output pixels, N = filters, K = C*kh*kw, the convolutions
im2col'd; its 1x1 and FC layers, which SCALE-Sim simulates in seconds; --all adds the 7x7 and
3x3 ones, a minute or more each) and a small DeepBench-shaped GEMM.

Two Ember columns. "CALC": the description as SCALE-Sim's CALC mode sees it, its DMA engines
and main memory never stalling (unbounded bandwidth; array, scratchpad sizes and on-chip
bandwidths as described), the like-for-like comparison. "DMA": the description as it is,
whose 16 B/cycle DMA makes some layers trade fill and drain (shorter streams) for traffic;
its compute cycles are shown for what that trade costs. Either way Ember streams M in tiles
whose A rows and i32 partial sums fit the scratchpads (32 KB each usable: at most 512 rows of
one fold column), paying the array's fill and drain per tile; SCALE-Sim streams all of M.
"""
from __future__ import annotations

import argparse
import csv
import math
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from ember.isa.describe import Target, load_target
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel
from ember.isa.mapper import map_kernel
from ember.isa.schedule import Schedule, schedule

# (name, M, N, K) of ResNet-18 at batch 1 (M = OH*OW, N = filters, K = C*kh*kw).
QUICK = [("resnet18.layer2.downsample", 784, 128, 64), ("resnet18.layer3.downsample", 196, 256, 128),
         ("resnet18.layer4.downsample", 49, 512, 256), ("resnet18.fc", 1, 1000, 512),
         ("gemm.128x128x256", 128, 128, 256)]
SLOW = [("resnet18.conv1", 12544, 64, 147), ("resnet18.layer1.conv", 3136, 64, 576),
        ("resnet18.layer2.conv", 784, 128, 1152), ("resnet18.layer3.conv", 196, 256, 2304),
        ("resnet18.layer4.conv", 49, 512, 4608)]
AGREEMENT = 0.10  # the bound on |ember / scalesim - 1|


def scalesim_config(target: Target) -> str:
    """The SCALE-Sim configuration of `target`'s array and scratchpads (ws dataflow)."""
    array = target.instruction("systolic.ws").semantics
    sizes = {level.holds[0]: (level.size or 0) // 1024 for level in target.memory if level.scratchpad}
    return f"""[general]
run_name = ember_npu

[architecture_presets]
ArrayHeight: {array.dim('r').extent}
ArrayWidth: {array.dim('c').extent}
IfmapSramSzkB: {sizes['A']}
FilterSramSzkB: {sizes['B']}
OfmapSramSzkB: {sizes['C']}
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Dataflow: ws
Bandwidth: {int(target.memory[-1].bandwidth)}
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""


def unbounded_interface(target: Target) -> Target:
    """`target` as SCALE-Sim's CALC mode runs it: the DMA engines and main memory never stall."""
    return replace(target, dma=tuple(replace(d, bandwidth=math.inf) for d in target.dma),
                   memory=tuple(m if m.scratchpad else replace(m, bandwidth=math.inf) for m in target.memory))


def ember_schedule(target: Target, m: int, n: int, k: int) -> Schedule:
    """Ember's schedule of the weight-stationary mapping of the GEMM (M, N, K) on `target`."""
    kernel = Kernel("gemm", parse_expr(f"C[i, j]:i32 += A[i, k]:i8 * B[k, j]:i8 over i:{m}, j:{n}, k:{k}"),
                    constants=frozenset({"B"}))
    mappings, _ = map_kernel(kernel, target.instruction("systolic.ws"))
    ws = next(mp for mp in mappings if mp.role("A") == "A" and [a.fused for a in mp.axes] == [("k",), ("j",), ("i",)])
    return schedule(ws, target)


def stream(plan: Schedule) -> int:
    return dict(plan.levels[1].tile)["t'"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scalesim-python", required=True, help="a python with scalesim 3.0.0 installed")
    parser.add_argument("--target", default="npu-systolic16")
    parser.add_argument("--all", action="store_true", help="also the 7x7 and 3x3 layers (a minute or more each)")
    args = parser.parse_args()
    target = load_target(args.target)
    layers = QUICK + (SLOW if args.all else [])
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "npu.cfg").write_text(scalesim_config(target))
        rows = "".join(f"{name}, {m}, {n}, {k},\n" for name, m, n, k in layers)
        (work / "gemm.csv").write_text("Layer, M, N, K,\n" + rows)
        (work / "layout.csv").write_text("Layer, M, N, K,\n" + rows)  # required by 3.0.0, unused
        with open(work / "scalesim.log", "w") as log:
            subprocess.run([args.scalesim_python, "-m", "scalesim.scale", "-c", "npu.cfg", "-t", "gemm.csv",
                            "-l", "layout.csv", "-p", "out", "-i", "gemm", "-s", "N"], cwd=work, check=True,
                           stdout=log, stderr=subprocess.STDOUT)
        (report,) = (work / "out").glob("*/COMPUTE_REPORT.csv")
        with open(report) as f:
            reference = [int(row[" Total Cycles"]) for row in csv.DictReader(f)]
    calc = unbounded_interface(target)
    print(f"target {target.name}; SCALE-Sim 3.0.0, ws dataflow, CALC bandwidth (compute cycles, no stalls); "
          f"Ember's compute cycles with the interface unbounded (CALC) and as described (DMA), stream in ()")
    print(f"{'layer':>28} {'M,N,K':>15} {'scalesim':>10} {'ember CALC':>16} {'ratio':>6} {'ember DMA':>16} "
          f"{'ratio':>6}")
    agree = 0
    for (name, m, n, k), simulated in zip(layers, reference, strict=True):
        like, described = ember_schedule(calc, m, n, k), ember_schedule(target, m, n, k)
        ratio = like.compute_cycles / simulated
        agree += abs(ratio - 1) <= AGREEMENT
        print(f"{name:>28} {f'{m},{n},{k}':>15} {simulated:10d} {f'{like.compute_cycles:.0f} ({stream(like)})':>16} "
              f"{ratio:6.3f} {f'{described.compute_cycles:.0f} ({stream(described)})':>16} "
              f"{described.compute_cycles / simulated:6.3f}")
    folds = math.ceil(256 / 16) * math.ceil(128 / 16)
    print(f"(each fold: 2R + C + T - 2 cycles; e.g. 128x128x256 is {folds} folds of 174; SCALE-Sim reports one less)")
    print(f"{agree} of {len(layers)} layers within {AGREEMENT:.0%} of SCALE-Sim (CALC)")


if __name__ == "__main__":
    main()
