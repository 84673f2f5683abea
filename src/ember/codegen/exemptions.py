"""What the C backend does not do, each with the reason: the one place its limits are listed.

C_EXEMPT: ops with no C kernel. The cpu backend lowers a non-primitive op it has no kernel
for; a primitive op listed here makes the cpu backend refuse the model with this reason.
tests/test_cpu_ops.py checks that every op in the op table either has a C kernel, is
lowered away for cpu, or is listed here.
C_EXEMPT_TYPES: element types no C kernel handles yet.
C_EXEMPT_FORMS: ops whose kernels cover only some forms (checked by the kernels' `accepts`).
The ONNX node suite on cpu (tests/test_onnx_node_suite_cpu.py) accepts a refusal only when
its reason is one of these."""
from __future__ import annotations

from ember.types import DType

C_EXEMPT_TYPES: dict[DType, str] = {
    dtype: "no C kernels for this element type yet (half, bfloat16 and narrow types run on the interpreter)"
    for dtype in DType
    if dtype not in (DType.FLOAT32, DType.FLOAT64, DType.INT8, DType.INT16, DType.INT32, DType.INT64,
                     DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64, DType.BOOL)
}

C_EXEMPT_FORMS: dict[str, str] = {
    "Conv": "only 2-D (NCHW) float32 convolutions with constant weights have C kernels",
    "FusedConv": "only 2-D (NCHW) float32 convolutions with constant weights have C kernels",
    "MaxPool": "only 2-D (NCHW) pooling has C kernels",
    "AveragePool": "only 2-D (NCHW) pooling has C kernels",
    "quantized": "quantized tensor types have no C kernels yet",
}

C_EXEMPT: dict[str, str] = {
    "Acos": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Acosh": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Asin": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Asinh": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Atan": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Atanh": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Cosh": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Sinh": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Tan": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Mish": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Selu": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Celu": "no C kernel yet (elementwise math added for ONNX conformance)",
    "ThresholdedRelu": "no C kernel yet (elementwise math added for ONNX conformance)",
    "Shrink": "no C kernel yet (elementwise math added for ONNX conformance)",
    "PRelu": "no C kernel yet (elementwise math added for ONNX conformance)",
    "IsNaN": "no C kernel yet (elementwise math added for ONNX conformance)",
    "IsInf": "no C kernel yet (elementwise math added for ONNX conformance)",
    "BitShift": "no C kernel yet (integer bitwise ops)",
    "BitwiseAnd": "no C kernel yet (integer bitwise ops)",
    "BitwiseOr": "no C kernel yet (integer bitwise ops)",
    "BitwiseXor": "no C kernel yet (integer bitwise ops)",
    "BitwiseNot": "no C kernel yet (integer bitwise ops)",
    "BitCast": "no C kernel yet (integer bitwise ops)",
    "GatherElements": "no C kernel yet (indexing)",
    "GatherND": "no C kernel yet (indexing)",
    "ScatterElements": "no C kernel yet (indexing)",
    "ScatterND": "no C kernel yet (indexing)",
    "TensorScatter": "no C kernel yet (indexing)",
    "Trilu": "no C kernel yet (indexing)",
    "CumSum": "no C kernel yet (indexing)",
    "CumProd": "no C kernel yet (indexing)",
    "OneHot": "no C kernel yet (indexing)",
    "TopK": "no C kernel yet (indexing)",
    "DepthToSpace": "no C kernel yet (indexing)",
    "SpaceToDepth": "no C kernel yet (indexing)",
    "ReverseSequence": "no C kernel yet (indexing)",
    "InstanceNormalization": "no C kernel yet (normalization)",
    "GroupNormalization": "no C kernel yet (normalization)",
    "LRN": "no C kernel yet (normalization)",
    "MeanVarianceNormalization": "no C kernel yet (normalization)",
    "LpNormalization": "no C kernel yet (normalization)",
    "RMSNormalization": "no C kernel yet (normalization)",
    "Hardmax": "no C kernel yet (normalization)",
    "ConvTranspose": "no C kernel yet (windowed ops)",
    "LpPool": "no C kernel yet (windowed ops)",
    "MaxPoolWithIndices": "no C kernel yet (windowed ops)",
    "MaxUnpool": "no C kernel yet (windowed ops)",
    "Col2Im": "no C kernel yet (windowed ops)",
    "Resize": "no C kernel yet (windowed ops)",
    "QuantizeLinear": "no C kernel yet (explicit quantization ops)",
    "DequantizeLinear": "no C kernel yet (explicit quantization ops)",
    "DynamicQuantizeLinear": "no C kernel yet (explicit quantization ops)",
    "MatMulInteger": "no C kernel yet (explicit quantization ops)",
    "ConvInteger": "no C kernel yet (explicit quantization ops)",
    "QLinearMatMul": "no C kernel yet (explicit quantization ops)",
    "QLinearConv": "no C kernel yet (explicit quantization ops)",
    "RNN": "no C kernel yet (recurrent ops)",
    "LSTM": "no C kernel yet (recurrent ops)",
    "Attention": "no C kernel yet (transformer ops)",
    "RotaryEmbedding": "no C kernel yet (transformer ops)",
    "NegativeLogLikelihoodLoss": "no C kernel yet (losses)",
    "SoftmaxCrossEntropyLoss": "no C kernel yet (losses)",
    "Einsum": "no C kernel yet (linear algebra)",
    "Det": "no C kernel yet (linear algebra)",
    "GridSample": "no C kernel yet (spatial sampling)",
    "AffineGrid": "no C kernel yet (spatial sampling)",
    "DFT": "no C kernel yet (spectral ops)",
    "STFT": "no C kernel yet (spectral ops)",
    "LinearAttention": "no C kernel yet (transformer ops)",
}
