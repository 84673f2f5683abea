"""One model across several Ray actors, each under a memory cap (Glow's memory-constrained
partitioning, with machines for devices).

The partitioner decides the split (partition/partitioner.py: a run of nodes whose weights and
results would exceed its target's memory_capacity is cut into another segment); here the
target is the chosen backend with memory_capacity = the actor's cap. Each segment is compiled
once, in this process, and its artifact shipped to an actor of its own (runtime/remote.py).
The partitioner's bytes are an estimate made before compiling (raw weights and every result);
a compiled segment may hold more (packed weight layouts, scratch). When a compiled segment's
footprint exceeds the cap, the split is planned again with the partitioner's capacity scaled
down by the worst segment's excess, a few times at most; a node that alone exceeds the cap is
refused naming it. stats["partition"] and stats["actors"] show the outcome."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ember.runtime.compiled import CompiledModel, TensorSpec
from ember.runtime.remote import RemoteSegmentedExecutable, RemoteStep, SegmentHost, footprint
from ember.serve.cluster import connect
from ember.support.errors import EmberError, UnsupportedError

PLANNING_ROUNDS = 5


def split(model: Any, memory_cap: int, *, backend: str = "cpu", num_threads: int = 1,
          input_shapes: Mapping[str, Sequence[int]] | None = None, address: str | None = None,
          num_cpus: int | None = None, actor_cpus: float = 1.0) -> CompiledModel:
    """Compiles an ONNX model (path or ModelProto) into segments of at most `memory_cap` bytes
    each and places every segment on a Ray actor of its own (reserving `memory_cap` of Ray's
    memory resource and `actor_cpus` CPUs), on the cluster at `address` or a local one. The
    result runs like any CompiledModel; `model.executable.close()` ends its actors."""
    from ember.driver import load_model

    if not isinstance(memory_cap, int) or memory_cap < 1:
        raise EmberError(f"memory_cap must be a positive number of bytes, got {memory_cap!r}")
    started = time.perf_counter()
    graph = load_model(model, input_shapes)
    inputs = [TensorSpec(p.name, p.type) for p in graph.inputs]
    outputs = [TensorSpec(o.name, o.value.type) for o in graph.outputs]
    partition, compiled, capacity = plan(graph, memory_cap, backend, num_threads)
    ray = connect(address, num_cpus)
    host = ray.remote(SegmentHost)
    from ember.serve.package import artifact_bytes

    actors: list[Any] = []
    steps: list[RemoteStep] = []
    placed: list[dict[str, Any]] = []
    for segment, segment_model in zip(partition.segments, compiled, strict=True):
        label = f"actor{len(actors)} ({segment.name})"
        # SPREAD: segments go to different nodes where the cluster has several.
        actor = host.options(num_cpus=actor_cpus, memory=memory_cap, scheduling_strategy="SPREAD").remote(
            {segment.index: artifact_bytes(segment_model)}, memory_cap, label)
        actors.append(actor)
        steps.append(RemoteStep(segment.index, actor, [v.name for v in segment.inputs],
                                [v.name for v in segment.outputs]))
        placed.append({"actor": label, "segment": segment.index, "nodes": len(segment.nodes),
                       "footprint_bytes": footprint(segment_model), "memory_cap": memory_cap})
    try:  # every actor loaded its segment under its cap, or the split fails here, not at the first run
        ray.get([actor.describe.remote() for actor in actors])
    except Exception as err:
        for actor in actors:
            ray.kill(actor)
        raise EmberError(f"placing the segments failed: {err}") from None
    from ember.graph import Constant

    constants = {o.value.name: o.value.data for o in graph.outputs if isinstance(o.value, Constant)}
    executable = RemoteSegmentedExecutable(steps, [p.name for p in graph.inputs],
                                           [o.value.name for o in graph.outputs], constants, actors)
    stats = {"compile_seconds": time.perf_counter() - started, "partition": partition.to_text(),
             "actors": placed, "memory_cap": memory_cap, "partition_capacity": capacity,
             "weight_bytes": sum(int(m.stats.get("weight_bytes", 0)) for m in compiled),
             "footprint_bytes": sum(footprint(m) for m in compiled)}
    return CompiledModel(executable, inputs, outputs, stats, f"ray:{backend}")


def plan(graph: Any, memory_cap: int, backend: str, num_threads: int) -> tuple[Any, list[CompiledModel], int]:
    """(partition, compiled segments, the partitioner capacity used): every compiled segment's
    footprint within memory_cap (see the module docstring)."""
    from ember.backends import get_backend
    from ember.driver import compile_graph
    from ember.heterogeneous import BackendTarget, canonicalize
    from ember.partition import outline, partition_graph

    canonicalize(graph)
    target = BackendTarget(get_backend(backend, num_threads=num_threads))
    capacity = memory_cap
    for _ in range(PLANNING_ROUNDS):
        target.memory_capacity = capacity
        try:
            partition = partition_graph(graph, [target])
        except UnsupportedError as err:
            raise UnsupportedError(f"cannot split the model under a memory cap of {memory_cap} bytes "
                                   f"(partitioner capacity {capacity}): {err}") from None
        compiled = [compile_graph(outline(partition, segment), target.backend) for segment in partition.segments]
        worst = max(footprint(m) for m in compiled)
        if worst <= memory_cap:
            return partition, compiled, capacity
        capacity = int(capacity * memory_cap / worst * 0.98)
    raise EmberError(f"cannot split the model into segments under {memory_cap} bytes once compiled: the largest "
                     f"still needs {worst} bytes after {PLANNING_ROUNDS} plans")
