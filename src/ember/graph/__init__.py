"""Layer 3: the high-level graph IR, its verifier, text form and Graphviz export."""
from ember.graph.dot import graph_to_dot
from ember.graph.ir import Constant, Graph, Node, Output, Placeholder, Value
from ember.graph.text import parse_graph, print_graph
from ember.graph.verify import verify_graph

__all__ = [
    "Constant", "Graph", "Node", "Output", "Placeholder", "Value",
    "graph_to_dot", "parse_graph", "print_graph", "verify_graph",
]
