"""ONNX op converters, one module per family; importing this package registers them all in
ember.frontends.onnx.registry.CONVERTERS."""
from ember.frontends.onnx.converters import elementwise, nn, reduce, rnn, shape, tensor  # noqa: F401
