"""What a converter sees of one ATen node of an exported program: its arguments bound by name
from the op's schema, its operands as graph values (Python numbers become constants of the
type the op computes in), the types torch inferred for its results, and `emit`, the one place
where nodes are added to the graph and where nodes whose operands are all constants are folded
at import (index arithmetic, masks and position ids in transformers fold this way)."""
from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from ember.frontends.torch.dtypes import to_dtype
from ember.graph.ir import Constant, Graph, Value
from ember.ops import OPS, NoAttrs, OpError
from ember.ops.elementwise import CastAttrs
from ember.ops.tensor import ReshapeAttrs
from ember.support import limits
from ember.support.errors import ModelImportError, UnsupportedOpError
from ember.types import DType, TensorType

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def source_location(node: torch.fx.Node) -> str:
    """Where the op came from in the model's Python source: the innermost frame of the node's
    stack trace and the module path, as 'file.py:42 in forward (layer1.conv): code'."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    module_stack = node.meta.get("nn_module_stack") or {}
    module = ""
    if module_stack:
        path = list(module_stack.values())[-1][0]
        module = f" ({path})" if path else ""
    if not frames:
        return f"no source location recorded{module}"
    file, line, function, code = frames[-1]
    return f"{file}:{line} in {function}{module}: {code.strip()}"


def aten_name(node: torch.fx.Node) -> str:
    """'aten.add.Tensor' for an OpOverload target, the callable's name otherwise."""
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def _bind(node: torch.fx.Node) -> dict[str, Any]:
    schema = node.target._schema  # type: ignore[union-attr]
    bound: dict[str, Any] = {}
    for i, argument in enumerate(schema.arguments):
        if i < len(node.args):
            bound[argument.name] = node.args[i]
        elif argument.name in node.kwargs:
            bound[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
        else:
            bound[argument.name] = None
    return bound


class AtenContext:
    """One ATen node being converted. Errors raised here carry no location: the importer
    prefixes the op and its source line."""

    def __init__(self, graph: Graph, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> None:
        self.graph = graph
        self.node = node
        self.name = node.name
        self.op = aten_name(node)
        self._env = env
        self.args = _bind(node)

    def __getitem__(self, name: str) -> Any:
        return self.args[name]

    # results -------------------------------------------------------------------------------

    def out_meta(self, i: int = 0) -> Any:
        meta = self.node.meta.get("val")
        return meta[i] if isinstance(meta, list | tuple) else meta

    def out_dtype(self, i: int = 0) -> DType:
        return to_dtype(self.out_meta(i).dtype, f"result {i} of {self.op}")

    def out_shape(self, i: int = 0) -> tuple[int, ...]:
        return tuple(int(d) for d in self.out_meta(i).shape)

    def result_used(self, i: int) -> bool:
        """Whether some node reads result i of a multi-result op (through getitem)."""
        return any(user.args[1] == i for user in self.node.users if user.target is operator.getitem)

    # operands ------------------------------------------------------------------------------

    def meta_of(self, name: str) -> Any:
        arg = self.args[name]
        return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg

    def tensor(self, name: str, dtype: DType | None = None) -> Value:
        """Argument `name` as a graph value, cast to `dtype` when given; a Python number
        becomes a constant of `dtype` (or of the result's type)."""
        return self.value_of(self.args[name], dtype)

    def optional_tensor(self, name: str, dtype: DType | None = None) -> Value | None:
        return None if self.args[name] is None else self.tensor(name, dtype)

    def value_of(self, arg: Any, dtype: DType | None = None) -> Value:
        if isinstance(arg, torch.fx.Node):
            value = self._env[arg]
            if not isinstance(value, Value):
                raise ModelImportError(f"operand '{arg.name}' is not a tensor")
            return value if dtype is None or value.type.dtype is dtype else self.cast(value, dtype)
        if isinstance(arg, bool | int | float):
            target = dtype or self.out_dtype()
            return self.constant(np.array(arg, dtype=target.numpy))
        raise UnsupportedOpError(f"operand {arg!r} ({type(arg).__name__}) is not a tensor or a number")

    def ints(self, name: str) -> tuple[int, ...]:
        value = self.args[name]
        if value is None:
            return ()
        values = [value] if isinstance(value, int) else list(value)
        if not all(isinstance(v, int) for v in values):
            raise UnsupportedOpError(f"argument '{name}' = {value!r} is not a list of integers known at export "
                                     "(Ember compiles static shapes)")
        return tuple(int(v) for v in values)

    def number(self, name: str, default: float | None = None) -> float | None:
        value = self.args[name]
        if value is None:
            return default
        if not isinstance(value, bool | int | float):
            raise UnsupportedOpError(f"argument '{name}' = {value!r} must be a number known at export")
        return float(value)

    # building ------------------------------------------------------------------------------

    def emit(self, op: str, inputs: Sequence[Value | None], attrs: Any = None) -> list[Value]:
        """Adds `op`, or evaluates it with the op's reference semantics when every present
        operand is a constant (while the results stay small: support/limits.py)."""
        opdef = OPS[op]
        attrs = NoAttrs() if attrs is None else attrs
        present = [v for v in inputs if v is not None]
        try:
            types = opdef.infer_types(attrs, [None if v is None else v.type for v in inputs])
            if (present and all(isinstance(v, Constant) for v in present)
                    and limits.may_fold(sum(t.nbytes for t in types))):
                arrays = [v.data if isinstance(v, Constant) else None for v in inputs]
                results = opdef.evaluate(attrs, arrays)
                return [self.constant(array) for array in results]
        except OpError as err:
            message = str(err)
            raise ModelImportError(message if message.startswith(op) else f"{op}: {message}") from None
        return self.graph.add_node(op, inputs, attrs, name=self.name)

    def emit1(self, op: str, inputs: Sequence[Value | None], attrs: Any = None) -> Value:
        (value,) = self.emit(op, inputs, attrs)
        return value

    def constant(self, array: np.ndarray) -> Value:
        return self.graph.add_constant(np.asarray(array), f"{self.name}_const")

    def cast(self, value: Value, dtype: DType) -> Value:
        return value if value.type.dtype is dtype else self.emit1("Cast", [value], CastAttrs(dtype))

    def reshape(self, value: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return value if value.type.shape == shape else self.emit1("Reshape", [value], ReshapeAttrs(shape))

    def check_result(self, value: Value, i: int = 0) -> Value:
        """`value` as result i: its type must be the one torch inferred (a converter's slip
        would otherwise surface far away, or as wrong numbers)."""
        expected = TensorType(self.out_dtype(i), self.out_shape(i))
        if value.type != expected:
            raise ModelImportError(f"internal: {self.op} converted to {value.type}, torch says {expected}")
        return value
