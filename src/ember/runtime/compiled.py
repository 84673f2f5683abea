"""CompiledModel: validates inputs, runs the executable, returns named outputs.

Validation happens here, before any backend code runs, so a native backend never sees a
missing input or an array of the wrong shape or element type."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.backends import Executable
from ember.support.errors import InputError
from ember.types import TensorType


@dataclass(frozen=True)
class TensorSpec:
    name: str
    type: TensorType


class CompiledModel:
    def __init__(self, executable: Executable, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 stats: dict[str, Any], backend: str) -> None:
        self._executable = executable
        self.inputs = inputs
        self.outputs = outputs
        self.stats = stats
        self.backend = backend

    @property
    def executable(self) -> Executable:
        """The backend's compiled program (the cpu backend's has `.source`, the C it built)."""
        return self._executable

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        arrays = self._validate(inputs)
        results = self._executable.run(arrays)
        return {spec.name: value for spec, value in zip(self.outputs, results, strict=True)}

    def _validate(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        if not isinstance(inputs, Mapping):
            raise InputError(f"run() takes a dict of input name -> array, got {type(inputs).__name__}")
        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in self.input_names]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing inputs {missing}")
            if unknown:
                parts.append(f"unknown inputs {unknown}")
            raise InputError(f"{'; '.join(parts)} (the model takes {self.input_names})")
        arrays = []
        for spec in self.inputs:
            value = inputs[spec.name]
            if not isinstance(value, np.ndarray):
                raise InputError(f"input '{spec.name}' must be a NumPy array, got {type(value).__name__}")
            expected = spec.type
            if value.dtype != expected.dtype.numpy:
                raise InputError(f"input '{spec.name}' must have element type {expected.dtype.numpy} "
                                 f"({expected.dtype}), got {value.dtype}")
            if tuple(value.shape) != expected.shape:
                raise InputError(f"input '{spec.name}' must have shape {list(expected.shape)}, "
                                 f"got {list(value.shape)}")
            # np.ascontiguousarray would turn a 0-d input into 1-d.
            arrays.append(value if value.flags.c_contiguous else np.array(value, order="C"))
        return arrays

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.type}" for s in self.inputs)
        outs = ", ".join(f"{s.name}: {s.type}" for s in self.outputs)
        return f"<CompiledModel backend={self.backend} ({ins}) -> ({outs})>"
