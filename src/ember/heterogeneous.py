"""Compiling one model for several backends: canonicalize the graph, partition it
(partition/), compile every segment on its backend, and run the segment DAG
(runtime/segmented.py).

    ember.compile(model, backend=["dnnl", "cpu", "interpreter"])   # priority order
    ember.compile(model, backend="auto")                            # cost-based, every backend

A backend that fails to compile a segment it claimed (a plugin's bug, a kernel's limit found
late) does not fail the model: its nodes are vetoed for that backend, the graph is partitioned
again and the segment goes to the next capable backend; `stats["fallbacks"]` says why. The
interpreter runs every op, so with it in the list every model the interpreter runs compiles."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.backends import Backend, automatic_backends, available_backends, get_backend
from ember.graph import Constant, Graph, Node, Value, verify_graph
from ember.lowering import LOWERINGS, lower_graph
from ember.partition import Partition, Pattern, outline, partition_graph
from ember.partition.cost import analytic_seconds
from ember.passes import PassManager
from ember.runtime import CompiledModel, TensorSpec
from ember.runtime.segmented import SegmentedExecutable, SegmentStep
from ember.support.errors import EmberError, UnsupportedError
from ember.transforms import CANONICAL_PIPELINE


class BackendTarget:
    """A backend as the partitioner sees it. refusal(node) answers for the node as the backend
    would really run it: natively, or through its lowering (the lowered nodes must all be
    supported). Answers are cached per node form; a backend that raises is treated as refusing,
    with the exception as the reason."""

    def __init__(self, backend: Backend, measure: Callable[[Graph], float | None] | None = None) -> None:
        self.backend = backend
        self.measure = measure
        self._seconds: dict[tuple, float] = {}
        self.name = backend.name
        self.memory_capacity = backend.memory_capacity
        self.vetoes: dict[str, str] = {}  # node name -> why compiling it here failed
        self._cache: dict[tuple, str | None] = {}

    def seconds(self, nodes: Sequence[Node]) -> float:
        """Estimated seconds to run `nodes` here: the backend's own estimate (`cost`), or a
        measurement on this machine when `measure` is set (cached per node form)."""
        key = tuple(_node_form(n) for n in nodes)
        if key not in self._seconds:
            graph = graph_of(nodes)
            estimate = self.measure(graph) if self.measure is not None else None
            if estimate is None:
                try:
                    estimate = self.backend.cost(graph)
                except Exception:
                    estimate = None
            if estimate is None:  # no estimate of its own: a generic machine's
                estimate = analytic_seconds(graph, flops_per_second=20e9, bytes_per_second=10e9, per_node=5e-6)
            self._seconds[key] = float(estimate)
        return self._seconds[key]

    def patterns(self) -> Sequence[Pattern]:
        try:
            patterns = list(self.backend.patterns())
        except Exception:  # a plugin's bug must not take the compile down: no patterns then
            return []
        return [p for p in patterns if isinstance(p, Pattern)]

    def refusal(self, node: Node) -> str | None:
        if node.name in self.vetoes:
            return self.vetoes[node.name]
        key = _node_form(node)
        if key not in self._cache:
            self._cache[key] = self._refusal(node)
        return self._cache[key]

    def _refusal(self, node: Node) -> str | None:
        try:
            native = self.backend.refusal(node)
            if native is None:
                return None
            if node.opdef.primitive or not self.backend.should_lower(node):
                return str(native)
        except Exception as err:
            return f"the backend raised {type(err).__name__}: {err}"
        if node.op not in LOWERINGS:
            return f"{native} (and no lowering rule)"
        lowered = isolate(node)
        try:
            lower_graph(lowered, self.backend.should_lower)
            for inner in lowered.nodes:
                reason = self.backend.refusal(inner)
                if reason is not None:
                    return f"lowered to {inner.op}, which it cannot run: {reason}"
        except Exception as err:
            return f"lowering for it failed: {err}"
        return None


def _node_form(node: Node) -> tuple:
    """What a backend's answer can depend on: op, attributes, operand types, which operands
    are constants (kernels want constant weights) and the values of small constants (shapes,
    axes, K of TopK); the values of weights do not matter."""
    operands = tuple(None if v is None else (str(v.type), _constant_key(v)) for v in node.inputs)
    return (node.op, repr(node.attrs), operands)


def measure_on(backend: Backend, repeats: int = 7) -> Callable[[Graph], float | None]:
    """A measurement of a unit on `backend`: compiled alone, run on seeded random inputs,
    the median of `repeats` timed runs (after one warm-up). None when it does not compile."""
    def measure(graph: Graph) -> float | None:
        from ember.driver import compile_graph

        try:
            model = compile_graph(graph_copy(graph), backend)
        except Exception:
            return None
        rng = np.random.default_rng(0)
        feeds = {}
        for spec in model.inputs:
            kind = np.dtype(spec.type.dtype.numpy)
            feeds[spec.name] = (rng.standard_normal(spec.type.shape).astype(kind) if kind.kind == "f"
                                else np.zeros(spec.type.shape, kind))
        try:
            model.run(feeds)
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                model.run(feeds)
                times.append(time.perf_counter() - started)
        except Exception:
            return None
        return float(np.median(times))

    return measure


def graph_copy(graph: Graph) -> Graph:
    """A copy to compile (compiling rewrites a graph in place; the partitioner keeps its own)."""
    from ember.graph.text import parse_graph, print_graph

    weights = {name: constant.data for name, constant in graph.constants.items()}
    return parse_graph(print_graph(graph), weights)


def _constant_key(value: Value) -> bytes | bool:
    if not isinstance(value, Constant):
        return False
    return value.data.tobytes() if value.data.size <= 64 else True


def isolate(node: Node) -> Graph:
    """A graph of `node` alone (see graph_of)."""
    return graph_of([node])


def graph_of(nodes: Sequence[Node]) -> Graph:
    """A graph of `nodes` (in topological order) alone: constants stay constants (sharing
    data), values made outside become inputs, every result becomes an output."""
    graph = Graph(nodes[0].name)
    mapping: dict[Value, Value] = {}
    results = []
    for node in nodes:
        operands: list[Value | None] = []
        for value in node.inputs:
            if value is not None and value not in mapping:
                mapping[value] = (graph.add_constant(value.data, value.name, exact=True) if isinstance(value, Constant)
                                  else graph.add_input(f"operand{len(graph.inputs)}", value.type))
            operands.append(None if value is None else mapping[value])
        made = graph.add_node(node.op, operands, node.attrs, name=node.name)
        mapping.update(zip(node.outputs, made, strict=True))
        results.extend(made)
    graph.set_outputs([(f"result{i}", v) for i, v in enumerate(results)])
    return graph


def compile_model_partitioned(model: Any, backends: str | Sequence[str], *,
                              input_shapes: Mapping[str, Sequence[int]] | None = None,
                              backend_options: Mapping[str, Any] | None = None, observer: Any = None,
                              ) -> CompiledModel:
    """Imports an ONNX model and compiles it across `backends`: names in priority order, or
    "auto" for every installed backend assigned by estimated cost."""
    from ember.driver import load_model

    started = time.perf_counter()
    instances, strategy, skipped = resolve_backends(backends, backend_options)
    compiled = compile_partitioned(load_model(model, input_shapes), instances, strategy=strategy, observer=observer)
    compiled.stats["compile_seconds"] = time.perf_counter() - started
    compiled.stats["skipped_backends"] = skipped
    return compiled


def _auto_backends() -> list[str]:
    """Every installed backend, the interpreter last (the universal fallback; ties in cost go
    to the earlier name)."""
    names = [n for n in automatic_backends() if n != "interpreter"]
    return [*names, "interpreter"]


def compile_partitioned(graph: Graph, backends: Sequence[Backend], *, strategy: str = "priority",
                        observer: Any = None, measure: bool | None = None) -> CompiledModel:
    """Compiles a verified graph across `backends` (priority order, or searched by cost when
    strategy == "cost"). The graph is canonicalized in place first. measure: with the cost
    strategy, time each unit on each backend on this machine instead of estimating it
    (compiles every distinct node form once per backend; default: EMBER_PARTITION_COST=measured)."""
    from ember.driver import compile_graph

    started = time.perf_counter()
    inputs = [TensorSpec(p.name, p.type) for p in graph.inputs]
    outputs = [TensorSpec(o.name, o.value.type) for o in graph.outputs]
    canonicalize(graph)
    if measure is None:
        measure = os.environ.get("EMBER_PARTITION_COST", "") == "measured"
    targets = [BackendTarget(b, measure_on(b) if measure and strategy == "cost" else None) for b in backends]
    by_name = {t.name: t for t in targets}
    fallbacks: list[str] = []
    compiled: dict[tuple[str, tuple[str, ...]], CompiledModel] = {}  # survives re-partitioning
    while True:
        partition = _partition(graph, targets, strategy)
        if observer is not None:
            observer("partition", partition)
        steps: list[SegmentStep] = []
        failed = False
        deps = partition.dependencies()
        for segment in partition.segments:
            target = by_name[segment.backend]
            key = (target.name, tuple(node.name for node in segment.nodes))
            try:
                if key not in compiled:
                    compiled[key] = compile_graph(outline(partition, segment), target.backend)
                model = compiled[key]
            except Exception as err:
                reason = f"compiling {segment.name} failed: {type(err).__name__}: {err}"
                fallbacks.append(f"{target.name}: {reason}")
                target.vetoes.update({node.name: reason for node in segment.nodes})
                failed = True
                break
            steps.append(SegmentStep(segment.index, segment.backend, model, [v.name for v in segment.inputs],
                                     [v.name for v in segment.outputs], frozenset(deps[segment.index])))
        if not failed:
            break
    constants = {o.value.name: o.value.data for o in graph.outputs if isinstance(o.value, Constant)}
    executable = SegmentedExecutable(steps, [p.name for p in graph.inputs],
                                     [o.value.name for o in graph.outputs], constants)
    stats: dict[str, Any] = {
        "compile_seconds": time.perf_counter() - started,
        "partition": partition.to_text(),
        "segments": [{"backend": s.backend, "nodes": len(seg.nodes), **_segment_stats(s.model)}
                     for s, seg in zip(steps, partition.segments, strict=True)],
        "fallbacks": fallbacks,
    }
    for total in ("arena_bytes", "weight_bytes"):
        stats[total] = sum(s.model.stats.get(total, 0) for s in steps)
    reports: dict[str, dict[str, Any]] = {}  # per backend, its segments' backend_stats (nodes merged)
    for step in steps:
        report = step.model.stats.get("backend_stats")
        if report:
            merged = reports.setdefault(step.backend, {"nodes": {}})
            merged["nodes"].update(report.get("nodes", {}))
            merged.update({k: v if k not in merged or not isinstance(v, int | float) else merged[k] + v
                           for k, v in report.items() if k != "nodes"})
    if reports:
        stats["backend_stats"] = reports
    return CompiledModel(executable, inputs, outputs, stats, "+".join(partition.backends()))


def canonicalize(graph: Graph) -> None:
    """The backend-independent graph optimizations every partition starts from."""
    PassManager(CANONICAL_PIPELINE, verify=None).run(graph)  # after every pass in debug mode only
    verify_graph(graph)


def plan_partition(graph: Graph, backends: Sequence[Backend], strategy: str = "priority") -> Partition:
    """The partition compile_partitioned starts from (before any fallback), without compiling:
    what `ember dump --stage partition` shows. The graph is canonicalized in place."""
    canonicalize(graph)
    return _partition(graph, [BackendTarget(b) for b in backends], strategy)


def backend_spec(text: str) -> str | list[str]:
    """A command line's --backend: one name, "auto", or names in priority order joined by
    commas ("cpu,interpreter")."""
    names = [n.strip() for n in text.split(",")]
    if len(names) == 1:
        return names[0]
    if not all(names):
        raise EmberError(f"--backend {text!r}: an empty name in the list")
    return names


def resolve_backends(spec: str | Sequence[str], options: Mapping[str, Any] | None = None,
                     ) -> tuple[list[Backend], str, list[str]]:
    """Backend instances, the strategy for a backend list or "auto", and why backends were
    left out: with "auto", an installed plugin that fails to load is left out rather than
    failing the compile; a backend named in a list that fails to load is an error."""
    strategy = "priority"
    automatic = spec == "auto"
    if isinstance(spec, str):
        if not automatic:
            raise EmberError(f"backend {spec!r}: pass one name, a list of names or 'auto'")
        strategy, spec = "cost", _auto_backends()
    names = list(spec)
    if not names or not all(isinstance(n, str) for n in names):
        raise EmberError(f"backend must be a name, a non-empty list of names or 'auto', got {spec!r}")
    refuse_unknown(names, available_backends())
    instances, skipped = [], []
    for name in names:
        try:
            instances.append(get_backend(name, **(options or {})))
        except EmberError as err:
            if not automatic:
                raise
            skipped.append(str(err))
    return instances, strategy, skipped


def _partition(graph: Graph, targets: list[BackendTarget], strategy: str) -> Partition:
    if strategy == "priority":
        return partition_graph(graph, targets)
    if strategy == "cost":
        from ember.partition.cost import assign_by_cost

        return partition_graph(graph, targets, assign=assign_by_cost(targets), strategy="cost")
    raise EmberError(f"unknown partitioning strategy {strategy!r} (priority or cost)")


def _segment_stats(model: CompiledModel) -> dict[str, Any]:
    return {k: model.stats[k] for k in ("arena_bytes", "weight_bytes", "instructions") if k in model.stats}


def refuse_unknown(names: Sequence[str], known: Sequence[str]) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnsupportedError(f"unknown backends {unknown} (available: {', '.join(known)})")
