"""ember-dnnl: Ember's `dnnl` backend, oneDNN (the oneAPI Deep Neural Network Library) behind
Ember's cpu backend, written against Ember's plugin API only (docs/adding-a-backend.md).

It derives the cpu backend's kernel registry and puts oneDNN kernels first for convolution
(Conv, FusedConv: bias, residual and activation as oneDNN post-ops), FullyConnected and
MatMul (oneDNN matmul) and MaxPool/AveragePool; every other op, and every form these
kernels refuse (their `accepts` says why), runs on Ember's own C kernels. The generated C
calls `edn_run` (ember_dnnl.c), which builds each primitive on first use and executes it
after that. Install: `pip install onednn-cpu-gomp onednn-devel-cpu-gomp` (or set
EMBER_DNNL_ROOT to a prefix holding include/dnnl.h and lib/libdnnl.so)."""
from __future__ import annotations

import hashlib
import math
import os
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

from ember.backends.cpu import CpuBackend
from ember.codegen.c_types import c_literal
from ember.codegen.c_writer import init
from ember.codegen.emitter import param
from ember.codegen.kernels import C_KERNELS, Kernel, KernelOptions, KernelPlan, OpView
from ember.graph import Graph, Node
from ember.partition.cost import node_work
from ember.support.errors import EmberError
from ember.types import DType

__all__ = ["KERNELS", "DnnlBackend", "find_onednn"]

C_SOURCE = (Path(__file__).parent / "ember_dnnl.c").read_text()
PREAMBLE = C_SOURCE[C_SOURCE.index("/* ---- declarations"):C_SOURCE.index("/* ---- implementation")]
# Ember's fused activations as oneDNN eltwise post-ops (names of the enum in ember_dnnl.c).
ACTIVATIONS = {"none": "EDN_NONE", "relu": "EDN_RELU", "clip": "EDN_CLIP", "leaky_relu": "EDN_LEAKY_RELU",
               "sigmoid": "EDN_SIGMOID", "tanh": "EDN_TANH", "hard_sigmoid": "EDN_HARD_SIGMOID"}
FAILED = "oneDNN could not create or run this node's primitive (ONEDNN_VERBOSE=all says why)"
PARALLEL_MIN_MACS = 1 << 18  # below this a kernel runs on one thread, as Ember's own do
BLOCK = 16  # oneDNN's blocked f32 layouts pad channels to 16 (AVX-512) or 8 (AVX2)


def find_onednn() -> tuple[Path, Path]:
    """(include folder, library folder) of an installed oneDNN: EMBER_DNNL_ROOT, else the
    onednn-* wheels' files, else sys.prefix."""
    candidates = [(Path(r) / "include", Path(r) / "lib") for r in [os.environ.get("EMBER_DNNL_ROOT")] if r]
    try:
        header = [f for f in metadata.files("onednn-devel-cpu-gomp") or [] if str(f).endswith("include/dnnl.h")]
        library = [f for f in metadata.files("onednn-cpu-gomp") or [] if f.name == "libdnnl.so"]
        if header and library:
            candidates.append((Path(str(header[0].locate())).resolve().parent,
                               Path(str(library[0].locate())).resolve().parent))
    except metadata.PackageNotFoundError:
        pass
    candidates.append((Path(sys.prefix) / "include", Path(sys.prefix) / "lib"))
    for include, lib in candidates:
        if (include / "dnnl.h").is_file() and (lib / "libdnnl.so").exists() and "," not in str(lib):
            return include, lib
    raise EmberError("oneDNN is not installed: pip install onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 "
                     "(or set EMBER_DNNL_ROOT to a prefix with include/dnnl.h and lib/libdnnl.so)")


# accepts: one function per family decides lowering, refusals and selection --------------


def _float32(view: OpView) -> str | None:
    for t in view.results + tuple(t for t in view.operands if t is not None):
        if t.dtype is not DType.FLOAT32 or t.quant is not None:
            return f"the oneDNN kernels here run float32 only, not {t.dtype.value}"
    return None


