"""qchain_avx512: an ElementwiseChain over 8-bit tensors (fold-qdq's expanded Q/DQ arithmetic:
a quantized residual Add, its Relu and its requantization) in 16-lane AVX-512 vectors.

The generic chain loop (elementwise.py) computes the same steps one element at a time and
leaves vectorizing to the C compiler, which turns Relu's, Clip's and the saturating Cast's
NaN-exact conditionals into mask arithmetic through general registers (about 3x the time of
the arithmetic itself on AMD EPYC). Here each step is one intrinsic with exactly the scalar
expression's result, NaN and signed zeros included:
  Relu  v > 0 ? v : 0                       vmaxps(v, 0) (returns its second operand on NaN)
  Clip  (v < lo ? lo : v) > hi ? hi : ...   vmaxps(lo, v), then vminps(hi, .)
  Round nearbyint                           vrndscaleps, current rounding mode
  Cast to u8/i8: NaN 0, saturating, truncating  clamp as Clip, then a NaN-masked vcvttps2dq
and Add/Sub/Mul/Div are the IEEE operations themselves (the step is compiled without
contraction, as every chain is). Elements past the last 16, and builds without AVX-512, run
the generic scalar body.

Applies to chains reading 8-bit sources or writing an 8-bit result (so float models keep
their generated C) whose steps are those above and Cast from u8/i8 to float32 of a source,
all else float32, each source either of the result's shape or a single value."""
from __future__ import annotations

import math

from ember.codegen.c_types import c_literal, c_type
from ember.codegen.emitter import Emitter
from ember.codegen.kernels.elementwise import EXPRESSIONS, expression_type
from ember.codegen.kernels.registry import Kernel, KernelOptions
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.chain import ELEMENTWISE_CHAIN, Step, chain_steps, infer_steps
from ember.lir.ir import Instr
from ember.types import DType, TensorType

_BYTES = (DType.UINT8, DType.INT8)
_FLOAT_STEPS = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
LANES = 16


def _finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


def _step_fits(step: Step, types: list[DType], result: DType, last: bool) -> bool:
    if step.op == "Cast":
        source = types[0]
        return (source in _BYTES and step.args[0][0] == "x" and result is DType.FLOAT32) or \
            (source is DType.FLOAT32 and result in _BYTES and last)
    if any(t is not DType.FLOAT32 for t in types) or result is not DType.FLOAT32:
        return False
    if step.op == "Clip":
        return _finite(step.attrs.min) and _finite(step.attrs.max)
    return step.op in _FLOAT_STEPS or step.op in ("Relu", "Round")


def _applies(instr: Instr, options: KernelOptions) -> bool:
    out, *sources = instr.required()
    shape = out.type.shape
    if any(b.type.shape != shape and b.type.size != 1 for b in sources) or out.type.size < LANES:
        return False
    if out.type.dtype not in _BYTES and not any(b.type.dtype in _BYTES for b in sources):
        return False
    if any(b.type.dtype not in (*_BYTES, DType.FLOAT32) for b in sources) or \
            out.type.dtype not in (*_BYTES, DType.FLOAT32):
        return False
    steps = chain_steps(instr.attrs)
    values = [t.dtype for t in infer_steps(steps, [b.type for b in sources])]
    if values[-1] is not out.type.dtype:
        return False
    for k, step in enumerate(steps):
        types = [values[int(a[1:])] if a[0] == "v" else sources[int(a[1:])].type.dtype for a in step.args]
        if not _step_fits(step, types, values[k], k == len(steps) - 1):
            return False
    # an 8-bit source is only ever read by a Cast (widened as it is loaded)
    return all(step.op == "Cast" for step in steps for a in step.args
               if a[0] == "x" and sources[int(a[1:])].type.dtype in _BYTES)


def _clamp(v: str, lo: float | None, hi: float | None) -> str:
    if lo is not None:
        v = f"_mm512_max_ps(_mm512_set1_ps({c_literal(lo, DType.FLOAT32)}), {v})"
    if hi is not None:
        v = f"_mm512_min_ps(_mm512_set1_ps({c_literal(hi, DType.FLOAT32)}), {v})"
    return v


