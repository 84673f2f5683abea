"""Elementwise kernels: one loop nest per instruction with NumPy broadcasting through
per-operand strides, collapsed so same-shaped operands run one flat (vectorizable) loop.
Each op is one C expression over its operands `a`, `b`, `c`."""
from __future__ import annotations

from collections.abc import Callable

from ember.codegen.c_types import c_literal, c_type, libm
from ember.codegen.kernels.registry import broadcast_strides, collapse, kernel, loop_nest
from ember.lir.ir import Instr
from ember.types import DType

Expr = Callable[[list[str], DType, object], str]


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
    return f"({c_literal(0.5, t)} * {x} * ({_one(t)} + {_float_unary('erf')([f'{x} * {c_literal(0.7071067811865476, t)}'], t, attrs)}))"


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
    return f"({{ {c_type(t)} r_ = {a[0]} % {a[1]}; (r_ != 0 && ((r_ < 0) != ({a[1]} < 0))) ? r_ + {a[1]} : r_; }})"


def _pow(a, t, attrs):
    if t.is_float:
        return f"{libm('pow', t)}({a[0]}, ({c_type(t)}){a[1]})"
    return f"(({c_type(t)})pow((double){a[0]}, (double){a[1]}))"


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
    if target is DType.BOOL:
        return f"({a[0]} != 0)"
    if t.is_float and target.is_int:
        # Truncation toward zero, like the reference; NaN/overflow is undefined in ONNX.
        return f"(({c_type(target)}){a[0]})"
    return f"(({c_type(target)}){a[0]})"


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
}
BINARY: dict[str, Expr] = {
    "Add": lambda a, t, attrs: f"({a[0]} + {a[1]})",
    "Sub": lambda a, t, attrs: f"({a[0]} - {a[1]})",
    "Mul": lambda a, t, attrs: f"({a[0]} * {a[1]})",
    "Div": lambda a, t, attrs: f"({a[0]} / {a[1]})",
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
}
# Integer division and remainder trap on zero: check the divisor first.
_INT_DIVISORS = {"Div", "Mod"}


def _expr_type(instr: Instr) -> DType:
    """The type an op's expression computes in: its first operand's (Where: the values')."""
    ins = instr.operands[1:]
    return ins[1].type.dtype if instr.name == "Where" else ins[0].type.dtype


def emit_elementwise(em, instr: Instr, expr: Expr) -> str:
    return emit_chain(em, [instr])


def emit_chain(em, chain: list[Instr]) -> str:
    """One loop nest computing a chain of elementwise instructions, each reading the previous
    one's result, which lives only in a register (see fusable_chains)."""
    final = chain[-1].operands[0]
    shape = final.type.shape
    # Which operand reads come from a register: member k's operand is the value of the latest
    # earlier member that wrote that buffer (in-place sharing may reuse one buffer throughout).
    reads: list[list[str | None]] = []
    written: dict[int, int] = {}
    sources: list = []  # operands read from memory, in first-use order
    source_names: dict[int, str] = {}
    for k, instr in enumerate(chain):
        row = []
        for buffer in instr.operands[1:]:
            if id(buffer) in written:
                row.append(f"v{written[id(buffer)]}")
                continue
            if id(buffer) not in source_names:
                source_names[id(buffer)] = f"x{len(sources)}"
                sources.append(buffer)
            row.append(None)
        reads.append(row)
        written[id(instr.operands[0])] = k
    strides = [broadcast_strides(shape, shape)] + [broadcast_strides(b.type.shape, shape) for b in sources]
    dims, strides = collapse(shape, strides)
    names = ["y"] + [source_names[id(b)] for b in sources]
    # No restrict: the memory planner may run elementwise ops in place (y aliases an input).
    lines = [f"{c_type(final.type.dtype)} *y = {em.pointer(final)};"]
    for buffer in sources:
        lines.append(f"const {c_type(buffer.type.dtype)} *{source_names[id(buffer)]} = {em.pointer(buffer, const=True)};")
    only = chain[0] if len(chain) == 1 else None
    guard = ""
    if only is not None and only.name in _INT_DIVISORS and _expr_type(only).is_int:
        guard = f"if ({{divisor}} == 0) {em.fail_check(f'node {only.source!r} ({only.name}): integer division by zero')} "

    def body(offsets: list[str]) -> str:
        offset_of = {source_names[id(b)]: offsets[i + 1] for i, b in enumerate(sources)}
        statements = []
        for k, instr in enumerate(chain):
            args = []
            for buffer, register in zip(instr.operands[1:], reads[k]):
                name = register or source_names[id(buffer)]
                args.append(register or f"{name}[{offset_of[name]}]")
            value = EXPRESSIONS[instr.name](args, _expr_type(instr), instr.attrs)
            if k == len(chain) - 1:
                check = guard.replace("{divisor}", args[1]) if guard else ""
                statements.append(f"{check}y[{offsets[0]}] = {value};")
            else:
                statements.append(f"{c_type(instr.operands[0].type.dtype)} v{k} = {value};")
        return " ".join(statements)

    if not dims:
        dims, strides = [1], [[0] for _ in strides]
    lines.append(loop_nest(dims, strides, names, body))
    return "\n".join(lines)


