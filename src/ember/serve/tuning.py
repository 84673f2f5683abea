"""The measured kernel search (ember/tuning.py) with its rounds on Ray workers: each round (the
whole model compiled with every tunable instruction on its k-th variant, each step timed) is a
Ray task, the rounds run in parallel, and the driver merges their times, decides and writes the
tuning cache as a local search would; later compiles on this machine read the choices from it.

Times only count on the CPU they describe: a round runs only on a node whose tuning-cache key
(CPU model, C compiler and kernel sources: tuning.cache_key) equals this process's, found by
a probe task pinned to each alive node. Each task reserves `num_threads` CPUs, so Ray never
runs two rounds on the same cores at once (rounds sharing one machine still share its caches
and memory bandwidth: the decision margin, tuning.MARGIN, absorbs that).

The model travels as ONNX bytes (through Ray's object store, once); on a cluster of several
machines every node needs Ember installed."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.frontends.onnx import model_bytes, model_from_bytes
from ember.runtime.compiled import CompiledModel
from ember.serve.cluster import connect
from ember.support.errors import EmberError
from ember.tuning import RoundTimes, Tuning, cache_key, compile_with, measure_round, tune_kernels


def _round(model: bytes, input_shapes: Mapping[str, Sequence[int]] | None, num_threads: int | None,
           round_index: int, signatures: Sequence[str], inputs: Mapping[str, np.ndarray] | None,
           ) -> tuple[str, RoundTimes]:
    return cache_key(), measure_round(model_from_bytes(model), input_shapes, num_threads, round_index, signatures,
                                      inputs)


def matching_nodes(probes: Mapping[str, str], key: str) -> list[str]:
    """The node ids whose probe reported `key` (this machine's tuning-cache key), in order."""
    return sorted(node for node, found in probes.items() if found == key)


def tune_on_ray(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                num_threads: int | None = None, inputs: Mapping[str, np.ndarray] | None = None,
                budget_s: float = 60.0, cache: Path | None = None, address: str | None = None) -> Tuning:
    """tune_kernels with its rounds as parallel Ray tasks on the nodes of this CPU model (a
    local cluster on this machine unless `address` names one). Rounds unfinished `budget_s`
    seconds after they started are cancelled: their variants stay unmeasured (and uncached).
    The report adds "nodes" (those that matched) and "parallel" (rounds at once, at most)."""
    ray = connect(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # The CPUs each round reserves are the threads it measures with (all of this machine's cores
    # where num_threads is not given, as a compile's default is).
    threads = max(1, num_threads or os.cpu_count() or 1)
    key = cache_key()
    cpus = {node["NodeID"]: int(node.get("Resources", {}).get("CPU", 0)) for node in ray.nodes() if node.get("Alive")}
    alive = [node for node, count in cpus.items() if count >= threads]
    probe = ray.remote(cache_key)
    keys = ray.get([probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                    .remote() for node in alive])
    nodes = matching_nodes(dict(zip(alive, keys, strict=True)), key)
    if not nodes:
        raise EmberError(f"no Ray node of {len(alive)} with {threads} CPU(s) has this machine's CPU model, C "
                         "compiler and kernel sources: kernel timings from another CPU would not describe this one")
    payload = ray.put(model_bytes(model))
    task = ray.remote(_round)
    parallel = sum(cpus[node] // threads for node in nodes)

    def run_rounds(rounds: Sequence[int], signatures: Sequence[str]) -> Iterator[RoundTimes]:
        started = time.perf_counter()
        pending = [task.options(num_cpus=threads, scheduling_strategy=NodeAffinitySchedulingStrategy(
            nodes[i % len(nodes)], soft=False)).remote(payload, input_shapes, threads, k, list(signatures), inputs)
            for i, k in enumerate(rounds)]
        try:
            while pending:
                left = budget_s - (time.perf_counter() - started)
                done, pending = ray.wait(pending, num_returns=1, timeout=max(left, 0.0))
                if not done:
                    return
                worker_key, times = ray.get(done[0])  # a round that failed raises its error here
                if worker_key == key:  # the node's CPU, compiler and sources as probed
                    yield times
        finally:  # out of time, or a round failed: the others stop too
            for ref in pending:
                ray.cancel(ref, force=True)

    tuning = tune_kernels(model, input_shapes, threads, inputs, budget_s, cache, run_rounds=run_rounds)
    tuning.report.update(nodes=len(nodes), parallel=max(1, parallel))
    return tuning


def compile_tuned_on_ray(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                         num_threads: int | None = None, inputs: Mapping[str, np.ndarray] | None = None,
                         budget_s: float = 60.0, cache: Path | None = None, address: str | None = None,
                         ) -> CompiledModel:
    """`model` compiled for the cpu backend with the choices tune_on_ray measured (what
    ember.compile(model, tune=True) then compiles from the cache it filled)."""
    tuning = tune_on_ray(model, input_shapes, num_threads, inputs, budget_s, cache, address)
    return compile_with(model, tuning, input_shapes, num_threads)
