"""load_onnx: builds a graph IR from an ONNX model. Owns the import pipeline (load, scan for
unsupported ops, inputs and initializers, node conversion in dependency order, outputs,
verification), the inlining of subgraphs that control-flow converters resolve at import, and
turns every failure into a ModelImportError that names the model, node or input concerned:
an UnsupportedOpError (also an UnsupportedError) when the cause is something Ember does not
support (the up-front scan for unsupported ops, or a feature a converter refuses)."""
from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnx.defs
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorShapeProto, ValueInfoProto

from ember.frontends.onnx import converters as _converters  # noqa: F401  (registration)
from ember.frontends.onnx.context import ConstantRequired, NodeContext
from ember.frontends.onnx.dtypes import onnx_type_name, tensor_to_array, to_dtype
from ember.frontends.onnx.loader import DEFAULT_DOMAINS, LoadedModel, load_model
from ember.frontends.onnx.registry import DOMAIN_CONVERTERS, find_converter
from ember.graph.ir import Graph, Value
from ember.graph.verify import verify_graph
from ember.support.errors import (
    EmberError,
    EmberWarning,
    ModelImportError,
    UnsupportedError,
    UnsupportedOpError,
    node_location,
)
from ember.support.limits import ResourceLimitError
from ember.types import TensorType


