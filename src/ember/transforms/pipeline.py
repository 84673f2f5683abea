"""The default graph optimization pipeline, as data: pass names in order, one comment each.

A backend that wants something else returns its own list from `Backend.pipeline()`. Each
rewrite pass runs its own patterns to a fixed point; the list itself runs once. The order
matters where one pass exposes work for another, as the comments say."""
from __future__ import annotations

DEFAULT_PIPELINE: list[str] = [
    "fold-qdq",  # QDQ islands -> QLinearConv/QLinearMatMul, before constant-fold folds the weights' DQ
    "constant-fold",  # evaluate constant subgraphs (exporter shape arithmetic, weight transposes)
    "eliminate-noops",  # identity Reshape/Transpose/Cast/Pad/Slice/Expand, x*1, x+0, ...
    "cse",  # merge equal constants and nodes, so the patterns below see one value, not copies
    "optimize-transposes",  # merge and cancel transposes, sink them, no-data transposes -> Reshape
    "merge-reshapes",  # collapse reshape chains, including reshapes made by the previous pass
    "simplify-concat-slice",  # single-operand and nested Concats, Slices that pick Concat operands
    "recognize-gelu",  # erf and tanh expansions -> Gelu
    "recognize-swish",  # x*sigmoid(x) -> Silu; x*hardsigmoid(x), x*relu6(x+3)/6 -> HardSwish
    "recognize-softmax",  # exp(x [- max]) / sum(exp(..)) -> Softmax
    "recognize-layernorm",  # mean/variance expansion -> LayerNormalization; fold the scale and bias
    "merge-pad",  # zero Pad into Conv/AveragePool pads, neutral Pad into MaxPool
    "fold-batchnorm",  # BatchNormalization into the preceding Conv or dense layer's weights
    "fold-conv-arithmetic",  # per-channel Mul/Div/Add/Sub constants into conv weights and bias
    "flush-denormal-weights",  # subnormal weights -> 0 (after the folds, which can make them)
    "form-fully-connected",  # MatMul/Gemm with constant weights (+ bias Add) -> FullyConnected
    "fuse-activations",  # activations and residual Adds into FusedConv/FullyConnected epilogues
    "constant-fold",  # fold what the rewrites left constant
    "cse",  # folded weights and rebuilt nodes can duplicate each other
    "dce",  # drop whatever nothing reads any more
]

# Canonicalization only, the part before Ember's own fused ops (FullyConnected, FusedConv
# epilogues): every rewrite keeps standard ops, so the partitioner, which runs it before
# choosing backends, shows every backend the same simpler graph.
CANONICAL_PIPELINE: list[str] = [*DEFAULT_PIPELINE[:DEFAULT_PIPELINE.index("form-fully-connected")], "dce"]
