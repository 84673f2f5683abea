"""The C kernels: C_KERNELS, the registry the cpu backend selects from. Families live in
their own modules; importing this package registers them all."""
from ember.codegen.kernels import (  # noqa: F401  (registration)
    attention,
    cast,
    conv,
    conv_channels_last,
    conv_nd,
    conv_transpose,
    data_movement,
    elementwise,
    gemm,
    gemm_bf16,
    gemm_mapped,
    indexing,
    inverted_residual,
    linalg,
    maxpool_rows,
    normalization,
    pooling,
    quantized,
    reduce,
    resize,
    sampling,
    sorting,
    spectral,
    trees,
)
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, KernelRegistry, OpView
from ember.codegen.kernels.table import C_KERNELS

__all__ = ["C_KERNELS", "Kernel", "KernelOptions", "KernelPlan", "KernelRegistry", "OpView"]
