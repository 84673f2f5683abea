"""The PyTorch frontend: `load_torch` exports a torch.nn.Module with torch.export, decomposes
it to core ATen ops and converts the program into the graph IR; dynamo.py is the
torch.compile backend built on the same conversion.

This package and the ONNX one are the only parts of Ember that import torch (an optional
extra: `pip install ember[torch]`). Layout: dtypes.py (element types, tensors to arrays),
exporter.py (torch.export and its refusals: training mode, grad, data-dependent control
flow), registry.py (the ATEN_CONVERTERS table), context.py (what a converter sees of a
node), converters/ (one module per op family), importer.py (program -> graph) and
dynamo.py (the torch.compile backend)."""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any


def is_torch_module(model: Any) -> bool:
    """Whether `model` is a torch.nn.Module (without importing torch when nobody has)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def load_torch(module: Any, example_inputs: Sequence[Any] | Mapping[str, Any],
               example_kwargs: Mapping[str, Any] | None = None):
    """The verified graph IR of `module` called on `example_inputs` (their shapes are the
    compiled shapes; parameters and buffers become constants). A mapping passes them by
    keyword: {"input_ids": ids, "attention_mask": mask}."""
    from ember.frontends.torch.exporter import export_module
    from ember.frontends.torch.importer import convert_program

    if isinstance(example_inputs, Mapping):
        keywords = {**example_inputs, **(example_kwargs or {})}
        program = export_module(module, (), keywords)
    else:
        program = export_module(module, example_inputs, example_kwargs)
    return convert_program(program, type(module).__name__)


__all__ = ["is_torch_module", "load_torch"]
