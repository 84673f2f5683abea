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


