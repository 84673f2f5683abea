"""The result of partitioning: segments (subgraphs, each for one backend) and the DAG between
them, with a text form, a Graphviz form, a validator and the outlining of a segment into a
graph of its own that the segment's backend compiles like any model."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ember.graph import Constant, Graph, Node, Value
from ember.support.errors import VerificationError


@dataclass
class Segment:
    """nodes: in a valid topological order. inputs: values read from outside (model inputs or
    other segments' results; constants are not inputs, they travel with the segment).
    outputs: results read by later segments or by the model's outputs."""

    index: int
    backend: str
    nodes: list[Node]
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    patterns: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"segment{self.index}"


@dataclass
class Partition:
    """segments: in an order that respects their dependencies. choices: per node name, why it
    went where it did (which backends refused it first, or the pattern that claimed it)."""

    graph: Graph
    segments: list[Segment]
    choices: dict[str, str] = field(default_factory=dict)
    strategy: str = "priority"

    def producers(self) -> dict[Value, int]:
        return {out: seg.index for seg in self.segments for node in seg.nodes for out in node.outputs}

    def dependencies(self) -> dict[int, set[int]]:
        """Segment index -> the segments whose results it reads."""
        made_by = self.producers()
        return {seg.index: {made_by[v] for v in seg.inputs if v in made_by} for seg in self.segments}

    def backends(self) -> list[str]:
        return sorted({seg.backend for seg in self.segments})

    def to_text(self) -> str:
        counts: dict[str, int] = {}
        for seg in self.segments:
            counts[seg.backend] = counts.get(seg.backend, 0) + 1
        summary = ", ".join(f"{b} {n}" for b, n in sorted(counts.items()))
        lines = [f"partition of {self.graph.name} ({self.strategy}): {len(self.segments)} segments ({summary})"]
        deps = self.dependencies()
        for seg in self.segments:
            after = f" after {', '.join(f'segment{d}' for d in sorted(deps[seg.index]))}" if deps[seg.index] else ""
            lines.append(f"{seg.name} on {seg.backend} ({len(seg.nodes)} nodes){after}")
            lines.append(f"  inputs: {', '.join('%' + v.name for v in seg.inputs) or '-'}")
            lines.append(f"  outputs: {', '.join('%' + v.name for v in seg.outputs) or '-'}")
            for node in seg.nodes:
                why = self.choices.get(node.name)
                lines.append(f"  {node.op} {node.name}" + (f"  # {why}" if why else ""))
        return "\n".join(lines) + "\n"

    def to_dot(self) -> str:
        # json.dumps quotes for DOT and writes real newlines as the two characters \n: DOT line breaks.
        lines = [f"digraph {json.dumps('partition ' + self.graph.name)} {{", "  rankdir=TB;",
                 "  node [shape=box, style=rounded];"]
        for seg in self.segments:
            ops: dict[str, int] = {}
            for node in seg.nodes:
                ops[node.op] = ops.get(node.op, 0) + 1
            listing = [f"{op} x{n}" if n > 1 else op for op, n in sorted(ops.items())[:8]]
            label = "\n".join([f"{seg.name}: {seg.backend}", f"{len(seg.nodes)} nodes", *listing])
            lines.append(f"  {seg.name} [label={json.dumps(label)}];")
        for index, deps in sorted(self.dependencies().items()):
            for dep in sorted(deps):
                lines.append(f"  segment{dep} -> segment{index};")
        lines.append("}")
        return "\n".join(lines) + "\n"


def verify_partition(partition: Partition) -> None:
    """Every node in exactly one segment, each segment's nodes in topological order, inputs and
    outputs exactly what crosses its border, and the segment graph acyclic with segments listed
    in dependency order."""
    graph = partition.graph
    segment_of: dict[Node, int] = {}
    for seg in partition.segments:
        if not seg.nodes:
            raise VerificationError(f"{seg.name} is empty")
        for node in seg.nodes:
            if node in segment_of:
                raise VerificationError(f"node '{node.name}' is in {seg.name} and segment{segment_of[node]}")
            segment_of[node] = seg.index
    missing = [n.name for n in graph.nodes if n not in segment_of]
    if missing:
        raise VerificationError(f"nodes in no segment: {', '.join(missing[:10])}")
    borders = compute_borders(graph, segment_of)
    made_by = partition.producers()
    position = {seg.index: i for i, seg in enumerate(partition.segments)}
    for seg in partition.segments:
        expected_in, expected_out = borders.get(seg.index, ([], []))
        if set(seg.inputs) != set(expected_in) or set(seg.outputs) != set(expected_out):
            raise VerificationError(f"{seg.name}: inputs/outputs do not match what crosses its border")
        defined = set(seg.inputs)
        for node in seg.nodes:
            for value in node.inputs:
                if value is None or isinstance(value, Constant) or value in defined:
                    continue
                raise VerificationError(f"{seg.name}: node '{node.name}' reads %{value.name} before it is made")
            defined.update(node.outputs)
        for value in seg.inputs:
            source = made_by.get(value)
            if source is not None and position[source] >= position[seg.index]:
                raise VerificationError(f"{seg.name} reads %{value.name} from segment{source}, which does not "
                                        "come before it: the segment graph has a cycle")


def compute_borders(graph: Graph, segment_of: dict[Node, int]) -> dict[int, tuple[list[Value], list[Value]]]:
    """Per segment index: the values it reads from outside (model inputs or other segments'
    results; constants travel with the segment) and its results read outside it or by the
    model's outputs, each in first-use order. One pass over the graph."""
    borders: dict[int, tuple[list[Value], list[Value]]] = {}
    seen_in: set[tuple[int, Value]] = set()
    exported: set[Value] = set()

    def export(value: Value) -> None:
        if value.producer is not None and value not in exported:
            exported.add(value)
            borders.setdefault(segment_of[value.producer], ([], []))[1].append(value)

    for node in graph.nodes:
        index = segment_of[node]
        for value in node.inputs:
            if value is None or isinstance(value, Constant):
                continue
            if value.producer is not None and segment_of[value.producer] == index:
                continue
            if (index, value) not in seen_in:
                seen_in.add((index, value))
                borders.setdefault(index, ([], []))[0].append(value)
            export(value)
    for output in graph.outputs:
        export(output.value)
    return borders


def outline(partition: Partition, segment: Segment) -> Graph:
    """The segment as a graph of its own: its inputs become placeholders, the constants it
    reads come along (sharing their data), its outputs become the graph's outputs. Value names
    are kept, so the runtime passes tensors between segments by name."""
    sub = Graph(f"{partition.graph.name}.{segment.name}")
    mapping: dict[Value, Value] = {}
    for placeholder in segment.inputs:
        mapping[placeholder] = sub.add_input(placeholder.name, placeholder.type)
    for node in segment.nodes:
        operands: list[Value | None] = []
        for operand in node.inputs:
            if operand is None:
                operands.append(None)
            elif operand in mapping:
                operands.append(mapping[operand])
            elif isinstance(operand, Constant):
                mapping[operand] = sub.add_constant(operand.data, operand.name, exact=True)
                operands.append(mapping[operand])
            else:
                raise VerificationError(f"{segment.name}: node '{node.name}' reads %{operand.name}, made nowhere")
        results = sub.add_node(node.op, operands, node.attrs, name=node.name,
                               result_names=[out.name for out in node.outputs])
        for old, new in zip(node.outputs, results, strict=True):
            if new.name != old.name or new.type != old.type:
                raise VerificationError(f"{segment.name}: outlining '{node.name}' changed %{old.name}")
            mapping[old] = new
    sub.set_outputs([(result.name, mapping[result]) for result in segment.outputs])
    return sub
