"""ONNX op converters, one module per family; importing this package registers them all in
ember.frontends.onnx.registry.CONVERTERS."""
# Families added for ONNX conformance:
from ember.frontends.onnx.converters import (  # noqa: F401  # noqa: F401  # noqa: F401
    attention,
    contrib,
    contrib_quant,
    control,
    conv,
    elementwise,
    indexing,
    math,
    ml,
    ml_trees,
    nn,
    normalization,
    quant,
    reduce,
    resize,
    rnn,
    shape,
    tensor,
)
