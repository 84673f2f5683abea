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
own); a driver unit runs them and the gate arithmetic between steps (ONNX's GRU, gates z, r, h,
with linear_before_reset = 1, so each step's recurrent product is ONE GEMM of N = 3 x hidden:
h~ = tanh(XW_h + Wb_h + r * (HR_h + Rb_h))). The gates use ember_math.h's sigmoid and tanh (the
cpu backend's formulas, so only the GEMMs differ from its GRU): the driver includes it by name,
and the caller builds with that header's folder on the include path. The first step's product
with a zero initial state is skipped (it is zero).

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
    workspace_elements floats. sources: file name -> C, compiled together into one library."""

    name: str
    sources: tuple[tuple[str, str], ...]
    seq: int
    batch: int
    inputs: int
    hidden: int
    input_gemm: GemmCode
    recurrent_gemm: GemmCode
    input_schedule: Schedule
    recurrent_schedule: Schedule
    flags: str

    @property
    def workspace_elements(self) -> int:
        gates = 3 * self.hidden
        return (self.seq * self.batch * gates + self.batch * gates + self.input_gemm.workspace_elements
                + self.recurrent_gemm.workspace_elements)

    @property
    def gemm_flops(self) -> int:
        """Multiply-adds x 2 of the two GEMMs over the whole sequence (the gates left out)."""
        return 2 * self.seq * self.batch * 3 * self.hidden * (self.inputs + self.hidden)

    def pack(self, w: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """W [3 hidden, inputs] and R [3 hidden, hidden] (one direction of ONNX's W and R),
        packed for the two GEMMs: done once, at compile time."""
        return self.input_gemm.pack_b(w), self.recurrent_gemm.pack_b(r)

    def summary(self) -> str:
        return (f"GRU seq {self.seq}, batch {self.batch}, hidden {self.hidden}: input gates "
                f"{self.input_gemm.m}x{self.input_gemm.n}x{self.input_gemm.k} on "
                f"{self.input_schedule.mapping.instruction.name} ({self.input_gemm.summary()}); recurrent gates "
                f"{self.recurrent_gemm.m}x{self.recurrent_gemm.n}x{self.recurrent_gemm.k} x {self.seq} steps on "
                f"{self.recurrent_schedule.mapping.instruction.name} ({self.recurrent_gemm.summary()})")


def gru_kernels(seq: int, batch: int, inputs: int, hidden: int) -> tuple[Kernel, Kernel]:
    """The GRU's two GEMMs as 2-D kernels, weights read transposed as ONNX stores them."""
    for label, value in (("seq", seq), ("batch", batch), ("inputs", inputs), ("hidden", hidden)):
        if not isinstance(value, int) or value < 1:
            raise UnsupportedError(f"mapped GRU: {label} must be a positive integer, got {value!r}")
    gates = 3 * hidden
    input_gates = Kernel("input-gates", parse_expr(
        f"C[i, j]:f32 += A[i, k]:f32 * B[j, k]:f32 over i:{seq * batch}, j:{gates}, k:{inputs}"),
        constants=frozenset({"B"}))
    recurrent_gates = Kernel("recurrent-gates", parse_expr(
        f"C[i, j]:f32 += A[i, k]:f32 * B[j, k]:f32 over i:{batch}, j:{gates}, k:{hidden}"),
        repeat=seq, constants=frozenset({"B"}))
    return input_gates, recurrent_gates


def emit_gru(target: Target, seq: int, batch: int, inputs: int, hidden: int, *, linear_before_reset: bool = True,
             name: str = "mapped_gru") -> GruCode:
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise UnsupportedError(f"mapped GRU: the function name {name!r} is not a C identifier")
    if not linear_before_reset:
        raise UnsupportedError("mapped GRU: only linear_before_reset = 1 is emitted (with 0 the reset gate "
                               "multiplies the state before its product, splitting each step's GEMM in two)")
    schedules = []
    for kernel in gru_kernels(seq, batch, inputs, hidden):
        best = choose(kernel, target)
        if best is None:
            raise UnsupportedError(f"mapped GRU: no instruction of {target.name} maps its {kernel.name} GEMM")
        schedules.append(best)
    x_schedule, h_schedule = schedules
    xw = emit_gemm(x_schedule, name=f"{name}_xw")
    hr = emit_gemm(h_schedule, name=f"{name}_hr")
    driver = _driver(name, seq, batch, hidden, xw, hr, target.name)
    return GruCode(name, ((f"{name}_xw.c", xw.source), (f"{name}_hr.c", hr.source), (f"{name}.c", driver)),
                   seq, batch, inputs, hidden, xw, hr, x_schedule, h_schedule, target.c_flags)


def _driver(name: str, seq: int, batch: int, hidden: int, xw: GemmCode, hr: GemmCode, target: str) -> str:
    gates = 3 * hidden
    return "\n".join([
        f"/* Generated by ember.isa.emit_rnn for {target}: a GRU (seq {seq}, batch {batch}, hidden {hidden},",
        " * gates z, r, h, linear_before_reset = 1) from two mapped GEMMs and the gate arithmetic. */",
        "#include <string.h>",
        '#include "ember_math.h"',
        "",
        f"void {name}_xw(const float *A, const float *Bp, float *C, float *workspace);",
        f"void {name}_hr(const float *A, const float *Bp, float *C, float *workspace);",
        "",
        f"void {name}(const float *X, const float *Wp, const float *Rp, const float *bias, const float *h0,",
        "             float *Y, float *workspace) {",
        f"    float *xw = workspace;                  /* [{seq * batch}][{gates}]: every step's input gates */",
        f"    float *hr = xw + {seq * batch * gates}L;  /* [{batch}][{gates}]: one step's recurrent gates */",
        f"    float *xw_work = hr + {batch * gates}L, *hr_work = xw_work + {xw.workspace_elements}L;",
        f"    {name}_xw(X, Wp, xw, xw_work);",
        f"    for (long t = 0; t < {seq}; t++) {{",
        f"        const float *h = t ? Y + (t - 1) * {batch * hidden}L : h0;",
        f"        if (h) {name}_hr(h, Rp, hr, hr_work);",
        f"        else memset(hr, 0, sizeof(float) * {batch * gates});",
        f"        float *y = Y + t * {batch * hidden}L;",
        f"        for (long b = 0; b < {batch}; b++) {{",
        f"            const float *x = xw + (t * {batch} + b) * {gates}L, *q = hr + b * {gates}L;",
        f"            float *out = y + b * {hidden}L;",
        f"            const float *prev = h ? h + b * {hidden}L : 0;",
        f"            for (long j = 0; j < {hidden}; j++) {{",
        f"                float z = ember_sigmoidf(x[j] + bias[j] + q[j] + bias[{gates} + j]);",
        f"                float r = ember_sigmoidf(x[{hidden} + j] + bias[{hidden} + j] + q[{hidden} + j]"
        f" + bias[{gates + hidden} + j]);",
        f"                float n = ember_tanhf(x[{2 * hidden} + j] + bias[{2 * hidden} + j]"
        f" + r * (q[{2 * hidden} + j] + bias[{gates + 2 * hidden} + j]));",
        "                out[j] = (1.0f - z) * n + z * (prev ? prev[j] : 0.0f);",
        "            }",
        "        }",
        "    }",
        "}",
        "",
    ])
