"""Ember: a neural-network compiler.

    import ember
    m = ember.compile("model.onnx", backend="interpreter")
    outputs = m.run({"input": x})
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ember.lowering  # noqa: F401  (registers lowering rules and the 'lower' pass)
import ember.transforms  # noqa: F401  (registers the optimization passes)
from ember.driver import compile_model
from ember.runtime import CompiledModel
from ember.support.errors import EmberError, InputError, UnsupportedError

__version__ = "0.1.0"


def compile(model: Any, backend: str = "interpreter",
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            num_threads: int | None = None) -> CompiledModel:
    """Compiles an ONNX model (a path or an onnx.ModelProto) for `backend`.

    input_shapes binds symbolic dimensions: {"input": (1, 3, 224, 224)}.
    num_threads: threads for native backends (default: all cores)."""
    options = {} if num_threads is None else {"num_threads": num_threads}
    return compile_model(model, backend=backend, input_shapes=input_shapes, backend_options=options)


__all__ = ["CompiledModel", "EmberError", "InputError", "UnsupportedError", "compile"]
