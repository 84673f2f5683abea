"""The partitioner: which backend runs each node, and the segments that result.

    annotate  every node (and every pattern match, kept whole as one unit) with the targets
              that can run it, and why the others cannot
    assign    one target per unit: the first capable one in the user's priority order, or the
              cheapest overall (partition/cost.py)
    order     a topological order of the units that stays on one target while any unit of that
              target is ready (Kahn's algorithm with affinity)
    segment   cut the order into runs of one target; a run over its device's memory is cut
              again (Glow's memory-constrained partitioning)

Segments are consecutive runs of one topological order, so every edge between them points
forward: the segment graph is acyclic by construction, the classic partitioning bug (merging
two regions that a third sits between) cannot happen, and no reachability test is needed.
The affinity keeps runs maximal in practice: a target is left only when nothing of it is
ready. This module asks targets only `name`, `refusal(node)`, `patterns()` and
`memory_capacity`; it never imports a backend."""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ember.graph import Constant, Graph, Node
from ember.partition.patterns import Pattern, match_chains
from ember.partition.segments import Partition, Segment, compute_borders, verify_partition
from ember.support.errors import UnsupportedError


class Target(Protocol):
    """What the partitioner needs of a backend. refusal: why it cannot run the node, after
    whatever lowering it would apply (None when it can). memory_capacity: bytes its device
    holds for one segment's weights and activations (None: unbounded)."""

    name: str
    memory_capacity: int | None

    def refusal(self, node: Node) -> str | None: ...

    def patterns(self) -> Sequence[Pattern]: ...


@dataclass(eq=False)
class Unit:
    """Nodes that go to one target together: one node, or one pattern match (its target fixed).
    index: the unit's position in graph order (ties are broken by it, so results are stable)."""

    index: int
    nodes: tuple[Node, ...]
    pattern: str | None = None
    target: str | None = None


@dataclass
class Annotation:
    """units in graph order; capable[unit index]: target names that can run the unit, in
    priority order; refusals[unit index][target]: why a target cannot."""

    units: list[Unit]
    capable: dict[int, list[str]]
    refusals: dict[int, dict[str, str]]


def annotate(graph: Graph, targets: Sequence[Target]) -> Annotation:
    """Pattern matches first (the targets' own order decides who claims a node first), then
    one unit per remaining node; then each unit's capable targets."""
    claimed: set[Node] = set()
    matched: list[tuple[int, Unit]] = []
    position = {node: i for i, node in enumerate(graph.nodes)}
    for target in targets:
        for pattern in target.patterns():
            for nodes in match_chains(graph, pattern, claimed):
                if any(target.refusal(node) is not None for node in nodes):
                    continue
                claimed.update(nodes)
                matched.append((position[nodes[0]], Unit(0, nodes, pattern.name, target.name)))
    by_start = dict(matched)
    units: list[Unit] = []
    for i, node in enumerate(graph.nodes):
        if i in by_start:
            by_start[i].index = len(units)
            units.append(by_start[i])
        elif node not in claimed:
            units.append(Unit(len(units), (node,)))
    capable: dict[int, list[str]] = {}
    refusals: dict[int, dict[str, str]] = {}
    for unit in units:
        reasons: dict[str, str] = {}
        for target in targets:
            if unit.target is not None and target.name != unit.target:
                reasons[target.name] = f"pattern {unit.pattern} belongs to {unit.target}"
                continue
            reason = _unit_refusal(target, unit)
            if reason is not None:
                reasons[target.name] = reason
        capable[unit.index] = [t.name for t in targets if t.name not in reasons]
        refusals[unit.index] = reasons
    _refuse_orphans(units, capable, refusals)
    return Annotation(units, capable, refusals)


def _unit_refusal(target: Target, unit: Unit) -> str | None:
    for node in unit.nodes:
        reason = target.refusal(node)
        if reason is not None:
            return reason if len(unit.nodes) == 1 else f"{node.location}: {reason}"
    capacity = target.memory_capacity
    if capacity is not None and unit_bytes(unit) > capacity:
        return f"needs {unit_bytes(unit)} bytes, more than the {capacity} its device holds"
    return None


def _refuse_orphans(units: list[Unit], capable: dict[int, list[str]], refusals: dict[int, dict[str, str]]) -> None:
    orphans = [u for u in units if not capable[u.index]]
    if not orphans:
        return
    listing = "; ".join(f"{n.location}: " + ", ".join(f"{t}: {r}" for t, r in refusals[u.index].items())
                        for u in orphans for n in u.nodes[:1])
    raise UnsupportedError(f"no backend can run {len(orphans)} node(s): {listing}")


Assigner = Callable[[Graph, Annotation], dict[int, str]]


