"""The targets an AOT bundle can be built for: compiler, flags, how to run the example.

One `Target` per name. Hosted targets (an OS with a C library) build a static library and
the `bundle_main` program; bare-metal targets (microcontrollers) build a static library with
the weights as a `const` array that the linker places in flash, report its size, and can
link an example firmware for a QEMU board when one is named.

Only `host` uses `-march=native`; every other target names its ISA explicitly so no x86 (or
host) instruction leaks into a cross build. Imports support/ only."""
from __future__ import annotations

import platform
from dataclasses import dataclass

from ember.support.errors import EmberError


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    cc: str                     # default compiler (the Makefile's CC, overridable)
    flags: tuple[str, ...]      # ISA and ABI flags, used when compiling and linking
    bare_metal: bool = False
    opt: str = "-O3"
    tool_prefix: str = ""       # binutils prefix for ar / size ("" = the host's)
    runner: str = ""            # command that runs a hosted cross binary (e.g. qemu-aarch64)
    qemu_board: str = ""        # bare metal: a QEMU machine with semihosting for the example
    board_ld: str = ""          # bare metal: the board's linker script (name in BOARDS)

    @property
    def embeds_weights(self) -> bool:
        """Microcontrollers have no file system: their weights are a C array in flash."""
        return self.bare_metal

    def tool(self, name: str) -> str:
        return f"{self.tool_prefix}{name}"


# Memory maps for the example firmware: (flash origin, flash bytes, ram origin, ram bytes).
# MPS2 AN386 (Cortex-M4) and AN500 (Cortex-M7): 4 MiB ZBT SSRAM1 at 0 holds code and
# constants, 4 MiB SSRAM2/3 at 0x20000000 the data (QEMU hw/arm/mps2.c).
BOARDS: dict[str, tuple[int, int, int, int]] = {
    "mps2": (0x00000000, 4 << 20, 0x20000000, 4 << 20),
}

_ARM_M = dict(cc="arm-none-eabi-gcc", bare_metal=True, opt="-O2", tool_prefix="arm-none-eabi-", board_ld="mps2")


def _host() -> Target:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        flags: tuple[str, ...] = ("-march=native",)
    elif machine in ("aarch64", "arm64"):
        flags = ("-mcpu=native",)
    else:
        flags = ()
    return Target("host", f"this machine ({machine or 'unknown'}), tuned with -march/-mcpu=native",
                  "cc", flags)


TARGETS: dict[str, Target] = {
    "host": _host(),
    "x86_64-linux": Target("x86_64-linux", "x86-64 Linux, AVX2 and FMA (x86-64-v3)",
                           "x86_64-linux-gnu-gcc", ("-march=x86-64-v3",), tool_prefix="x86_64-linux-gnu-"),
    "aarch64-linux": Target("aarch64-linux", "64-bit Arm Linux (Armv8-A, NEON)",
                            "aarch64-linux-gnu-gcc", ("-march=armv8-a",), tool_prefix="aarch64-linux-gnu-",
                            runner="qemu-aarch64 -L /usr/aarch64-linux-gnu"),
    "riscv64-linux": Target("riscv64-linux", "64-bit RISC-V Linux (RV64GC)",
                            "riscv64-linux-gnu-gcc", ("-march=rv64gc", "-mabi=lp64d"),
                            tool_prefix="riscv64-linux-gnu-", runner="qemu-riscv64 -L /usr/riscv64-linux-gnu"),
    "cortex-m4": Target("cortex-m4", "Arm Cortex-M4F microcontroller (single-precision FPU, hard float)",
                        flags=("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"),
                        qemu_board="mps2-an386", **_ARM_M),
    "cortex-m7": Target("cortex-m7", "Arm Cortex-M7 microcontroller (double-precision FPU, hard float)",
                        flags=("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"),
                        qemu_board="mps2-an500", **_ARM_M),
}

ALIASES = {"native": "host", "x86_64": "x86_64-linux", "aarch64": "aarch64-linux", "arm64": "aarch64-linux",
           "riscv64": "riscv64-linux"}


def get_target(name: str) -> Target:
    key = ALIASES.get(name, name)
    if key not in TARGETS:
        raise EmberError(f"unknown bundle target '{name}' (known: {', '.join(TARGETS)})")
    return TARGETS[key]
