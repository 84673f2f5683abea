"""fold-qdq (transforms/fold_qdq.py): ONNX QDQ islands -> QLinearConv / QLinearMatMul /
MatMulInteger, checked as text and numerically; tests/test_quant_ort.py runs it against ONNX
Runtime on models that onnxruntime.quantization writes."""
from __future__ import annotations

from tests.filecheck import check_pass

CONV = "{strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1]}"


def _graph(activation: str = "", y_zero: int = 0) -> str:
    act = f"""%r: f32[1,4,4,4] = {activation}(%c) name="r"
      %yq: u8[1,4,4,4] = QuantizeLinear(%r, @ys, @yz) {{to=u8}} name="q\"""" if activation else \
        """%yq: u8[1,4,4,4] = QuantizeLinear(%c, @ys, @yz) {to=u8} name="q\""""
    return f"""graph "g" {{
      input %x: f32[1,2,4,4]
      const @xs: f32[] = [0.02]
      const @xz: u8[] = [128]
      const @wq: i8[4,2,1,1] = [127, -5, 3, 90, -128, 7, 60, -61]
      const @ws: f32[4] = [0.01, 0.02, 0.005, 0.03]
      const @ys: f32[] = [0.05]
      const @yz: u8[] = [{y_zero}]
      %xq: u8[1,2,4,4] = QuantizeLinear(%x, @xs, @xz) {{to=u8}} name="xq"
      %xd: f32[1,2,4,4] = DequantizeLinear(%xq, @xs, @xz) {{to=f32}} name="xd"
      %wd: f32[4,2,1,1] = DequantizeLinear(@wq, @ws, none) {{to=f32, axis=0}} name="wd"
      %c: f32[1,4,4,4] = Conv(%xd, %wd, none) {CONV} name="c"
      {act}
      %y: f32[1,4,4,4] = DequantizeLinear(%yq, @ys, @yz) {{to=f32}} name="y"
      output "y" = %y
    }}"""


def test_conv_becomes_qlinearconv_with_per_channel_weights():
    check_pass(_graph(), "fold-qdq", """
      CHECK-NOT: Conv(
      CHECK: %yq: u8[1,4,4,4] = QLinearConv(%xq, @c.x_scale, @c.x_zero, @wq, @c.w_scale, @c.w_zero,
      CHECK-SAME: @c.y_scale, @c.y_zero, none)
      CHECK-NOT: Conv(""", rtol=0.05 / 3)


def test_relu_with_zero_point_at_the_minimum_vanishes_and_otherwise_becomes_an_integer_clip():
    check_pass(_graph("Relu"), "fold-qdq", """
      CHECK: QLinearConv(
      CHECK-NOT: Relu
      CHECK-NOT: Clip""", rtol=0.05 / 3)
    check_pass(_graph("Relu", y_zero=100), "fold-qdq", """
      CHECK: QLinearConv(
      CHECK-NEXT: Clip({{.*}}) {min=100.0}""", rtol=0.05 / 3)


def test_what_stays_float_a_conv_result_read_twice():
    ir = _graph().replace('output "y" = %y', 'output "y" = %y\n      output "c" = %c')
    check_pass(ir, "fold-qdq", "CHECK: Conv(%xd, %wd, none)")


def test_requantize_of_a_dequantize_with_the_same_parameters_disappears():
    check_pass("""graph "g" {
      input %x: u8[8]
      const @s: f32[] = [0.1]
      const @z: u8[] = [3]
      %d: f32[8] = DequantizeLinear(%x, @s, @z) {to=f32} name="d"
      %m: f32[8] = Neg(%d) name="m"
      %q: u8[8] = QuantizeLinear(%d, @s, @z) {to=u8} name="q"
      output "q" = %q
      output "m" = %m
    }""", "fold-qdq", """
      CHECK-NOT: QuantizeLinear
      CHECK: output "q" = %x""")




# Integer between the integer layers: pools and reshapes on the integers, residual Adds and
# requantizations as fused arithmetic --------------------------------------------------------

