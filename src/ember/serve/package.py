"""What a deployment ships to its replicas: the model compiled once, in the process that
deploys it, and saved as artifacts (runtime/artifact.py). Replicas load those bytes; none of
them imports or compiles the model.

A model whose inputs share a symbolic leading dimension (the batch) and that is served with
max_batch > 1 is compiled once per bucket size (1, 2, 4, ... up to max_batch): a batch of 5
rows runs on the 8-row artifact, padded, which runtime/padding.py must have found exact (the
samples stay independent), as for ember.compile(..., dynamic=). A model that mixes rows, an
artifact, a compiled model or a model of static shapes is served one request at a time, and
`batching` says why."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ember.runtime.artifact import is_artifact
from ember.runtime.compiled import CompiledModel
from ember.serve.payload import InputSpec
from ember.support.errors import EmberError, UnsupportedError


@dataclass
class ServedModel:
    """artifacts: (rows compiled for, artifact bytes); rows is None for a model served one
    request at a time. output_axes: per output, the axis carrying the batch (None: the output
    does not depend on it), for batched models. batching: a sentence for people."""

    name: str
    inputs: list[InputSpec]
    output_names: list[str]
    artifacts: list[tuple[int | None, bytes]]
    output_axes: dict[str, int | None] = field(default_factory=dict)
    batching: str = ""
    backend: str = ""
    compile_seconds: float = 0.0
    store: str | None = None  # the Ray actor holding the artifacts' bytes, when they are not here

    def stored_in(self, store: str) -> ServedModel:
        """This model with its artifacts' bytes left out, to be fetched from `store` (what
        Ray Serve checkpoints stays small: it keeps every deployment's arguments in its
        control store, which caps them at a few hundred megabytes)."""
        from dataclasses import replace

        return replace(self, artifacts=[(rows, b"") for rows, _ in self.artifacts], store=store)

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(rows for rows, _ in self.artifacts if rows is not None)

    @property
    def artifact_bytes(self) -> int:
        return sum(len(data) for _, data in self.artifacts)


def bucket_sizes(max_batch: int) -> list[int]:
    """Powers of two below max_batch, then max_batch: at most half a batch of padding."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch]


def checked_sizes(max_batch: int, batch_sizes: Sequence[int] | None) -> list[int]:
    """The row counts to compile for: bucket_sizes(max_batch), or the sizes given (max_batch
    added when missing); each an integer from 1 to max_batch."""
    if batch_sizes is None:
        return bucket_sizes(max_batch)
    sizes = sorted({*batch_sizes, max_batch})
    if not all(isinstance(s, int) and 1 <= s <= max_batch for s in sizes):
        raise EmberError(f"batch_sizes must be integers from 1 to max_batch {max_batch}, got {list(batch_sizes)!r}")
    return sizes


def prepare(model: Any, *, max_batch: int = 1, backend: str = "cpu", num_threads: int = 1,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            batch_sizes: Sequence[int] | None = None) -> ServedModel:
    """Compiles (or reads) `model` for serving: an ONNX path or ModelProto, an Ember artifact
    path (.ember, as CompiledModel.save writes) or a CompiledModel. batch_sizes: the row
    counts a batched model is compiled for (default: 1, 2, 4, ... up to max_batch)."""
    import time

    if not isinstance(max_batch, int) or max_batch < 1:
        raise EmberError(f"max_batch must be an integer >= 1, got {max_batch!r}")
    started = time.perf_counter()
    if isinstance(model, CompiledModel):
        served = _static(model, "a compiled model", "off: a CompiledModel has static shapes (pass the ONNX model "
                         "with a symbolic batch dimension to batch)")
    elif isinstance(model, str | os.PathLike) and is_artifact(model):
        served = _from_artifact(Path(model))
    elif isinstance(model, str | os.PathLike) or type(model).__name__ == "ModelProto":
        served = _from_onnx(model, checked_sizes(max_batch, batch_sizes), backend, num_threads, input_shapes)
    else:
        raise EmberError(f"serve takes an ONNX model (path or ModelProto), an Ember artifact or a CompiledModel, "
                         f"got {type(model).__name__}")
    served.compile_seconds = time.perf_counter() - started
    return served


