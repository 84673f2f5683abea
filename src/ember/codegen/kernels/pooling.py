"""Pooling over any number of spatial axes, as loop nests specialized on the constant shapes:
MaxPool and AveragePool beyond 2-D (1-D, 3-D, ...; the 2-D ones are conv.py's), LpPool,
MaxPool with its Indices output (MaxPoolWithIndices) and MaxUnpool.

One output element per iteration of the outer loops (images x channels, then the output
positions), one window cell per iteration of the inner ones. Every attribute arrives
resolved (ops/nn.py PoolAttrs): explicit pads (auto_pad and ceil_mode already decided the
output size; a ceil-mode window may run past the end pad), strides, dilations,
count_include_pad. Padding cells are skipped (max, sum) or read as the lowest value
(MaxPoolWithIndices, whose index of an all-padding window is the clipped first cell, as in
the NumPy reference)."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ember.codegen.c_types import c_type, lowest
from ember.codegen.emitter import Emitter, param, threads_pragma
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, contiguous_strides
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr


class Window:
    """The window geometry of one pooling instruction over x [N, C, *dims]."""

    def __init__(self, attrs, x_shape: Sequence[int], out_shape: Sequence[int]) -> None:
        self.items = x_shape[0] * x_shape[1]
        self.dims, self.out_dims = tuple(x_shape[2:]), tuple(out_shape[2:])
        n = len(self.dims)
        self.kernel, self.strides, self.dilations = tuple(attrs.kernel), tuple(attrs.strides), tuple(attrs.dilations)
        self.begins, self.ends = tuple(attrs.pads[:n]), tuple(attrs.pads[n:])
        self.volume, self.out_volume = math.prod(self.dims), math.prod(self.out_dims)

    def work(self) -> int:
        return self.items * self.out_volume * math.prod(self.kernel)

    def coordinate(self, axis: int) -> str:
        """The input coordinate of window cell t{axis} of output position o{axis}."""
        return (f"o{axis} * {self.strides[axis]} - {self.begins[axis]} + t{axis} * {self.dilations[axis]}")

    def offset(self, names: Sequence[str], dims: Sequence[int]) -> str:
        terms = [f"{name} * {stride}" for name, stride in zip(names, contiguous_strides(dims), strict=True)]
        return " + ".join(terms) or "0"

    def included(self, axis: int) -> str:
        """How many cells of the window along `axis` lie inside the input plus its explicit
        pads (count_include_pad; a ceil-mode overhang past the end pad does not count)."""
        span, step = self.dims[axis] + self.begins[axis] + self.ends[axis], self.dilations[axis]
        first = f"o{axis} * {self.strides[axis]}"
        return (f"({first} >= {span} ? 0L : ({span} - 1 - {first}) / {step} + 1 < {self.kernel[axis]} ? "
                f"({span} - 1 - {first}) / {step} + 1 : {self.kernel[axis]}L)")


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    x = instr.operand(2 if instr.name == "MaxPoolWithIndices" else 1)
    window = Window(instr.attrs, x.type.shape, instr.operand(0).type.shape)
    return KernelPlan({"threads": threads_for(options.num_threads, window.work())})


def _loops(em: Emitter, instr: Instr, window: Window, *, setup: list[str], init: list[str], cell: list[str],
           finish: list[str], skip_padding: bool = True) -> str:
    """The loop nest: `setup` once, per output element `init`, per window cell `cell` (with
    `val` the cell's value when skip_padding, else `inside` saying whether it is in the input
    and `at` its offset, clipped into it), then `finish` (with `o` the output offset)."""
    n = len(window.dims)
    lines = list(setup)
    if int(param(instr, "threads", 1)) > 1:
        lines.append(f"#pragma omp parallel for {threads_pragma(instr)} schedule(static)")
    lines.append(f"for (long item = 0; item < {window.items}; item++) {{")
    lines.append(f"    const val_t *xc = x + item * {window.volume};")
    depth = 1
    for axis in range(n):
        lines.append("    " * depth + f"for (long o{axis} = 0; o{axis} < {window.out_dims[axis]}; o{axis}++)")
    lines.append("    " * depth + "{")
    depth += 1
    lines += ["    " * depth + s for s in init]
    for axis in range(n):
        pad = "    " * depth
        lines.append(pad + f"for (long t{axis} = 0; t{axis} < {window.kernel[axis]}; t{axis}++) {{")
        lines.append(pad + f"    long i{axis} = {window.coordinate(axis)};")
        if skip_padding:
            lines.append(pad + f"    if (i{axis} < 0 || i{axis} >= {window.dims[axis]}) continue;")
        else:
            lines.append(pad + f"    int in{axis} = i{axis} >= 0 && i{axis} < {window.dims[axis]};")
            lines.append(pad + f"    long c{axis} = i{axis} < 0 ? 0 : (i{axis} >= {window.dims[axis]} ? "
                               f"{window.dims[axis] - 1} : i{axis});")
        depth += 1
    pad = "    " * depth
    if skip_padding:
        lines.append(pad + f"val_t val = xc[{window.offset([f'i{a}' for a in range(n)], window.dims)}];")
    else:
        inside = " && ".join(f"in{a}" for a in range(n)) or "1"
        lines.append(pad + f"int inside = {inside};")
        lines.append(pad + f"long at = {window.offset([f'c{a}' for a in range(n)], window.dims)};")
    lines += [pad + s for s in cell]
    for _ in range(n):
        depth -= 1
        lines.append("    " * depth + "}")
    out_offset = window.offset([f"o{a}" for a in range(n)], window.out_dims)
    lines.append("    " * depth + f"long o = item * {window.out_volume} + {out_offset};")
    lines += ["    " * depth + s for s in finish]
    lines += ["    }", "}"]
    return "\n".join(lines)


# MaxPool, AveragePool (any spatial rank: the 2-D ones select conv.py's kernels, registered
# first) ---------------------------------------------------------------------------------


@C_KERNELS.kernel("maxpool_nd_loops", "MaxPool", plan=_plan)
def emit_maxpool_nd(em: Emitter, instr: Instr) -> str:
    out, x = instr.operand(0), instr.operand(1)
    window = Window(instr.attrs, x.type.shape, out.type.shape)
    dtype = x.type.dtype
    t = c_type(dtype)
    nan = "val != val || " if dtype.is_float else ""
    return _loops(em, instr, window,
                  setup=[f"typedef {t} val_t;", f"const {t} *x = {em.pointer(x, const=True)};",
                         f"{t} *y = {em.pointer(out)};"],
                  init=[f"{t} acc = {lowest(dtype)};"], cell=[f"if ({nan}val > acc) acc = val;"],
                  finish=["y[o] = acc;"])


@C_KERNELS.kernel("avgpool_nd_loops", "AveragePool", plan=_plan)
def emit_avgpool_nd(em: Emitter, instr: Instr) -> str:
    """Sums in double; the count is of the cells inside the input (or inside input and
    explicit pads with count_include_pad). A window with none gives 0 / 0 (NaN), as the
    reference does."""
    out, x = instr.operand(0), instr.operand(1)
    attrs = instr.attrs
    window = Window(attrs, x.type.shape, out.type.shape)
    dtype = out.type.dtype
    t = c_type(dtype)
    empty = "NAN" if dtype.is_float else "0.0"
    if attrs.count_include_pad:
        count = " * ".join(window.included(a) for a in range(len(window.dims))) or "1L"
        finish = [f"long n_ = {count};", f"y[o] = ({t})(n_ ? acc / (double)n_ : {empty});"]
    else:
        finish = [f"y[o] = ({t})(count ? acc / (double)count : {empty});"]
    return _loops(em, instr, window,
                  setup=[f"typedef {t} val_t;", f"const {t} *x = {em.pointer(x, const=True)};",
                         f"{t} *y = {em.pointer(out)};"],
                  init=["double acc = 0.0;", "long count = 0; (void)count;"], cell=["acc += val; count++;"],
                  finish=finish)


# LpPool ----------------------------------------------------------------------------------


@C_KERNELS.kernel("lppool_loops", "LpPool", plan=_plan)
def emit_lppool(em: Emitter, instr: Instr) -> str:
    """(sum over the window of |x|^p)^(1/p) in double; padding adds nothing."""
    out, x = instr.operand(0), instr.operand(1)
    attrs = instr.attrs
    window = Window(attrs, x.type.shape, out.type.shape)
    t = c_type(out.type.dtype)
    p = attrs.p
    power = {1: "fabs((double)val)", 2: "(double)val * (double)val",
             3: "fabs((double)val) * (double)val * (double)val"}.get(p, f"pow(fabs((double)val), {float(p)!r})")
    root = {1: "acc", 2: "sqrt(acc)"}.get(p, f"pow(acc, 1.0 / {float(p)!r})")
    return _loops(em, instr, window,
                  setup=[f"typedef {t} val_t;", f"const {t} *x = {em.pointer(x, const=True)};",
                         f"{t} *y = {em.pointer(out)};"],
                  init=["double acc = 0.0;"], cell=[f"acc += {power};"], finish=[f"y[o] = ({t}){root};"])


# MaxPoolWithIndices ----------------------------------------------------------------------


@C_KERNELS.kernel("maxpool_indices_loops", "MaxPoolWithIndices", plan=_plan)
def emit_maxpool_indices(em: Emitter, instr: Instr) -> str:
    """The first maximum of each window in row-major scan order, padding read as the lowest
    value, and its offset in the whole input (storage_order 1: the spatial part column-major).
    A NaN is the maximum from where it first appears."""
    y, indices, x = instr.operand(0), instr.operand(1), instr.operand(2)
    attrs = instr.attrs
    window = Window(attrs, x.type.shape, y.type.shape)
    dtype = x.type.dtype
    t = c_type(dtype)
    n = len(window.dims)
    if attrs.storage_order:
        reversed_dims = tuple(reversed(window.dims))
        position = window.offset([f"c{a}" for a in reversed(range(n))], reversed_dims)
    else:
        position = window.offset([f"c{a}" for a in range(n)], window.dims)
    better = "best == best && (v != v || v > best)" if dtype.is_float else "v > best"
    return _loops(em, instr, window, skip_padding=False,
                  setup=[f"typedef {t} val_t;", f"const {t} *x = {em.pointer(x, const=True)};",
                         f"{t} *y = {em.pointer(y)};",
                         f"int64_t *idx = {em.pointer(indices)};"],
                  init=[f"{t} best = {lowest(dtype)};", "int64_t where = -1;"],
                  cell=[f"{t} v = inside ? xc[at] : {lowest(dtype)};",
                        f"if (where < 0 || ({better})) {{ best = v; where = {position}; }}"],
                  finish=["y[o] = best;", f"idx[o] = item * {window.volume} + where;"])


# MaxUnpool -------------------------------------------------------------------------------


@C_KERNELS.kernel("maxunpool_loops", "MaxUnpool")
def emit_max_unpool(em: Emitter, instr: Instr) -> str:
    """Zeros, then each value at its index: indices address the default-shaped result
    [N, C, (in - 1) * stride + kernel - pads], which sits at the start of the output. Every
    index is checked before anything is written; a repeated index keeps the last value."""
    out, x, indices = instr.operand(0), instr.operand(1), instr.operand(2)
    attrs = instr.attrs
    inner = tuple(x.type.shape[:2]) + attrs.default_dims(x.type.shape[2:])
    size = math.prod(inner)
    count = math.prod(x.type.shape)
    t = c_type(out.type.dtype)
    fail = em.fail_check(f"node {instr.source!r} (MaxUnpool): index out of range [0, {size})")
    lines = [f"const {t} *x = {em.pointer(x, const=True)};", f"const int64_t *idx = {em.pointer(indices, const=True)};",
             f"{t} *y = {em.pointer(out)};",
             f"for (long j = 0; j < {count}; j++) if (idx[j] < 0 || idx[j] >= {size}) {fail}",
             f"memset(y, 0, {out.type.nbytes});"]
    if inner == tuple(out.type.shape):
        lines.append(f"for (long j = 0; j < {count}; j++) y[idx[j]] = x[j];")
        return "\n".join(lines)
    # Re-address into the larger output: decompose the inner offset per axis.
    lines.append(f"for (long j = 0; j < {count}; j++) {{")
    lines.append("    int64_t rest = idx[j], at = 0;")
    out_strides = contiguous_strides(out.type.shape)
    for axis in range(len(inner) - 1, -1, -1):
        lines.append(f"    at += (rest % {inner[axis]}) * {out_strides[axis]}; rest /= {inner[axis]};")
    lines += ["    y[at] = x[j];", "}"]
    return "\n".join(lines)
