"""What the host CPU can run, for choices made at compile time (the bf16 precision mode)."""
from __future__ import annotations

import platform
from functools import cache
from pathlib import Path


@cache
def cpu_flags() -> frozenset[str]:
    """The host's CPU feature flags as Linux reports them (/proc/cpuinfo); empty where it
    cannot be read (another OS), so features are then taken as absent."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def has_avx512_bf16() -> bool:
    """True where the host runs vdpbf16ps (AVX512-BF16) and the AVX-512 the bf16 GEMM uses."""
    machine = platform.machine().lower()
    return machine in ("x86_64", "amd64") and {"avx512_bf16", "avx512bw", "avx512f"} <= cpu_flags()


def mapped_target() -> str | None:
    """The ISA Mapper description (src/ember/isa/targets) the host runs, for the mapped GEMM
    kernels: x86-avx512 needs AVX-512 F and FMA (its kernels use only these for float32)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64") and {"avx512f", "fma"} <= cpu_flags():
        return "x86-avx512"
    return None
