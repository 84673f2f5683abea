"""Dead code elimination."""
from __future__ import annotations

from ember.graph import Graph
from ember.passes import GraphPass, register_pass


@register_pass
class DeadCodeElimination(GraphPass):
    """Preconditions: ops have no side effects, so a node is dead exactly when no graph output
    depends on it.
    Rules:
    1. A node none of whose results reaches an output is removed.
    2. A constant no remaining node or output reads is removed."""

    name = "dce"

    def run(self, graph: Graph) -> bool:
        return graph.remove_unused()
