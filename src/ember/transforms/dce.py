"""Dead code elimination."""
from __future__ import annotations

from ember.graph import Graph
from ember.passes import GraphPass, register_pass


@register_pass
class DeadCodeElimination(GraphPass):
    """Removes nodes none of whose results reach an output, then unused constants.

    Ops have no side effects, so a node is dead exactly when no output depends on it."""

    name = "dce"

    def run(self, graph: Graph) -> bool:
        return graph.remove_unused()
