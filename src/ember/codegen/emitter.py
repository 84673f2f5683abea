"""The C emitter: one translation unit per program whose kernels are selected and whose
memory is planned. It only prints: every decision (kernel, algorithm, threads, packed
weights, scratch) is in the LIR already, put there by the `select-kernels` pass.

    int ember_run(const uint8_t *W, uint8_t *const *in, uint8_t *const *out, uint8_t *A)

W is the weight blob (raw weights and their compile-time packed copies, each 64-byte
aligned), `in`/`out` the model's input and output buffers in program order, and A the
activation arena (kernels' scratch included: the planner places it like any buffer). The
entry's name and linkage are options (`CodegenOptions`), so bundles use the same text. It
returns 0, or 1 + the index of the instruction that failed a run-time check (e.g. a Gather
index out of range); `CProgram.errors` maps that to a message.

Every kernel is specialized on its constant shapes and carries a comment naming its graph
node (sanitized: model names never reach the source raw). Output is deterministic: the same
program and options give the same bytes."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.c_writer import CWriter
from ember.lir.ir import MARKERS, Buffer, BufferKind, Instr, OperandKind, Program, resolve_address
from ember.support.errors import EmberError
from ember.support.heap import PAGE_BYTES, page_aligned_zeros, release_freed_memory
from ember.support.names import sanitize_identifier

if TYPE_CHECKING:
    from ember.codegen.kernels.registry import Kernel, KernelRegistry

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class CodegenOptions:
    """entry: the entry function's name; static_entry: give it internal linkage (a bundle
    wraps it in its own API function)."""

    entry: str = "ember_run"
    static_entry: bool = False
    # Also emit `ember_instrumented_run` (see instrumented_entry): per-step timers and a hook.
    instrumented: bool = False


@dataclass
class CProgram:
    """Generated source plus everything needed to call it."""

    source: str
    weights: np.ndarray  # uint8 blob
    arena_bytes: int
    entry: str = "ember_run"
    errors: dict[int, str] = field(default_factory=dict)
    # The program's instruction index of each step function, in call order.
    steps: list[int] = field(default_factory=list)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


def stored_weights(program: Program) -> list[Buffer]:
    """The weights the blob holds: packed copies and tables that kernels read, and every other
    weight some instruction reads, except one that each of its readers reads through a
    packed copy instead (the copy is stored in its place)."""
    readers: dict[int, list[Instr]] = {}
    for instr in program.instrs:
        if instr.name in MARKERS:
            continue
        for buffer in instr.operands:
            root = None if buffer is None else resolve_address(buffer)[0]
            if root is not None and root.kind is BufferKind.WEIGHT:
                readers.setdefault(id(root), []).append(instr)

    def reads_raw(instr: Instr, weight: Buffer) -> bool:
        return not any(b.packing is not None and b.packing.source is weight for b in instr.kernel_operands)

    return [w for w in program.weights
            if id(w) in readers and (w.packing is not None or any(reads_raw(i, w) for i in readers[id(w)]))]


_TRIM_EVERY_BYTES = 8 << 20

# The blob starts on a page: the native program runs it in place (no second copy of the
# weights at load), and where it falls in the cache does not change from one process to the next.
BLOB_ALIGN = PAGE_BYTES


class WeightBlob:
    """The stored weights at 64-byte aligned offsets, laid out once, before any kernel prints.
    Each weight is copied straight into the page-aligned blob: no intermediate list of copies.
    Then the weight's data becomes a view of its bytes in the blob (same values, dtype and
    shape), so the array it had is freed where nothing else holds it: a compile's peak holds
    each stored weight about once, not once in the program and once in the blob (MiniLM-L3:
    66 MB of weights)."""

    def __init__(self, weights: list[Buffer]) -> None:
        self.offsets: dict[int, int] = {}
        size = 0
        for weight in weights:
            self.offsets[id(weight)] = size
            size += _align(np.asarray(weight.data).nbytes)
        self.data = page_aligned_zeros(max(size, ALIGN))
        moved = 0
        for weight in weights:
            shape = np.asarray(weight.data).shape  # (np.ascontiguousarray makes a 0-d array 1-d)
            array = np.ascontiguousarray(weight.data)
            raw = array.view(np.uint8).reshape(-1)
            start = self.offsets[id(weight)]
            self.data[start:start + raw.size] = raw
            weight.data = self.data[start:start + raw.size].view(array.dtype).reshape(shape)
            moved += raw.size
            del array, raw
            # Freed heap pages stay resident until trimmed: the blob's pages, touched as it
            # fills, would otherwise come on top of them.
            if moved >= _TRIM_EVERY_BYTES:
                release_freed_memory()
                moved = 0


class Emitter:
    """What kernels print with: addresses of buffers, their kernel operands, error codes."""

    def __init__(self, program: Program) -> None:
        unplanned = [b.name for b in program.activations() if b.offset is None]
        if unplanned:
            raise EmberError(f"C generation needs a memory plan; activations without an offset: {unplanned[:5]}")
        self.program = program
        self.blob = WeightBlob(stored_weights(program))
        self.arena_bytes = max([ALIGN] + [_align((b.offset or 0) + b.type.nbytes) for b in program.activations()])
        self.errors: dict[int, str] = {}
        self.instr_index = 0
        self._input_index = {id(b): i for i, b in enumerate(program.inputs)}
        self._output_index = {id(b): i for i, b in enumerate(program.outputs)}
        self._defined: set[str] = set()
        self._pending: list[str] = []

    def define(self, key: str, text: str) -> None:
        """File-scope C a kernel calls (helper functions of a generated kernel), written once
        per key, just before the first step that defines it."""
        if key not in self._defined:
            self._defined.add(key)
            self._pending.append(text.strip("\n"))

    def take_definitions(self) -> list[str]:
        pending, self._pending = self._pending, []
        return pending

    # addresses -------------------------------------------------------------------------

    def address(self, buffer: Buffer) -> str:
        """A `uint8_t *` expression for the start of `buffer`."""
        base, offset = resolve_address(buffer)
        if base.kind is BufferKind.WEIGHT:
            if id(base) not in self.blob.offsets:
                raise EmberError(f"weight '{base.name}' is read but not stored: a kernel reads a weight its "
                                 "plan replaced by a packed copy (an Ember bug)")
            return f"(W + {self.blob.offsets[id(base)] + offset})"
        if base.kind is BufferKind.INPUT:
            return f"(in[{self._input_index[id(base)]}] + {offset})"
        if base.kind is BufferKind.OUTPUT:
            return f"(out[{self._output_index[id(base)]}] + {offset})"
        assert base.offset is not None
        return f"(A + {base.offset + offset})"

    def pointer(self, buffer: Buffer, const: bool = False) -> str:
        qualifier = "const " if const else ""
        return f"(({qualifier}{c_type(buffer.type.dtype)} *){self.address(buffer)})"

    # kernel operands -------------------------------------------------------------------

    @staticmethod
    def _extras(instr: Instr) -> list[tuple[Buffer, OperandKind]]:
        pairs = list(zip(instr.operands, instr.kinds(), strict=True))[instr.base_count:]
        return [(b, k) for b, k in pairs if b is not None]

    def packed(self, instr: Instr, index: int = 0) -> str:
        """A `const float *` to the instruction's index-th packed weight."""
        packed = [b for b, _ in self._extras(instr) if b.packing is not None and b.packing.source is not None]
        return f"((const float *){self.address(packed[index])})"

    def table(self, instr: Instr, index: int = 0) -> str:
        tables = [b for b, _ in self._extras(instr) if b.packing is not None and b.packing.source is None]
        return f"((const {c_type(tables[index].type.dtype)} *){self.address(tables[index])})"

    def scratch(self, instr: Instr) -> str:
        """A `float *` to the instruction's scratch, or NULL when it has none."""
        found = [b for b, k in self._extras(instr) if k is OperandKind.SCRATCH]
        return f"((float *){self.address(found[0])})" if found else "NULL"

    def fail_check(self, message: str) -> str:
        """A C statement returning this instruction's error code, recording `message`."""
        self.errors[self.instr_index + 1] = message
        return f"return {self.instr_index + 1};"


