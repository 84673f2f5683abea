"""The one local-rewrite mechanism of the graph optimizer.

A `Pattern` names the ops its root node may have and a function `(rewriter, root) ->
replacement`. The function either declines (returns None) or builds, through the Rewriter,
values that replace the root's results. `apply_patterns` runs a set of patterns greedily over
the graph in topological order, sweep after sweep, until no pattern applies (a fixed point).
`RewritePass` turns a tuple of patterns into a registered pass.

Conventions that keep the engine small and the graph valid after every rewrite:
1. A pattern matches upward: it reads the root, its operands and their producers, never a
   value defined after the root. New nodes are placed just before the root, so the node list
   stays topologically ordered without re-sorting.
2. A pattern checks before it builds. If it declines after building anyway, the engine
   removes what it built, so a sloppy pattern costs time, not correctness.
3. A replacement has exactly the type of the result it replaces (replace_all_uses checks),
   so broadcasting can never silently change what users see.
4. After each rewrite, nodes and constants nothing reads are dropped, so the use counts the
   next pattern sees are exact (fusions test "has exactly one use").
5. A new value replacing a root result takes over its name (and its node the root's name),
   so names downstream do not change and printed graphs stay readable.

Imports graph/ and below."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.graph import Constant, Graph, Node, Value
from ember.passes.manager import GraphPass
from ember.support.errors import EmberError, VerificationError

Replacement = Value | Sequence[Value] | None
PatternFn = Callable[["Rewriter", Node], Replacement]

# A sweep that still rewrites after this many rounds means two patterns undo each other.
MAX_SWEEPS = 100


@dataclass(frozen=True)
class Pattern:
    """A named local rewrite: `roots` are the ops the root may have (empty: any op)."""

    name: str
    roots: tuple[str, ...]
    fn: PatternFn

    def __call__(self, rewriter: Rewriter, node: Node) -> Replacement:
        return self.fn(rewriter, node)


def pattern(*roots: str, name: str | None = None) -> Callable[[PatternFn], Pattern]:
    """Decorator: `@pattern("Relu", "Clip") def fuse_activation(rw, node): ...` makes a
    Pattern named 'fuse-activation' rooted at Relu and Clip nodes."""

    def wrap(fn: PatternFn) -> Pattern:
        return Pattern(name or fn.__name__.strip("_").replace("_", "-"), tuple(roots), fn)

    return wrap


class Rewriter:
    """What a pattern sees: the graph, exact use queries, and builders whose nodes the engine
    places before the root."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.root: Node | None = None
        self._users: dict[Value, list[tuple[Node, int]]] | None = None
        self._outputs: set[Value] | None = None
        self._live: set[Node] | None = None

    # queries ---------------------------------------------------------------------------

    def users(self, value: Value) -> list[tuple[Node, int]]:
        """(node, operand index) for every operand that reads `value`."""
        if self._users is None:
            self._users = self.graph.users()
        return self._users.get(value, [])

    def is_output(self, value: Value) -> bool:
        if self._outputs is None:
            self._outputs = self.graph.output_values()
        return value in self._outputs

    def has_one_use(self, value: Value) -> bool:
        """Exactly one operand reads `value` and it is not a graph output: the condition for
        folding its producer into the user without computing it twice."""
        return len(self.users(value)) == 1 and not self.is_output(value)

    def only_used_by(self, value: Value, nodes: Iterable[Node]) -> bool:
        """Every reader of `value` is one of `nodes`, and it is not a graph output."""
        allowed = set(nodes)
        return not self.is_output(value) and all(user in allowed for user, _ in self.users(value))

    def is_live(self, node: Node) -> bool:
        if self._live is None:
            self._live = set(self.graph.nodes)
        return node in self._live

    # builders --------------------------------------------------------------------------

    def add(self, op: str, *inputs: Value | None, attrs: Any = None, name: str | None = None) -> Value:
        return self.graph.add(op, *inputs, attrs=attrs, name=name or self._default_name(op))

    def add_node(self, op: str, inputs: Sequence[Value | None], attrs: Any = None,
                 name: str | None = None) -> list[Value]:
        return self.graph.add_node(op, inputs, attrs, name or self._default_name(op))

    def constant(self, data: np.ndarray, name: str = "const") -> Constant:
        return self.graph.add_constant(data, name)

    def _default_name(self, op: str) -> str:
        return self.root.name if self.root is not None else op

    # engine ----------------------------------------------------------------------------

    def _invalidate(self) -> None:
        self._users = None
        self._outputs = None
        self._live = None

    def try_apply(self, pat: Pattern, node: Node) -> bool:
        graph = self.graph
        node_mark, const_mark = len(graph.nodes), len(graph.constants)
        self.root = node
        try:
            result = pat.fn(self, node)
        finally:
            self.root = None
        built = graph.nodes[node_mark:]
        del graph.nodes[node_mark:]
        replacements = _as_list(result)
        if replacements is not None and len(replacements) != len(node.outputs):
            raise EmberError(f"pattern '{pat.name}' gave {len(replacements)} values for {node.location}, "
                             f"which has {len(node.outputs)} results")
        if replacements is None or all(new is old for new, old in zip(replacements, node.outputs, strict=True)):
            self._roll_back_constants(const_mark)
            return False
        index = graph.nodes.index(node)
        graph.nodes[index:index] = built
        for old, new in zip(node.outputs, replacements, strict=True):
            if new is old:
                continue
            try:
                graph.replace_all_uses(old, new)
            except VerificationError as err:
                raise VerificationError(f"pattern '{pat.name}' at {node.location}: {err}") from None
        graph.remove_unused()
        self._invalidate()
        if not self.is_live(node):
            _inherit_names(node, replacements, built)
        return True

    def _roll_back_constants(self, mark: int) -> None:
        for name in list(self.graph.constants)[mark:]:
            del self.graph.constants[name]


