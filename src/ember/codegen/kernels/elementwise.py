"""Elementwise kernels: one loop nest per instruction (or per ElementwiseChain, which the
`fuse-elementwise` pass forms) with NumPy broadcasting through per-operand strides,
collapsed so same-shaped operands run one flat (vectorizable) loop. Each op is one C
expression over its operands `a`, `b`, `c`; a chain's intermediate values live in registers."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.codegen.c_types import NARROW_FLOATS, NARROW_INTS, c_literal, c_type, libm
from ember.codegen.emitter import Emitter
from ember.codegen.kernels.registry import broadcast_strides, collapse, loop_nest
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.chain import ELEMENTWISE_CHAIN, Step, chain_steps, infer_steps
from ember.lir.ir import Buffer, Instr
from ember.types import DType

Expr = Callable[[list[str], DType, Any], str]


# 16-bit floats: (to float32, from float32) conversions of runtime/ember_math.h.
HALVES = {DType.FLOAT16: ("ember_f16_to_f32", "ember_f32_to_f16"),
          DType.BFLOAT16: ("ember_bf16_to_f32", "ember_f32_to_bf16")}

# float32 versions that vectorize (runtime/ember_math.h); other widths use libm.
_VECTOR_MATH = {"exp": "ember_expf", "erf": "ember_erff", "tanh": "ember_tanhf"}


def _float_unary(fn: str) -> Expr:
    def expr(a, t, attrs):
        if t is DType.FLOAT32 and fn in _VECTOR_MATH:
            return f"{_VECTOR_MATH[fn]}({a[0]})"
        return f"{libm(fn, t)}({a[0]})"

    return expr


def _zero(t: DType) -> str:
    return c_literal(0, t)


def _one(t: DType) -> str:
    return c_literal(1, t)


def _sigmoid(a, t, attrs):
    if t is DType.FLOAT32:
        return f"ember_sigmoidf({a[0]})"
    return f"({_one(t)} / ({_one(t)} + {libm('exp', t)}(-{a[0]})))"


def _gelu(a, t, attrs):
    x = a[0]
    if attrs.approximate == "tanh":
        inner = f"{c_literal(0.7978845608028654, t)} * ({x} + {c_literal(0.044715, t)} * {x} * {x} * {x})"
        return f"({c_literal(0.5, t)} * {x} * ({_one(t)} + {_float_unary('tanh')([inner], t, attrs)}))"
    erf = _float_unary("erf")([f"{x} * {c_literal(0.7071067811865476, t)}"], t, attrs)
    return f"({c_literal(0.5, t)} * {x} * ({_one(t)} + {erf}))"


def _hard_swish(a, t, attrs):
    x = a[0]
    h = f"({x} * {c_literal(1 / 6, t)} + {c_literal(0.5, t)})"
    return f"({x} * ({h} < {_zero(t)} ? {_zero(t)} : ({h} > {_one(t)} ? {_one(t)} : {h})))"


def _softplus(a, t, attrs):
    x = a[0]
    return f"(({x} > {_zero(t)} ? {x} : {_zero(t)}) + {libm('log1p', t)}({libm('exp', t)}(-{libm('fabs', t)}({x}))))"


def _abs(a, t, attrs):
    return f"{libm('fabs', t)}({a[0]})" if t.is_float else f"({a[0]} < 0 ? -{a[0]} : {a[0]})"


def _extreme(compare: str) -> Expr:
    """Max (">") or Min ("<"). NaN propagates like np.maximum/np.minimum: a NaN in either
    operand wins."""

    def expr(a, t, attrs):
        nan = f"{a[0]} != {a[0]} || " if t.is_float else ""
        return f"(({nan}{a[0]} {compare} {a[1]}) ? {a[0]} : {a[1]})"

    return expr


def _mod(a, t, attrs):
    # np.mod: the remainder takes the divisor's sign.
    if t.is_float:
        r = f"{libm('fmod', t)}({a[0]}, {a[1]})"
        return f"({{ {c_type(t)} r_ = {r}; (r_ != 0 && ((r_ < 0) != ({a[1]} < 0))) ? r_ + {a[1]} : r_; }})"
    # x % -1 is 0, but INT_MIN % -1 traps on x86 (the quotient overflows): not computed.
    rem = f"({a[1]} == -1 ? 0 : {a[0]} % {a[1]})" if _signed(t) else f"{a[0]} % {a[1]}"
    return f"({{ {c_type(t)} r_ = {rem}; (r_ != 0 && ((r_ < 0) != ({a[1]} < 0))) ? r_ + {a[1]} : r_; }})"


def _div(a, t, attrs):
    if not _signed(t):
        return f"({a[0]} / {a[1]})"
    # x / -1 is -x, wrapping for the type's minimum, which the division itself would trap on
    # (x86 raises SIGFPE for INT_MIN / -1): negated in unsigned arithmetic, as the
    # interpreter's wraps.
    return f"({a[1]} == -1 ? ({c_type(t)})(0 - (uint64_t){a[0]}) : {a[0]} / {a[1]})"


def _pow(a, t, attrs):
    if t.is_float:
        return f"{libm('pow', t)}({a[0]}, ({c_type(t)}){a[1]})"
    # An integral exponent >= 0: exact, wrapping (ember_ipow); else in double, truncated.
    ct = c_type(t)
    return (f"({{ double e_ = (double)({a[1]}); ({ct})(e_ >= 0.0 && e_ == floor(e_) && e_ < 0x1p64 ? "
            f"({ct})ember_ipow((uint64_t)({a[0]}), (uint64_t)e_) : ({ct})pow((double)({a[0]}), e_)); }})")


def _clip(a, t, attrs):
    x = a[0]
    if attrs.min is not None:
        lo = c_literal(attrs.min, t)
        x = f"({x} < {lo} ? {lo} : {x})"
    if attrs.max is not None:
        hi = c_literal(attrs.max, t)
        x = f"({x} > {hi} ? {hi} : {x})"
    return x


def _cast(a, t, attrs):
    target = attrs.to
    x = a[0]
    if t in HALVES:  # stored as bits (c_types.py): widen exactly first
        x, t = f"{HALVES[t][0]}({x})", DType.FLOAT32
    elif t in NARROW_FLOATS:
        e, m, bias, kind = NARROW_FLOATS[t]
        x, t = f"ember_narrow_to_f32({x}, {e}, {m}, {bias}, {kind})", DType.FLOAT32
    elif t in NARROW_INTS:
        bits, signed = NARROW_INTS[t]
        x = f"((int8_t)(uint8_t)({x} << {8 - bits}) >> {8 - bits})" if signed else f"({x} & {(1 << bits) - 1})"
        t = DType.INT8
    if target in NARROW_FLOATS:  # from float32, as ml_dtypes converts (saturating where asked)
        e, m, bias, kind = NARROW_FLOATS[target]
        saturate = int(attrs.saturate and target is not DType.FLOAT4E2M1)
        return f"ember_f32_to_narrow((float){x}, {e}, {m}, {bias}, {kind}, {saturate})"
    if target in NARROW_INTS:
        bits = NARROW_INTS[target][0]
        if t.is_float:
            return f"ember_float_to_narrow_int((double){x}, {bits})"
        return f"((uint8_t)((int64_t){x} & {(1 << bits) - 1}))"
    if target in HALVES:
        # float16 rounds wider types once, as NumPy does (round to odd on the way through
        # float); bfloat16 goes through float32 like ml_dtypes and ONNX Runtime (the
        # interpreter's answer, which can differ in the last bit from one rounding).
        exact = t is DType.FLOAT32 or (t.is_int and t.itemsize <= 2)
        if exact or target is DType.BFLOAT16:
            return f"{HALVES[target][1]}((float){x})"
        return f"{HALVES[target][1]}(ember_f64_to_f32_odd((double){x}))"
    a = [x]
    if target is DType.BOOL:
        return f"({a[0]} != 0)"
    if t.is_float and target.is_int:
        # Truncation toward zero; NaN gives 0 and values past the range saturate, as the
        # reference defines them (ops/elementwise.py CastAttrs; a plain C cast is undefined).
        info = np.iinfo(target.numpy)
        low, high = c_literal(int(info.min), target), c_literal(int(info.max), target)
        past = f"{float(info.max) + 1.0!r}"
        return (f"({{ double cast_ = (double)({a[0]}); ({c_type(target)})(cast_ < {float(info.min)!r} ? {low} : "
                f"cast_ >= {past} ? {high} : cast_ == cast_ ? ({c_type(target)})cast_ : 0); }})")
    return f"(({c_type(target)}){a[0]})"


# ---- ops whose references compute in float64 and round once (src/ember/ops/math.py) ----
# float32 (and, for Shrink, integer) inputs compute in double and convert once, exactly as
# the references do: the same libm, the same comparisons against float64 attributes.


def _double_unary(fn: str) -> Expr:
    def expr(a, t, attrs):
        if t is DType.FLOAT64:
            return f"{fn}({a[0]})"
        return f"(({c_type(t)}){fn}((double){a[0]}))"

    return expr


def _in_double(body: Callable[[str, Any], str]) -> Expr:
    """`body(d, attrs)` is a double expression over the double `d`; the result converts to
    the op's type once (for integers: truncation toward zero, like NumPy's astype)."""

    def expr(a, t, attrs):
        return f"({{ double d_ = (double){a[0]}; ({c_type(t)})({body('d_', attrs)}); }})"

    return expr


def _d(value: float) -> str:
    return c_literal(value, DType.FLOAT64)


def _mish(d, attrs):
    # x * tanh(logaddexp(0, x)); logaddexp(0, x) = max(x, 0) + log1p(exp(-|x|)), NaN-propagating.
    return f"{d} * tanh(({d} > 0.0 ? {d} : 0.0) + log1p(exp(-fabs({d}))))"


def _selu(d, attrs):
    # gamma * where(x > 0, x, alpha * expm1(min(x, 0))): a NaN takes the second branch and stays NaN.
    return f"{_d(attrs.gamma)} * ({d} > 0.0 ? {d} : {_d(attrs.alpha)} * expm1({d}))"


def _celu(d, attrs):
    # max(x, 0) + min(0, alpha * expm1(x / alpha)), with np.maximum/np.minimum's NaN rules (x
    # itself is divided, as ONNX writes it: with alpha <= 0 a clamp to x <= 0 first gave 0 / 0).
    alpha = _d(attrs.alpha)
    return (f"(({d} != {d} || {d} > 0.0) ? {d} : 0.0) + "
            f"({{ double c_ = {alpha} * expm1({d} / {alpha}); (c_ != c_ || c_ < 0.0) ? c_ : 0.0; }})")


def _shrink(d, attrs):
    # -lambd as its own literal: "-" before a negative literal (lambd = -0.0) reads as "--".
    lambd, low, bias = _d(attrs.lambd), _d(-attrs.lambd), _d(attrs.bias)
    return f"({d} < {low} ? {d} + {bias} : ({d} > {lambd} ? {d} - {bias} : 0.0))"


def _is_inf(a, t, attrs):
    x, inf = a[0], c_literal(math.inf, t)
    tests = []
    if attrs.detect_positive:
        tests.append(f"{x} == {inf}")
    if attrs.detect_negative:
        tests.append(f"{x} == -{inf}")
    return f"({' || '.join(tests)})" if tests else "0"


def _signed(t: DType) -> bool:
    return np.dtype(t.numpy).kind == "i"


def _unsigned(t: DType) -> str:
    return f"uint{t.itemsize * 8}_t"


def _bitwise(operator: str) -> Expr:
    return lambda a, t, attrs: f"(({c_type(t)})({a[0]} {operator} {a[1]}))"


def _bit_shift(a, t, attrs):
    """Like the reference: a shift by a negative amount or by the width or more leaves the
    sign fill (-1 for a right shift of a negative value, else 0); left shifts run unsigned."""
    x, y, bits = a[0], a[1], t.itemsize * 8
    out_of_range = f"{y} >= {bits}" + (f" || {y} < 0" if _signed(t) else "")
    if attrs.direction == "LEFT":
        shifted = f"(({c_type(t)})((uint64_t)({_unsigned(t)}){x} << {y}))"
        fill = _zero(t)
    else:
        shifted = f"(({c_type(t)})({x} >> {y}))"
        fill = f"({x} < 0 ? {c_literal(-1, t)} : {_zero(t)})" if _signed(t) else _zero(t)
    return f"(({out_of_range}) ? {fill} : {shifted})"


def _prelu(a, t, attrs):
    x, slope = a
    if t.is_int:
        # NumPy's integer product wraps; signed overflow in C does not, so multiply unsigned.
        product = f"(({c_type(t)})((uint64_t){x} * (uint64_t){slope}))"
    else:
        product = f"{x} * {slope}"
    return f"({x} < {_zero(t)} ? {product} : {x})"


UNARY: dict[str, Expr] = {
    "Relu": lambda a, t, attrs: f"({a[0]} > {_zero(t)} ? {a[0]} : {_zero(t)})",
    "Sigmoid": _sigmoid,
    "Tanh": _float_unary("tanh"),
    "Exp": _float_unary("exp"),
    "Log": _float_unary("log"),
    "Sqrt": _float_unary("sqrt"),
    "Erf": _float_unary("erf"),
    "Reciprocal": lambda a, t, attrs: f"({_one(t)} / {a[0]})",
    "Floor": _float_unary("floor"),
    "Ceil": _float_unary("ceil"),
    "Round": _float_unary("nearbyint"),  # default rounding mode: half to even
    "Sin": _float_unary("sin"),
    "Cos": _float_unary("cos"),
    "Softplus": _softplus,
    "Softsign": lambda a, t, attrs: f"({a[0]} / ({_one(t)} + {libm('fabs', t)}({a[0]})))",
    "Neg": lambda a, t, attrs: f"(-{a[0]})",
    "Abs": _abs,
    "Sign": lambda a, t, attrs: f"(({c_type(t)})(({a[0]} > 0) - ({a[0]} < 0)))",
    "Not": lambda a, t, attrs: f"(!{a[0]})",
    "Clip": _clip,
    "Cast": _cast,
    "Gelu": _gelu,
    "Silu": lambda a, t, attrs: f"({a[0]} * {_sigmoid(a, t, attrs)})",
    "HardSwish": _hard_swish,
    "LeakyRelu": lambda a, t, attrs: f"({a[0]} >= {_zero(t)} ? {a[0]} : {a[0]} * {c_literal(attrs.alpha, t)})",
    "Elu": lambda a, t, attrs: (f"({a[0]} >= {_zero(t)} ? {a[0]} : "
                                f"{c_literal(attrs.alpha, t)} * {libm('expm1', t)}({a[0]}))"),
    "HardSigmoid": lambda a, t, attrs: (
        f"({{ {c_type(t)} h_ = {a[0]} * {c_literal(attrs.alpha, t)} + {c_literal(attrs.beta, t)}; "
        f"h_ < {_zero(t)} ? {_zero(t)} : (h_ > {_one(t)} ? {_one(t)} : h_); }})"),
    **{op: _double_unary(fn) for op, fn in {
        "Acos": "acos", "Asin": "asin", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Tan": "tan",
        "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh"}.items()},
    "Mish": _in_double(_mish),
    "Selu": _in_double(_selu),
    "Celu": _in_double(_celu),
    "ThresholdedRelu": _in_double(lambda d, attrs: f"({d} > {_d(attrs.alpha)} ? {d} : 0.0)"),
    "Shrink": _in_double(_shrink),
    "IsNaN": lambda a, t, attrs: f"({a[0]} != {a[0]})",
    "IsInf": _is_inf,
    "BitwiseNot": lambda a, t, attrs: f"(({c_type(t)})~{a[0]})",
}
BINARY: dict[str, Expr] = {
    "Add": lambda a, t, attrs: f"({a[0]} + {a[1]})",
    "Sub": lambda a, t, attrs: f"({a[0]} - {a[1]})",
    "Mul": lambda a, t, attrs: f"({a[0]} * {a[1]})",
    "Div": _div,
    "Max": _extreme(">"),
    "Min": _extreme("<"),
    "Mod": _mod,
    "Pow": _pow,
    "Equal": lambda a, t, attrs: f"({a[0]} == {a[1]})",
    "Less": lambda a, t, attrs: f"({a[0]} < {a[1]})",
    "LessOrEqual": lambda a, t, attrs: f"({a[0]} <= {a[1]})",
    "Greater": lambda a, t, attrs: f"({a[0]} > {a[1]})",
    "GreaterOrEqual": lambda a, t, attrs: f"({a[0]} >= {a[1]})",
    "And": lambda a, t, attrs: f"({a[0]} && {a[1]})",
    "Or": lambda a, t, attrs: f"({a[0]} || {a[1]})",
    "Xor": lambda a, t, attrs: f"(!{a[0]} != !{a[1]})",
    "Where": lambda a, t, attrs: f"({a[0]} ? {a[1]} : {a[2]})",
    "PRelu": _prelu,
    "BitwiseAnd": _bitwise("&"),
    "BitwiseOr": _bitwise("|"),
    "BitwiseXor": _bitwise("^"),
    "BitShift": _bit_shift,
}
# Integer division and remainder trap on zero: check the divisor first.
INT_DIVISORS = {"Div", "Mod"}
EXPRESSIONS: dict[str, Expr] = {**UNARY, **BINARY, "Expand": lambda a, t, attrs: a[0]}


def expression_type(op: str, operand_types: list[DType]) -> DType:
    """The type an op's expression computes in: its first operand's (Where: the values')."""
    return operand_types[1] if op == "Where" else operand_types[0]


def traps(op: str, operand_types: list[DType]) -> bool:
    """Integer division and remainder need a divisor check (and a loop of their own)."""
    return op in INT_DIVISORS and expression_type(op, operand_types).is_int


def _single_step(instr: Instr) -> tuple[list[Buffer], list[Step]]:
    sources: list[Buffer] = []
    args = []
    for buffer in instr.required()[1:]:
        if buffer not in sources:
            sources.append(buffer)
        args.append(f"x{sources.index(buffer)}")
    return sources, [Step(instr.name, tuple(args), instr.attrs)]


def emit_loop(em: Emitter, instr: Instr) -> str:
    """One loop nest computing the instruction's steps; every source is read from memory once
    per element, every intermediate value stays in a register."""
    if instr.name == ELEMENTWISE_CHAIN:
        out, *sources = instr.required()
        steps = chain_steps(instr.attrs)
    else:
        out = instr.operand(0)
        sources, steps = _single_step(instr)
    value_types = [t.dtype for t in infer_steps(steps, [b.type for b in sources])]
    shape = out.type.shape
    strides = [broadcast_strides(shape, shape)] + [broadcast_strides(b.type.shape, shape) for b in sources]
    dims, strides = collapse(shape, strides)
    names = ["y"] + [f"x{i}" for i in range(len(sources))]
    # No restrict: the memory planner may run elementwise ops in place (y aliases a source).
    lines = [f"{c_type(out.type.dtype)} *y = {em.pointer(out)};"]
    for i, buffer in enumerate(sources):
        lines.append(f"const {c_type(buffer.type.dtype)} *x{i} = {em.pointer(buffer, const=True)};")

    def body(offsets: list[str]) -> str:
        statements = []
        for k, step in enumerate(steps):
            args = [a if a[0] == "v" else f"{a}[{offsets[int(a[1:]) + 1]}]" for a in step.args]
            types = [value_types[int(a[1:])] if a[0] == "v" else sources[int(a[1:])].type.dtype for a in step.args]
            value = EXPRESSIONS[step.op](args, expression_type(step.op, types), step.attrs)
            if k < len(steps) - 1:
                statements.append(f"{c_type(value_types[k])} v{k} = {value};")
                continue
            if traps(step.op, types):
                message = f"node {instr.source!r} ({step.op}): integer division by zero"
                statements.append(f"if ({args[1]} == 0) {em.fail_check(message)}")
            statements.append(f"y[{offsets[0]}] = {value};")
        return " ".join(statements)

    if not dims:
        dims, strides = [1], [[0] for _ in strides]
    lines.append(loop_nest(dims, strides, names, body))
    return "\n".join(lines)


C_KERNELS.kernel("elementwise_loop", *EXPRESSIONS)(emit_loop)
C_KERNELS.kernel("elementwise_chain", ELEMENTWISE_CHAIN, rounds_each_op=True)(emit_loop)