def param(instr: Instr, name: str, default: Any = None) -> Any:
    """A decision select-kernels recorded for this instruction."""
    if instr.kernel is None:
        raise EmberError(f"instruction {instr.name} (node '{instr.source}') has no kernel selected")
    return instr.kernel.params.get(name, default)


def threads_pragma(instr: Instr) -> str:
    return f"num_threads({param(instr, 'threads', 1)})"


def generate_c(program: Program, registry: KernelRegistry, options: CodegenOptions | None = None) -> CProgram:
    """The translation unit of a program whose kernels `registry` selected."""
    opts = options or CodegenOptions()
    emitter = Emitter(program)
    kernels: list[tuple[int, Instr, Kernel]] = []
    for index, instr in enumerate(program.instrs):
        if instr.name in MARKERS:
            continue
        if instr.kernel is None:
            raise EmberError(f"instruction {index} ({instr.name}, node '{instr.source}') has no kernel: "
                             "run the backend's select-kernels pass first")
        kernels.append((index, instr, registry[instr.kernel.name]))
    used = list(dict.fromkeys(kernel.name for _, _, kernel in kernels))
    w = CWriter()
    w.line("/* Generated by Ember. Do not edit. */", _library(), "")
    w.line(*dict.fromkeys(registry[name].preamble for name in used if registry[name].preamble))
    # Each kernel is a function of its own, kept out of line: one function holding every
    # kernel of a large model made the C compiler's time grow faster than the model.
    # A step fusing several graph ops rounds after each (no FMA contraction across them; the
    # library is built with -ffp-contract=fast for the single-op kernels, where it is latitude).
    w.line("#if defined(__clang__)", "#define EMBER_STEP static __attribute__((noinline)) int",
           "#define EMBER_STEP_ROUNDED EMBER_STEP", "#define EMBER_ROUND_EACH_OP _Pragma(\"clang fp contract(off)\")",
           "#elif defined(__GNUC__)", "#define EMBER_STEP static __attribute__((noinline)) int",
           "#define EMBER_STEP_ROUNDED static __attribute__((noinline, optimize(\"fp-contract=off\"))) int",
           "#define EMBER_ROUND_EACH_OP", "#else", "#define EMBER_STEP static int",
           "#define EMBER_STEP_ROUNDED static int", "#define EMBER_ROUND_EACH_OP", "#endif", "")
    params = "const uint8_t *restrict W, uint8_t *const *restrict in, uint8_t *const *restrict out, uint8_t *restrict A"
    steps: list[int] = []
    # A step whose code is the same as an earlier one's (same kernel, shapes and addresses; a
    # run-time check returns its own step's code, so steps with checks never match) calls that
    # one: its C is compiled once. The C compiler's time grows with the
    # code it optimizes, and deep repeated structure (a long elementwise chain, split into
    # chains of the same steps in the same arena place) repeats whole kernels.
    first_with: dict[tuple[bool, str], int] = {}
    for index, instr, kernel in kernels:
        emitter.instr_index = index
        code = kernel.emit(emitter, instr)
        for definition in emitter.take_definitions():
            w.line(definition, "")
        label = sanitize_identifier(instr.source or "program")
        steps.append(index)
        same = first_with.setdefault((kernel.rounds_each_op, code), index)
        if same != index:
            w.line(f"/* {index}: {instr.name} [{kernel.name}] from node {label}: the code of step {same} */",
                   f"#define step{index} step{same}", "")
            continue
        w.line(f"/* {index}: {instr.name} [{kernel.name}] from node {label} */")
        w.line(f"{'EMBER_STEP_ROUNDED' if kernel.rounds_each_op else 'EMBER_STEP'} step{index}({params})")
        with w.block():
            if kernel.rounds_each_op:
                w.line("EMBER_ROUND_EACH_OP")
            w.line("(void)W; (void)in; (void)out; (void)A;")
            with w.block():
                w.line(code.strip("\n"))
            w.line("return 0;")
        w.line("")
    # The entry runs the steps from a table: a function of one call per step made the C
    # compiler's register allocation the largest part of compiling a 100k-step program.
    if steps:
        w.line(f"static int (*const {opts.entry}_steps[{len(steps)}])({params}) = {{")
        for start in range(0, len(steps), 8):
            w.line("    " + " ".join(f"step{step}," for step in steps[start:start + 8]))
        w.line("};")
    linkage = "static int" if opts.static_entry else "int"
    w.line(f"{linkage} {opts.entry}(const uint8_t *restrict W, uint8_t *const *restrict in, "
           "uint8_t *const *restrict out,",
           f"{' ' * (len(linkage) + len(opts.entry) + 2)}uint8_t *restrict A)")
    with w.block():
        if steps:
            with w.block(f"for (int k = 0; k < {len(steps)}; k++)"):
                w.line(f"int status = {opts.entry}_steps[k](W, in, out, A);", "if (status != 0) return status;")
        else:
            w.line("(void)W; (void)in; (void)out; (void)A;")
        w.line("return 0;")
    source = w.text() + "\n" + (instrumented_entry(steps) if opts.instrumented else "")
    return CProgram(source, emitter.blob.data, emitter.arena_bytes, opts.entry, emitter.errors, steps)