def assign_by_priority(graph: Graph, annotation: Annotation) -> dict[int, str]:
    """Each unit to the first capable target in the priority order."""
    return {unit.index: annotation.capable[unit.index][0] for unit in annotation.units}


def partition_graph(graph: Graph, targets: Sequence[Target], assign: Assigner = assign_by_priority,
                    strategy: str = "priority") -> Partition:
    """Partitions a verified graph (in topological order) across `targets`, listed in priority
    order. Raises UnsupportedError naming every node no target can run."""
    if not targets:
        raise UnsupportedError("partitioning needs at least one backend")
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise UnsupportedError(f"a backend is listed twice: {names}")
    annotation = annotate(graph, targets)
    assignment = assign(graph, annotation)
    capacities = {t.name: t.memory_capacity for t in targets}
    segments = form_segments(graph, annotation.units, assignment, capacities)
    partition = Partition(graph, segments, _choices(annotation, assignment, names), strategy)
    verify_partition(partition)
    return partition


def unit_order(units: list[Unit], assignment: dict[int, str]) -> list[Unit]:
    """A topological order of the units that switches targets only when no unit of the
    current target is ready (ties: graph order)."""
    unit_of = {node: unit for unit in units for node in unit.nodes}
    readers: dict[int, set[int]] = {u.index: set() for u in units}
    waiting: dict[int, int] = {}
    for unit in units:
        sources = {unit_of[v.producer].index for node in unit.nodes for v in node.inputs
                   if v is not None and not isinstance(v, Constant) and v.producer is not None}
        sources.discard(unit.index)
        waiting[unit.index] = len(sources)
        for source in sources:
            readers[source].add(unit.index)
    ready: dict[str, list[int]] = {}
    for unit in units:
        if waiting[unit.index] == 0:
            heapq.heappush(ready.setdefault(assignment[unit.index], []), unit.index)
    order: list[Unit] = []
    current = ""
    while any(ready.values()):
        if not ready.get(current):
            current = min((heap[0], name) for name, heap in ready.items() if heap)[1]
        index = heapq.heappop(ready[current])
        order.append(units[index])
        for reader in sorted(readers[index]):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready.setdefault(assignment[reader], []), reader)
    if len(order) != len(units):
        raise UnsupportedError("the graph has a cycle: it cannot be partitioned")
    return order


def form_segments(graph: Graph, units: list[Unit], assignment: dict[int, str],
                  capacities: dict[str, int | None]) -> list[Segment]:
    segments: list[Segment] = []
    used_bytes = 0
    weights_seen: set[Constant] = set()
    for unit in unit_order(units, assignment):
        target = assignment[unit.index]
        capacity = capacities.get(target)
        fresh = not segments or segments[-1].backend != target
        if not fresh and capacity is not None:
            fresh = used_bytes + unit_bytes(unit, weights_seen) > capacity
        if fresh:
            segments.append(Segment(len(segments), target, []))
            weights_seen, used_bytes = set(), 0
        used_bytes += unit_bytes(unit, weights_seen)
        weights_seen.update(v for node in unit.nodes for v in node.inputs if isinstance(v, Constant))
        segments[-1].nodes.extend(unit.nodes)
        if unit.pattern is not None:
            segments[-1].patterns.append(unit.pattern)
    segment_of = {node: seg.index for seg in segments for node in seg.nodes}
    for index, (inputs, outputs) in compute_borders(graph, segment_of).items():
        segments[index].inputs, segments[index].outputs = inputs, outputs
    return segments


def unit_bytes(unit: Unit, weights_seen: set[Constant] | None = None) -> int:
    """An upper bound on the device memory a unit adds to a segment: the weights it reads
    (once per segment) and every result it makes (as if nothing were shared)."""
    seen = weights_seen if weights_seen is not None else set()
    weights = {v for node in unit.nodes for v in node.inputs if isinstance(v, Constant) and v not in seen}
    return sum(w.type.nbytes for w in weights) + sum(out.type.nbytes for node in unit.nodes for out in node.outputs)


def _choices(annotation: Annotation, assignment: dict[int, str], priority: list[str]) -> dict[str, str]:
    """Per node name, the visible reason for its target: a pattern, or the refusals of the
    targets ahead of it in priority order (nothing when the first target took it)."""
    choices: dict[str, str] = {}
    for unit in annotation.units:
        chosen = assignment[unit.index]
        if unit.pattern is not None:
            why = f"pattern {unit.pattern}"
        else:
            ahead = priority[:priority.index(chosen)]
            reasons = annotation.refusals[unit.index]
            refused = [f"{t}: {reasons[t]}" for t in ahead if t in reasons]
            cheaper = [t for t in ahead if t not in reasons]
            why = "; ".join(refused + ([f"cheaper than {', '.join(cheaper)}"] if cheaper else []))
        if why:
            for node in unit.nodes:
                choices[node.name] = why
    return choices
