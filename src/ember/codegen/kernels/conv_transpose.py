"""Transposed convolution: ConvTranspose (GEMM + col2im, fused bias and activation) and Col2Im."""
