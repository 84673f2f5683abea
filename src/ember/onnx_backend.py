"""Ember as an ONNX backend (`onnx.backend.base.Backend`), so ONNX's backend test runner and
anything written against that API can drive Ember:

    import ember.onnx_backend as backend
    rep = backend.prepare(model, "CPU")      # compiles with the driver (ember.compile)
    outputs = rep.run([x, y])                # outputs in model order

The Ember backend that compiles the model is `prepare`'s `backend=` keyword, else the
environment variable EMBER_ONNX_BACKEND, else the interpreter. Only CPU devices exist.

Specialization. Ember compiles static shapes, so an input that decides a shape or a
parameter (Reshape's shape, Reduce axes, Pad pads, TopK k, ...) must be a constant. The ONNX
API hands the model over before its inputs, so when `prepare` meets such an input
(ConstantRequired) the rep compiles at `run` instead, with the inputs it needs bound to the
given values as constants, and caches that compilation per distinct value; a later run with
other values compiles again. Inputs whose *data* decides an output shape (NonZero, Unique...)
are never specialized: those ops are refused. EMBER_ONNX_SPECIALIZE=0 turns specialization
off (prepare then raises the ConstantRequired error)."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ember.driver import compile_graph, compile_model
from ember.frontends.onnx import ConstantRequired, load_onnx
from ember.frontends.onnx.backend_api import (
    BackendBase,
    BackendRepBase,
    Device,
    DeviceType,
    model_input_names,
    node_model,
)
from ember.runtime import CompiledModel
from ember.runtime.dynamic import DynamicModel
from ember.specialize import compile_dynamic, dynamic_inputs
from ember.support.errors import InputError

ENV_BACKEND = "EMBER_ONNX_BACKEND"
ENV_SPECIALIZE = "EMBER_ONNX_SPECIALIZE"
DEFAULT_BACKEND = "interpreter"
# Distinct specializations kept per rep; the oldest is dropped beyond this.
MAX_SPECIALIZATIONS = 8


def selected_backend(explicit: str | None = None) -> str:
    return explicit or os.environ.get(ENV_BACKEND) or DEFAULT_BACKEND


def specialization_enabled() -> bool:
    return os.environ.get(ENV_SPECIALIZE, "1") != "0"


class EmberBackendRep(BackendRepBase):
    """A compiled model; `run` takes the inputs positionally (model order, initializers
    excluded) or by name, and returns the outputs in model order. `bound` names the inputs
    compiled as constants (empty unless the model needed specializing)."""

    def __init__(self, model: Any, backend: str, compiled: CompiledModel | DynamicModel | None,
                 bound: Sequence[str] = (), input_shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        self.model = model
        self.backend = backend
        self.compiled = compiled
        self.bound = tuple(bound)
        self.input_shapes = input_shapes
        self.input_names = compiled.input_names if compiled is not None else model_input_names(model)
        self.specializations: dict[tuple, CompiledModel] = {}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feeds = self._feeds(inputs)
        if self.compiled is not None:
            compiled = self.compiled
        else:
            compiled = self._specialized(feeds)
            feeds = {n: v for n, v in feeds.items() if n not in self.bound}  # compiled in as constants
        results = compiled.run(feeds)
        return tuple(results[name] for name in compiled.output_names)

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        names = self.input_names
        if isinstance(inputs, Mapping):
            return dict(inputs)
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(names):
            raise InputError(f"the model takes {len(names)} inputs {names}, got {len(inputs)}")
        return dict(zip(names, inputs, strict=True))

    def _specialized(self, feeds: dict[str, Any]) -> CompiledModel:
        bound = list(self.bound)
        while True:
            missing = [n for n in bound if n not in feeds]
            if missing:
                raise InputError(f"missing inputs {missing} (the model takes {self.input_names})")
            values = {n: np.asarray(feeds[n]) for n in bound}
            key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in sorted(values.items()))
            if key in self.specializations:
                return self.specializations[key]
            try:
                graph = load_onnx(self.model, input_shapes=self.input_shapes, constant_inputs=values)
            except ConstantRequired as err:
                more = [n for n in err.inputs if n not in bound]
                if not more:
                    raise
                bound += more  # a folded input exposed another one to bind
                continue
            compiled = compile_graph(graph, self.backend)
            if len(self.specializations) >= MAX_SPECIALIZATIONS:
                self.specializations.pop(next(iter(self.specializations)))
            self.specializations[key] = compiled
            self.bound = tuple(bound)
            return compiled


class EmberBackend(BackendBase):
    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> EmberBackendRep:
        _check_device(device)
        backend = selected_backend(kwargs.pop("backend", None))
        input_shapes = kwargs.pop("input_shapes", None)
        symbolic = dynamic_inputs(model, input_shapes)
        if symbolic is not None:  # compiled per input shape on first use
            return EmberBackendRep(model, backend, compile_dynamic(*symbolic, backend), (), input_shapes)
        try:
            compiled = compile_model(model, backend=backend, input_shapes=input_shapes)
        except ConstantRequired as err:
            if not specialization_enabled() or not err.inputs:
                raise
            return EmberBackendRep(model, backend, None, err.inputs, input_shapes)
        return EmberBackendRep(model, backend, compiled, (), input_shapes)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Sequence[Any] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        arrays = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
        model = node_model(node, arrays, kwargs.pop("opset_version", None))
        return cls.prepare(model, device, **kwargs).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):
            return False


def _check_device(device: str) -> None:
    if not EmberBackend.supports_device(device):
        raise InputError(f"Ember runs on CPU only; device '{device}' is not supported")


prepare = EmberBackend.prepare
run_model = EmberBackend.run_model
run_node = EmberBackend.run_node
supports_device = EmberBackend.supports_device

__all__ = ["EmberBackend", "EmberBackendRep", "prepare", "run_model", "run_node", "supports_device"]
