"""Layer 5: lowering high-level ops to primitives. `LOWERINGS[op]` holds one rule per
non-primitive op; `lower_graph` applies them where the backend's `should_lower` agrees."""
from ember.lowering import (  # noqa: F401  (registration)
    activations,
    attention,
    einsum,
    fused,
    loss,
    nn,
    normalization,
    reductions,
    rnn,
)
from ember.lowering.engine import LOWERINGS, lower_graph

__all__ = ["LOWERINGS", "lower_graph"]