INSTRUMENTED_ENTRY = "ember_instrumented_run"


def instrumented_entry(steps: list[int]) -> str:
    """C appended to a program's translation unit (it calls the static step functions):

        int ember_instrumented_run(W, in, out, A, uint64_t *T, int (*hook)(int))

    Around step k it stores CLOCK_MONOTONIC nanoseconds in T[2k] and T[2k+1] (T holds
    2 * steps + 2 values; the last two bracket the whole run); `hook`, if not NULL, is called
    with k before step k and with the step count after the last, outside the timed spans (a
    debugger reads buffers there), and a nonzero return stops the run. Returns what ember_run
    returns, or -1 when the hook stopped it. Built only when a profile or debugger asks: the
    plain entry carries no timers."""
    w = CWriter()
    w.line("#include <time.h>", "static uint64_t ember_now_ns(void)")
    with w.block():
        w.line("struct timespec t;", "clock_gettime(CLOCK_MONOTONIC, &t);",
               "return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;")
    w.line(f"int {INSTRUMENTED_ENTRY}(const uint8_t *restrict W, uint8_t *const *restrict in, "
           "uint8_t *const *restrict out,",
           "                           uint8_t *restrict A, uint64_t *restrict T, int (*hook)(int))")
    with w.block():
        w.line("int status;", "(void)status;", f"T[{2 * len(steps)}] = ember_now_ns();")
        for k, step in enumerate(steps):
            w.line(f"if (hook && hook({k})) return -1;", f"T[{2 * k}] = ember_now_ns();",
                   f"status = step{step}(W, in, out, A);", f"T[{2 * k + 1}] = ember_now_ns();",
                   "if (status != 0) return status;")
        w.line(f"if (hook && hook({len(steps)})) return -1;", f"T[{2 * len(steps) + 1}] = ember_now_ns();",
               "return 0;")
    return w.text() + "\n"


def _library() -> str:
    # omp.h only where OpenMP is on: AOT bundles build the same source without it.
    return ("#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
            "#ifdef _OPENMP\n#include <omp.h>\n#endif\n#include \"ember_gemm.h\"\n#include \"ember_math.h\"\n")