def _vector_body(instr: Instr, source_types: list[DType], full: list[bool]) -> list[str]:
    """The statements computing 16 results at element i0 into y."""
    steps = chain_steps(instr.attrs)
    lines = []

    def operand(arg: str) -> str:
        k = int(arg[1:])
        if arg[0] == "v":
            return f"v{k}"
        return f"_mm512_loadu_ps(x{k} + i0)" if full[k] else f"s{k}"

    for k, step in enumerate(steps):
        a = [operand(arg) for arg in step.args]
        if step.op == "Cast" and step.args[0][0] == "x":
            src = int(step.args[0][1:])
            widen = "_mm512_cvtepu8_epi32" if source_types[src] is DType.UINT8 else "_mm512_cvtepi8_epi32"
            load = f"_mm_loadu_si128((const __m128i *)(x{src} + i0))" if full[src] else \
                f"_mm_set1_epi8((char)x{src}[0])"
            lines.append(f"__m512 v{k} = _mm512_cvtepi32_ps({widen}({load}));")
        elif step.op == "Cast":  # float32 to 8 bits, the chain's last step
            info = (-128.0, 127.0) if step.attrs.to is DType.INT8 else (0.0, 255.0)
            lines.extend([f"__m512 c{k} = {_clamp(a[0], *info)};",
                          f"__m512i i{k} = _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask({a[0]}, {a[0]}, _CMP_ORD_Q), "
                          f"c{k});",
                          f"_mm_storeu_si128((__m128i *)(y + i0), _mm512_cvtepi32_epi8(i{k}));"])
            return lines
        elif step.op in _FLOAT_STEPS:
            lines.append(f"__m512 v{k} = _mm512_{_FLOAT_STEPS[step.op]}_ps({a[0]}, {a[1]});")
        elif step.op == "Relu":
            lines.append(f"__m512 v{k} = _mm512_max_ps({a[0]}, _mm512_setzero_ps());")
        elif step.op == "Round":
            lines.append(f"__m512 v{k} = _mm512_roundscale_ps({a[0]}, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);")
        else:  # Clip
            lines.append(f"__m512 v{k} = {_clamp(a[0], step.attrs.min, step.attrs.max)};")
    lines.append(f"_mm512_storeu_ps(y + i0, v{len(steps) - 1});")
    return lines


def emit_qchain(em: Emitter, instr: Instr) -> str:
    """The chain in vectors of 16 (sources of one value broadcast once), then the generic
    loop's expressions from the first element the vectors left."""
    out, *sources = instr.required()
    n = out.type.size
    full = [b.type.shape == out.type.shape for b in sources]
    types = [b.type.dtype for b in sources]
    lines = [f"{c_type(out.type.dtype)} *y = {em.pointer(out)};"]
    lines += [f"const {c_type(b.type.dtype)} *x{i} = {em.pointer(b, const=True)};" for i, b in enumerate(sources)]
    lines.append("long i0 = 0;")
    lines.append("#if defined(__AVX512F__) && defined(__GNUC__)")
    lines += [f"const __m512 s{i} = _mm512_set1_ps(x{i}[0]);" for i, b in enumerate(sources)
              if not full[i] and b.type.dtype is DType.FLOAT32]
    lines.append(f"for (; i0 + {LANES} <= {n}; i0 += {LANES}) {{")
    lines += ["    " + line for line in _vector_body(instr, types, full)]
    lines += ["}", "#endif"]
    lines.append(f"for (; i0 < {n}; i0++) {{ {_scalar_body(instr, types, full)} }}")
    return "\n".join(lines)


def _scalar_body(instr: Instr, source_types: list[DType], full: list[bool]) -> str:
    """The generic chain loop's statements for element i0 (its expressions: its results)."""
    steps = chain_steps(instr.attrs)
    values = [t.dtype for t in infer_steps(steps, [TensorType(t, ()) for t in source_types])]
    statements = []
    for k, step in enumerate(steps):
        args = [a if a[0] == "v" else f"{a}[{'i0' if full[int(a[1:])] else '0'}]" for a in step.args]
        types = [values[int(a[1:])] if a[0] == "v" else source_types[int(a[1:])] for a in step.args]
        value = EXPRESSIONS[step.op](args, expression_type(step.op, types), step.attrs)
        statements.append(f"{c_type(values[k])} v{k} = {value};" if k < len(steps) - 1 else f"y[i0] = {value};")
    return " ".join(statements)


PREAMBLE = """#if defined(__AVX512F__) && defined(__GNUC__)
#include <immintrin.h>
#endif"""

C_KERNELS.add(Kernel("qchain_avx512", (ELEMENTWISE_CHAIN,), emit_qchain, applies=_applies, preamble=PREAMBLE,
                     rounds_each_op=True), first=True)

__all__ = ["LANES", "emit_qchain"]
