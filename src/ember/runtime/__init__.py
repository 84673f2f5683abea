"""Layer 11: the runtime face of a compiled model."""
from ember.runtime.compiled import CompiledModel, TensorSpec

__all__ = ["CompiledModel", "TensorSpec"]
