"""Layer 2: the op table. Importing this package registers every op family."""
# Importing each op family registers its ops.
from ember.ops import (  # noqa: F401  (registration)
    activations,
    attention,
    conv,
    elementwise,
    fused,
    fused_attention,
    indexing,
    inverted_residual,
    linalg,
    loss,
    math,
    ml,
    nn,
    normalization,
    quant,
    recurrent,
    reduce,
    resize,
    sampling,
    spectral,
    tensor,
)
from ember.ops.registry import OPS, NoAttrs, OpDef, OpError, define_op, get_op

__all__ = ["OPS", "NoAttrs", "OpDef", "OpError", "define_op", "get_op"]
