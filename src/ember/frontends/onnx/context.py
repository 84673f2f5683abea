"""The per-node conversion context handed to every converter: the node's identity and opset,
its inputs (as graph values, or as constant arrays where ONNX passes shapes as tensors), typed
attribute getters, and `emit`, the one place where nodes are added to the graph and where
nodes whose inputs are all constants are folded at import time."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto, helper

from ember.frontends.onnx.dtypes import tensor_to_array
from ember.graph.ir import Constant, Graph, Placeholder, Value
from ember.ops import OPS, NoAttrs, OpError
from ember.ops.tensor import ReshapeAttrs, ShapeAttrs
from ember.support import limits
from ember.support.errors import ModelImportError, UnsupportedError, node_location

_REQUIRED = object()

# (body, outer environment, bindings of the body's inputs, name prefix) -> the body's outputs
Inliner = Callable[[GraphProto, dict[str, Value], dict[str, Value], str], list[Value]]


class ConstantRequired(ModelImportError):
    """An input that Ember needs as a constant (a shape, axes, pads, k...) is computed at run
    time. `inputs` names the graph inputs it is computed from: binding those to constants
    (load_onnx's constant_inputs) makes the model compile."""

    def __init__(self, message: str, inputs: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.inputs = tuple(inputs)


def graph_inputs(value: Value) -> list[str]:
    """The graph inputs (placeholders) that `value` is computed from."""
    seen: set[int] = set()
    found: list[str] = []
    stack: list[Value | None] = [value]
    while stack:
        v = stack.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, Placeholder):
            found.append(v.name)
        elif v.producer is not None:
            stack.extend(v.producer.inputs)
    return sorted(found)

_ATTR_TYPE_NAMES: dict[int, str] = {
    AttributeProto.INT: "an int",
    AttributeProto.FLOAT: "a float",
    AttributeProto.INTS: "a list of ints",
    AttributeProto.FLOATS: "a list of floats",
    AttributeProto.STRING: "a string",
    AttributeProto.TENSOR: "a tensor",
}


def _text(value: bytes, name: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelImportError(f"attribute '{name}' is not valid UTF-8 text: {value[:40]!r}") from None


class NodeContext:
    """What a converter sees of one ONNX node. Errors raised here carry no node location;
    the importer prefixes it (`node 'n' (Conv): ...`)."""

    def __init__(self, graph: Graph, node: NodeProto, name: str, opset: int, env: dict[str, Value],
                 used_names: set[str], inliner: Inliner | None = None) -> None:
        self.graph = graph
        self.node = node
        self.name = name
        self.op_type = node.op_type
        self.opset = opset
        self._env = env
        self._used = used_names
        self._attrs = {a.name: a for a in node.attribute}
        self._inliner = inliner

    @property
    def location(self) -> str:
        return node_location(self.name, self.op_type)

    # inputs --------------------------------------------------------------------------------

    @property
    def num_inputs(self) -> int:
        return len(self.node.input)

    def input_name(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else ""

    def input(self, i: int) -> Value | None:
        """Input i, or None when it is absent (missing or given the empty name)."""
        name = self.input_name(i)
        if not name:
            return None
        return self._env[name]

    def require(self, i: int, what: str | None = None) -> Value:
        """Input i, which must be present."""
        value = self.input(i)
        if value is None:
            label = f" ({what})" if what else ""
            raise ModelImportError(f"required input {i}{label} is missing")
        return value

    def is_constant(self, i: int) -> bool:
        return isinstance(self.input(i), Constant)

    def constant(self, i: int, what: str | None = None) -> np.ndarray:
        """The data of input i, which must be a constant (an initializer, or computed from
        constants only). Raises ConstantRequired, naming the graph inputs it is computed from."""
        value = self.require(i, what)
        if not isinstance(value, Constant):
            label = f", {what}" if what else ""
            raise ConstantRequired(
                f"input {i} ('{self.input_name(i)}'{label}) of {self.location} must be a constant: "
                "Ember compiles static shapes, and this input decides a shape or a parameter",
                graph_inputs(value))
        return value.data

    def optional_constant(self, i: int, what: str | None = None) -> np.ndarray | None:
        return None if self.input(i) is None else self.constant(i, what)

    def constant_ints(self, i: int, what: str | None = None) -> tuple[int, ...] | None:
        """A constant integer input as a tuple (None when absent)."""
        data = self.optional_constant(i, what)
        if data is None:
            return None
        if data.dtype.kind not in "iu":
            raise ModelImportError(f"input {i} ({what or self.input_name(i)}) must hold integers, got {data.dtype}")
        return tuple(int(v) for v in data.reshape(-1))

    # attributes ----------------------------------------------------------------------------

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def _attr(self, name: str, kind: int, default: Any) -> Any:
        attr = self._attrs.get(name)
        if attr is None:
            if default is _REQUIRED:
                raise ModelImportError(f"required attribute '{name}' is missing")
            return default
        if attr.type != kind:
            raise ModelImportError(f"attribute '{name}' must be {_ATTR_TYPE_NAMES.get(kind, str(kind))}, "
                                   f"got {AttributeProto.AttributeType.Name(attr.type).lower()}")
        return helper.get_attribute_value(attr)

    @overload
    def attr_int(self, name: str) -> int: ...
    @overload
    def attr_int(self, name: str, default: int) -> int: ...
    @overload
    def attr_int(self, name: str, default: None) -> int | None: ...

    def attr_int(self, name: str, default: Any = _REQUIRED) -> int | None:
        value = self._attr(name, AttributeProto.INT, default)
        return value if value is None else int(value)

    def attr_bool(self, name: str, default: bool) -> bool:
        """A flag attribute: the spec allows 0 and 1 only. Anything else is refused, since
        runtimes disagree on it (ONNX Runtime reads `== 1`, the reference `!= 0`)."""
        value = self._attr(name, AttributeProto.INT, int(default))
        if value not in (0, 1):
            raise ModelImportError(f"attribute '{name}' is a flag and must be 0 or 1, got {value}")
        return bool(value)

    @overload
    def attr_float(self, name: str) -> float: ...
    @overload
    def attr_float(self, name: str, default: float) -> float: ...
    @overload
    def attr_float(self, name: str, default: None) -> float | None: ...

    def attr_float(self, name: str, default: Any = _REQUIRED) -> float | None:
        attr = self._attrs.get(name)
        kind = AttributeProto.INT if attr is not None and attr.type == AttributeProto.INT else AttributeProto.FLOAT
        value = self._attr(name, kind, default)  # an int where a float belongs is harmless
        return value if value is None else float(value)

    @overload
    def attr_ints(self, name: str) -> tuple[int, ...]: ...
    @overload
    def attr_ints(self, name: str, default: Sequence[int]) -> tuple[int, ...]: ...
    @overload
    def attr_ints(self, name: str, default: None) -> tuple[int, ...] | None: ...

    def attr_ints(self, name: str, default: Any = _REQUIRED) -> tuple[int, ...] | None:
        value = self._attr(name, AttributeProto.INTS, default)
        return value if value is None else tuple(int(v) for v in value)

    def attr_floats(self, name: str, default: Any = _REQUIRED) -> tuple[float, ...] | None:
        value = self._attr(name, AttributeProto.FLOATS, default)
        return value if value is None else tuple(float(v) for v in value)

    def attr_str(self, name: str, default: Any = _REQUIRED) -> str:
        value = self._attr(name, AttributeProto.STRING, default)
        return _text(value, name) if isinstance(value, bytes) else value

    def attr_strs(self, name: str, default: Any = _REQUIRED) -> tuple[str, ...] | None:
        value = self._attr(name, AttributeProto.STRINGS, default)
        return value if value is None else tuple(_text(v, name) if isinstance(v, bytes) else v for v in value)

    @overload
    def attr_tensor(self, name: str) -> np.ndarray: ...
    @overload
    def attr_tensor(self, name: str, default: None) -> np.ndarray | None: ...

    def attr_tensor(self, name: str, default: Any = _REQUIRED) -> np.ndarray | None:
        attr = self._attrs.get(name)
        if attr is None:
            if default is _REQUIRED:
                raise ModelImportError(f"required attribute '{name}' is missing")
            return default
        if attr.type != AttributeProto.TENSOR:
            raise ModelImportError(f"attribute '{name}' must be a tensor")
        return tensor_to_array(attr.t, f"attribute '{name}'")

    def attr_graph(self, name: str) -> GraphProto:
        attr = self._attrs.get(name)
        if attr is None:
            raise ModelImportError(f"required attribute '{name}' is missing")
        if attr.type != AttributeProto.GRAPH:
            raise ModelImportError(f"attribute '{name}' must be a graph")
        return attr.g

    def inline(self, body: GraphProto, bindings: dict[str, Value], tag: str) -> list[Value]:
        """Converts subgraph `body` into the graph (its inputs bound to `bindings`, outer
        values visible by name) and returns the values of its outputs. Control flow that
        Ember can resolve at import (If on a constant, loops with known trip counts) inlines
        its bodies this way; `tag` names the copy (e.g. 'iter3')."""
        if self._inliner is None:
            raise ModelImportError("subgraphs cannot be inlined here")
        return self._inliner(body, dict(self._env), bindings, f"{self.name}/{tag}")

    def reject_attr(self, name: str, reason: str) -> None:
        if name in self._attrs:
            raise UnsupportedError(f"attribute '{name}' is not supported: {reason}")

    # outputs -------------------------------------------------------------------------------

    @property
    def num_outputs(self) -> int:
        return len(self.node.output)

    def output_name(self, i: int) -> str:
        return self.node.output[i] if i < len(self.node.output) else ""

    def output_used(self, i: int) -> bool:
        """Whether output i exists and some node or graph output reads it."""
        name = self.output_name(i)
        return bool(name) and name in self._used

    def check_unused(self, i: int, what: str) -> None:
        if self.output_used(i):
            raise UnsupportedError(f"output {i} ('{self.output_name(i)}', {what}) is used, "
                                   "but Ember cannot produce it")

    def _result_names(self, count: int) -> list[str]:
        return [self.output_name(i) or f"{self.name}_out{i}" for i in range(count)]

    # building ------------------------------------------------------------------------------

    def emit(self, op: str, inputs: Sequence[Value | None], attrs: Any = None,
             names: Sequence[str] | None = None) -> list[Value]:
        """Adds `op` to the graph, or, when every present input is a constant, evaluates it
        with the op's reference semantics and adds the results as constants. `names` name
        the results (default: derived from the node name)."""
        opdef = OPS[op]
        attrs = NoAttrs() if attrs is None else attrs
        inputs = list(inputs)
        count = len(opdef.results)
        base = f"{self.name}_{op.lower()}"
        names = list(names or [])[:count]
        names += [base if count == 1 else f"{base}{i}" for i in range(len(names), count)]
        present = [v for v in inputs if v is not None]
        try:
            types = opdef.infer_types(attrs, [None if v is None else v.type for v in inputs])
            for type_, name in zip(types, names, strict=True):
                limits.check_shape(type_.shape, type_.dtype.itemsize, f"{self.location}: result '{name}' ({type_})")
            # Folded only while the results stay small: a tiny model can ask for gigabytes
            # (Expand, Tile of constants); past the limit the node computes at run time.
            if (present and all(isinstance(v, Constant) for v in present)
                    and limits.may_fold(sum(t.nbytes for t in types))):
                arrays = [v.data if isinstance(v, Constant) else None for v in inputs]
                results = opdef.evaluate(attrs, arrays)
                return [self.graph.add_constant(array, name) for array, name in zip(results, names, strict=True)]
        except OpError as err:
            message = str(err)
            raise ModelImportError(message if message.startswith(op) else f"{op}: {message}") from None
        return self.graph.add_node(op, inputs, attrs, name=self.name, result_names=names)

    def emit1(self, op: str, inputs: Sequence[Value | None], attrs: Any = None, name: str | None = None) -> Value:
        (value,) = self.emit(op, inputs, attrs, None if name is None else [name])
        return value

    def result(self, op: str, inputs: Sequence[Value | None], attrs: Any = None) -> list[Value]:
        """Emits the op that computes this node's outputs, naming its results after them."""
        return self.emit(op, inputs, attrs, self._result_names(len(OPS[op].results)))

    def add_constant(self, array: np.ndarray, name: str | None = None) -> Value:
        """A helper constant (named after the node unless `name`)."""
        return self.graph.add_constant(np.asarray(array), name or f"{self.name}_const")

    def filled_result(self, shape: Sequence[int], value: np.ndarray, i: int = 0) -> Value:
        """Output i: `shape` filled with the one-element `value`; a constant while it is small
        enough to fold (support/limits.py), else a run-time Expand of the scalar (a 100-byte
        model must not make Ember allocate gigabytes at compile time)."""
        dtype = np.dtype(value.dtype)
        scalar = value.reshape(())
        nbytes = math.prod(shape) * dtype.itemsize
        limits.check_shape(shape, dtype.itemsize, f"{self.location}: result {list(shape)} of {dtype}")
        if limits.may_fold(nbytes):
            return self.constant_result(np.full(tuple(shape), scalar, dtype=dtype), i)
        fill = self.add_constant(scalar.copy(), f"{self.name}_fill")
        return self.emit("Expand", [fill], ShapeAttrs(tuple(int(d) for d in shape)), self._result_names(i + 1)[i:])[0]

    def constant_result(self, array: np.ndarray, i: int = 0) -> Value:
        """A constant that is output i of this node."""
        return self.graph.add_constant(np.asarray(array), self._result_names(i + 1)[i])

    def reshape(self, x: Value, shape: Sequence[int], final: bool = False) -> Value:
        """x reshaped to `shape` (x itself when the shape already matches)."""
        shape = tuple(int(d) for d in shape)
        if x.type.shape == shape:
            return x
        if final:
            return self.result("Reshape", [x], ReshapeAttrs(shape))[0]
        return self.emit1("Reshape", [x], ReshapeAttrs(shape))
