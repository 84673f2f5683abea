"""form-fully-connected and fuse-activations: dense layers become FullyConnected with their
bias, activations and residual Adds join the FusedConv / FullyConnected epilogue; results with
other readers (or that are graph outputs) are not fused."""
from __future__ import annotations

import numpy as np

from tests.filecheck import check_pass

CONV = "{strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1]}"


def test_matmul_and_gemm_become_fully_connected_with_bias():
    check_pass("""graph "g" {
      input %x: f32[2,3,5]
      input %a: f32[5,3]
      const @w: f32[5,4]
      const @bias: f32[1,1,4] = [1.0, 2.0, 3.0, 4.0]
      const @wt: f32[4,5]
      const @c: f32[4] = [0.5, 0.5, 0.5, 0.5]
      const @full: f32[3,4]
      %m: f32[2,3,4] = MatMul(%x, @w) name="m"
      %b: f32[2,3,4] = Add(@bias, %m) name="b"
      %g: f32[3,4] = Gemm(%a, @wt, @c) {alpha=2.0, transA=true, transB=true} name="g"
      %h: f32[3,4] = Gemm(%a, @wt, @full) {transA=true, transB=true, beta=0.5} name="h"
      output "b" = %b
      output "g" = %g
      output "h" = %h
    }""", "form-fully-connected", """
      CHECK: %b: f32[2,3,4] = FullyConnected(%x, @w, @m.b, none)
      // transA needs a real transpose; B^T * alpha is computed at compile time.
      CHECK: Transpose(%a) {perm=[1, 0]}
      CHECK: %g: f32[3,4] = FullyConnected({{.*}}, @g.w, @c, none)
      // A full [M, N] C becomes a constant residual.
      CHECK: %h: f32[3,4] = FullyConnected({{.*}}, @h.w, none, @h.residual)""")


def test_non_constant_weights_and_non_vector_adds_stay():
    check_pass("""graph "g" {
      input %x: f32[3,5]
      input %w: f32[5,4]
      input %r: f32[3,4]
      const @v: f32[5,4]
      const @col: f32[3,1] = [1.0, 2.0, 3.0]
      %m: f32[3,4] = MatMul(%x, %w) name="m"
      %f: f32[3,4] = MatMul(%x, @v) name="f"
      %a: f32[3,4] = Add(%f, @col) name="a"
      %y: f32[3,4] = Add(%m, %a) name="y"
      output "y" = %y
    }""", "form-fully-connected", """
      CHECK: %m: f32[3,4] = MatMul(%x, %w)
      CHECK: %f: f32[3,4] = FullyConnected(%x, @v, none, none)
      // A per-row constant is not a bias.
      CHECK-NEXT: %a: f32[3,4] = Add(%f, @col)""")


def test_activations_and_residuals_fuse_into_convolutions():
    check_pass(f"""graph "g" {{
      input %x: f32[1,4,6,6]
      const @w1: f32[4,4,3,3]
      const @b1: f32[4] = [0.1, 0.2, 0.3, 0.4]
      const @w2: f32[4,4,3,3]
      %c1: f32[1,4,6,6] = Conv(%x, @w1, @b1) {CONV} name="c1"
      %r1: f32[1,4,6,6] = Relu(%c1) name="r1"
      %c2: f32[1,4,6,6] = Conv(%r1, @w2, none) {CONV} name="c2"
      %sum: f32[1,4,6,6] = Add(%x, %c2) name="sum"
      %r2: f32[1,4,6,6] = Clip(%sum) {{min=0.0, max=6.0}} name="r2"
      output "y" = %r2
    }}""", "fuse-activations", """
      CHECK: %r1: f32[1,4,6,6] = FusedConv(%x, @w1, @b1, none)
      CHECK-SAME: activation="relu"
      CHECK-NEXT: %r2: f32[1,4,6,6] = FusedConv(%r1, @w2, none, %x)
      CHECK-SAME: activation="clip", beta=6.0
      CHECK-NOT: Add""")


