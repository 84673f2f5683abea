"""From a torch.nn.Module and example inputs to an ExportedProgram in core ATen form
(torch.export, then run_decompositions), refusing up front what an inference compiler must
not take silently: a module in training mode, inputs that require grad, complex inputs; and
turning torch.export's failures (data-dependent control flow above all) into errors that name
the model's source line."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from ember.frontends.torch.dtypes import to_dtype
from ember.support.errors import EmberError, InputError, ModelImportError, UnsupportedError

_USER_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def check_inference_module(module: torch.nn.Module) -> None:
    training = [name or type(module).__name__ for name, m in module.named_modules() if m.training]
    if training:
        listed = ", ".join(training[:5]) + (f" and {len(training) - 5} more" if len(training) > 5 else "")
        raise UnsupportedError(f"the module is in training mode ({listed}); Ember compiles inference only: "
                               "call model.eval() first")


def check_example_inputs(inputs: Sequence[Any], what: str = "example input") -> None:
    for i, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            label = f"{what} {i}"
            if value.requires_grad and torch.is_grad_enabled():
                raise UnsupportedError(f"{label} requires grad; Ember compiles inference only: pass a tensor "
                                       "without requires_grad, or run under torch.no_grad()")
            to_dtype(value.dtype, label)
            if value.device.type != "cpu":
                raise InputError(f"{label} is on {value.device}; Ember's backends take CPU tensors")


def export_module(module: torch.nn.Module, example_inputs: Sequence[Any],
                  example_kwargs: Mapping[str, Any] | None = None) -> ExportedProgram:
    """The module exported with static shapes (those of the example inputs) and decomposed
    to core ATen ops."""
    if not isinstance(module, torch.nn.Module):
        raise EmberError(f"expected a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(example_inputs, tuple | list):
        raise EmberError("example_inputs must be a tuple of the module's positional arguments, "
                         f"got {type(example_inputs).__name__}")
    check_inference_module(module)
    check_example_inputs(list(example_inputs) + list((example_kwargs or {}).values()))
    try:
        with torch.no_grad():
            program = torch.export.export(module, tuple(example_inputs), kwargs=dict(example_kwargs or {}),
                                          strict=False)
            return program.run_decompositions(decompositions())
    except EmberError:
        raise
    except Exception as err:  # torch.export's failures come as many types; all are the model's
        raise ModelImportError(describe_export_failure(err)) from err


# Ops that core ATen decomposes but Ember runs better whole: activations it has as one op,
# triangles, resizes and padding modes (decomposed, they become gathers of computed indices),
# LSTM and GRU (unrolled cells are hundreds of nodes; Ember's recurrent ops lower themselves).
KEPT_WHOLE = ("lstm.input", "gru.input", "silu.default", "hardswish.default", "hardsigmoid.default", "mish.default",
              "softplus.default", "tril.default", "triu.default", "upsample_nearest1d.vec", "upsample_nearest3d.vec",
              "upsample_linear1d.vec", "upsample_trilinear3d.vec", "reflection_pad1d.default",
              "reflection_pad2d.default", "reflection_pad3d.default", "replication_pad1d.default",
              "replication_pad2d.default", "replication_pad3d.default")


def decompositions() -> Any:
    """torch.export's core ATen decomposition table, less the ops in KEPT_WHOLE."""
    table = torch.export.default_decompositions()
    for name in KEPT_WHOLE:
        op, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, op), overload), None)
    return table


def describe_export_failure(err: Exception) -> str:
    text = str(err)
    frames = _USER_FRAME.findall(text.split("The following call raised this error:")[-1])
    where = ""
    if frames:
        file, line, function, code = frames[0]
        where = f" at {file}:{line} in {function}: {code.strip()}"
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    if "data-dependent" in text:
        return (f"torch.export cannot capture data-dependent control flow{where} ({first}); Ember compiles "
                "one static graph: rewrite it with torch.where / torch.cond, or compile with "
                "torch.compile(backend='ember'), which runs such code eagerly between graphs")
    return f"torch.export failed{where}: {type(err).__name__}: {first}"
