"""Cost-based assignment: each unit goes where the estimated end-to-end time is least,
counting the unit's time on each capable target and the cost of every tensor that crosses
from one target to another (a hop: the segment call, plus the bytes moved).

The search: start from the better of the priority assignment and the cheapest target per
unit; then move single units, and whole connected groups of one target, to another target
while that lowers the total; finally compare with running everything on each single target
that can. The result is never estimated slower than the priority assignment or any single
target. Unit times come from the targets (`CostedTarget.seconds`: a backend's own estimate,
Ember's analytic one, or a measurement)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ember.graph import Constant, Graph, Node
from ember.partition.partitioner import Annotation, Assigner, Target, assign_by_priority

# Crossing between targets: a segment call and its bookkeeping (measured: ~20-40 us through
# the Python runtime), and the bytes copied between devices (host memory here: ~10 GB/s).
HOP_SECONDS = 30e-6
SECONDS_PER_BYTE = 1e-10
MAX_ROUNDS = 20


class CostedTarget(Target, Protocol):
    def seconds(self, nodes: Sequence[Node]) -> float: ...


def node_work(node: Node) -> tuple[float, float]:
    """(floating-point operations, bytes read and written) of one node, roughly: matrix and
    convolution ops by their multiply-adds, everything else one operation per result element."""
    moved = float(sum(v.type.nbytes for v in node.inputs if v is not None) + sum(v.type.nbytes for v in node.outputs))
    result = node.outputs[0].type if node.outputs else None
    elements = float(result.size) if result is not None else 0.0
    if node.op in ("MatMul", "Gemm", "FullyConnected", "MatMulInteger", "QLinearMatMul") and node.inputs[0] is not None:
        depth = node.inputs[0].type.shape[-1] if node.inputs[0].type.shape else 1
        return 2.0 * elements * depth, moved
    if node.op in ("Conv", "FusedConv", "ConvTranspose", "ConvInteger", "QLinearConv") and node.inputs[1] is not None:
        weight = node.inputs[1].type.shape
        per_output = 1.0
        for extent in weight[1:]:
            per_output *= extent
        return 2.0 * elements * per_output, moved
    return elements, moved


def analytic_seconds(graph: Graph, flops_per_second: float, bytes_per_second: float, per_node: float) -> float:
    """A roofline-style estimate: per node, the larger of compute and memory time, plus a fixed
    per-node overhead."""
    total = 0.0
    for node in graph.nodes:
        flops, moved = node_work(node)
        total += per_node + max(flops / flops_per_second, moved / bytes_per_second)
    return total


def assign_by_cost(targets: Sequence[CostedTarget]) -> Assigner:
    by_name = {t.name: t for t in targets}

    def assign(graph: Graph, annotation: Annotation) -> dict[int, str]:
        seconds = {u.index: {name: by_name[name].seconds(u.nodes) for name in annotation.capable[u.index]}
                   for u in annotation.units}
        search = _Search(annotation, seconds)
        return search.run(assign_by_priority(graph, annotation), [t.name for t in targets])

    return assign


class _Search:
    def __init__(self, annotation: Annotation, seconds: dict[int, dict[str, float]]) -> None:
        self.units = annotation.units
        self.capable = annotation.capable
        self.seconds = seconds
        unit_of = {node: unit.index for unit in self.units for node in unit.nodes}
        # edges[u]: (other unit, bytes) for every value crossing between u and another unit.
        self.edges: dict[int, list[tuple[int, int]]] = {u.index: [] for u in self.units}
        for unit in self.units:
            for node in unit.nodes:
                for value in node.inputs:
                    if value is None or isinstance(value, Constant) or value.producer is None:
                        continue
                    source = unit_of[value.producer]
                    if source != unit.index:
                        self.edges[unit.index].append((source, value.type.nbytes))
                        self.edges[source].append((unit.index, value.type.nbytes))

    def total(self, assignment: dict[int, str]) -> float:
        compute = sum(self.seconds[u][t] for u, t in assignment.items())
        crossing = sum(_hop(nbytes) for u, edges in self.edges.items() for v, nbytes in edges
                       if u < v and assignment[u] != assignment[v])
        return compute + crossing

    def run(self, priority: dict[int, str], names: list[str]) -> dict[int, str]:
        cheapest = {u: min(self.capable[u], key=lambda t: (self.seconds[u][t], names.index(t))) for u in priority}
        best = min((priority, cheapest), key=self.total)
        current = dict(best)
        for _ in range(MAX_ROUNDS):
            if not (self._move_units(current) | self._move_groups(current)):
                break
        candidates = [current, priority, *self._single_targets(names)]
        return min(candidates, key=self.total)

    def _move_units(self, assignment: dict[int, str]) -> bool:
        changed = False
        for unit in self.units:
            u = unit.index
            for target in self.capable[u]:
                if target != assignment[u] and self._delta({u}, target, assignment) < -1e-12:
                    assignment[u] = target
                    changed = True
        return changed

    def _move_groups(self, assignment: dict[int, str]) -> bool:
        changed = False
        for group in self._groups(assignment):
            here = assignment[next(iter(group))]
            options = set.intersection(*(set(self.capable[u]) for u in group)) - {here}
            for target in sorted(options):
                if self._delta(group, target, assignment) < -1e-12:
                    for u in group:
                        assignment[u] = target
                    changed = True
                    break
        return changed

    def _groups(self, assignment: dict[int, str]) -> list[set[int]]:
        """Connected groups of units on one target (edges in either direction)."""
        seen: set[int] = set()
        groups = []
        for unit in self.units:
            if unit.index in seen:
                continue
            group, stack = set(), [unit.index]
            while stack:
                u = stack.pop()
                if u in group:
                    continue
                group.add(u)
                stack.extend(v for v, _ in self.edges[u] if assignment[v] == assignment[u] and v not in group)
            seen |= group
            groups.append(group)
        return groups

    def _delta(self, group: set[int], target: str, assignment: dict[int, str]) -> float:
        delta = sum(self.seconds[u][target] - self.seconds[u][assignment[u]] for u in group)
        for u in group:
            for v, nbytes in self.edges[u]:
                if v in group:
                    continue
                before = assignment[u] != assignment[v]
                after = target != assignment[v]
                delta += (_hop(nbytes) if after else 0.0) - (_hop(nbytes) if before else 0.0)
        return delta

    def _single_targets(self, names: list[str]) -> list[dict[int, str]]:
        return [{u.index: name for u in self.units} for name in names
                if all(name in self.capable[u.index] for u in self.units)]


def _hop(nbytes: int) -> float:
    return HOP_SECONDS + nbytes * SECONDS_PER_BYTE

