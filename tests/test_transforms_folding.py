"""fold-batchnorm and fold-conv-arithmetic: normalization and per-channel arithmetic folded
into convolution and dense weights; the cases that must stay."""
from __future__ import annotations

import numpy as np

from ember.graph import parse_graph, print_graph
from ember.passes import PassManager
from tests.filecheck import check_pass, filecheck

CONV = "{strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1]}"
rng = np.random.default_rng(7)


def _bn_weights(channels: int, prefix: str = "") -> dict[str, np.ndarray]:
    return {
        f"{prefix}scale": rng.uniform(0.5, 1.5, channels).astype(np.float32),
        f"{prefix}bias": rng.standard_normal(channels).astype(np.float32),
        f"{prefix}mean": rng.standard_normal(channels).astype(np.float32),
        f"{prefix}var": rng.uniform(0.2, 2.0, channels).astype(np.float32),
    }


BN_CONSTS = """
      const @scale: f32[{c}]
      const @bias: f32[{c}]
      const @mean: f32[{c}]
      const @var: f32[{c}]"""


def test_batchnorm_folds_into_conv_with_and_without_bias_and_into_grouped_conv():
    check_pass(f"""graph "g" {{
      input %x: f32[1,4,6,6]
      const @w: f32[4,4,3,3]
      const @b: f32[4] = [0.1, 0.2, 0.3, 0.4]
      const @dw: f32[4,1,3,3]
      {BN_CONSTS.format(c=4)}
      %c: f32[1,4,6,6] = Conv(%x, @w, @b) {CONV} name="c"
      %n: f32[1,4,6,6] = BatchNormalization(%c, @scale, @bias, @mean, @var) {{epsilon=0.001}} name="n"
      %d: f32[1,4,6,6] = Conv(%n, @dw, none) {{strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=4}} name="d"
      %m: f32[1,4,6,6] = BatchNormalization(%d, @scale, @bias, @mean, @var) name="m"
      output "y" = %m
    }}""", "fold-batchnorm", """
      CHECK-NOT: BatchNormalization
      CHECK: %n: f32[1,4,6,6] = Conv(%x, @c.w, @c.b)
      CHECK-NEXT: %m: f32[1,4,6,6] = Conv(%n, @d.w, @d.b) {{.*}}group=4}""", weights=_bn_weights(4))


def test_batchnorm_stays_when_the_conv_result_is_used_elsewhere():
    check_pass(f"""graph "g" {{
      input %x: f32[1,4,6,6]
      const @w: f32[4,4,3,3]
      {BN_CONSTS.format(c=4)}
      %c: f32[1,4,6,6] = Conv(%x, @w, none) {CONV} name="c"
      %n: f32[1,4,6,6] = BatchNormalization(%c, @scale, @bias, @mean, @var) name="n"
      %y: f32[1,4,6,6] = Add(%n, %c) name="y"
      output "y" = %y
    }}""", "fold-batchnorm", "CHECK: BatchNormalization(%c", weights=_bn_weights(4))


def test_batchnorm_folds_into_gemm_and_matmul():
    check_pass(f"""graph "g" {{
      input %x: f32[3,5]
      const @wt: f32[4,5]
      const @c: f32[4] = [1.0, 2.0, 3.0, 4.0]
      const @w2: f32[4,4]
      {BN_CONSTS.format(c=4)}
      %g: f32[3,4] = Gemm(%x, @wt, @c) {{alpha=0.5, beta=2.0, transB=true}} name="g"
      %n: f32[3,4] = BatchNormalization(%g, @scale, @bias, @mean, @var) name="n"
      %m: f32[3,4] = MatMul(%n, @w2) name="m"
      %o: f32[3,4] = BatchNormalization(%m, @scale, @bias, @mean, @var) name="o"
      output "y" = %o
    }}""", "fold-batchnorm", """
      CHECK-NOT: BatchNormalization
      CHECK: %n: f32[3,4] = FullyConnected(%x, @g.w, @g.b, none)
      CHECK-NEXT: %o: f32[3,4] = FullyConnected(%n, @m.w, @m.b, none)""", weights=_bn_weights(4))


def test_per_channel_arithmetic_folds_into_conv():
    check_pass(f"""graph "g" {{
      input %x: f32[1,3,5,5]
      const @w: f32[4,3,3,3]
      const @scale: f32[4,1,1] = [0.5, 2.0, -1.0, 3.0]
      const @shift: f32[1,4,1,1] = [1.0, 2.0, 3.0, 4.0]
      const @two: f32[] = [2.0]
      %c: f32[1,4,5,5] = Conv(%x, @w, none) {CONV} name="c"
      %m: f32[1,4,5,5] = Mul(@scale, %c) name="m"
      %a: f32[1,4,5,5] = Add(%m, @shift) name="a"
      %d: f32[1,4,5,5] = Div(%a, @two) name="d"
      %s: f32[1,4,5,5] = Sub(%d, @two) name="s"
      output "y" = %s
    }}""", "fold-conv-arithmetic", """
      CHECK-NOT: Mul
      CHECK-NOT: Add
      CHECK-NOT: Div
      CHECK-NOT: Sub
      CHECK: %s: f32[1,4,5,5] = Conv(%x, @{{[a-z]+}}.w, @{{[a-z]+}}.b)""")


def test_arithmetic_that_is_not_per_channel_stays():
    check_pass(f"""graph "g" {{
      input %x: f32[1,3,5,5]
      const @w: f32[4,3,3,3]
      const @spatial: f32[5] = [1.0, 2.0, 3.0, 4.0, 5.0]
      const @zero: f32[4,1,1] = [1.0, 0.0, 1.0, 1.0]
      %c: f32[1,4,5,5] = Conv(%x, @w, none) {CONV} name="c"
      %m: f32[1,4,5,5] = Mul(%c, @spatial) name="m"
      %k: f32[1,4,5,5] = Conv(%x, @w, none) {CONV} name="k"
      %s: f32[1,4,5,5] = Sub(@zero, %k) name="s"
      output "m" = %m
      output "s" = %s
    }}""", "fold-conv-arithmetic", """
      CHECK: Mul(%c, @spatial)
      CHECK: Sub(@zero, %k)""")


def test_division_by_a_zero_channel_stays():
    # Not numerically comparable (the division makes infinities), so text only.
    graph = parse_graph(f"""graph "g" {{
      input %x: f32[1,3,5,5]
      const @w: f32[4,3,3,3]
      const @zero: f32[4,1,1] = [1.0, 0.0, 1.0, 1.0]
      %e: f32[1,4,5,5] = Conv(%x, @w, none) {CONV} name="e"
      %d: f32[1,4,5,5] = Div(%e, @zero) name="d"
      output "d" = %d
    }}""", {"w": np.ones((4, 3, 3, 3), np.float32)})
    PassManager(["fold-conv-arithmetic"]).run(graph)
    filecheck(print_graph(graph), "CHECK: Div(%e, @zero)")
