"""The ATen converters, one module per op family; importing this package registers them all
in registry.ATEN_CONVERTERS."""
from ember.frontends.torch.converters import elementwise, nn, reduce, rnn, tensor

__all__ = ["elementwise", "nn", "reduce", "rnn", "tensor"]
