"""Convolution and pooling kernels (NCHW).

Conv runs as GEMM per group: A = the weights, packed at compile time into 8-row blocks
[M/8][K][8]; B = im2col of 32 output pixels at a time, packed per thread straight into the
panel layout (no full im2col buffer). Bias, residual and activation run in the tile epilogue.
Depthwise convolution (one input and one output channel per group) has its own direct
kernel with per-tap loop bounds computed at compile time, so the inner loops carry no
bounds checks."""
from __future__ import annotations

import math

import numpy as np

from ember.codegen.c_types import c_type, lowest
from ember.codegen.kernels.gemm import MR, NR, PARALLEL_MIN_MACS, Epilogue
from ember.codegen.kernels.registry import kernel
from ember.lir.ir import BufferKind, Instr
from ember.ops.fused import FusedConvAttrs
from ember.support.errors import UnsupportedError
from ember.types import DType


def pack_rows(w: np.ndarray) -> np.ndarray:
    """[M, K] -> [ceil(M/8), K, 8] zero-padded: the A layout the tile reads with strides (1, 8)."""
    m, k = w.shape
    blocks = math.ceil(m / MR)
    padded = np.zeros((blocks * MR, k), np.float32)
    padded[:m] = w
    return np.ascontiguousarray(padded.reshape(blocks, MR, k).transpose(0, 2, 1))


def _conv_parts(instr: Instr):
    out, x, w, b = instr.operands[:4]
    residual = instr.operands[4] if len(instr.operands) > 4 else None
    attrs = instr.attrs
    if isinstance(attrs, FusedConvAttrs):
        epilogue = (attrs.activation, attrs.alpha, attrs.beta)
        conv = attrs.conv
    else:
        epilogue = ("none", 0.0, 0.0)
        conv = attrs
    return out, x, w, b, residual, conv, epilogue


@kernel("Conv", "FusedConv")
def emit_conv(em, instr: Instr) -> str:
    out, x, w, b, residual, conv, (act, alpha, beta) = _conv_parts(instr)
    if out.type.dtype is not DType.FLOAT32 or x.type.rank != 4:
        raise UnsupportedError(f"node '{instr.source}': the C backend runs 2-D float32 convolutions only")
    if w.kind is not BufferKind.WEIGHT:
        raise UnsupportedError(f"node '{instr.source}': the C backend needs constant convolution weights")
    n_batch, channels, height, width = x.type.shape
    out_channels, cg, kh, kw = w.type.shape
    groups = conv.group
    oh, ow = out.type.shape[2:]
    if cg == 1 and out_channels == groups:
        return _depthwise(em, instr, out, x, w, b, residual, conv, act, alpha, beta)
    mg = out_channels // groups
    k = cg * kh * kw
    pixels = oh * ow
    panels = math.ceil(pixels / NR)
    packed = np.stack([pack_rows(w.data[g * mg:(g + 1) * mg].reshape(mg, k).astype(np.float32))
                       for g in range(groups)])
    a = em.packed_weight(w, "conv_rows8", packed)
    group_a = packed[0].size
    em.need_scratch(k * NR * 4)
    pointwise = kh == kw == 1 and conv.strides == (1, 1) and conv.pads == (0, 0, 0, 0)
    epilogue = Epilogue(bias="b_" if b is not None else "NULL", bias_per_row=True,
                        residual="r_" if residual is not None else "NULL", ld_residual=pixels,
                        activation=act, alpha=alpha, beta=beta)
    (sh, sw), (dh, dw) = conv.strides, conv.dilations
    pt, pl = conv.pads[0], conv.pads[1]
    items = n_batch * groups * panels
    threads = em.num_threads > 1 and items > 1 and out_channels * pixels * k >= PARALLEL_MIN_MACS
    lines = [
        f"const float *x = {em.pointer(x, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"const float *bias = {em.pointer(b, const=True) if b is not None else 'NULL'};",
        f"const float *res = {em.pointer(residual, const=True) if residual is not None else 'NULL'};",
        "(void)bias; (void)res;",
    ]
    if threads:
        lines.append(f"#pragma omp parallel for {em.threads_pragma} schedule(static)")
    lines.append(f"for (long item = 0; item < {items}; item++) {{")
    body = [
        f"long nb = item / {groups * panels}, g = (item / {panels}) % {groups}, p = item % {panels};",
        f"const float *xg = x + nb * {channels * height * width} + g * {cg * height * width};",
        f"float *yg = y + nb * {out_channels * pixels} + g * {mg * pixels};",
        f"const float *b_ = bias ? bias + g * {mg} : NULL; (void)b_;",
        f"const float *r_ = res ? res + nb * {out_channels * pixels} + g * {mg * pixels} : NULL; (void)r_;",
        epilogue.c_init(),
        f"float *bp = (float *)(S + (long)omp_get_thread_num() * {em.scratch_stride_expr()});",
        f"long col0 = p * {NR};",
        f"int ncols = {pixels} - col0 < {NR} ? (int)({pixels} - col0) : {NR};",
    ]
    if pointwise:
        body.append(f"ember_pack_panel(bp, xg, {pixels}, {k}, {pixels}, col0);")
    else:
        body += [
            f"long ih0[{NR}], iw0[{NR}];",
            f"for (int j = 0; j < {NR}; j++) {{",
            f"    long q = col0 + j < {pixels} ? col0 + j : {pixels - 1};",
            f"    ih0[j] = (q / {ow}) * {sh} - {pt}; iw0[j] = (q % {ow}) * {sw} - {pl};",
            "}",
            f"for (long c = 0; c < {cg}; c++)",
            f"for (long u = 0; u < {kh}; u++)",
            f"for (long v = 0; v < {kw}; v++) {{",
            f"    float *dst = bp + ((c * {kh} + u) * {kw} + v) * {NR};",
            f"    const float *src = xg + c * {height * width};",
            f"    for (int j = 0; j < {NR}; j++) {{",
            f"        long ih = ih0[j] + u * {dh}, iw = iw0[j] + v * {dw};",
            f"        dst[j] = (j < ncols && ih >= 0 && ih < {height} && iw >= 0 && iw < {width}) "
            f"? src[ih * {width} + iw] : 0.0f;",
            "    }",
            "}",
        ]
    body += [
        f"const float *ag = {a} + g * {group_a};",
        f"for (long r = 0; r < {mg}; r += {MR}) {{",
        f"    int mr = {mg} - r < {MR} ? (int)({mg} - r) : {MR};",
        f"    ember_tile_rows(mr, {k}, ag + r * {k}, 1, {MR}, bp, yg + r * {pixels} + col0, {pixels}, ncols, &ep, r, col0);",
        "}",
    ]
    lines += ["    " + line for line in body]
    lines.append("}")
    return "\n".join(lines)