def _activation(view: OpView) -> str | None:
    act = getattr(view.attrs, "activation", "none")
    if act not in ACTIVATIONS:
        return f"activation {act} has no oneDNN post-op here"
    if act == "clip" and view.attrs.alpha > view.attrs.beta:
        return "clip with min > max"
    return None


def accepts_conv(view: OpView) -> str | None:
    if view.operand(0).rank != 4:
        return "the oneDNN convolution here is 2-D (NCHW) only"
    if not view.constant[1]:
        return "oneDNN convolution needs constant weights (reordered once, on first run)"
    return _float32(view) or _activation(view)


def accepts_matmul(view: OpView) -> str | None:
    ranks = [t.rank for t in view.operands[:2] if t is not None]
    if view.op == "MatMul" and (min(ranks) < 2 or max(ranks) > 6):
        return "oneDNN matmul here takes operands of rank 2 to 6"
    return _float32(view) or _activation(view)


def pool_pads(view: OpView) -> tuple[list[int], list[int]] | str:
    """oneDNN's padding (left, right) for an Ember pooling: the right pads grow (ceil mode) or
    shrink (even below 0: windows that stop short of the edge) so that oneDNN's output-size
    formula holds; or why it cannot be expressed."""
    attrs, (height, width), out = view.attrs, view.operand(0).shape[2:], view.results[0].shape[2:]
    left, right = list(attrs.pads[:2]), []
    for axis, size in enumerate((height, width)):
        extent = (attrs.kernel[axis] - 1) * attrs.dilations[axis] + 1
        pad = (out[axis] - 1) * attrs.strides[axis] + extent - size - left[axis]
        if max(left[axis], pad) >= extent:
            return "pads as large as the pooling window"
        if view.op == "AveragePool" and attrs.count_include_pad and pad > attrs.pads[2 + axis]:
            return "averages counting pads with ceil-mode overhang (oneDNN would count the overhang)"
        right.append(pad)
    return left, right


def accepts_pool(view: OpView) -> str | None:
    if view.operand(0).rank != 4:
        return "oneDNN pooling here is 2-D (NCHW) only"
    pads = pool_pads(view)
    return pads if isinstance(pads, str) else _float32(view)


# plans: threads, scratch for blocked copies, and the weights' digest ----------------------


def _digest(buffer) -> str:
    return hashlib.sha256(np.ascontiguousarray(buffer.constant()).tobytes()).hexdigest()[:24]


def _plan(instr, options: KernelOptions, macs: int, weights=None, scratch: int = 0) -> KernelPlan:
    params: dict = {"threads": options.num_threads if macs >= PARALLEL_MIN_MACS else 1}
    if weights is not None and OpView.of_instr(instr).constant[1]:
        params["weights"] = _digest(weights)  # the C's state is derived from these weights
    return KernelPlan(params, scratch_bytes=scratch)


def _blocked_bytes(shape) -> int:
    n, c, h, w = shape
    return (n * math.ceil(c / BLOCK) * BLOCK * h * w * 4 + 63) // 64 * 64


def _conv_scratch(instr) -> int:
    return _blocked_bytes(instr.operand(1).type.shape) + _blocked_bytes(instr.operand(0).type.shape)


def plan_conv(instr, options: KernelOptions) -> KernelPlan:
    out, w = instr.operand(0), instr.operand(2)
    macs = out.type.size * math.prod(w.type.shape[1:])
    return _plan(instr, options, macs, w, _conv_scratch(instr))


def plan_matmul(instr, options: KernelOptions) -> KernelPlan:
    out, x = instr.operand(0), instr.operand(1)
    return _plan(instr, options, out.type.size * x.type.shape[-1], instr.operand(2))


def plan_pool(instr, options: KernelOptions) -> KernelPlan:
    return _plan(instr, options, instr.operand(0).type.size * math.prod(instr.attrs.kernel))


