"""C_KERNELS: instruction name -> emitter of a C block specialized on the instruction's
shapes. Families live in their own modules; importing this package registers them all."""
from ember.codegen.kernels.registry import C_KERNELS, kernel
from ember.codegen.kernels import data_movement, elementwise, gemm, nn, normalization, reduce  # noqa: F401,E402

__all__ = ["C_KERNELS", "kernel"]
