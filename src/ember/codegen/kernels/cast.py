"""Element type conversions in C: Cast and BitCast between every element type ONNX has,
and the half/low-precision story of the cpu backend."""
