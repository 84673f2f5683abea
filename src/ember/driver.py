"""The compile pipeline end to end:

    import -> verify -> optimize (backend's pipeline) -> lower (backend's should_lower)
           -> clean up (constant-fold, dce) -> schedule -> irgen -> verify
           -> LIR passes -> memory plan -> backend.compile

An observer, if given, sees every stage's artifact: ("graph", Graph) after import,
("optimized", Graph), ("lowered", Graph), ("lir", Program, optimized and planned) and
("memory", MemoryPlan). `ember dump` uses it."""
from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.backends import Backend, get_backend
from ember.graph import Graph, verify_graph
from ember.lir.ir import BufferKind, Program
from ember.lir.irgen import generate_program
from ember.lir.passes import run_lir_pipeline
from ember.lir.schedule import schedule_graph
from ember.lir.verify import verify_program
from ember.lowering import lower_graph
from ember.memory import MemoryPlan, plan_memory
from ember.passes import PassContext, PassManager, debug_mode
from ember.runtime import CompiledModel, TensorSpec
from ember.support.errors import EmberError, UnsupportedError
from ember.support.gc_pause import gc_paused
from ember.support.heap import release_freed_memory
from ember.support.progress import step

Observer = Callable[[str, Any], None]
STAGES = ("graph", "optimized", "lowered", "lir", "memory")
def load_model(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Imports an ONNX model (path or ModelProto) into a verified graph."""
    from ember.frontends.onnx import load_onnx

    if not isinstance(model, str | os.PathLike) and type(model).__name__ not in ("ModelProto", "LoadedModel"):
        raise EmberError(f"compile() takes a path to an ONNX file or an onnx.ModelProto, got {type(model).__name__}")
    step("importing the model")
    graph = load_onnx(model, input_shapes=input_shapes)
    verify_graph(graph)
    return graph


# The IR is verified after import, after lowering and after the LIR pipeline; after every
# pass only in debug mode (EMBER_DEBUG=1, which the test suite sets): verifying 30 times
# made compile time a multiple of the work itself on large graphs.


def optimize_graph(graph: Graph, backend: Backend) -> None:
    PassManager(backend.pipeline(), verify=None, context=PassContext(backend=backend)).run(graph)
    if debug_mode():
        verify_graph(graph)


def lower_for_backend(graph: Graph, backend: Backend) -> None:
    lower_graph(graph, backend.should_lower)
    PassManager(backend.post_lowering_pipeline(), verify=None).run(graph)
    verify_graph(graph)
    refused: dict[tuple[str, str], list[str]] = {}
    for node in graph.nodes:
        reason = backend.refusal(node)
        if reason is not None:
            refused.setdefault((node.op, reason), []).append(node.name)
    if refused:
        listing = "; ".join(f"{op} (nodes: {', '.join(names)}): {reason}"
                            for (op, reason), names in sorted(refused.items()))
        raise UnsupportedError(f"{backend.describe()} cannot run: {listing}")


def compile_model(model: Any, backend: str | Backend = "interpreter",
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  observer: Observer | None = None, backend_options: Mapping[str, Any] | None = None,
                  quantize: Any = None, quantize_options: Mapping[str, Any] | None = None,
                  ) -> CompiledModel:
    """Imports an ONNX model and compiles it (see compile_graph); `quantize` (a Profile or the
    path of one) inserts Q/DQ first (quant.quantize_graph, with `quantize_options`)."""
    started = time.perf_counter()
    target = get_backend(backend, **(backend_options or {})) if isinstance(backend, str) else backend
    graph = load_model(model, input_shapes)
    decisions: dict[str, str] = {}
    if quantize is not None:
        quantize_loaded(graph, quantize, quantize_options, decisions)
    compiled = compile_graph(graph, target, observer, discard_graph=True)
    # The graph's weights and the program's packed copies are garbage now (the compiled model
    # runs from its own blob), held in the IR's reference cycles: collect them and hand their
    # pages back. Resident after a cached compile and five runs (AMD EPYC): BERT 104 -> 84 MB,
    # ResNet-18 164 -> 120 MB, for one full collection (about 15 ms).
    del graph
    gc.collect()
    release_freed_memory()
    if quantize is not None:
        compiled.stats["quantization"] = decisions  # per Conv/MatMul/Gemm: int8 or why float
    compiled.stats["compile_seconds"] = time.perf_counter() - started
    return compiled


def quantize_loaded(graph: Graph, quantize: Any, options: Mapping[str, Any] | None = None,
                    decisions: dict[str, str] | None = None) -> int:
    """Quantizes an imported graph in place with a Profile or a profile file's path
    (`decisions`: see quant.quantize_graph)."""
    from ember.quant import Profile, check_options, quantize_graph

    checked = check_options(options)
    profile = quantize if isinstance(quantize, Profile) else Profile.load(quantize)
    return quantize_graph(graph, profile, **checked, decisions=decisions)


def profile_model(model: Any, calibration_inputs: Any, input_shapes: Mapping[str, Sequence[int]] | None = None):
    """Profiles an ONNX model on calibration feeds (quant.profile_graph on the imported graph)."""
    from ember.quant import profile_graph

    return profile_graph(load_model(model, input_shapes), calibration_inputs)


def compile_graph(graph: Graph, backend: str | Backend = "interpreter",
                  observer: Observer | None = None, discard_graph: bool = False) -> CompiledModel:
    """Compiles a verified graph; the graph is optimized and lowered in place. discard_graph:
    the caller has no further use for the graph, which is emptied once the instruction IR
    holds what the code generator needs (its weights are not kept beside the weight blob)."""
    started = time.perf_counter()
    target = get_backend(backend) if isinstance(backend, str) else backend
    inputs = [TensorSpec(p.name, p.type) for p in graph.inputs]
    outputs = [TensorSpec(o.name, o.value.type) for o in graph.outputs]
    target.begin_compile(graph)
    with gc_paused():
        program, plan, ops = prepare_program(graph, target, observer)
        if discard_graph:
            graph.discard()
        step(f"compiling for {target.name}")
        executable = target.compile(program)
    stats = _program_stats(program, plan)
    stats["ops"] = ops
    backend_stats = getattr(executable, "backend_stats", None)  # what a backend reports (e.g. the NPU's cycles)
    if backend_stats:
        stats["backend_stats"] = backend_stats
    if target.precision != "fp32":
        from ember.codegen.kernels.gemm_bf16 import precision_decisions, stored_weight_bytes

        stats["precision"] = {"mode": target.precision, "nodes": precision_decisions(program),
                              "stored_weight_bytes": stored_weight_bytes(program)}
    stats["compile_seconds"] = time.perf_counter() - started
    return CompiledModel(executable, inputs, outputs, stats, target.name)


def prepare_program(graph: Graph, target: Backend, observer: Observer | None = None,
                    ) -> tuple[Program, MemoryPlan, dict[str, dict[str, int]]]:
    """Everything before `target.compile`: optimize, lower, schedule, irgen, the backend's LIR
    pipeline and the memory plan. Returns the planned program, the plan and the op counts per
    stage. Ahead-of-time bundles start from here."""
    notify = observer or (lambda stage, artifact: None)
    ops = {"imported": graph.op_counts()}
    notify("graph", graph)

    step(f"optimizing the graph ({len(graph.nodes)} nodes)")
    optimize_graph(graph, target)
    ops["optimized"] = graph.op_counts()
    notify("optimized", graph)

    step(f"lowering for {target.name}")
    lower_for_backend(graph, target)
    # Constants that folding replaced sit in reference cycles, and the collector is paused while
    # compiling (support/gc_pause.py): free them before packing allocates the weights' copies
    # (a GRU's weight slices: peak RSS 106 -> 89 MB). Only the young generation: ~1 ms. Their
    # pages go back too, or the heap's high-water mark carries them to the compile's peak.
    gc.collect(0)
    release_freed_memory()
    ops["lowered"] = graph.op_counts()
    notify("lowered", graph)

    step("scheduling and generating the instruction IR")
    schedule_graph(graph)
    program = generate_program(graph)
    if debug_mode():
        verify_program(program)
    run_lir_pipeline(program, target.lir_pipeline(), verify=None, context=PassContext(backend=target))
    verify_program(program)
    step("planning memory")
    plan = plan_memory(program)
    release_freed_memory()  # the packing temporaries' pages (support/heap.py)
    notify("lir", program)
    notify("memory", plan)
    return program, plan, ops


def _program_stats(program: Program, plan: MemoryPlan) -> dict[str, Any]:
    return {
        **plan.summary(),
        "activation_buffers": len(program.activations()),
        "instructions": len(program.compute_instrs()),
        "io_bytes": sum(b.type.nbytes for b in program.inputs + program.outputs
                        if b.kind in (BufferKind.INPUT, BufferKind.OUTPUT)),
    }