def _inherit_names(root: Node, replacements: list[Value], built: list[Node]) -> None:
    """Like LLVM's takeName: a value built to replace a root result takes that result's name,
    and its node the root's name, so printed graphs stay readable across rewrites. Only called
    once the root is gone: names need only be unique among live nodes and values."""
    new_nodes = set(built)
    for old, new in zip(root.outputs, replacements, strict=True):
        if new is not old and new.producer in new_nodes:
            new.name = old.name
            new.producer.name = root.name


def _as_list(result: Replacement) -> list[Value] | None:
    if result is None:
        return None
    if isinstance(result, Value):
        return [result]
    return list(result)


def apply_patterns(graph: Graph, patterns: Sequence[Pattern]) -> Counter[str]:
    """Applies `patterns` greedily until none matches; returns how often each one fired.
    At each node, patterns are tried in the given order and the first that rewrites wins."""
    by_op: dict[str, list[Pattern]] = {}
    wildcard = [p for p in patterns if not p.roots]
    for pat in patterns:
        for op in pat.roots:
            by_op.setdefault(op, []).append(pat)
    rewriter = Rewriter(graph)
    fired: Counter[str] = Counter()
    for _ in range(MAX_SWEEPS):
        progress = False
        for node in list(graph.nodes):
            for pat in by_op.get(node.op, []) + wildcard:
                if not rewriter.is_live(node):
                    break
                if rewriter.try_apply(pat, node):
                    fired[pat.name] += 1
                    progress = True
                    break
        if not progress:
            return fired
    raise EmberError(f"rewrites did not reach a fixed point after {MAX_SWEEPS} sweeps "
                     f"(patterns fired: {dict(fired)}); two patterns probably undo each other")


class RewritePass(GraphPass):
    """A pass made of patterns, run to a fixed point. `fired` counts the last run's
    rewrites per pattern name (handy in tests and when debugging a pipeline)."""

    patterns: tuple[Pattern, ...] = ()

    def __init__(self) -> None:
        self.fired: Counter[str] = Counter()

    def run(self, graph: Graph) -> bool:
        self.fired = apply_patterns(graph, self.patterns)
        return bool(self.fired)
