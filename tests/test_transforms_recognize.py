"""recognize-gelu, recognize-swish, recognize-softmax and recognize-layernorm: the expansions
exporters write collapse into one op, in the operand orders seen in practice; expansions
whose intermediates are needed elsewhere, or whose constants differ, stay. Also the new
activation ops' lowerings."""
from __future__ import annotations

import numpy as np
import pytest

from ember.graph import parse_graph
from ember.lowering import lower_graph
from ember.ops import NoAttrs, get_op
from ember.ops.activations import GeluAttrs
from tests.filecheck import check_pass
from tests.helpers import evaluate_graph, relative_error

HEADER = """graph "g" {
  input %x: f32[2,16]
  const @half: f32[] = [0.5]
  const @one: f32[] = [1.0]
  const @sqrt2: f32[] = [1.4142135381698608]
  const @rsqrt2: f32[] = [0.7071067690849304]
  const @two: f32[] = [2.0]
"""

# Each body computes %y from %x; all are GELU in erf form.
GELU_ERF_FORMS = {
    "bert": """
  %d: f32[2,16] = Div(%x, @sqrt2) name="d"
  %e: f32[2,16] = Erf(%d) name="e"
  %a: f32[2,16] = Add(%e, @one) name="a"
  %m: f32[2,16] = Mul(%x, %a) name="m"
  %y: f32[2,16] = Mul(%m, @half) name="y"
""",
    "half_x_first": """
  %d: f32[2,16] = Mul(@rsqrt2, %x) name="d"
  %e: f32[2,16] = Erf(%d) name="e"
  %a: f32[2,16] = Add(@one, %e) name="a"
  %h: f32[2,16] = Mul(%x, @half) name="h"
  %y: f32[2,16] = Mul(%h, %a) name="y"
""",
    "gate_scaled": """
  %d: f32[2,16] = Div(%x, @sqrt2) name="d"
  %e: f32[2,16] = Erf(%d) name="e"
  %a: f32[2,16] = Add(%e, @one) name="a"
  %g: f32[2,16] = Div(%a, @two) name="g"
  %y: f32[2,16] = Mul(%g, %x) name="y"
""",
}


@pytest.mark.parametrize("form", sorted(GELU_ERF_FORMS))
def test_gelu_erf_forms(form):
    check_pass(HEADER + GELU_ERF_FORMS[form] + '  output "y" = %y\n}', "recognize-gelu", """
      CHECK: %y: f32[2,16] = Gelu(%x) name="y"
      CHECK-NOT: Erf
      CHECK-NOT: Mul""")


def test_gelu_tanh_form():
    check_pass(HEADER + """
  const @cubic: f32[] = [0.044714998453855515]
  const @scale: f32[] = [0.7978845834732056]
  const @three: f32[] = [3.0]
  %p: f32[2,16] = Pow(%x, @three) name="p"
  %c: f32[2,16] = Mul(@cubic, %p) name="c"
  %s: f32[2,16] = Add(%x, %c) name="s"
  %u: f32[2,16] = Mul(%s, @scale) name="u"
  %t: f32[2,16] = Tanh(%u) name="t"
  %a: f32[2,16] = Add(%t, @one) name="a"
  %h: f32[2,16] = Mul(@half, %x) name="h"
  %y: f32[2,16] = Mul(%h, %a) name="y"
  output "y" = %y
}""", "recognize-gelu", 'CHECK: %y: f32[2,16] = Gelu(%x) {approximate="tanh"}\nCHECK-NOT: Tanh')


def test_gelu_lookalikes_stay():
    body = GELU_ERF_FORMS["bert"]
    # A wrong constant, and an intermediate that something else reads.
    wrong = HEADER.replace("[0.5]", "[0.6]") + body + '  output "y" = %y\n}'
    check_pass(wrong, "recognize-gelu", "CHECK: Erf\nCHECK-NOT: Gelu")
    shared = HEADER + body + '  output "y" = %y\n  output "e" = %e\n}'
    check_pass(shared, "recognize-gelu", "CHECK: Erf\nCHECK-NOT: Gelu")


