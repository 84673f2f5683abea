"""The torch.compile backend: `torch.compile(model, backend="ember", options={...})`.

Dynamo hands over each captured FX graph (graph breaks run eagerly between them, as with any
backend). The graph's parameters and buffers are frozen into constants, so that the cpu
backend packs weights at compile time; a frozen tensor that changes afterwards (its version
counter moves, or another tensor takes its place) drops the compiled code, which is rebuilt on
the next call. Each distinct input shape compiles once and is cached (Dynamo's symbolic
shapes arrive here as concrete sizes). Tensors cross without copies where their layout
allows: contiguous CPU inputs are viewed as NumPy arrays, outputs are wrapped by
torch.from_numpy.

The compile function (graph -> compiled model) is passed in by the caller (ember/__init__.py),
which sits above the driver in the layering."""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.fx.traceback
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind, TensorArgument

from ember.frontends.torch.exporter import check_example_inputs, export_module
from ember.frontends.torch.importer import convert_program
from ember.graph.ir import Graph
from ember.support.errors import EmberError, UnsupportedError

# (graph, backend name(s), backend options) -> a compiled model (runtime.CompiledModel)
GraphCompiler = Callable[[Graph, Any, Mapping[str, Any]], Any]

OPTIONS = {"backend": "which Ember backend(s): 'cpu' (default), 'interpreter', a list, or 'auto'",
           "num_threads": "threads for native backends (default: all cores)",
           "precision": "'fp32' (default) or 'bf16' where the backend has bf16 kernels (passed to the backend)"}


def check_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in OPTIONS.items())
        raise EmberError(f"unknown torch.compile option{'s' if len(unknown) > 1 else ''} {unknown} for backend "
                         f"'ember' (it takes {known})")
    if options.get("precision", "fp32") == "fp32":
        options.pop("precision", None)
    threads = options.get("num_threads")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise EmberError(f"num_threads={threads!r} must be a positive integer")
    return options


def is_state(node: torch.fx.Node) -> bool:
    """Whether a Dynamo graph input is a module's parameter or buffer (frozen), from the
    source Dynamo recorded for it."""
    name = str(getattr(getattr(node.meta.get("grapharg"), "source", None), "name", ""))
    return "._parameters[" in name or "._buffers[" in name


class _Frozen(torch.nn.Module):
    """The Dynamo graph with its state inputs bound to buffers (exported as constants), taking
    the other inputs."""

    def __init__(self, gm: torch.fx.GraphModule, frozen: Mapping[int, torch.Tensor], count: int) -> None:
        super().__init__()
        self.gm = gm
        self.count = count
        self.frozen = sorted(frozen)
        for i, tensor in frozen.items():
            self.register_buffer(f"state_{i}", tensor.detach())

    def forward(self, *args: Any) -> Any:
        given = iter(args)
        full = [getattr(self, f"state_{i}") if i in self.frozen else next(given) for i in range(self.count)]
        # Node by node, so that the exported nodes keep the model's source lines that Dynamo
        # recorded (calling the graph's code would record the generated code's lines).
        with torch.fx.traceback.preserve_node_meta():
            return torch.fx.Interpreter(self.gm).run(*full)


@dataclass
class _Entry:
    """One compiled shape. Its key (shapes and element types of the tensor arguments) is what
    CompiledModel.run would validate, so the executable is called directly: per call, this
    path is most of the backend's overhead on small models."""

    model: Any
    positions: list[int]  # for each model input, in order, its position among the call's arguments
    out_spec: Any

    def run(self, args: Sequence[Any]) -> Any:
        outputs = self.model.executable.run([_as_array(args[p]) for p in self.positions])
        return pytree.tree_unflatten([torch.from_numpy(o) for o in outputs], self.out_spec)


def _as_array(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:
        from ember.types import DType

        return tensor.view(torch.int16).numpy().view(DType.BFLOAT16.numpy)
    return tensor.numpy()


def _concrete(args: Sequence[Any]) -> bool:
    """Whether the arguments have concrete sizes (Dynamo's symbolic-shape graphs get their
    example inputs with symbolic ones: those graphs compile at their first call)."""
    for arg in args:
        if isinstance(arg, torch.SymInt | torch.SymFloat | torch.SymBool):
            return False
        if isinstance(arg, torch.Tensor) and not all(isinstance(d, int) for d in arg.shape):
            return False
    return True


class CompiledGraphModule:
    """What the backend returns to Dynamo: called with the graph's inputs, returns its outputs."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], compile_graph: GraphCompiler,
                 options: Mapping[str, Any]) -> None:
        self._gm = gm
        self._compile_graph = compile_graph
        self._options = dict(options)
        self._backend = self._options.pop("backend", "cpu")
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self._count = len(placeholders)
        self._state = [i for i, node in enumerate(placeholders) if is_state(node)]
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
            names = [placeholders[i].name for i, t in enumerate(example_inputs)
                     if isinstance(t, torch.Tensor) and t.requires_grad]
            raise UnsupportedError(f"inputs {names[:4]} of the compiled graph require grad; Ember's torch.compile "
                                   "backend is inference only: call the model under torch.no_grad() or "
                                   "torch.inference_mode()")
        self._frozen: dict[int, torch.Tensor] = {}
        self._versions: dict[int, int] = {}
        self._cache: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()
        if _concrete(example_inputs):  # compile now: unsupported ops fail at torch.compile's first call
            self._entry(example_inputs)

    def _key(self, args: Sequence[Any]) -> tuple:
        return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                     for i, a in enumerate(args) if i not in self._frozen)

    def _state_changed(self, args: Sequence[Any]) -> bool:
        """Whether a frozen tensor was replaced or modified in place since it was frozen."""
        frozen, versions = self._frozen, self._versions
        for i in self._state:
            tensor: Any = args[i]
            if versions.get(i) != tensor._version or frozen.get(i) is not tensor:
                return True
        return False

    def _entry(self, args: Sequence[Any]) -> _Entry:
        if self._state_changed(args):
            with self._lock:
                self._frozen = {j: args[j] for j in self._state}
                self._versions = {j: args[j]._version for j in self._state}
                self._cache = {}
        key = self._key(args)
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key) or self._compile(args)
                self._cache[key] = entry
        return entry

    def _compile(self, args: Sequence[Any]) -> _Entry:
        user = [(i, a) for i, a in enumerate(args) if i not in self._frozen]
        check_example_inputs([a for _, a in user], "graph input")
        wrapper = _Frozen(self._gm, self._frozen, self._count).eval()
        program = export_module(wrapper, [a for _, a in user])
        graph = convert_program(program, "torch_compile")
        by_name = {}
        user_specs = [s for s in program.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
        for spec, (position, _) in zip(user_specs, user, strict=True):
            if isinstance(spec.arg, TensorArgument):
                by_name[spec.arg.name] = position
        model = self._compile_graph(graph, self._backend, self._options)
        return _Entry(model, [by_name[name] for name in model.input_names], program.call_spec.out_spec)

    def __call__(self, *args: Any) -> Any:
        return self._entry(args).run(args)


def compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], compile_graph: GraphCompiler,
               options: Mapping[str, Any] | None = None, **unused: Any) -> CompiledGraphModule:
    """The backend function: Dynamo calls it with each captured graph and its example inputs."""
    if unused.get("mode") not in (None, "default"):
        raise EmberError(f"torch.compile mode={unused['mode']!r} means nothing to backend 'ember'; use options=")
    return CompiledGraphModule(gm, example_inputs, compile_graph, check_options(options))
