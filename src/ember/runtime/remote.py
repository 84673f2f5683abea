"""The remote device kind of the segmented runtime: segments placed on Ray actors.

A `SegmentHost` is the body of one actor: it loads the artifacts of the segments placed on it
(runtime/artifact.py; nothing is compiled there) and refuses to start when their footprint
(weights and activation arena, as each compiled segment reports them) exceeds the actor's
memory cap. `RemoteSegmentedExecutable` runs the segment DAG from the driver by chaining
actor calls: each call's results stay in Ray's object store as references, and the next
segment's actor reads them from there, so tensors cross between actors (and machines) without
passing through the driver; only the model's outputs are fetched. Independent segments run at
once, as Ray schedules a call when its arguments are ready.

Ray is imported where it is used (an optional extra); serve/split.py plans and places."""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember.runtime.compiled import CompiledModel
from ember.support.errors import EmberError


def footprint(model: CompiledModel) -> int:
    """Bytes a compiled segment holds while it runs: its weights and its activation arena."""
    return int(model.stats.get("weight_bytes", 0)) + int(model.stats.get("arena_bytes", 0))


class SegmentHost:
    """parts: segment index -> artifact bytes; memory_cap: bytes (None: unbounded)."""

    def __init__(self, parts: dict[int, bytes], memory_cap: int | None, label: str = "") -> None:
        from ember.runtime.artifact import load

        self.label = label
        self.models: dict[int, CompiledModel] = {}
        with tempfile.TemporaryDirectory(prefix="ember-segment-") as folder:
            for index, data in parts.items():
                path = Path(folder) / f"segment{index}.ember"
                path.write_bytes(data)
                self.models[index] = load(path)
        used = sum(footprint(m) for m in self.models.values())
        if memory_cap is not None and used > memory_cap:
            raise EmberError(f"{label or 'a segment actor'}: segments {sorted(parts)} need {used} bytes, more than "
                             f"its memory cap of {memory_cap} bytes")
        self.used_bytes = used

    def describe(self) -> dict[str, Any]:
        import os

        return {"label": self.label, "pid": os.getpid(), "segments": sorted(self.models), "used_bytes": self.used_bytes}

    def run(self, index: int, *arrays: np.ndarray) -> Any:
        """The segment's results in its output order (one value, or a tuple of them)."""
        model = self.models[index]
        results = model.run(dict(zip(model.input_names, arrays, strict=True)))
        values = tuple(results[name] for name in model.output_names)
        return values[0] if len(values) == 1 else values


@dataclass
class RemoteStep:
    """A segment on an actor: inputs/outputs are value names (the order between segments is
    the object references' own: a call waits for the results it is passed)."""

    index: int
    actor: Any
    inputs: list[str]
    outputs: list[str]


class RemoteSegmentedExecutable:
    """An Executable over segments on Ray actors (see the module docstring)."""

    def __init__(self, steps: list[RemoteStep], model_inputs: list[str], model_outputs: list[str],
                 constants: dict[str, np.ndarray], actors: Sequence[Any]) -> None:
        self.steps = steps
        self.model_inputs = model_inputs
        self.model_outputs = model_outputs
        self.constants = constants
        self.actors = list(actors)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import ray

        env: dict[str, Any] = dict(self.constants)
        # Put once: a model input read by several segments is stored once, not per call.
        env.update({name: ray.put(value) for name, value in zip(self.model_inputs, inputs, strict=True)})
        for step in self.steps:
            call = step.actor.run.options(num_returns=len(step.outputs))
            result = call.remote(step.index, *(env[name] for name in step.inputs))
            env.update(zip(step.outputs, [result] if len(step.outputs) == 1 else result, strict=True))
        names = [n for n in self.model_outputs if isinstance(env[n], ray.ObjectRef)]
        try:
            fetched = dict(zip(names, ray.get([env[n] for n in names]), strict=True))
        except ray.exceptions.RayTaskError as err:
            cause = err.as_instanceof_cause()
            if isinstance(cause, EmberError):
                raise EmberError(f"a remote segment failed: {cause}") from None
            raise EmberError(f"a remote segment failed: {type(cause).__name__}: {cause}") from None
        except ray.exceptions.RayActorError as err:
            raise EmberError(f"a segment actor died: {err}") from None
        # Object-store arrays are read-only views of shared memory: the caller gets its own.
        return [np.array(fetched[n]) if n in fetched else env[n] for n in self.model_outputs]

    def close(self) -> None:
        """Ends the segment actors (the model cannot run afterwards)."""
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