SWISH_FORMS = {
    "silu": ("""
  %s: f32[2,16] = Sigmoid(%x) name="s"
  %y: f32[2,16] = Mul(%s, %x) name="y"
""", "Silu"),
    "hard_sigmoid": ("""
  %s: f32[2,16] = HardSigmoid(%x) {alpha=0.16666666666666666, beta=0.5} name="s"
  %y: f32[2,16] = Mul(%x, %s) name="y"
""", "HardSwish"),
    "relu6_div": ("""
  %a: f32[2,16] = Add(%x, @three) name="a"
  %c: f32[2,16] = Clip(%a) {min=0.0, max=6.0} name="c"
  %m: f32[2,16] = Mul(%x, %c) name="m"
  %y: f32[2,16] = Div(%m, @six) name="y"
""", "HardSwish"),
    "relu6_scaled": ("""
  %a: f32[2,16] = Add(@three, %x) name="a"
  %c: f32[2,16] = Clip(%a) {min=0.0, max=6.0} name="c"
  %g: f32[2,16] = Mul(%c, @sixth) name="g"
  %y: f32[2,16] = Mul(%g, %x) name="y"
""", "HardSwish"),
}
SWISH_HEADER = HEADER + """  const @three: f32[] = [3.0]
  const @six: f32[] = [6.0]
  const @sixth: f32[] = [0.1666666716337204]
"""


@pytest.mark.parametrize("form", sorted(SWISH_FORMS))
def test_swish_forms(form):
    body, op = SWISH_FORMS[form]
    check_pass(SWISH_HEADER + body + '  output "y" = %y\n}', "recognize-swish",
               f'CHECK: %y: f32[2,16] = {op}(%x) name="y"\nCHECK-NOT: Clip\nCHECK-NOT: Sigmoid')


def test_swish_lookalikes_stay():
    check_pass("""graph "g" {
      input %x: f32[2,16]
      input %z: f32[2,16]
      %s: f32[2,16] = Sigmoid(%z) name="s"
      %y: f32[2,16] = Mul(%s, %x) name="y"
      %h: f32[2,16] = HardSigmoid(%x) name="h"
      %w: f32[2,16] = Mul(%x, %h) name="w"
      output "y" = %y
      output "w" = %w
    }""", "recognize-swish", """
      // x * sigmoid(z) is a gate, not a swish; HardSigmoid's defaults (0.2, 0.5) are not HardSwish's.
      CHECK: Mul(%s, %x)
      CHECK: Mul(%x, %h)
      CHECK-NOT: Silu
      CHECK-NOT: HardSwish""")


SOFTMAX = """graph "g" {
  input %x: f32[2,3,5]
  %mx: f32[2,3,1] = ReduceMax(%x) {axes=[2]} name="mx"
  %sh: f32[2,3,5] = Sub(%x, %mx) name="sh"
  %e: f32[2,3,5] = Exp(%sh) name="e"
  %s: f32[2,3,1] = ReduceSum(%e) {axes=[2]} name="s"
  %y: f32[2,3,5] = Div(%e, %s) name="y"
  %e2: f32[2,3,5] = Exp(%x) name="e2"
  %s2: f32[2,1,5] = ReduceSum(%e2) {axes=[1]} name="s2"
  %z: f32[2,3,5] = Div(%e2, %s2) name="z"
  %e3: f32[2,3,5] = Exp(%x) name="e3"
  %s3: f32[2,1,1] = ReduceSum(%e3) {axes=[1, 2]} name="s3"
  %w: f32[2,3,5] = Div(%e3, %s3) name="w"
  output "y" = %y
  output "z" = %z
  output "w" = %w
}"""


def test_softmax_with_max_subtraction_only():
    check_pass(SOFTMAX, "recognize-softmax", """
      CHECK-NOT: ReduceMax
      CHECK: %y: f32[2,3,5] = Softmax(%x) {axis=2}
      // Without the max, exp overflows where Softmax does not: the graph's meaning stays.
      CHECK: %z: f32[2,3,5] = Div(%e2, %s2)
      // Two axes at once is not one Softmax.
      CHECK: %w: f32[2,3,5] = Div(%e3, %s3)""")


def test_softmax_shifted_by_another_max_stays():
    """Exp(x - max over all axes) underflows to 0 in a row far below the max (0 / 0: NaN, as
    ONNX Runtime gives); a Softmax would subtract the row's own max and give finite values."""
    check_pass("""graph "g" {
      input %x: f32[2,4]
      %mx: f32[1,1] = ReduceMax(%x) {axes=[0, 1]} name="mx"
      %sh: f32[2,4] = Sub(%x, %mx) name="sh"
      %e: f32[2,4] = Exp(%sh) name="e"
      %s: f32[2,1] = ReduceSum(%e) {axes=[1]} name="s"
      %y: f32[2,4] = Div(%e, %s) name="y"
      output "y" = %y
    }""", "recognize-softmax", """
      CHECK: ReduceMax(%x)
      CHECK: Div(%e, %s)
      CHECK-NOT: Softmax""")


