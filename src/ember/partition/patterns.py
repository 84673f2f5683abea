"""Composite patterns: named chains of ops a backend wants to receive whole (TVM's pattern
tables: conv + bias + relu, matmul + add + gelu). The partitioner keeps every match in one
segment, on the backend that declared it.

A chain matches nodes n0 -> n1 -> ... where each node's only result feeds the next node and
nothing else (no other reader, not a graph output). That makes a match convex: no path leaves
it and comes back, so placing it whole can never create a cycle between segments."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ember.graph import Graph, Node, Value


@dataclass(frozen=True)
class Pattern:
    """ops: the chain's op types in data-flow order. check: an optional predicate on the matched
    nodes (attributes, types, constant weights); a match it rejects is not used."""

    name: str
    ops: tuple[str, ...]
    check: Callable[[Sequence[Node]], bool] | None = None

    def __post_init__(self) -> None:
        if not self.ops:
            raise ValueError(f"pattern {self.name!r} has no ops")


@dataclass(frozen=True)
class Match:
    pattern: str
    backend: str
    nodes: tuple[Node, ...]


def match_chains(graph: Graph, pattern: Pattern, claimed: set[Node]) -> list[tuple[Node, ...]]:
    """Every non-overlapping match of `pattern` among nodes not yet `claimed`, in graph order."""
    users = graph.users()
    outputs = graph.output_values()
    matches: list[tuple[Node, ...]] = []
    taken: set[Node] = set()
    for start in graph.nodes:
        if start.op != pattern.ops[0] or start in claimed or start in taken:
            continue
        chain = [start]
        for op in pattern.ops[1:]:
            follower = _sole_reader(chain[-1], users, outputs)
            if follower is None or follower.op != op or follower in claimed or follower in taken:
                break
            chain.append(follower)
        if len(chain) == len(pattern.ops) and (pattern.check is None or pattern.check(chain)):
            matches.append(tuple(chain))
            taken.update(chain)
    return matches


def _sole_reader(node: Node, users: dict[Value, list[tuple[Node, int]]], outputs: set[Value]) -> Node | None:
    """The one node reading `node`'s results, if the chain may continue through it."""
    live = [out for out in node.outputs if out in users or out in outputs]
    if len(live) != 1 or live[0] in outputs:
        return None
    readers = {reader for reader, _ in users[live[0]]}
    return readers.pop() if len(readers) == 1 else None