def _from_artifact(path: Path) -> ServedModel:
    from ember.runtime.artifact import load

    model = load(path)  # verified here once, so a damaged file fails the deploy, not every replica
    served = _static(model, path.stem, "off: a saved artifact has static shapes")
    served.artifacts = [(None, path.read_bytes())]
    return served


def _static(model: CompiledModel, name: str, batching: str) -> ServedModel:
    inputs = [InputSpec(s.name, np.dtype(s.type.dtype.numpy), tuple(s.type.shape)) for s in model.inputs]
    return ServedModel(name, inputs, model.output_names, [(None, artifact_bytes(model))], {}, batching,
                       model.backend)


def artifact_bytes(model: CompiledModel) -> bytes:
    """The artifact file of `model`, as bytes (written to a private temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="ember-serve-") as folder:
        path = Path(folder) / "model.ember"
        model.save(path)
        return path.read_bytes()


def _from_onnx(model: Any, sizes: list[int], backend: str, num_threads: int,
               input_shapes: Mapping[str, Sequence[int]] | None) -> ServedModel:
    import ember
    from ember.specialize import compile_dynamic, dynamic_inputs

    name = Path(model).stem if isinstance(model, str | os.PathLike) else "model"
    symbolic = dynamic_inputs(model, input_shapes)
    if symbolic is None:
        compiled = ember.compile(model, backend=backend, num_threads=num_threads, input_shapes=input_shapes)
        assert isinstance(compiled, CompiledModel)
        why = "off: the model's shapes are static (give it a symbolic leading batch dimension to batch)"
        served = _static(compiled, name, why)
        return served
    proto, inputs = symbolic
    symbol = _batch_symbol(inputs)
    options = {"num_threads": num_threads}
    max_batch = sizes[-1]
    dynamic = compile_dynamic(proto, inputs, backend, options, buckets={symbol: sizes})
    try:
        specializations = {rows: dynamic.specialization({symbol: rows}) for rows in sizes}
        batching = f"on: batch dimension '{symbol}', compiled for {sizes} rows"
    except UnsupportedError as err:  # the model mixes rows: no padding, one request at a time
        specializations = {1: compile_dynamic(proto, inputs, backend, options).specialization({symbol: 1})}
        batching = f"off: {err}"
    specs = [InputSpec(item.name, np.dtype(item.dtype.numpy), tuple(None if d == symbol else int(d) for d in item.dims))
             for item in inputs]
    first = next(iter(specializations.values()))
    if len(specializations) == 1 and max_batch == 1:
        batching = "off: max_batch is 1"
    axes = first.output_axes.get(symbol, {}) if len(specializations) > 1 or max_batch > 1 else {}
    artifacts: list[tuple[int | None, bytes]] = [(rows, artifact_bytes(spec.model))
                                                 for rows, spec in sorted(specializations.items())]
    if not axes:  # one request at a time: each request is the one row the artifact takes
        specs = [InputSpec(s.name, s.dtype, tuple(1 if d is None else d for d in s.dims)) for s in specs]
        artifacts = [(None, data) for _, data in artifacts]
    return ServedModel(name, specs, first.model.output_names, artifacts, dict(axes), batching, first.model.backend)


def _batch_symbol(inputs: Sequence[Any]) -> str:
    """The one symbolic dimension left, which must lead every input (the batch)."""
    symbols = {d for item in inputs for d in item.dims if isinstance(d, str)}
    symbol = next(iter(symbols)) if len(symbols) == 1 else None
    if symbol is None or any(not item.dims or item.dims[0] != symbol or symbol in item.dims[1:] for item in inputs):
        described = ", ".join(f"{item.name}{list(item.dims)}" for item in inputs)
        raise EmberError(f"serving binds every symbolic dimension but one leading batch dimension shared by all "
                         f"inputs: the model's inputs are {described}; bind the others with input_shapes "
                         "(--shape NAME=D0,D1,...)")
    return symbol