# emit: a constant description and one call -------------------------------------------------


def _dims(shape) -> str:
    return "{" + ", ".join(str(int(d)) for d in shape) + "}"


def _emit(em, instr, kind: str, x, w, y, dims, bias=None, residual=None, **fields) -> str:
    attrs = instr.attrs
    act = getattr(attrs, "activation", "none")
    desc = {"kind": kind, "act": ACTIVATIONS[act], "threads": int(param(instr, "threads", 1)),
            "bias": int(bias is not None), "residual": int(residual is not None),
            "const_wei": int("weights" in instr.kernel.params), "ndims": len(dims[0])}
    if act != "none":
        desc.update(alpha=c_literal(attrs.alpha, DType.FLOAT32), beta=c_literal(attrs.beta, DType.FLOAT32))
    desc.update(src=_dims(dims[0]), wei=_dims(dims[1]), dst=_dims(dims[2]), **fields)
    pointer = lambda b: "NULL" if b is None else em.pointer(b, const=True)  # noqa: E731
    lines = [f"/* its oneDNN state is built from the weights with sha256 {param(instr, 'weights')}... */"
             if "weights" in instr.kernel.params else "/* no constant weights: its state is shapes only */",
             "static edn_step *_Atomic state;", init("static const edn_desc", "d", **desc),
             f"if (edn_run(&state, &d, {pointer(x)}, {pointer(w)}, {pointer(bias)}, {pointer(residual)}, "
             f"{em.pointer(y)}, {em.scratch(instr)})) {em.fail_check(FAILED)}"]
    return "\n".join(lines)


def _window(attrs, pads: tuple[list[int], list[int]]) -> dict[str, str]:
    return {"stride": _dims(attrs.strides), "dilate": _dims(attrs.dilations), "pad_l": _dims(pads[0]),
            "pad_r": _dims(pads[1])}


def emit_conv(em, instr) -> str:
    y, x, w = instr.operand(0), instr.operand(1), instr.operand(2)
    base = instr.base_operands + [None, None]
    conv = getattr(instr.attrs, "conv", instr.attrs)
    pads = (list(conv.pads[:2]), list(conv.pads[2:]))
    return _emit(em, instr, "EDN_CONV", x, w, y, (x.type.shape, w.type.shape, y.type.shape), base[3], base[4],
                 groups=str(int(conv.group)), scratch=str(_conv_scratch(instr)), **_window(conv, pads))


def emit_fully_connected(em, instr) -> str:
    y, x, w = instr.operand(0), instr.operand(1), instr.operand(2)
    base = instr.base_operands + [None, None]
    (k, n), m = w.type.shape, math.prod(x.type.shape[:-1])
    return _emit(em, instr, "EDN_MATMUL", x, w, y, ((m, k), (k, n), (m, n)), base[3], base[4])


def emit_matmul(em, instr) -> str:
    y, a, b = instr.required()
    rank = y.type.rank
    shapes = [(1,) * (rank - t.type.rank) + t.type.shape for t in (a, b, y)]
    return _emit(em, instr, "EDN_MATMUL", a, b, y, shapes)


def emit_pool(em, instr) -> str:
    y, x = instr.required()
    pads = pool_pads(OpView.of_instr(instr))
    assert not isinstance(pads, str), pads
    kind = ("EDN_POOL_MAX" if instr.name == "MaxPool" else
            "EDN_POOL_AVG_PAD" if instr.attrs.count_include_pad else "EDN_POOL_AVG")
    return _emit(em, instr, kind, x, None, y, (x.type.shape, (), y.type.shape), kernel=_dims(instr.attrs.kernel),
                 **_window(instr.attrs, pads))


