"""Layer 2: the op table. Importing this package registers every op family."""
from ember.ops import elementwise, fused, nn, reduce, rnn, tensor  # noqa: F401  (registration)
from ember.ops import activations  # noqa: F401  (registration)
# Families added for ONNX conformance (registration):
from ember.ops import attention, conv, indexing, linalg, loss, math  # noqa: F401
from ember.ops import normalization, quant, recurrent, resize, sampling, spectral  # noqa: F401
from ember.ops.registry import OPS, NoAttrs, OpDef, OpError, define_op, get_op

__all__ = ["OPS", "NoAttrs", "OpDef", "OpError", "define_op", "get_op"]
