"""merge-pad: zero pads into Conv and AveragePool, neutral pads into MaxPool, and the cases
that must stay (non-zero values, cropping, channel padding, unknown-sign inputs)."""
from __future__ import annotations

from tests.filecheck import check_pass

CONV = "{strides=[1, 1], pads=[1, 0, 1, 0], dilations=[1, 1]}"


def test_zero_pad_merges_into_conv():
    check_pass(f"""graph "g" {{
      input %x: f32[1,2,5,5]
      const @w: f32[3,2,3,3]
      %p: f32[1,2,7,8] = Pad(%x) {{pads=[0, 0, 1, 2, 0, 0, 1, 1]}} name="p"
      %y: f32[1,3,7,6] = Conv(%p, @w, none) {CONV} name="y"
      output "y" = %y
    }}""", "merge-pad", """
      CHECK-NOT: Pad
      CHECK: %y: f32[1,3,7,6] = Conv(%x, @w, none) {strides=[1, 1], pads=[2, 2, 2, 1], dilations=[1, 1]}""")


def test_pads_that_are_not_zero_or_touch_channels_stay():
    check_pass(f"""graph "g" {{
      input %x: f32[1,2,5,5]
      const @w: f32[3,2,3,3]
      const @w4: f32[3,4,3,3]
      %p: f32[1,2,7,7] = Pad(%x) {{pads=[0, 0, 1, 1, 0, 0, 1, 1], value=1.0}} name="p"
      %y: f32[1,3,7,5] = Conv(%p, @w, none) {CONV} name="y"
      %q: f32[1,4,5,5] = Pad(%x) {{pads=[0, 1, 0, 0, 0, 1, 0, 0]}} name="q"
      %z: f32[1,3,5,3] = Conv(%q, @w4, none) {CONV} name="z"
      %r: f32[1,2,3,3] = Pad(%x) {{pads=[0, 0, -1, -1, 0, 0, -1, -1]}} name="r"
      %v: f32[1,3,3,1] = Conv(%r, @w, none) {CONV} name="v"
      output "y" = %y
      output "z" = %z
      output "v" = %v
    }}""", "merge-pad", """
      CHECK: Conv(%p
      CHECK: Conv(%q
      CHECK: Conv(%r""")


def test_zero_pad_merges_into_average_pool_counting_the_pads():
    check_pass("""graph "g" {
      input %x: f32[1,2,5,5]
      %p: f32[1,2,7,7] = Pad(%x) {pads=[0, 0, 1, 1, 0, 0, 1, 1]} name="p"
      %y: f32[1,2,3,3] = AveragePool(%p) {kernel=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1]} name="y"
      %q: f32[1,2,7,7] = Pad(%x) {pads=[0, 0, 1, 1, 0, 0, 1, 1]} name="q"
      %z: f32[1,2,4,4] = AveragePool(%q) {kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1]} name="z"
      output "y" = %y
      output "z" = %z
    }""", "merge-pad", """
      CHECK: %y: f32[1,2,3,3] = AveragePool(%x) {kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
      CHECK-SAME: dilations=[1, 1], count_include_pad=true}
      // The pool's own pads do not count, the explicit ones do: not expressible, so it stays.
      CHECK: AveragePool(%q)""")


def test_max_pool_takes_neutral_pads_only():
    check_pass("""graph "g" {
      input %x: f32[1,2,5,5]
      %r: f32[1,2,5,5] = Relu(%x) name="r"
      %p: f32[1,2,7,7] = Pad(%r) {pads=[0, 0, 1, 1, 0, 0, 1, 1]} name="p"
      %a: f32[1,2,3,3] = MaxPool(%p) {kernel=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1]} name="a"
      %q: f32[1,2,7,7] = Pad(%x) {pads=[0, 0, 1, 1, 0, 0, 1, 1], value=-inf} name="q"
      %b: f32[1,2,3,3] = MaxPool(%q) {kernel=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1]} name="b"
      %s: f32[1,2,7,7] = Pad(%x) {pads=[0, 0, 1, 1, 0, 0, 1, 1]} name="s"
      %c: f32[1,2,3,3] = MaxPool(%s) {kernel=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1]} name="c"
      output "a" = %a
      output "b" = %b
      output "c" = %c
    }""", "merge-pad", """
      // Zero padding of a Relu result never wins a max: merged.
      CHECK: %a: f32[1,2,3,3] = MaxPool(%r) {kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
      // -inf padding is what MaxPool pads with anyway: merged.
      CHECK: %b: f32[1,2,3,3] = MaxPool(%x) {kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
      // Zero padding of a value of unknown sign can win: kept.
      CHECK: %c: f32[1,2,3,3] = MaxPool(%s)""")