def load_onnx(model: str | os.PathLike | ModelProto | LoadedModel,
              input_shapes: Mapping[str, Sequence[int]] | None = None,
              constant_inputs: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Imports an ONNX model (a file path or a ModelProto) as a verified graph.

    input_shapes binds the shape of inputs whose ONNX shape has symbolic or unknown
    dimensions (Ember compiles static shapes); a given shape replaces the declared one and
    must agree with its fixed dimensions.

    constant_inputs binds inputs to values known at compile time: each becomes a constant
    (and stops being an input), which lets inputs that decide shapes, axes or pads fold. The
    compiled model is then valid for those values only."""
    loaded = load_model(model)
    proto = loaded.model.graph
    names = node_names(proto.node)
    check_supported(proto, names, loaded.opset)
    if proto.sparse_initializer:
        raise UnsupportedOpError(f"{loaded.label}: sparse initializers "
                                 f"('{proto.sparse_initializer[0].values.name}') are not supported")

    graph = Graph(proto.name or "main")
    env: dict[str, Value] = {}
    initializers = _add_initializers(graph, proto, env, loaded)
    _add_inputs(graph, proto, initializers, dict(input_shapes or {}), dict(constant_inputs or {}), env)
    used = {name for node in proto.node for name in node.input if name} | {o.name for o in proto.output}
    for index in _topological_order(proto.node, names, set(env)):
        _convert_node(graph, proto.node[index], names[index], loaded.opset, env, used)
    _set_outputs(graph, proto, env)
    graph.remove_unused()
    if loaded.single_use:
        del proto  # a sub-message holds the whole proto's memory
        loaded.release()
    try:
        verify_graph(graph)
    except EmberError as err:
        raise ModelImportError(f"the graph imported from {loaded.label} does not verify: {err}") from None
    return graph


def node_names(nodes: Sequence[NodeProto]) -> list[str]:
    """Each node's name, or a deterministic one (op type and index) for unnamed nodes."""
    return [node.name or f"{node.op_type}_{i}" for i, node in enumerate(nodes)]


def check_supported(graph: GraphProto, names: Sequence[str], opset: int) -> None:
    """Raises one UnsupportedOpError listing every node Ember cannot convert, by op type."""
    bad: dict[str, list[str]] = {}
    notes: dict[str, str] = {}
    for node, name in zip(graph.node, names, strict=True):
        found = find_converter(node.domain, node.op_type)
        key = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        if node.domain not in DEFAULT_DOMAINS and node.domain not in DOMAIN_CONVERTERS:
            notes[key] = f"domain '{node.domain}' is not supported"
        elif found is None:
            pass
        elif not found.supports(opset):
            notes[key] = f"supported in {found.describe_range()}"
        else:
            continue
        bad.setdefault(key, []).append(name)
    if bad:
        parts = []
        for key, nodes in bad.items():
            note = f"; {notes[key]}" if key in notes else ""
            parts.append(f"{key} (nodes: {', '.join(nodes)}{note})")
        raise UnsupportedOpError(f"unsupported ONNX ops (opset {opset}): {'; '.join(parts)}")


@functools.lru_cache(maxsize=1024)
def _schema(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


def check_against_schema(node: NodeProto, opset: int) -> None:
    """The node's arity and attribute names against ONNX's own schema of the op at this
    opset: extra operands or unknown attributes are refused, never silently ignored (ONNX
    Runtime refuses them too)."""
    schema = _schema(node.op_type, opset)
    if schema is None:
        first = _first_version(node.op_type)
        if first is not None and first > opset:
            raise ModelImportError(f"{node.op_type} does not exist in opset {opset}: ONNX added it in opset {first} "
                                   "(raise the model's opset import)")
        return
    where = f"{node.op_type}-{schema.since_version}"
    if len(node.input) > schema.max_input:
        raise ModelImportError(f"{len(node.input)} inputs given, but {where} takes at most {schema.max_input}")
    if len(node.output) > schema.max_output:
        raise ModelImportError(f"{len(node.output)} outputs given, but {where} has at most {schema.max_output}")
    unknown = sorted({a.name for a in node.attribute} - set(schema.attributes))
    if unknown:
        known = ", ".join(sorted(schema.attributes)) or "none"
        raise ModelImportError(f"unknown attribute{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
                               f" ({where} has: {known})")
    for attr in node.attribute:
        expected: int = schema.attributes[attr.name].type.value  # type: ignore[attr-defined]  # stubs lack it
        # UNDEFINED: writers older than IR version 2 left the type out (the value's field tells)
        if attr.type not in (AttributeProto.UNDEFINED, expected):
            raise ModelImportError(f"attribute '{attr.name}' is {AttributeProto.AttributeType.Name(attr.type)}, but "
                                   f"{where} takes {AttributeProto.AttributeType.Name(expected)}")


def _first_version(op_type: str) -> int | None:
    """The opset that introduced a default-domain op, or None when ONNX has no such op."""
    return _first_versions().get(op_type)


@functools.cache
def _first_versions() -> dict[str, int]:
    first: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "":
            first[schema.name] = min(schema.since_version, first.get(schema.name, schema.since_version))
    return first


def _add_initializers(graph: Graph, proto: GraphProto, env: dict[str, Value], loaded: LoadedModel) -> set[str]:
    """Each initializer as a constant: its raw_data read from the file where the file was read
    without it (loaded.payloads, frontends/onnx/weights.py)."""
    if loaded.payloads is None:
        return _initializers_from(graph, proto, env, None)
    try:
        with loaded.payloads.reader() as read:
            return _initializers_from(graph, proto, env, read)
    except OSError as err:
        raise ModelImportError(f"cannot read the weights of {loaded.label}: {err}") from None


def _initializers_from(graph: Graph, proto: GraphProto, env: dict[str, Value],
                       read: Callable[[int], np.ndarray | None] | None) -> set[str]:
    names: set[str] = set()
    for index, tensor in enumerate(proto.initializer):
        what = f"initializer '{tensor.name}'"
        if not tensor.name:
            raise ModelImportError("an initializer has no name")
        if tensor.name in names:
            raise ModelImportError(f"{what} is defined twice")
        # Resolved external data is in the proto; a payload read apart is not.
        raw = read(index) if read is not None and not tensor.HasField("raw_data") else None
        array = tensor_to_array(tensor, what, raw)
        env[tensor.name] = graph.add_constant(array, tensor.name, exact=True)
        names.add(tensor.name)
    return names


def _add_inputs(graph: Graph, proto: GraphProto, initializers: set[str], input_shapes: dict[str, Sequence[int]],
                constant_inputs: dict[str, np.ndarray], env: dict[str, Value]) -> None:
    inputs = [vi for vi in proto.input if vi.name not in initializers]
    unknown = sorted((set(input_shapes) | set(constant_inputs)) - {vi.name for vi in inputs})
    if unknown:
        known = ", ".join(f"'{vi.name}'" for vi in inputs) or "none"
        what = "input_shapes" if not set(unknown) & set(constant_inputs) else "constant_inputs"
        raise ModelImportError(f"{what} names {', '.join(repr(n) for n in unknown)}, which "
                               f"{'is' if len(unknown) == 1 else 'are'} not a model input (inputs: {known})")
    for vi in inputs:
        if vi.name in env:
            raise ModelImportError(f"graph input '{vi.name}' is declared twice")
        if vi.name in constant_inputs:
            data = np.asarray(constant_inputs[vi.name])
            expected = input_type(vi, data.shape)
            if data.dtype != expected.dtype.numpy:
                raise ModelImportError(f"constant_inputs['{vi.name}'] has element type {data.dtype}, but the model "
                                       f"declares {expected.dtype}")
            env[vi.name] = graph.add_constant(np.array(data, order="C"), vi.name, exact=True)
            continue
        env[vi.name] = graph.add_input(vi.name, input_type(vi, input_shapes.get(vi.name)))


def input_type(vi: ValueInfoProto, bound: Sequence[int] | None) -> TensorType:
    """The static type of a graph input, binding symbolic dims from `bound`."""
    what = f"input '{vi.name}'"
    if vi.type.WhichOneof("value") != "tensor_type":
        kind = vi.type.WhichOneof("value") or "untyped value"
        raise UnsupportedOpError(f"{what} is not a tensor (it is a {kind}); Ember supports tensor inputs only")
    tensor_type = vi.type.tensor_type
    dtype = to_dtype(tensor_type.elem_type, what)
    declared = list(tensor_type.shape.dim) if tensor_type.HasField("shape") else None
    if bound is not None:
        try:
            shape = tuple(int(d) for d in bound)
        except (TypeError, ValueError):
            raise ModelImportError(f"input_shapes['{vi.name}'] must be a sequence of integers, got {bound!r}") from None
        if any(d < 0 for d in shape):
            raise ModelImportError(f"input_shapes['{vi.name}'] = {list(shape)} has a negative dimension")
        if declared is not None:
            if len(declared) != len(shape):
                raise ModelImportError(f"input_shapes['{vi.name}'] = {list(shape)} has rank {len(shape)}, "
                                       f"but the model declares rank {len(declared)}")
            for i, (dim, d) in enumerate(zip(declared, shape, strict=True)):
                # A negative dim_value is how some exporters write "unknown": not a contradiction.
                if dim.WhichOneof("value") == "dim_value" and dim.dim_value >= 0 and dim.dim_value != d:
                    raise ModelImportError(f"input_shapes['{vi.name}'] = {list(shape)} sets dimension {i} to {d}, "
                                           f"but the model fixes it to {dim.dim_value} (declared shape "
                                           f"{declared_shape_text(declared)})")
        return TensorType(dtype, shape)
    if declared is None:
        raise ModelImportError(f"{what} has no declared shape; Ember compiles static shapes: "
                               f"pass input_shapes={{'{vi.name}': [...]}} to load_onnx")
    dims: list[int] = []
    for i, dim in enumerate(declared):
        if dim.WhichOneof("value") == "dim_value" and dim.dim_value >= 0:
            dims.append(int(dim.dim_value))
            continue
        label = f"symbolic dimension '{dim.dim_param}'" if dim.dim_param else "an unknown dimension"
        example = declared_shape_text(declared)[1:-1]
        raise ModelImportError(f"{what} has {label} at dimension {i}; Ember compiles static shapes: "
                               f"pass input_shapes={{'{vi.name}': [{example}]}} with every dimension set")
    return TensorType(dtype, tuple(dims))


def _topological_order(nodes: Sequence[NodeProto], names: Sequence[str], available: set[str]) -> list[int]:
    """Node indices in an order where every input is defined first (the file order when
    it already is one)."""
    available = set(available)
    order: list[int] = []
    pending = list(range(len(nodes)))
    while pending:
        rest = []
        for i in pending:
            if all(not name or name in available for name in nodes[i].input):
                order.append(i)
                available.update(name for name in nodes[i].output if name)
            else:
                rest.append(i)
        if len(rest) == len(pending):
            i = rest[0]
            missing = next(n for n in nodes[i].input if n and n not in available)
            raise ModelImportError(f"{node_location(names[i], nodes[i].op_type)}: input '{missing}' is not produced "
                                   "by any node, graph input or initializer (or the graph has a cycle)")
        pending = rest
    return order


def _located(location: str, err: Exception) -> str:
    message = str(err)
    return message if location in message else f"{location}: {message}"


def inline_subgraph(graph: Graph, body: GraphProto, env: dict[str, Value], bindings: dict[str, Value],
                    prefix: str, opset: int) -> list[Value]:
    """Converts the nodes of subgraph `body` into `graph`: `env` holds the outer scope's
    values (copied by the caller, since each inlined copy defines the body's names afresh),
    `bindings` the values of the body's inputs. Returns the body's output values."""
    missing = [vi.name for vi in body.input if vi.name not in bindings]
    if missing:
        raise ModelImportError(f"{prefix}: subgraph inputs {missing} are not bound")
    env.update(bindings)
    for tensor in body.initializer:
        env[tensor.name] = graph.add_constant(tensor_to_array(tensor, f"initializer '{tensor.name}'"),
                                              f"{prefix}/{tensor.name}")
    names = [f"{prefix}/{n}" for n in node_names(body.node)]
    check_supported(body, names, opset)
    used = {n for node in body.node for n in node.input if n} | {o.name for o in body.output}
    for index in _topological_order(body.node, names, set(env)):
        _convert_node(graph, body.node[index], names[index], opset, env, used)
    outputs = []
    for vi in body.output:
        if vi.name not in env:
            raise ModelImportError(f"{prefix}: subgraph output '{vi.name}' is not produced")
        outputs.append(env[vi.name])
    return outputs


def _convert_node(graph: Graph, node: NodeProto, name: str, opset: int, env: dict[str, Value],
                  used: set[str]) -> None:
    def inliner(body, outer, bindings, prefix):
        return inline_subgraph(graph, body, outer, bindings, prefix, opset)

    ctx = NodeContext(graph, node, name, opset, env, used, inliner)
    try:
        if node.domain in DEFAULT_DOMAINS:
            check_against_schema(node, opset)
        found = find_converter(node.domain, node.op_type)
        assert found is not None  # check_supported refused the node otherwise
        results = found.fn(ctx)
        if isinstance(results, Value):
            results = [results]
        results = list(results)
        for i, out_name in enumerate(node.output):
            if not out_name:
                continue
            value = results[i] if i < len(results) else None
            if value is None:
                if out_name in used:
                    raise UnsupportedError(f"output {i} ('{out_name}') is used, but Ember cannot produce it")
                continue
            if out_name in env:
                raise ModelImportError(f"output '{out_name}' is already defined by another node, input or initializer")
            env[out_name] = value
    except ConstantRequired as err:
        raise ConstantRequired(_located(ctx.location, err), err.inputs) from None
    except UnsupportedError as err:
        raise UnsupportedOpError(_located(ctx.location, err)) from None
    except ResourceLimitError as err:
        raise ResourceLimitError(_located(ctx.location, err)) from None
    except EmberError as err:
        raise ModelImportError(_located(ctx.location, err)) from None
    except MemoryError:
        raise ResourceLimitError(f"{ctx.location}: out of memory while converting (lower the limits in "
                                 "ember/support/limits.py to refuse such models before allocating)") from None
    except Exception as err:  # noqa: BLE001  (a converter bug must still name the node)
        raise ModelImportError(f"{ctx.location}: internal error while converting: {type(err).__name__}: {err}") from err


def _set_outputs(graph: Graph, proto: GraphProto, env: dict[str, Value]) -> None:
    outputs = []
    for vi in proto.output:
        value = env.get(vi.name)
        if value is None:
            raise ModelImportError(f"graph output '{vi.name}' is not produced by any node, input or initializer")
        _check_output_type(vi, value)
        outputs.append((vi.name, value))
    graph.set_outputs(outputs)


def _check_output_type(vi: ValueInfoProto, value: Value) -> None:
    """A declared element type must match; a declared shape is only a hint. Exporters write -1
    or 0 for unknown dimensions and sometimes a wrong rank (ONNX Runtime only warns): Ember's
    inference is authoritative, and a contradiction is a warning naming both shapes."""
    if vi.type.WhichOneof("value") != "tensor_type":
        return
    tensor_type = vi.type.tensor_type
    inferred = value.type
    what = f"graph output '{vi.name}'"
    if tensor_type.elem_type:
        declared = to_dtype(tensor_type.elem_type, what)
        if declared is not inferred.dtype:
            raise ModelImportError(f"{what} is declared {onnx_type_name(tensor_type.elem_type).lower()} "
                                   f"({declared}), but Ember infers {inferred}")
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        fixed = [int(d.dim_value) if d.WhichOneof("value") == "dim_value" and d.dim_value >= 0 else None
                 for d in dims]
        if len(dims) != inferred.rank or any(f is not None and f != s for f, s in zip(fixed, inferred.shape,
                                                                                       strict=False)):
            warnings.warn(f"{what} is declared with shape {declared_shape_text(dims)}, but Ember infers "
                          f"{list(inferred.shape)}: using the inferred shape", EmberWarning, stacklevel=2)


def declared_shape_text(dims: Sequence[TensorShapeProto.Dimension]) -> str:
    """A declared shape as the user reads it: numbers, symbols, '?' for unknown (-1 or unset)."""
    parts = []
    for d in dims:
        if d.WhichOneof("value") == "dim_value" and d.dim_value >= 0:
            parts.append(str(d.dim_value))
        else:
            parts.append(d.dim_param or "?")
    return "[" + ", ".join(parts) + "]"
