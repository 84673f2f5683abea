"""Ember: a neural-network compiler.

    import ember
    m = ember.compile("model.onnx", backend="cpu")
    outputs = m.run({"input": x})
    m = ember.compile("model.onnx", backend=["cpu", "interpreter"])   # partitioned, priority order
    m = ember.compile("model.onnx", backend="auto")                   # partitioned by cost
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import ember.lowering  # noqa: F401  (registers lowering rules and the 'lower' pass)
import ember.quant  # noqa: F401  (ember.quant.Profile, quantize_graph)
import ember.transforms  # noqa: F401  (registers the optimization passes)
from ember.driver import compile_model
from ember.runtime import CompiledModel
from ember.runtime.dynamic import DynamicModel
from ember.support.errors import (
    EmberError,
    EmberWarning,
    InputError,
    ModelImportError,
    QueueFullError,
    UnsupportedError,
)

__version__ = "0.1.0"


def compile(model: Any, backend: str | Sequence[str] | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            num_threads: int | None = None, dynamic: Mapping[str, Sequence[int]] | None = None,
            quantize: Any = None, quantize_options: Mapping[str, Any] | None = None,
            example_inputs: Sequence[Any] | None = None,
            precision: str | None = None, tune: bool = False,
            ) -> CompiledModel | DynamicModel:
    """Compiles an ONNX model (a path or an onnx.ModelProto), or a torch.nn.Module called on
    example_inputs (a tuple of tensors whose shapes are compiled; frontends/torch).

    backend: one backend's name (the whole model runs there, or is refused naming every node
    it cannot run; default: "cpu" where a C compiler is found, else "interpreter", with a
    warning); a list of names in priority order (the model is partitioned: each node
    goes to the first backend that can run it, e.g. ["cpu", "interpreter"]); or "auto" (every
    installed backend, each node where the estimated end-to-end time is least).
    input_shapes binds symbolic dimensions: {"input": (1, 3, 224, 224)}. Dimensions left
    symbolic make a DynamicModel, compiled for each input shape on first use.
    dynamic: buckets for symbolic dimensions, {"batch": [1, 4, 16]}: a size is padded up to
    the next bucket (one compile per bucket) where the model keeps samples independent.
    num_threads: threads for native backends (default: all cores).
    quantize: a quantization profile (ember.profile(...), or the path of one it saved) taken on
    this model: Conv/MatMul/Gemm run as int8 where the backend has integer kernels;
    quantize_options: schema ("asymmetric" uint8 activations, the default; "symmetric" int8;
    "symmetric-uint8"; "power2" scales), method ("minmax", "percentile", "entropy"),
    percentile, keep_float (op types or node names). One backend by name and static shapes
    only, for now. ember.quant.accuracy_report compares the result with the float model.
    precision: "fp32" (the default), "bf16" (convolutions and GEMMs with weights computed from
    bfloat16-rounded operands with float32 sums, on backends with bf16 kernels: cpu on a CPU
    with AVX512-BF16; stats["precision"] gives the choice per node) or "int8" (what quantize=
    does; it needs the profile).
    tune: time the kernels that can run each convolution in the model on this machine and keep
    the fastest (cpu backend, static shapes, float32; bounded to about a minute, the choices
    cached per CPU model in the user cache folder and reused by later compiles; ember/tuning.py).
    stats["tuning"] says what was measured and chosen."""
    from ember.specialize import compile_dynamic, dynamic_inputs

    backend = _default_backend() if backend is None else backend
    options: dict[str, Any] = {} if num_threads is None else {"num_threads": num_threads}
    if _resolve_precision(precision, quantize, backend) == "bf16":
        options["precision"] = "bf16"
    if example_inputs is not None or _is_torch_module(model):
        unused = {"input_shapes": input_shapes, "dynamic": dynamic, "quantize": quantize, "tune": tune}
        return _compile_torch(model, example_inputs, backend, options, [k for k, v in unused.items() if v])
    source = model
    loaded = None
    if isinstance(model, str | os.PathLike):
        from ember.frontends.onnx.loader import load_model

        # Read once, for its inputs' shapes and to import it (the static path's import then
        # releases the proto: loader.LoadedModel.single_use).
        model = loaded = load_model(model, single_use=True)
    symbolic = dynamic_inputs(model, input_shapes) if loaded is not None or _is_proto(model) else None
    if symbolic is not None and tune:
        raise EmberError("tune=True measures kernels on static shapes: bind the model's symbolic dimensions "
                         "with input_shapes=")
    if symbolic is not None:
        proto, inputs = symbolic
        return compile_dynamic(proto, inputs, backend, options, buckets=dynamic)
    if dynamic:
        raise EmberError(f"dynamic={dict(dynamic)!r}: the model has no symbolic dimensions left to bucket")
    if quantize is not None and (symbolic is not None or not isinstance(backend, str) or backend == "auto"):
        raise EmberError("quantize= needs one backend by name and static shapes (for now)")
    if tune:
        if backend != "cpu" or quantize is not None or options.get("precision", "fp32") != "fp32":
            raise EmberError("tune=True measures the cpu backend's float32 kernels: pass backend='cpu' and no "
                             "quantize= or precision='bf16'")
        from ember.tuning import compile_tuned

        return compile_tuned(source if loaded is not None else model, input_shapes, num_threads)
    if isinstance(backend, str) and backend != "auto":
        return compile_model(model, backend=backend, input_shapes=input_shapes, backend_options=options,
                             quantize=quantize, quantize_options=quantize_options)
    from ember.heterogeneous import compile_model_partitioned

    return compile_model_partitioned(model, backend, input_shapes=input_shapes, backend_options=options)


def _default_backend() -> str:
    """cpu where a C compiler exists (native code, 20-40x the interpreter's speed), else the
    interpreter, said once per call."""
    from ember.backends.cpu.build import missing_compiler

    reason = missing_compiler()
    if reason:
        warnings.warn(f"{reason}; compiling for the interpreter backend instead", EmberWarning, stacklevel=3)
        return "interpreter"
    return "cpu"


PRECISIONS = ("fp32", "bf16", "int8")


def _resolve_precision(precision: str | None, quantize: Any, backend: Any) -> str:
    """The precision compile() was asked for, refused clearly where it cannot be had."""
    if precision is None:
        return "int8" if quantize is not None else "fp32"
    if precision not in PRECISIONS:
        raise EmberError(f"precision={precision!r}: expected one of {', '.join(map(repr, PRECISIONS))}")
    if precision == "int8" and quantize is None:
        raise EmberError("precision='int8' needs a quantization profile: pass quantize=ember.profile(model, "
                         "calibration_inputs) (or the path of a saved one), or make one with `ember quantize`")
    if precision != "int8" and quantize is not None:
        raise EmberError(f"precision={precision!r} with quantize=: a profile quantizes to int8 (pass "
                         "precision='int8' or leave precision out)")
    if precision == "bf16":
        if not isinstance(backend, str) or backend == "auto":
            raise EmberError("precision='bf16' needs one backend by name (e.g. backend='cpu')")
        from ember.backends import get_backend

        target = get_backend(backend)
        if "bf16" not in target.precisions:
            raise EmberError(f"precision='bf16': backend '{target.name}' has no bf16 kernels (it computes in "
                             f"{', '.join(target.precisions)}; the cpu backend has them)")
    return precision


def profile(model: Any, calibration_inputs: Any, input_shapes: Mapping[str, Sequence[int]] | None = None):
    """A quantization profile (ember.quant.Profile; .save(path) writes JSON) of an ONNX model
    on calibration feeds, an iterable of {input name: array}; for compile(quantize=...)."""
    from ember.driver import profile_model

    return profile_model(model, calibration_inputs, input_shapes)


def load(path: str | os.PathLike) -> CompiledModel:
    """A model saved with CompiledModel.save: verified, then loaded; no import or compile,
    and onnx need not be installed. Load only artifacts you trust (they hold native code)."""
    from ember.runtime.artifact import load as load_artifact

    return load_artifact(path)


def _is_torch_module(model: Any) -> bool:
    from ember.frontends.torch import is_torch_module

    return is_torch_module(model)


def _compile_torch(module: Any, example_inputs: Sequence[Any] | None, backend: str | Sequence[str],
                   options: Mapping[str, Any], unused: Sequence[str] = ()) -> CompiledModel:
    from ember.frontends.torch import load_torch

    if unused:
        raise EmberError(f"{', '.join(unused)}: not for a torch.nn.Module (its shapes are those of example_inputs)")
    if example_inputs is None:
        raise EmberError("compiling a torch.nn.Module needs example_inputs=(tensor, ...): their shapes are compiled")
    return _compile_graph_on(load_torch(module, example_inputs), backend, options)


def _compile_graph_on(graph: Any, backend: str | Sequence[str], options: Mapping[str, Any]) -> CompiledModel:
    from ember.backends import get_backend
    from ember.driver import compile_graph

    if isinstance(backend, str) and backend != "auto":
        return compile_graph(graph, get_backend(backend, **options))
    from ember.heterogeneous import compile_partitioned, resolve_backends

    instances, strategy, _ = resolve_backends(backend, options)
    return compile_partitioned(graph, instances, strategy=strategy)


def torch_dynamo_backend(gm: Any, example_inputs: Any, options: Mapping[str, Any] | None = None, **kwargs: Any):
    """The torch.compile backend: torch.compile(model, backend="ember", options={"backend": "cpu",
    "num_threads": 1}) finds it through the torch_dynamo_backends entry point (it lives here,
    above the driver it compiles with; frontends/torch/dynamo.py does the rest)."""
    from ember.frontends.torch.dynamo import compile_fx

    return compile_fx(gm, example_inputs, _compile_graph_on, options, **kwargs)


def _is_proto(model: Any) -> bool:
    return type(model).__name__ == "ModelProto"


def bundle(model: Any, target: str = "host", output_dir: str | os.PathLike = "bundle", prefix: str = "model",
           input_shapes: Mapping[str, Sequence[int]] | None = None, quantize: Any = None,
           quantize_options: Mapping[str, Any] | None = None, num_threads: int = 1,
           flash_bytes: int | None = None, ram_bytes: int | None = None) -> Any:
    """Compiles an ONNX model ahead of time into `output_dir`: portable C, a header with the
    memory contract, the weights and a Makefile for `target` (host, x86_64-linux,
    aarch64-linux, riscv64-linux, cortex-m4, cortex-m7). Every external symbol starts with
    `prefix`. quantize / quantize_options as for compile(): an int8 bundle, whose integer ops
    run portable int8 kernels on targets other than x86 (int8 weights: about a quarter of the
    float bundle's). num_threads > 1 (hosted targets): kernels use OpenMP, built with
    -fopenmp. A bundle that does not fit flash_bytes / ram_bytes (default: a microcontroller
    target's example board's memory) is refused with the numbers before any file is written;
    output_dir must be new, empty or hold an earlier bundle (whose files are replaced).
    Returns an ember.codegen.bundle.Bundle (file list and memory layout)."""
    from ember.backends.cpu.portable import bundle_backend
    from ember.codegen.bundle import get_target
    from ember.driver import load_model, prepare_program, quantize_loaded

    tgt = get_target(target)  # an unknown target fails before compiling
    if not isinstance(num_threads, int) or num_threads < 1:
        raise EmberError(f"num_threads must be a positive integer, got {num_threads!r}")
    if num_threads > 1 and tgt.bare_metal:
        raise EmberError(f"bundles for {tgt.name} run on one thread (no OpenMP on a microcontroller)")
    backend = bundle_backend(tgt, num_threads)
    graph = load_model(model, input_shapes)
    if quantize is not None:
        quantize_loaded(graph, quantize, quantize_options)
    program, plan, _ = prepare_program(graph, backend)
    return backend.bundle(program, plan, output_dir, target=target, prefix=prefix, flash_bytes=flash_bytes,
                          ram_bytes=ram_bytes)


__all__ = ["CompiledModel", "DynamicModel", "EmberError", "EmberWarning", "InputError", "ModelImportError",
           "QueueFullError", "UnsupportedError", "bundle", "compile", "load", "profile"]
