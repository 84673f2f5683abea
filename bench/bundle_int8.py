"""int8 AOT bundles against float ones on a microcontroller target. For each model, quantized
with a profile of random calibration inputs (seeded), three bundles for --target:

    float         ember.bundle(model)
    int8          ember.bundle(model, quantize=profile): the portable int8 kernels
    int8 x86 path the same quantized program on the cpu backend's x86 integer kernels (their
                  plain C path, what a bundle for this target ran before the portable ones)

and for each: the weight region, the static library's flash (text + data, `make size`), the
example firmware's flash (text + data of bundle_main.elf for QEMU's MPS2 board, 4 MiB of
flash: "does not fit" when the linker's flash region overflows; the bundles are written past
ember.bundle's own fit check to show their sizes), the instructions one
inference executes (QEMU -icount shift=0 makes one instruction one nanosecond; the MPS2's
25 MHz CMSDK timer read around <prefix>_run counts 40 of them a tick: an instruction count,
not Cortex-M4 cycles), and for int8 the firmware run under qemu-system-arm on --runs random
inputs against the interpreter on the same quantized graph, bit for bit.

    python bench/bundle_int8.py [--target cortex-m4] [--models mlp,mobilenetv2] [--runs 3]
                                [--models-dir ../shared/models] [--keep DIR] [--no-x86-path]

Needs arm-none-eabi-gcc with newlib and qemu-system-arm (Debian: gcc-arm-none-eabi,
libnewlib-arm-none-eabi, qemu-system-arm).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ember
from ember.backends.cpu import CpuBackend
from ember.codegen.bundle import Target, get_target
from ember.driver import load_model, prepare_program, quantize_loaded

ROOT = Path(__file__).resolve().parent.parent

# Runs <prefix>_run once on zeroed inputs between two reads of the MPS2's CMSDK APB timer 0
# (0x40000000: CTRL, VALUE, RELOAD; counts down at 25 MHz) and prints the ticks.
TIMER_MAIN = r"""
#include <stdint.h>
#include "model.h"
static uint8_t io[MODEL_MUTABLE_MEM_SIZE] __attribute__((aligned(MODEL_MEM_ALIGN)));
static uint8_t activations[MODEL_ACTIVATIONS_MEM_SIZE] __attribute__((aligned(MODEL_MEM_ALIGN)));
#define TIMER ((volatile uint32_t *)0x40000000u)
static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
void bundle_exit(int code)
{
    semihost(0x18, (const void *)(uintptr_t)(code ? 0x20023 : 0x20026));
    for (;;) {}
}
int main(void)
{
    char text[16], *at = text + sizeof text - 1;
    TIMER[2] = 0xFFFFFFFFu; TIMER[1] = 0xFFFFFFFFu; TIMER[0] = 1u;
    uint32_t start = TIMER[1];
    int status = model_run(model_weights, io, activations);
    uint32_t ticks = start - TIMER[1];
    *at = 0; *--at = '\n';
    do { *--at = (char)('0' + ticks % 10); ticks /= 10; } while (ticks);
    semihost(0x04, at);
    return status;
}
"""
NS_PER_TICK = 40  # 25 MHz
# Bundles are written whatever their size (ember.bundle refuses one that does not fit the
# board by default): the firmware's link says whether it fits, and the sizes are reported.
UNCHECKED = {"flash_bytes": 1 << 40, "ram_bytes": 1 << 40}


def make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "AR", "CFLAGS", "MAKEFLAGS")}
    return subprocess.run(["make", "-C", str(folder), "-j2", *args], capture_output=True, text=True, env=env,
                          timeout=3600)


def library_flash(folder: Path) -> int:
    result = make(folder, "size")
    if result.returncode:
        raise SystemExit(f"make size failed in {folder}:\n{result.stderr[-2000:]}")
    return int(re.search(r"^flash: (\d+) bytes", result.stdout, re.M)[1])


def firmware_flash(folder: Path) -> int | None:
    """text + data of the example firmware, or None when it overflows the board's flash."""
    result = make(folder, "firmware")
    if result.returncode:
        if "overflowed" in result.stderr:
            return None
        raise SystemExit(f"make firmware failed in {folder}:\n{result.stderr[-2000:]}")
    text, data = re.search(r"^\s*(\d+)\s+(\d+)\s+\d+\s+\d+\s+\w+\s+bundle_main.elf", result.stdout, re.M).groups()
    return int(text) + int(data)


