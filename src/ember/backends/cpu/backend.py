"""CpuBackend: what runs natively is what its kernel registry accepts; the rest is lowered.
compile = the backend's LIR pipeline (select-kernels last) has run; print C, build, load.

A library backend (a BLAS, oneDNN, a vendor's kernels) subclasses CpuBackend in its own
package: it derives `kernels` from C_KERNELS, overrides or adds entries, and names the C
sources, include folders and link flags its kernels need. No file of Ember changes."""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.backends.api import Backend
from ember.backends.cpu.build import build_library, library_flags, missing_compiler, prebuild_library
from ember.backends.cpu.features import has_avx512_bf16, mapped_target
from ember.backends.cpu.instrumented import InstrumentedNativeProgram
from ember.backends.cpu.native import NativeProgram
from ember.codegen import CodegenOptions, CProgram, generate_c
from ember.codegen.kernels import C_KERNELS, KernelOptions, KernelRegistry, OpView
from ember.codegen.kernels.conv_channels_last import prefers_channels_last as prefers_fused_conv_channels_last
from ember.codegen.kernels.gemm_bf16 import PRECISIONS
from ember.codegen.kernels.inverted_residual import runs_channels_last
from ember.codegen.kernels.table import as_float32
from ember.codegen.runtime_files import sources_for
from ember.graph import Graph, Node
from ember.lir.ir import Program
from ember.lir.passes import DEFAULT_LIR_PIPELINE
from ember.partition.cost import analytic_seconds
from ember.support.errors import EmberError, UnsupportedError
from ember.support.host import default_threads, l2_cache_bytes
from ember.support.progress import step
from ember.types import DType

if TYPE_CHECKING:
    from ember.codegen.bundle import Bundle
    from ember.memory import MemoryPlan


