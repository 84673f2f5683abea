"""eliminate-noops: identity data movement, casts and arithmetic identities disappear; the
same ops stay where they change the type or the data (broadcasting, reversal, real work)."""
from __future__ import annotations

from tests.filecheck import check_pass


def test_identity_data_movement_and_casts_are_removed():
    check_pass("""graph "g" {
      input %x: f32[2,3,4]
      %r: f32[2,3,4] = Reshape(%x) {shape=[2, 3, 4]} name="r"
      %t: f32[2,3,4] = Transpose(%r) {perm=[0, 1, 2]} name="t"
      %c: f32[2,3,4] = Cast(%t) {to=f32} name="c"
      %p: f32[2,3,4] = Pad(%c) {pads=[0, 0, 0, 0, 0, 0]} name="p"
      %s: f32[2,3,4] = Slice(%p) {axes=[1, 2], starts=[0, 0], ends=[3, 4], steps=[1, 1]} name="s"
      %e: f32[2,3,4] = Expand(%s) {shape=[1, 4]} name="e"
      %i: f32[2,3,4] = Tile(%e) {repeats=[1, 1, 1]} name="i"
      %k: f32[2,3,4] = Clip(%i) name="k"
      %y: f32[2,3,4] = Relu(%k) name="y"
      output "y" = %y
    }""", "eliminate-noops", """
      CHECK: input %x
      CHECK-NEXT: %y: f32[2,3,4] = Relu(%x)
      CHECK-NEXT: output "y" = %y""")


def test_ops_that_move_or_grow_data_stay():
    check_pass("""graph "g" {
      input %x: f32[3,3]
      input %v: f32[3]
      %t: f32[3,3] = Transpose(%x) {perm=[1, 0]} name="t"
      %s: f32[3,3] = Slice(%t) {axes=[0], starts=[2], ends=[-1], steps=[-1]} name="s"
      %e: f32[3,3] = Expand(%v) {shape=[3, 3]} name="e"
      %c: f32[3,3] = Cast(%s) {to=f32} name="c"
      %y: f32[3,3] = Add(%c, %e) name="y"
      output "y" = %y
    }""", "eliminate-noops", """
      CHECK: Transpose(%x) {perm=[1, 0]}
      CHECK: Slice(%t)
      CHECK: Expand(%v)
      CHECK-NOT: Cast
      CHECK: %y: f32[3,3] = Add(%s, %e)""")


def test_arithmetic_identities_unless_the_constant_broadcasts():
    check_pass("""graph "g" {
      input %x: f32[2,3]
      input %z: f32[3]
      const @zero: f32[] = [0.0]
      const @ones: f32[3] = [1.0, 1.0, 1.0]
      const @onesw: f32[2,3]
      %a: f32[2,3] = Add(@zero, %x) name="a"
      %b: f32[2,3] = Sub(%a, @zero) name="b"
      %c: f32[2,3] = Mul(%b, @ones) name="c"
      %d: f32[2,3] = Div(%c, @ones) name="d"
      %e: f32[2,3] = Pow(%d, @ones) name="e"
      %f: f32[2,3] = Sub(@zero, %e) name="f"
      %g: f32[2,3] = Mul(%z, @onesw) name="g"
      %y: f32[2,3] = Add(%f, %g) name="y"
      output "y" = %y
    }""", "eliminate-noops", """
      // 0 - x is a negation, not a no-op; z * ones[2,3] broadcasts z, so it stays too.
      CHECK: %f: f32[2,3] = Sub(@zero, %x)
      CHECK-NEXT: %g: f32[2,3] = Mul(%z, @onesw)
      CHECK-NEXT: %y: f32[2,3] = Add(%f, %g)""", weights={"onesw": __import__("numpy").ones((2, 3), "float32")})


def test_unit_pools_are_removed():
    check_pass("""graph "g" {
      input %x: f32[1,2,4,4]
      %m: f32[1,2,4,4] = MaxPool(%x) {kernel=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1]} name="m"
      %a: f32[1,2,4,4] = AveragePool(%m) {kernel=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1]} name="a"
      %s: f32[1,2,2,2] = MaxPool(%a) {kernel=[1, 1], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1]} name="s"
      output "y" = %s
    }""", "eliminate-noops", """
      CHECK-NOT: AveragePool
      CHECK: %s: f32[1,2,2,2] = MaxPool(%x) {kernel=[1, 1], strides=[2, 2]""")