LAYERNORM = """graph "g" {
  input %x: f32[2,4,8]
  const @two: f32[] = [2.0]
  const @eps: f32[] = [9.999999747378752e-06]
  const @gamma: f32[8]
  const @beta: f32[8]
  %mean: f32[2,4,1] = ReduceMean(%x) {axes=[2]} name="mean"
  %d: f32[2,4,8] = Sub(%x, %mean) name="d"
  %sq: f32[2,4,8] = Pow(%d, @two) name="sq"
  %var: f32[2,4,1] = ReduceMean(%sq) {axes=[-1]} name="var"
  %ve: f32[2,4,1] = Add(%var, @eps) name="ve"
  %std: f32[2,4,1] = Sqrt(%ve) name="std"
  %n: f32[2,4,8] = Div(%d, %std) name="n"
  %s: f32[2,4,8] = Mul(%n, @gamma) name="s"
  %y: f32[2,4,8] = Add(@beta, %s) name="y"
  output "y" = %y
}"""


def test_layernorm_from_its_reduction_form_with_scale_and_bias():
    check_pass(LAYERNORM, "recognize-layernorm", """
      CHECK-NOT: ReduceMean
      CHECK: %y: f32[2,4,8] = LayerNormalization(%x, @n.scale_1, @s.bias) {axis=2, epsilon=9.99
      CHECK-NEXT: output""")


def test_layernorm_over_two_axes_with_mul_square_and_reciprocal():
    text = (LAYERNORM.replace("f32[2,4,1]", "f32[2,1,1]").replace("{axes=[2]}", "{axes=[1, 2]}")
            .replace("{axes=[-1]}", "{axes=[1, 2]}").replace("Pow(%d, @two)", "Mul(%d, %d)")
            .replace('%n: f32[2,4,8] = Div(%d, %std) name="n"',
                     '%rs: f32[2,1,1] = Reciprocal(%std) name="rs"\n  %n: f32[2,4,8] = Mul(%rs, %d) name="n"'))
    check_pass(text, "recognize-layernorm", "CHECK: LayerNormalization(%x, {{.*}}) {axis=1, epsilon=")


def test_layernorm_lookalikes_stay():
    # Variance over a different axis than the mean.
    check_pass(LAYERNORM.replace("{axes=[-1]}", "{axes=[1]}").replace(
        '%var: f32[2,4,1]', '%var: f32[2,1,8]').replace('%ve: f32[2,4,1]', '%ve: f32[2,1,8]').replace(
        '%std: f32[2,4,1]', '%std: f32[2,1,8]'), "recognize-layernorm", "CHECK: Div(%d, %std)\nCHECK-NOT: LayerNorm")


@pytest.mark.parametrize("op,attrs", [("Gelu", ""), ("Gelu", ' {approximate="tanh"}'), ("HardSwish", ""),
                                      ("Silu", "")])
def test_activation_ops_lower_to_primitives_with_the_same_numbers(op, attrs):
    graph = parse_graph(f"""graph "g" {{
      input %x: f32[3,7]
      %y: f32[3,7] = {op}(%x){attrs} name="y"
      output "y" = %y
    }}""")
    inputs = {"x": np.linspace(-6, 6, 21, dtype=np.float32).reshape(3, 7)}
    expected = evaluate_graph(graph, inputs)["y"]
    lower_graph(graph)
    assert all(node.opdef.primitive for node in graph.nodes)
    assert relative_error(evaluate_graph(graph, inputs)["y"], expected) < 1e-6


def test_activation_references():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0], np.float32)
    (gelu,) = get_op("Gelu").evaluate(GeluAttrs(), [x])
    np.testing.assert_allclose(gelu, [-0.00404969, -0.15865525, 0.0, 0.34573123, 1.95449974], rtol=1e-5)
    (tanh_gelu,) = get_op("Gelu").evaluate(GeluAttrs("tanh"), [x])
    np.testing.assert_allclose(tanh_gelu, gelu, atol=1e-3)
    (hard_swish,) = get_op("HardSwish").evaluate(NoAttrs(), [x])
    np.testing.assert_allclose(hard_swish, x * np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6)
    (silu,) = get_op("Silu").evaluate(NoAttrs(), [x])
    np.testing.assert_allclose(silu, x / (1 + np.exp(-x)), rtol=1e-6)
