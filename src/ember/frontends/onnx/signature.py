"""A model's input signature before any shape is bound: element types and dimensions, each a
number or a symbol (the dim_param, or a generated name for an unknown dimension). Dynamic
models specialise on it (runtime/dynamic.py)."""
from __future__ import annotations

from dataclasses import dataclass

from onnx import ModelProto

from ember.frontends.onnx.dtypes import to_dtype
from ember.frontends.onnx.importer import input_type
from ember.support.errors import ModelImportError
from ember.types import DType

Dim = int | str
# dim_param values that mean "unknown" rather than naming a dimension shared across inputs.
ANONYMOUS_DIMS = frozenset({"?", "-1", "None", "unk__", "unknown"})


@dataclass(frozen=True)
class InputSignature:
    name: str
    dtype: DType
    dims: tuple[Dim, ...]

    @property
    def symbols(self) -> set[str]:
        return {d for d in self.dims if isinstance(d, str)}


def input_signature(model: ModelProto) -> list[InputSignature]:
    """The graph inputs that are not initializers, with their declared dimensions."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    signature = []
    for vi in graph.input:
        if vi.name in initializers:
            continue
        if vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.HasField("shape"):
            input_type(vi, None)  # raises the importer's own error for non-tensors
            raise ModelImportError(f"input '{vi.name}' has no declared shape: its rank is unknown")
        dims: list[Dim] = []
        for i, dim in enumerate(vi.type.tensor_type.shape.dim):
            if dim.WhichOneof("value") == "dim_value" and dim.dim_value >= 0:
                dims.append(int(dim.dim_value))
            elif dim.dim_param and dim.dim_param not in ANONYMOUS_DIMS:
                dims.append(dim.dim_param)
            else:
                # Unknown, or a placeholder name exporters give every unknown dim alike
                # (paddle2onnx writes '?'): each such dim is a symbol of its own.
                dims.append(f"{vi.name}[{i}]")
        dtype = to_dtype(vi.type.tensor_type.elem_type, f"input '{vi.name}'")
        signature.append(InputSignature(vi.name, dtype, tuple(dims)))
    return signature
