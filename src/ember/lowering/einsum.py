"""Lowering of Einsum onto Transpose, Reshape, ReduceSum and MatMul."""