def _placement(buffer) -> tuple[object, int, int]:
    """(memory region, first byte, end) of a buffer: activations share the arena, at their
    planned offsets; anything else is its own region."""
    from ember.lir.ir import BufferKind, footprint

    root, start, end = footprint(buffer)
    if root.kind is BufferKind.ACTIVATION:
        return "arena", root.offset + start, root.offset + end
    return root, start, end


def fusable_chains(instrs: list[Instr]) -> dict[int, list[int]]:
    """Chains of elementwise instructions to emit as one loop: start index -> member indices.

    Instruction B joins A's chain when B is the next computing instruction after A, both are
    elementwise over the same output shape, B reads A's result, and A's result is a plain
    activation that nothing after B reads (its dealloc sits between B and the next
    computing instruction, or B writes it in place). Integer division stays alone: its
    divide-by-zero check needs its own loop."""
    from ember.lir.ir import DEALLOC, MARKERS, BufferKind

    compute = [i for i, instr in enumerate(instrs) if instr.name not in MARKERS]
    chains: dict[int, list[int]] = {}
    current: list[int] = []

    def joinable(a: Instr, b: Instr, between: list[Instr]) -> bool:
        if a.name not in EXPRESSIONS or b.name not in EXPRESSIONS:
            return False
        if any(x.name in _INT_DIVISORS and _expr_type(x).is_int for x in (a, b)):
            return False
        result, out = a.operands[0], b.operands[0]
        if result.kind is not BufferKind.ACTIVATION or result.is_view or result.type.shape != out.type.shape:
            return False
        if not any(op is result for op in b.operands[1:]):
            return False
        dies = any(m.name == DEALLOC and m.operands[0] is result for m in between)
        return dies or out is result

    def safe_output(members: list[int]) -> bool:
        """The fused loop writes only the last result, while it still reads the sources: the
        planner may have placed that result over a source that died in between (unfused,
        it was read in full first), so no source may share its memory unless it is the same
        buffer read element for element."""
        out = instrs[members[-1]].operands[0]
        results = {id(instrs[i].operands[0]) for i in members[:-1]}
        region, start, end = _placement(out)
        for i in members:
            for source in instrs[i].operands[1:]:
                if source is None or id(source) in results:
                    continue
                other, s0, s1 = _placement(source)
                if other is not region or s1 <= start or end <= s0:
                    continue
                if not (source is out or (s0 == start and source.type == out.type)):
                    return False
        return True

    for pos, index in enumerate(compute):
        if current:
            prev = current[-1]
            between = instrs[prev + 1:index] + instrs[index + 1:compute[pos + 1] if pos + 1 < len(compute) else len(instrs)]
            if (joinable(instrs[prev], instrs[index], [m for m in between if m.name == DEALLOC])
                    and safe_output(current + [index])):
                current.append(index)
                continue
            if len(current) > 1:
                chains[current[0]] = current
        current = [index] if instrs[index].name in EXPRESSIONS else []
    if len(current) > 1:
        chains[current[0]] = current
    return chains


def _make(expr: Expr):
    return lambda em, instr: emit_elementwise(em, instr, expr)


EXPRESSIONS: dict[str, Expr] = {**UNARY, **BINARY, "Expand": lambda a, t, attrs: a[0]}

for _name, _expr in {**UNARY, **BINARY}.items():
    kernel(_name)(_make(_expr))


@kernel("Expand")
def emit_expand(em, instr: Instr) -> str:
    return emit_elementwise(em, instr, lambda a, t, attrs: a[0])
