"""The C emitter: one translation unit per program.

    int ember_run(const uint8_t *W, uint8_t *const *in, uint8_t *const *out, uint8_t *A, uint8_t *S)

W is the weight blob (raw and pre-packed weights, 64-byte aligned), `in`/`out` the model's
input and output buffers in program order, A the activation arena and S per-thread scratch.
S is scratch shared by the threads of one kernel at a time. The function returns 0, or 1 + the index of the instruction that failed a run-time check
(e.g. a Gather index out of range); `CProgram.errors` maps that to a message.

Every kernel is specialized on its constant shapes and carries a comment naming its graph
node (sanitized: model names never reach the source raw). Output is deterministic: the same
program and options give the same bytes."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.runtime_files import RUNTIME_SOURCES, runtime_source  # noqa: F401
from ember.lir.ir import MARKERS, Buffer, BufferKind, Instr, Program, resolve_address
from ember.support.errors import UnsupportedError
from ember.support.names import sanitize_identifier

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class CProgram:
    """Generated source plus everything needed to call it."""

    source: str
    weights: np.ndarray  # uint8 blob
    arena_bytes: int
    scratch_bytes: int
    num_threads: int
    errors: dict[int, str] = field(default_factory=dict)
    profiled: list[str] = field(default_factory=list)  # "index:instr:node" per timer slot

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


class WeightBlob:
    """Weights laid out at 64-byte aligned offsets; the same (name, layout) is stored once."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.offsets: dict[tuple[str, str], int] = {}
        self.size = 0

    def add(self, key: tuple[str, str], data: np.ndarray) -> int:
        if key in self.offsets:
            return self.offsets[key]
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        offset = self.size
        self.offsets[key] = offset
        self.chunks.append(raw)
        pad = _align(raw.size) - raw.size
        if pad:
            self.chunks.append(np.zeros(pad, np.uint8))
        self.size += raw.size + pad
        return offset

    def data(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros(ALIGN, np.uint8)
        return np.concatenate(self.chunks)


class Emitter:
    """State shared by the kernel emitters while generating one program."""

    def __init__(self, program: Program, num_threads: int, winograd: bool = True) -> None:
        self.program = program
        self.num_threads = max(1, num_threads)
        self.winograd = winograd
        self.blob = WeightBlob()
        self.scratch_bytes = 0
        self.errors: dict[int, str] = {}
        self.instr_index = 0
        self.instr: Instr | None = None
        self._input_index = {id(b): i for i, b in enumerate(program.inputs)}
        self._output_index = {id(b): i for i, b in enumerate(program.outputs)}
        self.arena_bytes = self._place_activations()

    def _place_activations(self) -> int:
        """Activations keep offsets from the memory planner; any without one (no planner
        run) get their own slot after the planned region."""
        end = 0
        for buffer in self.program.activations():
            if buffer.offset is not None:
                end = max(end, buffer.offset + buffer.type.nbytes)
        end = _align(end)
        for buffer in self.program.activations():
            if buffer.offset is None:
                buffer.offset = end
                end = _align(end + buffer.type.nbytes)
        return max(end, ALIGN)

    # addresses -------------------------------------------------------------------------

    def address(self, buffer: Buffer) -> str:
        """A `uint8_t *` expression for the start of `buffer`."""
        base, offset = resolve_address(buffer)
        if base.kind is BufferKind.WEIGHT:
            return f"(W + {self.blob.add((base.name, 'raw'), base.data) + offset})"
        if base.kind is BufferKind.INPUT:
            return f"(in[{self._input_index[id(base)]}] + {offset})"
        if base.kind is BufferKind.OUTPUT:
            return f"(out[{self._output_index[id(base)]}] + {offset})"
        return f"(A + {base.offset + offset})"

    def pointer(self, buffer: Buffer, const: bool = False) -> str:
        qualifier = "const " if const else ""
        return f"(({qualifier}{c_type(buffer.type.dtype)} *){self.address(buffer)})"

    def packed_weight(self, buffer: Buffer, layout: str, data: np.ndarray) -> str:
        """A `const float *` to a compile-time repacked copy of a weight."""
        base, offset = resolve_address(buffer)
        if base.kind is not BufferKind.WEIGHT or offset:
            raise UnsupportedError(f"'{buffer.name}' is not a whole weight and cannot be pre-packed")
        return f"((const float *)(W + {self.blob.add((base.name, layout), data)}))"

    def constant(self, key: str, data: np.ndarray, ctype: str) -> str:
        """A pointer to compile-time data the kernels need (offset tables and the like)."""
        return f"((const {ctype} *)(W + {self.blob.add(('__constant__', key), data)}))"

    def need_scratch(self, nbytes: int) -> None:
        """Reserves `nbytes` of scratch (S) for the current kernel; kernels run one at a
        time, so the scratch region is the largest single need."""
        self.scratch_bytes = max(self.scratch_bytes, _align(nbytes))

    def fail_check(self, message: str) -> str:
        """A C statement returning this instruction's error code, recording `message`."""
        self.errors[self.instr_index + 1] = message
        return f"return {self.instr_index + 1};"

    @property
    def threads_pragma(self) -> str:
        return f"num_threads({self.num_threads})"


def generate_c(program: Program, num_threads: int = 1, profile: bool = False, winograd: bool = True) -> CProgram:
    """profile: time every instruction into a table read by `ember_profile` (for tuning).
    winograd: run the 3x3 convolutions that gain from it as Winograd F(2x2, 3x3)."""
    from ember.codegen.kernels import C_KERNELS
    from ember.codegen.kernels.elementwise import emit_chain, fusable_chains

    emitter = Emitter(program, num_threads, winograd)
    body: list[str] = []
    profiled: list[str] = []
    chains = fusable_chains(program.instrs)
    fused = {member for members in chains.values() for member in members[1:]}
    for index, instr in enumerate(program.instrs):
        if instr.name in MARKERS or index in fused:
            continue
        kernel = C_KERNELS.get(instr.name)
        if kernel is None:
            raise UnsupportedError(f"the C backend has no kernel for {instr.name} (node '{instr.source}')")
        emitter.instr_index = index
        emitter.instr = instr
        if index in chains:
            members = [program.instrs[i] for i in chains[index]]
            code = emit_chain(emitter, members)
            label = "_".join(sanitize_identifier(m.source or "program") for m in members)
            instr = Instr("+".join(m.name for m in members), [], source=label)
        else:
            code = kernel(emitter, instr)
            label = sanitize_identifier(instr.source or "program")
        if profile:
            code = f"double t0_ = omp_get_wtime();\n{code}\nember_prof[{len(profiled)}] += omp_get_wtime() - t0_;"
            profiled.append(f"{index}:{instr.name}:{label}")
        body.append(f"    /* {index}: {instr.name} from node {label} */\n    {{\n{_indent(code, 8)}\n    }}")
    profile_lines = []
    if profile:
        profile_lines = [f"static double ember_prof[{max(len(profiled), 1)}];",
                         "/* " + " ".join(profiled) + " */",
                         f"void ember_profile(double *out) {{ for (int i = 0; i < {len(profiled)}; i++) out[i] = ember_prof[i]; }}"]
    source = "\n".join([
        "/* Generated by Ember. Do not edit. */",
        _library(),
        *profile_lines,
        "int ember_run(const uint8_t *restrict W, uint8_t *const *restrict in, uint8_t *const *restrict out,",
        "              uint8_t *restrict A, uint8_t *restrict S)",
        "{",
        "    (void)W; (void)in; (void)out; (void)A; (void)S;",
        *body,
        "    return 0;",
        "}",
        "",
    ])
    return CProgram(source, emitter.blob.data(), emitter.arena_bytes, emitter.scratch_bytes,
                    emitter.num_threads, emitter.errors, profiled)


def _indent(code: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else "" for line in code.strip("\n").splitlines())


def _library() -> str:
    # omp.h only where OpenMP is on: AOT bundles build the same source without it.
    return ("#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
            "#ifdef _OPENMP\n#include <omp.h>\n#endif\n#include \"ember_gemm.h\"\n#include \"ember_math.h\"\n")
