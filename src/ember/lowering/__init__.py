"""Layer 5: lowering high-level ops to primitives. `LOWERINGS[op]` holds one rule per
non-primitive op; `lower_graph` applies them where the backend's `should_lower` agrees."""
from ember.lowering import activations, fused, nn, normalization, reductions, rnn  # noqa: F401  (registration)
from ember.lowering.engine import LOWERINGS, lower_graph

__all__ = ["LOWERINGS", "lower_graph"]
