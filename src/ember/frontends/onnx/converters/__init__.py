"""ONNX op converters, one module per family; importing this package registers them all in
ember.frontends.onnx.registry.CONVERTERS."""
from ember.frontends.onnx.converters import elementwise, nn, reduce, rnn, shape, tensor  # noqa: F401
# Families added for ONNX conformance:
from ember.frontends.onnx.converters import attention, control, conv, indexing, math  # noqa: F401
from ember.frontends.onnx.converters import normalization, quant, resize  # noqa: F401
