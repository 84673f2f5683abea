"""Selection and ordering kernels: TopK."""