_QUANTIZED_INPUTS = """
  input %x: f32[1,2,6,6]
  input %u: f32[1,2,6,6]
  const @s: f32[] = [0.05]
  const @z: u8[] = [120]
  const @t: f32[] = [0.03]
  const @zt: u8[] = [7]
  %xq: u8[1,2,6,6] = QuantizeLinear(%x, @s, @z) {to=u8} name="xq"
  %uq: u8[1,2,6,6] = QuantizeLinear(%u, @t, @zt) {to=u8} name="uq"
  %xd: f32[1,2,6,6] = DequantizeLinear(%xq, @s, @z) {to=f32} name="xd"
  %ud: f32[1,2,6,6] = DequantizeLinear(%uq, @t, @zt) {to=f32} name="ud\""""


def test_maxpool_and_reshape_move_onto_the_integers():
    check_pass(f"""graph "g" {{{_QUANTIZED_INPUTS}
      %p: f32[1,2,3,3] = MaxPool(%xd) {{kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1]}} name="p"
      %r: f32[1,18] = Reshape(%p) {{shape=[1, 18]}} name="r"
      %q: u8[1,18] = QuantizeLinear(%r, @s, @z) {{to=u8}} name="q"
      output "q" = %q
      output "ud" = %ud
    }}""", "fold-qdq", """
      CHECK: %p.q: u8[1,2,3,3] = MaxPool(%xq)
      CHECK: %r.q: u8[1,18] = Reshape(%p.q)
      CHECK-NOT: QuantizeLinear(
      CHECK: output "q" = %r.q""", rtol=0.0)


def test_a_pool_whose_window_can_be_all_padding_stays_float():
    check_pass(f"""graph "g" {{{_QUANTIZED_INPUTS}
      %p: f32[1,2,5,5] = MaxPool(%xd) {{kernel=[2, 2], strides=[2, 2], pads=[2, 2, 2, 2], dilations=[1, 1]}} name="p"
      %r: f32[1,2,5,5] = Relu(%p) name="r"
      output "r" = %r
      output "ud" = %ud
    }}""", "fold-qdq", "CHECK: %p: f32[1,2,5,5] = MaxPool(%xd)", rtol=0.0)


def test_residual_add_relu_and_its_quantize_become_one_integer_chain():
    after = check_pass(f"""graph "g" {{{_QUANTIZED_INPUTS}
      %a: f32[1,2,6,6] = Add(%xd, %ud) name="a"
      %r: f32[1,2,6,6] = Relu(%a) name="r"
      const @ys: f32[] = [0.04]
      const @yz: u8[] = [0]
      %q: u8[1,2,6,6] = QuantizeLinear(%r, @ys, @yz) {{to=u8}} name="q"
      output "q" = %q
    }}""", "fold-qdq", """
      CHECK: %xd.f: f32[1,2,6,6] = Cast(%xq) {to=f32}
      CHECK-NEXT: %xd.c: f32[1,2,6,6] = Sub(%xd.f, @xd.zf)
      CHECK-NEXT: %xd: f32[1,2,6,6] = Mul(%xd.c, @xd.s)
      CHECK: %a: f32[1,2,6,6] = Add(%xd, %ud)
      CHECK-NEXT: %r: f32[1,2,6,6] = Relu(%a)
      CHECK-NEXT: %q.d: f32[1,2,6,6] = Div(%r, @q.s)
      CHECK-NEXT: %q.r: f32[1,2,6,6] = Round(%q.d)
      CHECK-NEXT: %q.c: f32[1,2,6,6] = Clip(%q.r) {min=0.0, max=255.0}
      CHECK-NEXT: %q: u8[1,2,6,6] = Cast(%q.c) {to=u8}
      CHECK-NOT: DequantizeLinear(%xq""", rtol=0.0)
    assert "DequantizeLinear" not in after.op_counts() and after.op_counts()["QuantizeLinear"] == 2  # the inputs' own


def test_a_requantize_becomes_arithmetic_and_a_dequantize_read_by_other_ops_stays():
    check_pass(f"""graph "g" {{{_QUANTIZED_INPUTS}
      %q: u8[1,2,6,6] = QuantizeLinear(%xd, @t, @zt) {{to=u8}} name="q"
      %sm: f32[1,2,6,6] = Softmax(%ud) {{axis=-1}} name="sm"
      output "q" = %q
      output "sm" = %sm
    }}""", "fold-qdq", """
      CHECK: %ud: f32[1,2,6,6] = DequantizeLinear(%uq, @t, @zt)
      CHECK: %q.dq: f32[1,2,6,6] = Mul(
      CHECK: %q: u8[1,2,6,6] = Cast(%q.c) {to=u8}""", rtol=0.0)
