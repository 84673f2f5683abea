"""C for a whole GRU layer from the ISA mapper's kernels: what "the mapped kernel of a GRU"
means here. A GRU's compute is two GEMMs (kernels.py's input-gates and recurrent-gates, viewed
as plain matrix products):

- the input projection of every step at once, XW[t*batch + b, g] = X[t, b, :] . W[g, :]
  (M = seq x batch, N = 3 x hidden, K = inputs), W packed at compile time;
- per step the recurrent projection HR[b, g] = H[b, :] . R[g, :] (M = batch, N = 3 x hidden,
  K = hidden), R packed at compile time; a step depends on the previous one, so this GEMM runs
  seq times with M = batch (1 or 4 for DeepBench's inference sizes: matrix-vector-like,
  bound by streaming R).

Each is mapped, scheduled and emitted by emit_c as a GEMM of its own (a translation unit of its
own); a driver unit runs them and the gate arithmetic between steps (ONNX's GRU, gates z, r, h).
With linear_before_reset = 1 (cuDNN's and DeepBench's GRU) each step's recurrent product is ONE
GEMM of N = 3 x hidden: h~ = tanh(XW_h + Wb_h + r * (HR_h + Rb_h)). With 0 (ONNX's default)
the reset gate multiplies the state before its product, h~ = tanh(XW_h + Wb_h + (r * H) R_h^T +
Rb_h): two recurrent GEMMs per step, N = 2 x hidden (z, r) and N = hidden (h~ from r * H).
The gates use ember_math.h's sigmoid and tanh (the cpu backend's formulas, so only the GEMMs
differ from its GRU): the driver includes it by name, and the caller builds with that header's
folder on the include path. The first step's products with a zero initial state are skipped
(they are zero).

Forward, one direction, default activations, no clip or sequence lengths: other GRUs are
refused. Imports isa.* and support/."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ember.isa.describe import Target
from ember.isa.emit_c import GemmCode, emit_gemm
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel
from ember.isa.report import choose
from ember.isa.schedule import Schedule
from ember.support.errors import UnsupportedError


@dataclass(frozen=True)
class GruCode:
    """`void {name}(const float *X, const float *Wp, const float *Rp, const float *bias,
    const float *h0, float *Y, float *workspace)`: X [seq][batch][inputs], Wp and Rp from
    pack(), bias [6 x hidden] (ONNX's B: Wb then Rb), h0 [batch][hidden] or NULL for zeros,
    Y [seq][batch][hidden] (ONNX's Y with one direction; its last step is Y_h), workspace of
    workspace_elements floats. sources: file name -> C, compiled together into one library.
    recurrent_gemm: the per-step product with R (all three gates, or z and r when
    reset_gemm, the product of r * H with R_h, is there: linear_before_reset = 0)."""

    name: str
    sources: tuple[tuple[str, str], ...]
    seq: int
    batch: int
    inputs: int
    hidden: int
    input_gemm: GemmCode
    recurrent_gemm: GemmCode
    reset_gemm: GemmCode | None
    schedules: tuple[Schedule, ...]
    flags: str

    @property
    def linear_before_reset(self) -> bool:
        return self.reset_gemm is None

    @property
    def workspace_elements(self) -> int:
        gates, state = 3 * self.hidden, self.batch * self.hidden
        gemms = [self.input_gemm, self.recurrent_gemm] + ([self.reset_gemm] if self.reset_gemm else [])
        # input gates of every step, one step's recurrent gates, without linear_before_reset the
        # step's z, r * H and its product with R_h; then the GEMMs' workspace (one at a time)
        return (self.seq * self.batch * gates + self.batch * self.recurrent_gemm.n
                + (0 if self.reset_gemm is None else 3 * state) + max(g.workspace_elements for g in gemms))

    @property
    def gemm_flops(self) -> int:
        """Multiply-adds x 2 of the GEMMs over the whole sequence (the gates left out)."""
        return 2 * self.seq * self.batch * 3 * self.hidden * (self.inputs + self.hidden)

    def pack(self, w: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """W [3 hidden, inputs] and R [3 hidden, hidden] (one direction of ONNX's W and R),
        packed for the GEMMs (R's two parts one after the other without linear_before_reset):
        done once, at compile time."""
        if self.reset_gemm is None:
            return self.input_gemm.pack_b(w), self.recurrent_gemm.pack_b(r)
        r = np.asarray(r)
        split = 2 * self.hidden
        return self.input_gemm.pack_b(w), np.concatenate([self.recurrent_gemm.pack_b(r[:split]).ravel(),
                                                          self.reset_gemm.pack_b(r[split:]).ravel()])

    def summary(self) -> str:
        gemms = [("input gates", self.input_gemm, 1), ("recurrent gates", self.recurrent_gemm, self.seq)]
        if self.reset_gemm is not None:
            gemms.append(("reset state", self.reset_gemm, self.seq))
        parts = [f"{label} {g.m}x{g.n}x{g.k}{f' x {times} steps' if times > 1 else ''} on "
                 f"{schedule.mapping.instruction.name} ({g.summary()})"
                 for (label, g, times), schedule in zip(gemms, self.schedules, strict=True)]
        return (f"GRU seq {self.seq}, batch {self.batch}, hidden {self.hidden}, linear_before_reset "
                f"{int(self.linear_before_reset)}: " + "; ".join(parts))


def _gemm(name: str, m: int, n: int, k: int, repeat: int = 1) -> Kernel:
    return Kernel(name, parse_expr(f"C[i, j]:f32 += A[i, k]:f32 * B[j, k]:f32 over i:{m}, j:{n}, k:{k}"),
                  repeat=repeat, constants=frozenset({"B"}))


def gru_kernels(seq: int, batch: int, inputs: int, hidden: int, linear_before_reset: bool = True
                ) -> tuple[Kernel, ...]:
    """The GRU's GEMMs as 2-D kernels, weights read transposed as ONNX stores them: the input
    gates, then the recurrent ones (two without linear_before_reset)."""
    for label, value in (("seq", seq), ("batch", batch), ("inputs", inputs), ("hidden", hidden)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UnsupportedError(f"mapped GRU: {label} must be a positive integer, got {value!r}")
    gates = 3 * hidden
    if linear_before_reset:
        return _gemm("input-gates", seq * batch, gates, inputs), _gemm("recurrent-gates", batch, gates, hidden, seq)
    return (_gemm("input-gates", seq * batch, gates, inputs), _gemm("recurrent-gates", batch, 2 * hidden, hidden, seq),
            _gemm("reset-state-gates", batch, hidden, hidden, seq))


def emit_gru(target: Target, seq: int, batch: int, inputs: int, hidden: int, *, linear_before_reset: bool = True,
             name: str = "mapped_gru") -> GruCode:
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise UnsupportedError(f"mapped GRU: the function name {name!r} is not a C identifier")
    schedules = []
    for kernel in gru_kernels(seq, batch, inputs, hidden, linear_before_reset):
        best = choose(kernel, target)
        if best is None:
            raise UnsupportedError(f"mapped GRU: no instruction of {target.name} maps its {kernel.name} GEMM")
        schedules.append(best)
    codes = [emit_gemm(s, name=f"{name}_{suffix}") for s, suffix in zip(schedules, ("xw", "hr", "hh"), strict=False)]
    xw, hr = codes[0], codes[1]
    hh = codes[2] if len(codes) > 2 else None
    driver = _driver(name, seq, batch, hidden, codes, target.name)
    sources = tuple((f"{code.name}.c", code.source) for code in codes) + ((f"{name}.c", driver),)
    return GruCode(name, sources, seq, batch, inputs, hidden, xw, hr, hh, tuple(schedules), target.c_flags)


def _driver(name: str, seq: int, batch: int, hidden: int, codes: list[GemmCode], target: str) -> str:
    gates, state = 3 * hidden, batch * hidden
    xw, hr = codes[0], codes[1]
    hh = codes[2] if len(codes) > 2 else None
    z_in = f"x[j] + bias[j] + q[j] + bias[{gates} + j]"
    r_in = f"x[{hidden} + j] + bias[{hidden} + j] + q[{hidden} + j] + bias[{gates + hidden} + j]"
    lines = [
        f"/* Generated by ember.isa.emit_rnn for {target}: a GRU (seq {seq}, batch {batch}, hidden {hidden},",
        f" * gates z, r, h, linear_before_reset = {int(hh is None)}) from {len(codes)} mapped GEMMs and the gate "
        "arithmetic. */",
        "#include <string.h>",
        '#include "ember_math.h"',
        "",
        *[f"void {code.name}(const float *A, const float *Bp, float *C, float *workspace);" for code in codes],
        "",
        f"void {name}(const float *X, const float *Wp, const float *Rp, const float *bias, const float *h0,",
        "             float *Y, float *workspace) {",
        f"    float *xw = workspace;                  /* [{seq * batch}][{gates}]: every step's input gates */",
        f"    float *hr = xw + {seq * batch * gates}L;  /* [{batch}][{hr.n}]: one step's recurrent gates */",
        f"    float *work = hr + {batch * hr.n}L;",
    ]
    if hh is not None:
        lines += [
            f"    float *zs = work, *rh = zs + {state}L, *hh = rh + {state}L;  /* z, r * H, (r * H) R_h^T */",
            f"    work = hh + {state}L;",
            f"    const float *Rh = Rp + {hr.panels * hr.k_padded * hr.nr}L;",
        ]
    lines += [
        f"    {xw.name}(X, Wp, xw, work);",
        f"    for (long t = 0; t < {seq}; t++) {{",
        f"        const float *h = t ? Y + (t - 1) * {state}L : h0;",
        f"        if (h) {hr.name}(h, Rp, hr, work);",
        f"        else memset(hr, 0, sizeof(float) * {batch * hr.n});",
        f"        float *y = Y + t * {state}L;",
    ]
    if hh is None:
        lines += [
            f"        for (long b = 0; b < {batch}; b++) {{",
            f"            const float *x = xw + (t * {batch} + b) * {gates}L, *q = hr + b * {gates}L;",
            f"            const float *prev = h ? h + b * {hidden}L : 0;",
            f"            float *out = y + b * {hidden}L;",
            f"            for (long j = 0; j < {hidden}; j++) {{",
            f"                float z = ember_sigmoidf({z_in});",
            f"                float r = ember_sigmoidf({r_in});",
            f"                float n = ember_tanhf(x[{2 * hidden} + j] + bias[{2 * hidden} + j]"
            f" + r * (q[{2 * hidden} + j] + bias[{gates + 2 * hidden} + j]));",
            "                out[j] = (1.0f - z) * n + z * (prev ? prev[j] : 0.0f);",
            "            }",
            "        }",
            "    }",
            "}",
            "",
        ]
        return "\n".join(lines)
    lines += [
        f"        for (long b = 0; b < {batch}; b++) {{",
        f"            const float *x = xw + (t * {batch} + b) * {gates}L, *q = hr + b * {2 * hidden}L;",
        f"            const float *prev = h ? h + b * {hidden}L : 0;",
        f"            for (long j = 0; j < {hidden}; j++) {{",
        f"                zs[b * {hidden} + j] = ember_sigmoidf({z_in});",
        f"                rh[b * {hidden} + j] = ember_sigmoidf({r_in}) * (prev ? prev[j] : 0.0f);",
        "            }",
        "        }",
        f"        if (h) {hh.name}(rh, Rh, hh, work);",
        f"        else memset(hh, 0, sizeof(float) * {state});",
        f"        for (long b = 0; b < {batch}; b++) {{",
        f"            const float *x = xw + (t * {batch} + b) * {gates}L;",
        f"            const float *prev = h ? h + b * {hidden}L : 0;",
        f"            float *out = y + b * {hidden}L;",
        f"            for (long j = 0; j < {hidden}; j++) {{",
        f"                float n = ember_tanhf(x[{2 * hidden} + j] + bias[{2 * hidden} + j] + hh[b * {hidden} + j]"
        f" + bias[{gates + 2 * hidden} + j]);",
        f"                float z = zs[b * {hidden} + j];",
        "                out[j] = (1.0f - z) * n + z * (prev ? prev[j] : 0.0f);",
        "            }",
        "        }",
        "    }",
        "}",
        "",
    ]
    return "\n".join(lines)
