"""optimize-transposes and merge-reshapes: transposes merge, cancel, sink below elementwise
ops and become reshapes when they move no data; reshape chains collapse."""
from __future__ import annotations

from tests.filecheck import check_pass


def test_transpose_pairs_merge_or_cancel():
    check_pass("""graph "g" {
      input %x: f32[2,3,4]
      %a: f32[3,4,2] = Transpose(%x) {perm=[1, 2, 0]} name="a"
      %b: f32[2,3,4] = Transpose(%a) {perm=[2, 0, 1]} name="b"
      %c: f32[4,3,2] = Transpose(%b) {perm=[2, 1, 0]} name="c"
      %d: f32[3,2,4] = Transpose(%c) {perm=[1, 2, 0]} name="d"
      output "y" = %d
    }""", "optimize-transposes", """
      // a then b is the identity; c then d is one transpose of x.
      CHECK: input %x
      CHECK-NEXT: %d: f32[3,2,4] = Transpose(%x) {perm=[1, 0, 2]}
      CHECK-NEXT: output""")


def test_transposes_sink_through_elementwise_ops_and_cancel():
    check_pass("""graph "g" {
      input %x: f32[2,3,4]
      input %z: f32[2,3,4]
      const @bias: f32[2,1] = [0.5, -1.0]
      %t: f32[4,2,3] = Transpose(%x) {perm=[2, 0, 1]} name="t"
      %u: f32[4,2,3] = Transpose(%z) {perm=[2, 0, 1]} name="u"
      %r: f32[4,2,3] = Relu(%t) name="r"
      %s: f32[4,2,3] = Add(%r, %u) name="s"
      %b: f32[4,2,3] = Mul(%s, @bias) name="b"
      %y: f32[2,3,4] = Transpose(%b) {perm=[1, 2, 0]} name="y"
      output "y" = %y
    }""", "optimize-transposes", """
      CHECK: Relu(%x)
      CHECK-NEXT: Add({{.*}}, %z)
      // The bias constant was transposed back at compile time.
      CHECK-NEXT: Mul({{.*}}, @bias.t)
      CHECK-NOT: Transpose""")


def test_shared_transposes_are_not_duplicated():
    check_pass("""graph "g" {
      input %x: f32[2,3]
      %t: f32[3,2] = Transpose(%x) {perm=[1, 0]} name="t"
      %r: f32[3,2] = Relu(%t) name="r"
      %n: f32[3,2] = Neg(%t) name="n"
      %y: f32[3,2] = Add(%r, %n) name="y"
      output "y" = %y
    }""", "optimize-transposes", """
      CHECK: %t: f32[3,2] = Transpose(%x)
      CHECK-NEXT: %r: f32[3,2] = Relu(%t)
      CHECK-NEXT: %n: f32[3,2] = Neg(%t)""")


def test_transpose_of_unit_axes_becomes_reshape_and_merges():
    check_pass("""graph "g" {
      input %x: f32[25,1,1,8]
      %t: f32[25,1,1,8] = Transpose(%x) {perm=[0, 2, 1, 3]} name="t"
      %r: f32[25,8] = Reshape(%t) {shape=[25, 8]} name="r"
      %m: f32[1,8,25,1] = Transpose(%x) {perm=[1, 3, 0, 2]} name="m"
      output "r" = %r
      output "m" = %m
    }""", ["optimize-transposes", "merge-reshapes"], """
      // [0, 2, 1, 3] swaps two unit axes: a reshape, merged into the next one.
      CHECK: %r: f32[25,8] = Reshape(%x) {shape=[25, 8]}
      // [1, 3, 0, 2] moves the 25 behind the 8: real data movement stays a transpose.
      CHECK-NEXT: %m: f32[1,8,25,1] = Transpose(%x)""")


def test_reshape_chains_collapse():
    check_pass("""graph "g" {
      input %x: f32[2,3,4]
      %a: f32[6,4] = Reshape(%x) {shape=[6, 4]} name="a"
      %b: f32[24] = Reshape(%a) {shape=[24]} name="b"
      %c: f32[4,6] = Reshape(%b) {shape=[4, 6]} name="c"
      %d: f32[2,3,4] = Reshape(%c) {shape=[2, 3, 4]} name="d"
      %e: f32[2,12] = Reshape(%a) {shape=[2, 12]} name="e"
      %y: f32[2,3,4] = Relu(%d) name="y"
      output "y" = %y
      output "e" = %e
    }""", "merge-reshapes", """
      // The chain back to x's own shape vanishes; %e reads x directly.
      CHECK-NOT: %a
      CHECK: %e: f32[2,12] = Reshape(%x) {shape=[2, 12]}
      CHECK-NEXT: %y: f32[2,3,4] = Relu(%x)""")
