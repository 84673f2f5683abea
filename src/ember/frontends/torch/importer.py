"""convert_program: builds a graph IR from a torch.export ExportedProgram in core ATen form.

Parameters, buffers and lifted constants become graph constants; user inputs become
placeholders of the static types torch recorded; each ATen node goes through its converter
(converters/); outputs take the names of their place in the module's output structure
(`last_hidden_state`, `output_0`, ...). Every ATen op without a converter is reported in one
UnsupportedOpError with the Python source line of each use, before anything is converted."""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind, TensorArgument

from ember.frontends.torch import converters as _converters  # noqa: F401  (registration)
from ember.frontends.torch.context import AtenContext, aten_name, source_location
from ember.frontends.torch.dtypes import tensor_to_array, to_dtype
from ember.frontends.torch.registry import ATEN_CONVERTERS
from ember.graph.ir import Graph, Value
from ember.graph.verify import verify_graph
from ember.support.errors import EmberError, ModelImportError, UnsupportedError, UnsupportedOpError
from ember.support.names import sanitize_identifier
from ember.types import TensorType

# Nodes that check or assert what the static shapes already guarantee: nothing to compute.
IGNORED = frozenset({"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
                     "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg"})


def convert_program(program: ExportedProgram, graph_name: str = "main") -> Graph:
    """The verified graph of an exported program (after run_decompositions)."""
    check_supported(program.graph)
    graph = Graph(graph_name)
    env: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    for spec, node in zip(program.graph_signature.input_specs, placeholders, strict=True):
        _add_input(graph, program, spec, node, env)
    for node in program.graph.nodes:
        if node.op == "call_function":
            _convert_node(graph, node, env)
        elif node.op == "output":
            _set_outputs(graph, program, node, env)
        elif node.op not in ("placeholder",):
            raise UnsupportedOpError(f"exported graph node '{node.name}' is a {node.op}; Ember converts "
                                     "ATen calls only")
    graph.remove_unused()
    try:
        verify_graph(graph)
    except EmberError as err:
        raise ModelImportError(f"the graph converted from the exported program does not verify: {err}") from None
    return graph


def check_supported(fx_graph: torch.fx.Graph) -> None:
    """Raises one UnsupportedOpError naming every ATen op without a converter, with the
    source line of each use."""
    missing: dict[str, list[str]] = {}
    for node in fx_graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        name = aten_name(node)
        if name not in ATEN_CONVERTERS and name not in IGNORED:
            missing.setdefault(name, []).append(source_location(node))
    if missing:
        parts = [f"{op} at {'; '.join(dict.fromkeys(places))}" for op, places in sorted(missing.items())]
        raise UnsupportedOpError(f"unsupported ATen ops ({len(missing)}): " + " | ".join(parts))


def _add_input(graph: Graph, program: ExportedProgram, spec: Any, node: torch.fx.Node,
               env: dict[torch.fx.Node, Any]) -> None:
    if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
        source = program.constants if spec.kind is InputKind.CONSTANT_TENSOR or spec.target in program.constants \
            else program.state_dict
        tensor = source[spec.target]
        what = f"{spec.kind.name.lower()} '{spec.target}'"
        env[node] = graph.add_constant(tensor_to_array(tensor, what), sanitize_identifier(spec.target))
        return
    if spec.kind is not InputKind.USER_INPUT:
        raise UnsupportedOpError(f"exported input '{node.name}' is a {spec.kind.name.lower()}; Ember takes tensors, "
                                 "parameters, buffers and constants")
    if not isinstance(spec.arg, TensorArgument):
        env[node] = spec.arg.value if hasattr(spec.arg, "value") else None
        return
    meta = node.meta["val"]
    what = f"input '{node.name}'"
    shape = tuple(meta.shape)
    if not all(isinstance(d, int) for d in shape):
        raise UnsupportedError(f"{what} has symbolic shape {list(shape)}; Ember compiles static shapes "
                               "(export without dynamic_shapes)")
    env[node] = graph.add_input(node.name, TensorType(to_dtype(meta.dtype, what), tuple(int(d) for d in shape)))


def _convert_node(graph: Graph, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> None:
    if node.target is operator.getitem:
        container, index = node.args
        value = env[container][index]  # type: ignore[index]
        if value is None:
            raise UnsupportedOpError(f"result {index} of {aten_name(container)} at "  # type: ignore[arg-type]
                                     f"{source_location(container)} is used, but Ember cannot produce it")  # type: ignore[arg-type]
        env[node] = value
        return
    name = aten_name(node)
    if name in IGNORED:
        return
    ctx = AtenContext(graph, node, env)
    try:
        results = ATEN_CONVERTERS[name](ctx)
        if isinstance(results, Value):
            env[node] = ctx.check_result(results)
        else:
            env[node] = [None if v is None else ctx.check_result(v, i) for i, v in enumerate(results)]
    except EmberError as err:
        kind = UnsupportedOpError if isinstance(err, UnsupportedError) else ModelImportError
        raise kind(f"{name} at {source_location(node)}: {err}") from None


def output_names(program: ExportedProgram, count: int) -> list[str]:
    """A name per flat output from its place in the module's output structure: an attribute
    or key ('logits'), else its index ('output_0', 'output_1_2')."""
    spec = program.call_spec.out_spec
    if spec is None:
        return [str(i) for i in range(count)]
    try:
        rebuilt = pytree.tree_unflatten(list(range(count)), spec)
        paths = pytree.tree_flatten_with_path(rebuilt)[0]
    except Exception:  # an output structure pytree cannot rebuild: fall back to indices
        return [str(i) for i in range(count)]
    names = []
    for path, _ in paths:
        parts = [str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k)))) for k in path]
        name = "_".join(parts)
        names.append(sanitize_identifier(name) if name[:1].isalpha() else f"output_{name}" if name else "output")
    return _unique(names)


def _unique(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    result = []
    for name in names:
        count = seen.get(name, 0)
        seen[name] = count + 1
        result.append(name if count == 0 else f"{name}_{count}")
    return result


def _set_outputs(graph: Graph, program: ExportedProgram, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> None:
    specs = program.graph_signature.output_specs
    mutated = [s for s in specs if s.kind is not OutputKind.USER_OUTPUT]
    if mutated:
        what = ", ".join(f"{s.kind.name.lower()} of '{s.target}'" for s in mutated)
        raise UnsupportedError(f"the module mutates state in place ({what}); Ember compiles inference only: "
                               "call model.eval() and do not modify inputs or buffers in forward")
    (returned,) = node.args
    values = list(returned) if isinstance(returned, list | tuple) else [returned]
    names = output_names(program, len(values))
    outputs = []
    for name, arg in zip(names, values, strict=True):
        value = env.get(arg) if isinstance(arg, torch.fx.Node) else None
        if not isinstance(value, Value):
            raise UnsupportedError(f"output '{name}' is not a tensor ({arg!r}); Ember models return tensors only")
        outputs.append((name, value))
    graph.set_outputs(outputs)
