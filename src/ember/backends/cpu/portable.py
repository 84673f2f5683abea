"""The cpu backend as AOT bundles for CPUs other than x86 use it: the same kernels, except that
the integer ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) select the portable
int8 kernels (codegen/kernels/quantized_portable.py: int8 weight rows, an integer main loop,
exact fixed-point requantization) instead of the x86 VNNI/AVX2 GEMM. `bundle_backend(target)`
picks the backend a bundle target's `int8_kernels` names."""
from __future__ import annotations

from typing import Any

from ember.backends.cpu.backend import CpuBackend
from ember.codegen.bundle import Target
from ember.codegen.kernels.quantized_portable import portable_kernels


class PortableCpuBackend(CpuBackend):
    name = "cpu-portable"

    def __init__(self, **options: Any) -> None:
        """The options of CpuBackend (num_threads, sanitize, ...)."""
        super().__init__(**options)
        self.kernels = portable_kernels()


def bundle_backend(target: Target, num_threads: int = 1) -> CpuBackend:
    """The backend whose kernels suit `target`: single-threaded unless a hosted target is
    asked for threads (its bundle then builds with -fopenmp); no Winograd on a
    microcontroller, whose flash would hold 16/9 (F(2x2, 3x3)) to 4x (F(4x4, 3x3)) the
    weights of each 3x3 convolution; errors name the bundle."""
    backend = PortableCpuBackend if target.int8_kernels == "portable" else CpuBackend
    chosen = backend(num_threads=num_threads, winograd=not target.bare_metal)
    chosen.subject = f"a bundle for {target.name}"
    return chosen
