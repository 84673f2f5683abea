"""Integer kernels for the explicit quantization ops: QuantizeLinear, DequantizeLinear,
QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger."""