def instructions(folder: Path, target: Target) -> int:
    """Instructions of one inference under QEMU -icount (the library must be built)."""
    board = target.board
    assert board is not None
    (folder / "timer_main.c").write_text(TIMER_MAIN)
    subprocess.run([target.cc, *target.flags, "-O2", f"-I{folder}", str(folder / "timer_main.c"),
                    str(folder / board.startup_name), str(folder / "libmodel.a"), "-T", str(folder / "mps2.ld"),
                    *board.link_flags, "-lm", "-o", str(folder / "timer.elf")], check=True, capture_output=True)
    result = subprocess.run([board.emulator.program, "-M", board.emulator.machine, "-nographic", "-monitor", "none",
                             "-serial", "none", "-semihosting-config", "enable=on,target=native", "-icount",
                             "shift=0", "-kernel", str(folder / "timer.elf")], capture_output=True, text=True,
                            timeout=3600)
    if result.returncode:
        raise SystemExit(f"the timing firmware failed under QEMU:\n{result.stdout[-1000:]}\n{result.stderr[-1000:]}")
    ticks = re.findall(r"^(\d+)$", result.stdout + result.stderr, re.M)  # semihosting writes to stderr
    if not ticks:
        raise SystemExit(f"no tick count from the timing firmware:\n{result.stdout[-500:]}\n{result.stderr[-500:]}")
    return int(ticks[-1]) * NS_PER_TICK


def run_firmware(bundle, inputs: list[np.ndarray]) -> list[np.ndarray]:
    folder = bundle.directory
    for sub in ("in", "out"):
        shutil.rmtree(folder / sub, ignore_errors=True)
        (folder / sub).mkdir()
    for slot, value in zip(bundle.layout.inputs, inputs, strict=True):
        np.ascontiguousarray(value, dtype=slot.dtype.numpy).tofile(folder / "in" / f"input_{slot.index}.bin")
    result = make(folder, "run-qemu", "IN=in", "OUT=out")
    if result.returncode:
        raise SystemExit(f"the firmware failed under QEMU:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return [np.fromfile(folder / "out" / f"output_{slot.index}.bin", slot.dtype.numpy).reshape(slot.shape)
            for slot in bundle.layout.outputs]


def random_inputs(model: str, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Random normal inputs of the model's input shapes."""
    shapes = {p.name: p.type.shape for p in load_model(model).inputs}
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
            for _ in range(count)]