def test_each_activation_kind_fuses_into_fully_connected():
    for op, attrs, expected in [
        ("LeakyRelu", "{alpha=0.1}", 'activation="leaky_relu", alpha=0.1'),
        ("Sigmoid", "", 'activation="sigmoid"'),
        ("Tanh", "", 'activation="tanh"'),
        ("HardSigmoid", "{alpha=0.3, beta=0.4}", 'activation="hard_sigmoid", alpha=0.3, beta=0.4'),
        ("Clip", "{min=0.0}", 'activation="relu"'),
        ("HardSwish", "", 'activation="hard_swish", alpha=1.0'),
        ("Silu", "", 'activation="silu"'),
    ]:
        check_pass(f"""graph "g" {{
          input %x: f32[2,5]
          const @w: f32[5,3]
          %m: f32[2,3] = MatMul(%x, @w) name="m"
          %y: f32[2,3] = {op}(%m) {attrs} name="y"
          output "y" = %y
        }}""", "fuse-activations", f"CHECK: %y: f32[2,3] = FullyConnected(%x, @w, none, none) {{{expected}}}")


def test_scalar_affine_after_hard_swish_joins_the_epilogue():
    """PP-LCNet's learnable affine block, HardSwish then a scalar Mul and Add, is one epilogue:
    alpha * hardswish(y) + beta; a per-channel scale, a second reader or an activation whose
    alpha and beta mean something else keep the Mul and Add."""
    dw = "{strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=4}"
    check_pass(f"""graph "g" {{
      input %x: f32[1,4,6,6]
      const @w: f32[4,4,3,3]
      const @wd: f32[4,1,3,3]
      const @s: f32[1] = [0.4]
      const @t: f32[] = [-0.25]
      const @per_channel: f32[1,4,1,1] = [0.5, 1.0, 1.5, 2.0]
      %c: f32[1,4,6,6] = Conv(%x, @w, none) {CONV} name="c"
      %h: f32[1,4,6,6] = HardSwish(%c) name="h"
      %m: f32[1,4,6,6] = Mul(@s, %h) name="m"
      %a: f32[1,4,6,6] = Add(%m, @t) name="a"
      %d: f32[1,4,6,6] = Conv(%a, @wd, none) {dw} name="d"
      %dh: f32[1,4,6,6] = HardSwish(%d) name="dh"
      %dm: f32[1,4,6,6] = Mul(%dh, @per_channel) name="dm"
      %e: f32[1,4,6,6] = Conv(%x, @w, none) {CONV} name="e"
      %eh: f32[1,4,6,6] = HardSwish(%e) name="eh"
      %em: f32[1,4,6,6] = Mul(%eh, @s) name="em"
      %r: f32[1,4,6,6] = Conv(%x, @w, none) {CONV} name="r"
      %rr: f32[1,4,6,6] = HardSigmoid(%r) {{alpha=0.2, beta=0.5}} name="rr"
      %rm: f32[1,4,6,6] = Mul(%rr, @s) name="rm"
      output "dm" = %dm
      output "eh" = %eh
      output "em" = %em
      output "rm" = %rm
    }}""", "fuse-activations", """
      CHECK: %a: f32[1,4,6,6] = FusedConv(%x, @w, none, none)
      CHECK-SAME: activation="hard_swish", alpha=0.4{{[0-9]*}}, beta=-0.25
      CHECK-NEXT: %dh: f32[1,4,6,6] = FusedConv(%a, @wd, none, none)
      CHECK-SAME: activation="hard_swish", alpha=1.0
      // A per-channel scale is not the epilogue's scalar.
      CHECK-NEXT: %dm: f32[1,4,6,6] = Mul(%dh, @per_channel)
      // %eh is a graph output: the Mul after it stays.
      CHECK: %eh: f32[1,4,6,6] = FusedConv
      CHECK-NEXT: %em: f32[1,4,6,6] = Mul(%eh, @s)
      // hard_sigmoid's alpha and beta are its own parameters, not a scale and shift.
      CHECK: %rm: f32[1,4,6,6] = Mul(%rr, @s)""")


