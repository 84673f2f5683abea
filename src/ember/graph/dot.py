"""Graphviz DOT export of a graph: ops as boxes, inputs and outputs as ovals, edges labeled
with the value's type. Constants are folded into their user's label to keep pictures small."""
from __future__ import annotations

import json

from ember.graph.ir import Constant, Graph, Placeholder


def _quote(text: str) -> str:
    return json.dumps(text)


def graph_to_dot(graph: Graph) -> str:
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;", "  node [fontname=\"Helvetica\"];"]
    ids: dict[object, str] = {}
    for i, placeholder in enumerate(graph.inputs):
        ids[placeholder] = f"in{i}"
        lines.append(f"  in{i} [shape=oval, label={_quote(f'{placeholder.name}: {placeholder.type}')}];")
    for i, node in enumerate(graph.nodes):
        node_id = f"n{i}"
        weights = [v for v in node.inputs if isinstance(v, Constant)]
        # json.dumps writes real newlines as the two characters \n, which DOT reads as breaks.
        label = "\n".join([node.op, node.name] + [f"{w.name}: {w.type}" for w in weights])
        lines.append(f"  {node_id} [shape=box, label={_quote(label)}];")
        for value in node.inputs:
            if value is None or isinstance(value, Constant):
                continue
            source = ids[value.producer] if value.producer is not None else ids[value]
            lines.append(f"  {source} -> {node_id} [label={_quote(str(value.type))}];")
        ids[node] = node_id
    for i, output in enumerate(graph.outputs):
        lines.append(f"  out{i} [shape=oval, label={_quote(output.name)}];")
        value = output.value
        if isinstance(value, Placeholder):
            source = ids[value]
        elif isinstance(value, Constant):
            continue
        else:
            source = ids[value.producer]
        lines.append(f"  {source} -> out{i} [label={_quote(str(value.type))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
