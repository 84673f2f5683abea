"""Compiling a model whose inputs have symbolic dimensions: the model file is read once, and a
DynamicModel (runtime/dynamic.py) compiles it for each input shape it meets, on any backend
or backend list; bucketed dimensions are checked for padding (runtime/padding.py)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ember.backends import Backend, get_backend
from ember.driver import compile_graph, load_model
from ember.heterogeneous import compile_partitioned, resolve_backends
from ember.runtime.dynamic import DynamicInput, DynamicModel, Specialization
from ember.runtime.padding import padded_output_axes
from ember.support.errors import UnsupportedError


def dynamic_inputs(model: Any, input_shapes: Mapping[str, Sequence[int]] | None,
                   ) -> tuple[Any, list[DynamicInput]] | None:
    """(the checked ModelProto, its inputs) when some input dimension stays symbolic after
    `input_shapes`; None for a model of static shapes (compiled the usual way)."""
    from ember.frontends.onnx.loader import load_model as read_onnx
    from ember.frontends.onnx.signature import input_signature

    loaded = read_onnx(model)
    bound = dict(input_shapes or {})
    inputs = []
    for item in input_signature(loaded.model):  # the inputs: no weight is read for them
        dims = tuple(bound[item.name]) if item.name in bound else item.dims
        inputs.append(DynamicInput(item.name, item.dtype, dims))
    if not any(isinstance(d, str) for item in inputs for d in item.dims):
        return None
    return loaded.complete(), inputs


def compile_dynamic(proto: Any, inputs: list[DynamicInput], backend: str | Sequence[str],
                    backend_options: Mapping[str, Any] | None = None,
                    buckets: Mapping[str, Sequence[int]] | None = None, cache_size: int = 16) -> DynamicModel:
    if isinstance(backend, str) and backend != "auto":
        backends: list[Backend] = [get_backend(backend, **(backend_options or {}))]
        strategy = None
    else:
        backends, strategy, _ = resolve_backends(backend, backend_options)

    def compile_for(shapes: dict[str, tuple[int, ...]], padded: Sequence[str]) -> Specialization:
        graph = load_model(proto, shapes)
        axes = {symbol: padded_output_axes(graph, _input_axes(inputs, symbol), symbol) for symbol in padded}
        if strategy is None:
            model = compile_graph(graph, backends[0])
        else:
            model = compile_partitioned(graph, backends, strategy=strategy)
        return Specialization(model, axes)

    names = [o.name for o in proto.graph.output]
    label = backend if isinstance(backend, str) else ",".join(backend)
    return DynamicModel(inputs, names, compile_for, buckets, cache_size, backend=label)


def _input_axes(inputs: list[DynamicInput], symbol: str) -> dict[str, int]:
    axes = {}
    for item in inputs:
        found = [i for i, d in enumerate(item.dims) if d == symbol]
        if len(found) > 1:
            raise UnsupportedError(f"dimension '{symbol}' appears twice in input '{item.name}': "
                                   "it cannot be padded to a bucket")
        if found:
            axes[item.name] = found[0]
    return axes