def test_gelu_fuses_in_its_erf_form_only():
    source = """graph "g" {{
      input %x: f32[2,5]
      const @w: f32[5,40]
      %m: f32[2,40] = MatMul(%x, @w) name="m"
      %y: f32[2,40] = Gelu(%m) {{approximate="{form}"}} name="y"
      output "y" = %y
    }}"""
    check_pass(source.format(form="none"), "fuse-activations",
               'CHECK: %y: f32[2,40] = FullyConnected(%x, @w, none, none) {activation="gelu"}')
    # The tanh form has no epilogue: the MatMul still becomes FullyConnected elsewhere, not here.
    check_pass(source.format(form="tanh"), "fuse-activations", """
      CHECK: %m: f32[2,40] = MatMul(%x, @w)
      CHECK-NEXT: %y: f32[2,40] = Gelu(%m) {approximate="tanh"}""")


def test_no_fusion_when_the_result_is_read_elsewhere_or_already_activated():
    check_pass(f"""graph "g" {{
      input %x: f32[1,4,6,6]
      const @w: f32[4,4,3,3]
      const @b: f32[4] = [0.0, 0.0, 0.0, 0.0]
      %c: f32[1,4,6,6] = Conv(%x, @w, none) {CONV} name="c"
      %r: f32[1,4,6,6] = Relu(%c) name="r"
      %d: f32[1,4,6,6] = Conv(%x, @w, none) {CONV} name="d"
      %t: f32[1,4,6,6] = Tanh(%d) name="t"
      %s: f32[1,4,6,6] = Sigmoid(%t) name="s"
      %e: f32[1,4,6,6] = Conv(%x, @w, none) {CONV} name="e"
      %k: f32[1,4,6,6] = Clip(%e) {{min=1.0}} name="k"
      %u: f32[1,4,6,6] = Add(%t, %x) name="u"
      output "r" = %r
      output "c" = %c
      output "s" = %s
      output "k" = %k
      output "u" = %u
    }}""", "fuse-activations", """
      // %c is a graph output: unfused.
      CHECK: %c: f32[1,4,6,6] = Conv
      CHECK-NEXT: %r: f32[1,4,6,6] = Relu(%c)
      // %t has two readers: the Tanh fuses nowhere, and nothing fuses into it.
      CHECK-NEXT: %t: f32[1,4,6,6] = FusedConv({{.*}}activation="tanh"
      CHECK-NEXT: %s: f32[1,4,6,6] = Sigmoid(%t)
      // Clip with a lower bound only (not 0) has no epilogue form.
      CHECK: %k: f32[1,4,6,6] = Clip(%e)
      // A residual cannot follow an activation.
      CHECK: %u: f32[1,4,6,6] = Add(%t, %x)""")


def test_matmul_residual_and_activation_fuse_in_order():
    check_pass("""graph "g" {
      input %x: f32[2,8,5]
      input %skip: f32[2,8,3]
      const @w: f32[5,3]
      const @b: f32[3] = [1.0, -1.0, 0.5]
      %m: f32[2,8,3] = MatMul(%x, @w) name="m"
      %a: f32[2,8,3] = Add(%m, @b) name="a"
      %r: f32[2,8,3] = Add(%skip, %a) name="r"
      %y: f32[2,8,3] = Relu(%r) name="y"
      output "y" = %y
    }""", ["form-fully-connected", "fuse-activations"], """
      CHECK: %y: f32[2,8,3] = FullyConnected(%x, @w, @m.b, %skip) {activation="relu"}
      CHECK-NOT: Add""", weights={"w": np.eye(5, 3, dtype=np.float32)})