KERNELS = C_KERNELS.derive("dnnl")
for _name, _ops, _emit_fn, _accepts, _plan_fn in (
        ("dnnl_conv", ("Conv", "FusedConv"), emit_conv, accepts_conv, plan_conv),
        ("dnnl_fully_connected", ("FullyConnected",), emit_fully_connected, accepts_matmul, plan_matmul),
        ("dnnl_matmul", ("MatMul",), emit_matmul, accepts_matmul, plan_matmul),
        ("dnnl_maxpool", ("MaxPool",), emit_pool, accepts_pool, plan_pool),
        ("dnnl_avgpool", ("AveragePool",), emit_pool, accepts_pool, plan_pool)):
    KERNELS.add(Kernel(_name, _ops, _emit_fn, _accepts, plan=_plan_fn, preamble=PREAMBLE), first=True)


# the backend --------------------------------------------------------------------------------

# oneDNN's rates for cost(), per thread, measured with ONEDNN_VERBOSE and bench/dnnl_plugin.py on
# a 2-core AMD EPYC (AVX-512): convolution and matmul ~100 GFLOP/s; a batch-1 matmul streams its
# blocked weights at only ~6 GB/s; JIT pooling ~15 G window elements/s; reorders between NCHW and
# its blocked layouts ~10 GB/s; ~8 us a call (memory objects, stream). Ember's kernels elsewhere:
# CpuBackend.cost's rates (40 GFLOP/s a thread, 10 GB/s, 1 us a call).
DNNL_FLOPS, DNNL_MATMUL_BYTES, DNNL_POOL_ELEMENTS, REORDER_BYTES, DNNL_CALL = 100e9, 6e9, 15e9, 10e9, 8e-6
CPU_FLOPS, CPU_BYTES, CPU_CALL = 40e9, 10e9, 1e-6
ON_DNNL = {"Conv": accepts_conv, "FusedConv": accepts_conv, "MatMul": accepts_matmul, "Gemm": _float32,
           "FullyConnected": accepts_matmul, "MaxPool": accepts_pool, "AveragePool": accepts_pool}


def node_seconds(node: Node, threads: int) -> float:
    """Estimated seconds of one node on the dnnl backend (oneDNN's kernel, or Ember's)."""
    flops, moved = node_work(node)
    check = ON_DNNL.get(node.op)
    try:
        on_dnnl = check is not None and check(OpView.of_node(node)) is None
    except Exception:
        on_dnnl = False
    if not on_dnnl:
        return CPU_CALL + max(flops / (CPU_FLOPS * threads), moved / CPU_BYTES)
    if node.op in ("MaxPool", "AveragePool"):
        return DNNL_CALL + node.outputs[0].type.size * math.prod(node.attrs.kernel) / (DNNL_POOL_ELEMENTS * threads)
    if node.op in ("Conv", "FusedConv"):
        reorders = node.input(0).type.nbytes + node.outputs[0].type.nbytes
        return DNNL_CALL + flops / (DNNL_FLOPS * threads) + reorders / REORDER_BYTES
    return DNNL_CALL + max(flops / (DNNL_FLOPS * threads), moved / DNNL_MATMUL_BYTES)


class DnnlBackend(CpuBackend):
    """Ember's cpu backend with oneDNN kernels first (options as CpuBackend's)."""

    name = "dnnl"
    kernels = KERNELS
    c_sources = {"ember_dnnl.c": C_SOURCE}

    def __init__(self, **options) -> None:
        include, lib = find_onednn()
        super().__init__(**options)
        self.compile_flags = (f"-I{include}",)
        # oneDNN (the gomp build) and ember_dnnl.c's omp_set_num_threads use libgomp: named here,
        # since model libraries link Ember's own pool, not an OpenMP runtime.
        self.link_flags = (f"-L{lib}", f"-Wl,-rpath,{lib}", "-ldnnl", "-lgomp")

    def cost(self, graph: Graph) -> float:
        """A roofline estimate per node with oneDNN's rates where its kernels take the node
        (measured costs, EMBER_PARTITION_COST=measured, time the real thing instead)."""
        return sum(node_seconds(node, self.num_threads) for node in graph.nodes)