def x86_path_bundle(model: str, profile, target: Target, folder: Path):
    """The quantized program on the cpu backend's own kernels (x86 integer GEMM, plain C path)."""
    backend = CpuBackend(num_threads=1)
    graph = load_model(model)
    quantize_loaded(graph, profile)
    program, plan, _ = prepare_program(graph, backend)
    return backend.bundle(program, plan, folder, target=target.name, **UNCHECKED)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cortex-m4")
    parser.add_argument("--models", default="mlp,mobilenetv2")
    parser.add_argument("--models-dir", default=str(ROOT.parent / "shared" / "models"))
    parser.add_argument("--runs", type=int, default=3, help="inputs run under QEMU per int8 firmware")
    parser.add_argument("--calibration", type=int, default=16, help="random calibration inputs")
    parser.add_argument("--keep", metavar="DIR", help="write the bundles here (default: a temporary folder)")
    parser.add_argument("--no-x86-path", action="store_true", help="skip the bundle on the x86 kernels' C path")
    args = parser.parse_args()

    target = get_target(args.target)
    if not target.bare_metal or target.board is None:
        raise SystemExit(f"--target {args.target}: a bare-metal target with a board (cortex-m4, cortex-m7)")
    for tool in (target.cc, target.board.emulator.program, "make"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found")
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ember-bundle-int8-"))
    print(f"target {target.name} ({target.description}); board {target.board.emulator.machine}, "
          f"{target.board.memory.flash_bytes >> 20} MiB flash; built and run on {os.uname().machine}")

    def kib(n: int | None) -> str:
        return "does not fit" if n is None else f"{n / 1024:,.1f} KiB"

    failed = []
    print(f"\n{'model':<13}{'bundle':<15}{'weights':>13}{'library flash':>15}{'firmware flash':>16}"
          f"{'instructions':>14}  int8 kernels")
    for name in args.models.split(","):
        model = str(Path(args.models_dir) / f"{name}.onnx")
        if not Path(model).exists():
            raise SystemExit(f"{model} not found (--models-dir)")
        started = time.perf_counter()
        profile = ember.profile(model, random_inputs(model, args.calibration, seed=0))
        bundles = {"float": ember.bundle(model, target=target.name, output_dir=base / f"{name}-float", **UNCHECKED),
                   "int8": ember.bundle(model, target=target.name, output_dir=base / f"{name}-int8",
                                        quantize=profile, **UNCHECKED)}
        if not args.no_x86_path:
            bundles["int8 x86 path"] = x86_path_bundle(model, profile, target, base / f"{name}-int8-x86-path")
        results = {}
        for kind, bundle in bundles.items():
            flash = library_flash(bundle.directory)
            firmware = firmware_flash(bundle.directory)
            count = instructions(bundle.directory, target) if firmware is not None else None
            kernels = sorted(set(re.findall(r"\[(q\w*(?:gemm|conv)\w*)\]", (bundle.directory / "model.c").read_text())))
            results[kind] = (bundle.layout.constant_bytes, flash, firmware, count)
            shown = "-" if count is None else f"{count:,}"
            print(f"{name:<13}{kind:<15}{kib(bundle.layout.constant_bytes):>13}{kib(flash):>15}{kib(firmware):>16}"
                  f"{shown:>14}  {', '.join(kernels) or '-'}")
        reference = ember.compile(model, quantize=profile, backend="interpreter")
        exact = 0
        if results["int8"][2] is not None:
            for feeds in random_inputs(model, args.runs, seed=1):
                actual = run_firmware(bundles["int8"], [feeds[n] for n in reference.input_names])
                expected = reference.run(feeds)
                exact += all(np.array_equal(a, expected[n]) for a, n in zip(actual, reference.output_names,
                                                                             strict=True))
            if exact != args.runs:
                failed.append(name)
        w8, lib8, fw8, n8 = results["int8"]
        w32, lib32, fw32, n32 = results["float"]
        ratios = [f"weights {w32 / w8:.2f}x", f"library {lib32 / lib8:.2f}x"]
        if fw8 and fw32:
            ratios.append(f"firmware {fw32 / fw8:.2f}x")
        print(f"{'':<13}float / int8 flash: {', '.join(ratios)}")
        speed = [f"float / int8 {n32 / n8:.2f}x" if n32 and n8 else ""]
        x86 = results.get("int8 x86 path")
        if x86 and x86[3] and n8:
            speed.append(f"int8 x86 path / int8 {x86[3] / n8:.2f}x")
        if any(speed):
            print(f"{'':<13}instructions: {', '.join(s for s in speed if s)}")
        verdict = f"{exact}/{args.runs} runs bit for bit against the interpreter" if fw8 else "not run (no fit)"
        print(f"{'':<13}int8 firmware: {verdict}; {time.perf_counter() - started:.0f} s in all")
    print(f"\nbundles in {base}")
    if failed:
        print(f"MISMATCH against the interpreter: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
