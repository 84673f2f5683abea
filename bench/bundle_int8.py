"""int8 AOT bundles against float ones on a microcontroller target: for each model, quantized
with a profile of random calibration inputs (seeded), the bundle's weight region, the static
library's flash (text + data, `make size`) and the example firmware's flash (text + data of
bundle_main.elf for QEMU's MPS2 board: 4 MiB of flash), int8 against float, and the int8
firmware run under qemu-system-arm against the interpreter on the same quantized graph
(bit for bit, on --runs inputs).

    python bench/bundle_int8.py [--target cortex-m4] [--models mlp,mobilenetv2] [--runs 3]
                                [--models-dir ../shared/models] [--keep DIR]

Needs arm-none-eabi-gcc with newlib and qemu-system-arm (Debian: gcc-arm-none-eabi,
libnewlib-arm-none-eabi, qemu-system-arm). A firmware that does not fit the board's flash is
reported as such (the linker's region overflow), not built.
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
from ember.codegen.bundle import get_target

ROOT = Path(__file__).resolve().parent.parent


def make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "AR", "CFLAGS", "MAKEFLAGS")}
    return subprocess.run(["make", "-C", str(folder), "-j2", *args], capture_output=True, text=True, env=env,
                          timeout=1800)


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


def calibration(model: str, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Random normal inputs of the model's input shapes."""
    from ember.driver import load_model

    shapes = {p.name: p.type.shape for p in load_model(model).inputs}
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
            for _ in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cortex-m4")
    parser.add_argument("--models", default="mlp,mobilenetv2")
    parser.add_argument("--models-dir", default=str(ROOT.parent / "shared" / "models"))
    parser.add_argument("--runs", type=int, default=3, help="inputs run under QEMU per int8 firmware")
    parser.add_argument("--calibration", type=int, default=16, help="random calibration inputs")
    parser.add_argument("--keep", metavar="DIR", help="write the bundles here (default: a temporary folder)")
    args = parser.parse_args()

    target = get_target(args.target)
    if not target.bare_metal or target.board is None:
        raise SystemExit(f"--target {args.target}: a bare-metal target with a board (cortex-m4, cortex-m7)")
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm", "make"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found")
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ember-bundle-int8-"))
    print(f"target {target.name} ({target.description}); board {target.board.emulator.machine}, "
          f"{target.board.memory.flash_bytes >> 20} MiB flash; host {os.uname().machine}")
    rows = []
    for name in args.models.split(","):
        model = str(Path(args.models_dir) / f"{name}.onnx")
        if not Path(model).exists():
            raise SystemExit(f"{model} not found (--models-dir)")
        feeds = calibration(model, args.calibration, seed=0)
        started = time.perf_counter()
        profile = ember.profile(model, feeds)
        int8 = ember.bundle(model, target=target.name, output_dir=base / f"{name}-int8", quantize=profile)
        float32 = ember.bundle(model, target=target.name, output_dir=base / f"{name}-f32")
        kernels = sorted(set(re.findall(r"\[(q\w*(?:gemm|conv)\w*)\]", (int8.directory / "model.c").read_text())))
        sizes = {}
        for kind, bundle in (("int8", int8), ("float", float32)):
            sizes[kind] = (bundle.layout.constant_bytes, library_flash(bundle.directory),
                           firmware_flash(bundle.directory))
        reference = ember.compile(model, quantize=profile)
        rng = np.random.default_rng(1)
        exact = 0
        qemu_seconds = 0.0
        if sizes["int8"][2] is not None:
            for _ in range(args.runs):
                x = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in feeds[0].items()}
                begin = time.perf_counter()
                actual = run_firmware(int8, [x[n] for n in reference.input_names])
                qemu_seconds += time.perf_counter() - begin
                expected = reference.run(x)
                exact += all(np.array_equal(a, expected[n]) for a, n in zip(actual, reference.output_names,
                                                                             strict=True))
        rows.append((name, sizes, kernels, exact, time.perf_counter() - started, qemu_seconds))

    def kib(n: int | None) -> str:
        return "does not fit" if n is None else f"{n / 1024:,.1f} KiB"

    print(f"\n{'model':<13}{'':<7}{'weights':>14}{'library flash':>16}{'firmware flash':>16}")
    for name, sizes, kernels, exact, seconds, qemu in rows:
        for kind in ("float", "int8"):
            w, lib, fw = sizes[kind]
            print(f"{name:<13}{kind:<7}{kib(w):>14}{kib(lib):>16}{kib(fw):>16}")
        w8, lib8, fw8 = sizes["int8"]
        w32, lib32, fw32 = sizes["float"]
        firmware = f", firmware {fw32 / fw8:.2f}x" if fw8 and fw32 else ""
        print(f"{'':<13}float / int8: weights {w32 / w8:.2f}x, library {lib32 / lib8:.2f}x{firmware} less flash")
        runs = f"{exact}/{args.runs} runs bit for bit against the interpreter" if fw8 else "not run (no fit)"
        print(f"{'':<13}int8 kernels {', '.join(kernels)}; {runs}, QEMU {qemu:.1f} s; {seconds:.0f} s in all")
    print(f"\nbundles in {base}")
    failed = [r[0] for r in rows if r[1]["int8"][2] is not None and r[3] != args.runs]
    if failed:
        print(f"MISMATCH against the interpreter: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