def _valid_range(out_size: int, in_size: int, stride: int, pad: int, offset: int) -> tuple[int, int]:
    """Outputs o with 0 <= o*stride - pad + offset < in_size, as [lo, hi)."""
    lo = max(0, -(-(pad - offset) // stride))
    hi = min(out_size, (in_size - 1 + pad - offset) // stride + 1)
    return lo, max(lo, hi)


def _depthwise(em, instr, out, x, w, b, residual, conv, act, alpha, beta) -> str:
    n_batch, channels, height, width = x.type.shape
    _, _, kh, kw = w.type.shape
    oh, ow = out.type.shape[2:]
    (sh, sw), (dh, dw) = conv.strides, conv.dilations
    pt, pl = conv.pads[0], conv.pads[1]
    items = n_batch * channels
    threads = em.num_threads > 1 and items > 1 and items * oh * ow * kh * kw >= PARALLEL_MIN_MACS // 4
    lines = [
        f"const float *x = {em.pointer(x, const=True)};",
        f"const float *w = {em.pointer(w, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"const float *bias = {em.pointer(b, const=True) if b is not None else 'NULL'};",
        f"const float *res = {em.pointer(residual, const=True) if residual is not None else 'NULL'};",
        "(void)bias; (void)res;",
        Epilogue(activation=act, alpha=alpha, beta=beta).c_init(),
    ]
    if threads:
        lines.append(f"#pragma omp parallel for {em.threads_pragma} schedule(static)")
    lines.append(f"for (long item = 0; item < {items}; item++) {{")
    body = [
        f"long c = item % {channels};",
        f"const float *xc = x + item * {height * width};",
        f"float *yc = y + item * {oh * ow};",
        f"const float *wc = w + c * {kh * kw};",
        "float b0 = bias ? bias[c] : 0.0f;",
        f"for (long o = 0; o < {oh * ow}; o++) yc[o] = b0;",
    ]
    for u in range(kh):
        hlo, hhi = _valid_range(oh, height, sh, pt, u * dh)
        if hlo >= hhi:
            continue
        for v in range(kw):
            wlo, whi = _valid_range(ow, width, sw, pl, v * dw)
            if wlo >= whi:
                continue
            body += [
                f"{{ float wv = wc[{u * kw + v}];",
                f"  for (long i = {hlo}; i < {hhi}; i++) {{",
                f"    const float *xr = xc + (i * {sh} - {pt} + {u * dh}) * {width} + ({v * dw} - {pl});",
                f"    float *yr = yc + i * {ow};",
                f"    for (long j = {wlo}; j < {whi}; j++) yr[j] += wv * xr[j * {sw}];",
                "  } }",
            ]
    body.append(f"const float *rc = res ? res + item * {oh * ow} : NULL;")
    body.append(f"for (long o = 0; o < {oh * ow}; o++) {{ float v = yc[o]; if (rc) v += rc[o]; "
                "yc[o] = ember_activate(v, &ep); }")
    lines += ["    " + line for line in body]
    lines.append("}")
    return "\n".join(lines)


def _pool_loops(em, instr: Instr, init: str, accumulate: str, finish) -> str:
    out, x = instr.operands
    attrs = instr.attrs
    if x.type.rank != 4:
        raise UnsupportedError(f"node '{instr.source}': the C backend runs 2-D pooling only")
    n_batch, channels, height, width = x.type.shape
    oh, ow = out.type.shape[2:]
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilations
    pt, pl = attrs.pads[0], attrs.pads[1]
    t = c_type(x.type.dtype)
    items = n_batch * channels
    lines = [f"const {t} *x = {em.pointer(x, const=True)};", f"{t} *y = {em.pointer(out)};"]
    if em.num_threads > 1 and items * oh * ow * kh * kw >= PARALLEL_MIN_MACS:
        lines.append(f"#pragma omp parallel for {em.threads_pragma} schedule(static)")
    lines += [
        f"for (long item = 0; item < {items}; item++)",
        f"for (long i = 0; i < {oh}; i++)",
        f"for (long j = 0; j < {ow}; j++) {{",
        f"    const {t} *xc = x + item * {height * width};",
        f"    {init}",
        f"    long count = 0; (void)count;",
        f"    for (long u = 0; u < {kh}; u++) {{",
        f"        long ih = i * {sh} - {pt} + u * {dh};",
        f"        if (ih < 0 || ih >= {height}) continue;",
        f"        for (long v = 0; v < {kw}; v++) {{",
        f"            long iw = j * {sw} - {pl} + v * {dw};",
        f"            if (iw < 0 || iw >= {width}) continue;",
        f"            {t} val = xc[ih * {width} + iw];",
        f"            {accumulate}",
        "        }",
        "    }",
        f"    y[(item * {oh} + i) * {ow} + j] = {finish(out)};",
        "}",
    ]
    return "\n".join(lines)


@kernel("MaxPool")
def emit_maxpool(em, instr: Instr) -> str:
    t = instr.operands[1].type.dtype
    nan = "val != val || " if t.is_float else ""
    return _pool_loops(em, instr, f"{c_type(t)} acc = {lowest(t)};", f"if ({nan}val > acc) acc = val;",
                       lambda out: "acc")


@kernel("AveragePool")
def emit_avgpool(em, instr: Instr) -> str:
    attrs = instr.attrs
    out = instr.operands[0]
    t = out.type.dtype
    if attrs.count_include_pad:
        # Cells inside input + explicit pads count; ceil-mode overhang beyond the pads does not.
        (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilations
        height, width = instr.operands[1].type.shape[2:]
        pt, pl, pb, pr = attrs.pads
        counts = (
            f"(double)(({{ long n_ = 0; for (long u = 0; u < {kh}; u++) {{ long ih = i * {sh} - {pt} + u * {dh}; "
            f"if (ih < -{pt} || ih >= {height + pb}) continue; for (long v = 0; v < {kw}; v++) {{ "
            f"long iw = j * {sw} - {pl} + v * {dw}; if (iw >= -{pl} && iw < {width + pr}) n_++; }} }} n_; }}))"
        )
        finish = lambda o: f"({c_type(t)})(acc / {counts})"  # noqa: E731
    else:
        finish = lambda o: f"({c_type(t)})(count ? acc / count : 0.0)"  # noqa: E731
    return _pool_loops(em, instr, "double acc = 0.0;", "acc += val; count++;", finish)


@kernel("ArgMax", "ArgMin")
def emit_arg_reduce(em, instr: Instr) -> str:
    out, x = instr.operands
    attrs = instr.attrs
    shape = x.type.shape
    axis = attrs.axis % len(shape)
    outer = math.prod(shape[:axis])
    n = shape[axis]
    inner = math.prod(shape[axis + 1:])
    t = c_type(x.type.dtype)
    better = ">" if instr.name == "ArgMax" else "<"
    if attrs.select_last_index:
        better += "="
    return "\n".join([
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"int64_t *y = {em.pointer(out)};",
        f"for (long o = 0; o < {outer}; o++) for (long i = 0; i < {inner}; i++) {{",
        f"    const {t} *row = x + o * {n * inner} + i;",
        f"    {t} best = row[0]; int64_t at = 0;",
        f"    for (long j = 1; j < {n}; j++) if (row[j * {inner}] {better} best) {{ best = row[j * {inner}]; at = j; }}",
        f"    y[o * {inner} + i] = at;",
        "}",
    ])