class CpuBackend(Backend):
    name = "cpu"
    precisions = PRECISIONS
    kernels: KernelRegistry = C_KERNELS
    # A library backend's additions to the build: C sources compiled into every model
    # library (file name -> text), compiler flags (e.g. -I), linker flags (-L, -l).
    c_sources: Mapping[str, str] = {}
    compile_flags: Sequence[str] = ()
    link_flags: Sequence[str] = ()

    def __init__(self, num_threads: int | None = None, sanitize: bool | None = None, march: str | None = None,
                 winograd: bool = True, precision: str = "fp32", mapped_kernels: bool = True,
                 kernel_pins: Mapping[str, str] | None = None, variant_round: int | None = None) -> None:
        """march: build for this ISA level (e.g. "x86-64-v3" for AVX2) instead of the host's
        own, for libraries that must also run on older machines of the same architecture.
        winograd: False keeps every 3x3 convolution on the direct kernel (for comparison).
        precision: "bf16" runs convolutions and GEMMs with weights on bf16 kernels
        (codegen/kernels/gemm_bf16.py); it needs a host with AVX512-BF16.
        mapped_kernels: False keeps every GEMM on the hand-written kernels, never the ISA
        Mapper's (codegen/kernels/gemm_mapped.py), for comparison.
        kernel_pins: measured kernel choices, instruction signature -> kernel name (what
        ember.compile(tune=True) found; ember/tuning.py); variant_round: while tuning, every
        instruction takes its k-th feasible variant."""
        if march is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", march):
            raise EmberError(f"march {march!r} is not an ISA name")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise EmberError(f"num_threads must be a positive integer, got {num_threads!r}")
        self.num_threads = num_threads or default_threads()
        self.march = march
        self.winograd = winograd
        self.precision = check_precision(precision)
        self.mapped_kernels = mapped_kernels
        # Measured kernel choices (instruction signature -> kernel; ember/tuning.py), and while
        # tuning, the round whose k-th feasible variant every instruction takes.
        self.kernel_pins = dict(kernel_pins or {})
        self.variant_round = variant_round
        # EMBER_SANITIZE=1 builds every library with AddressSanitizer and UBSan (test mode).
        self.sanitize = os.environ.get("EMBER_SANITIZE") == "1" if sanitize is None else sanitize

    def kernel_options(self) -> KernelOptions:
        # Mapped kernels only for the host's own ISA: not for an -march level or a bundle.
        host = self.mapped_kernels and self.march is None and self.subject is None
        mapped = mapped_target() if host else None
        options = KernelOptions(num_threads=self.num_threads, winograd=self.winograd, precision=self.precision,
                                mapped_target=mapped, pinned=tuple(sorted(self.kernel_pins.items())),
                                variant_round=self.variant_round)
        l2 = l2_cache_bytes() if self.march is None and self.subject is None else None
        return replace(options, l2_bytes=l2) if l2 else options

    def supports(self, node: Node) -> bool:
        return self.refusal(node) is None

    def refusal(self, node: Node) -> str | None:
        """Why no kernel of the registry runs `node` (None when one does); a non-primitive op
        without a kernel is lowered instead, so this is the reason only for primitives."""
        # 16-bit floats: the cpu pipeline computes them in float32 (compute-halves-in-float32).
        reason = self.kernels.refusal(as_float32(OpView.of_node(node)))
        if reason is not None and self.subject is not None:
            reason = _RUNS_ELSEWHERE.sub("", reason)  # a bundle has no interpreter to fall back on
        return reason

    def cost(self, graph: Graph) -> float:
        # Generated C: about 40 GFLOP/s a thread in its GEMM and convolution kernels, ~10 GB/s
        # for memory-bound ops, a microsecond per kernel call (2-core EPYC; a rough guide).
        return analytic_seconds(graph, flops_per_second=40e9 * self.num_threads, bytes_per_second=10e9,
                                per_node=1e-6)

    def pipeline(self) -> list[str]:
        # MobileNetV2 blocks and attention heads as one step each (channels-last intermediates; no
        # scores tensor): fp32 and Ember's own kernels only (a library backend keeps its ops).
        passes = super().pipeline()
        if self.precision == "fp32" and self.kernels is C_KERNELS:
            passes.insert(passes.index("fuse-activations") + 1, "fuse-inverted-residual")
            passes.insert(passes.index("fuse-inverted-residual") + 1, "fuse-attention")
            # Chains of those blocks stay channels last between them; the transposes cancel.
            passes.insert(passes.index("fuse-attention") + 1, "assign-layouts")
            passes.insert(passes.index("assign-layouts") + 1, "optimize-transposes")
        return passes

    def prefers_channels_last(self, node: Node) -> bool:
        """Whether this backend's kernel for `node` runs channels last inside (see the
        assign-layouts pass): MobileNetV2 blocks with outputs up to 28x28, and the pointwise and
        depthwise FusedConvs conv_channels_last runs (pointwise ones where their output channels
        fill the GEMM's panels)."""
        if node.op == "InvertedResidual":
            return self.supports(node) and runs_channels_last(node.outputs[0].type.shape)
        if node.op == "FusedConv":
            return prefers_fused_conv_channels_last(OpView.of_node(node))
        return False

    def post_lowering_pipeline(self) -> list[str]:
        # Lowering GRU/LSTM and Gemm exposes MatMuls with constant weights and their bias and
        # activation ops: fold them back into FullyConnected epilogues.
        # float16/bfloat16 ops compute in float32 between Casts (the constant ones fold).
        return ["compute-halves-in-float32", "constant-fold", "form-fully-connected", "fuse-activations", "cse",
                "dce"]

    def lir_pipeline(self) -> list[str]:
        return [*DEFAULT_LIR_PIPELINE, "fuse-elementwise", "select-kernels"]

    def generate(self, program: Program, options: CodegenOptions | None = None) -> CProgram:
        """The C of a program this backend's LIR pipeline ran on and memory was planned for."""
        return generate_c(program, self.kernels, options)

    def bundle(self, program: Program, plan: MemoryPlan | None, output_dir: str | os.PathLike, target: str = "host",
               prefix: str = "model", flash_bytes: int | None = None, ram_bytes: int | None = None) -> Bundle:
        """Writes an ahead-of-time bundle of a program this backend prepared (portable C with
        a static entry, weights, header, Makefile; see codegen/bundle), refused when it does
        not fit flash_bytes/ram_bytes (default: a microcontroller board's memory). Kernels
        planned for several threads build with -fopenmp."""
        from ember.codegen.bundle import sanitize_prefix, write_bundle

        if self.c_sources or self.link_flags:
            raise UnsupportedError(f"backend '{self.name}' links its own C sources or libraries; bundles carry "
                                   "the Ember kernel library only")
        prefix = sanitize_prefix(prefix)
        cprogram = self.generate(program, CodegenOptions(entry=f"{prefix}_entry", static_entry=True))
        return write_bundle(program, plan, cprogram, output_dir, target=target, prefix=prefix,
                            flash_bytes=flash_bytes, ram_bytes=ram_bytes, openmp=self.num_threads > 1)

    def load_executable(self, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> NativeProgram:
        """A program saved by NativeProgram.artifact: its library is written into a fresh
        private folder (never a shared path another user could swap) and loaded from there."""
        folder = Path(tempfile.mkdtemp(prefix="ember-artifact-"))
        library = folder / "model.so"
        descriptor = os.open(library, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(files["library.so"])
        return NativeProgram.from_artifact(library, dict(meta), files["weights.bin"])

    def begin_compile(self, graph: Graph) -> None:
        """On a fresh machine, the GEMM core of the kernel library (a few seconds of the C
        compiler, in pieces) starts building now, beside the passes, where the graph will
        need it: an fp32 GEMM or convolution on Ember's own kernels (not sanitized)."""
        if self.kernels is not C_KERNELS or self.precision != "fp32" or self.sanitize or missing_compiler():
            return
        if any(node.op in GEMM_OPS and node.outputs[0].type.dtype == DType.FLOAT32 for node in graph.nodes):
            prebuild_library(sources_for({"ember_gemm"}), library_flags(list(self.compile_flags), march=self.march))

    def compile(self, program: Program) -> NativeProgram:
        step("generating C")
        cprogram = self.generate(program)
        return InstrumentedNativeProgram(self._build(cprogram.source), cprogram, program, self._build)

    def _build(self, source: str) -> Path:
        """A library of `source` with this backend's flags, sources and link flags."""
        return build_library(source, extra_flags=[*self.compile_flags], sanitize=self.sanitize, march=self.march,
                             extra_sources=dict(self.c_sources), link_flags=[*self.link_flags])


# Imported ops whose float kernels all run on the GEMM core (ember_gemm.c and its tiles): a
# graph holding one will link it.
GEMM_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "GRU", "LSTM", "RNN", "Attention"})

_RUNS_ELSEWHERE = re.compile(r" \((?:it|they) runs? on the interpreter\)")


def check_precision(precision: str) -> str:
    """The cpu backend's precision mode, refused clearly where it cannot run: "bf16" needs
    AVX512-BF16 on the host (the library also checks at run time and would take a portable,
    much slower path on a CPU without it)."""
    if precision not in PRECISIONS:
        raise EmberError(f"precision {precision!r}: the cpu backend computes in {' or '.join(PRECISIONS)}")
    if precision == "bf16" and not has_avx512_bf16():
        raise EmberError("precision='bf16' needs a CPU with AVX512-BF16 (vdpbf16ps); this one does not report "
                         "avx512_bf16 (use precision='fp32')")
    return precision
