"""simplify-concat-slice: trivial and nested concats, slices that pick concat operands."""
from __future__ import annotations

from tests.filecheck import check_pass


def test_single_operand_and_nested_concats():
    check_pass("""graph "g" {
      input %a: f32[2,1]
      input %b: f32[2,2]
      input %c: f32[2,3]
      %one: f32[2,1] = Concat(%a) {axis=1} name="one"
      %inner: f32[2,3] = Concat(%one, %b) {axis=-1} name="inner"
      %outer: f32[2,6] = Concat(%inner, %c) {axis=1} name="outer"
      %other: f32[4,3] = Concat(%c, %c) name="other"
      %nested: f32[4,6] = Concat(%other, %other) {axis=1} name="nested"
      output "outer" = %outer
      output "nested" = %nested
    }""", "simplify-concat-slice", """
      CHECK: %outer: f32[2,6] = Concat(%a, %b, %c) {axis=1}
      // A concat along another axis does not flatten.
      CHECK: %other: f32[4,3] = Concat(%c, %c)
      CHECK-NEXT: %nested: f32[4,6] = Concat(%other, %other) {axis=1}""")


def test_slices_of_concats_pick_operands():
    check_pass("""graph "g" {
      input %a: f32[2,3,1]
      input %b: f32[2,3,2]
      input %c: f32[2,3,4]
      %cat: f32[2,3,7] = Concat(%a, %b, %c) {axis=2} name="cat"
      %pick_b: f32[2,3,2] = Slice(%cat) {axes=[2], starts=[1], ends=[3], steps=[1]} name="pick_b"
      %pick_bc: f32[2,3,6] = Slice(%cat) {axes=[0, 2], starts=[0, 1], ends=[2, 7], steps=[1, 1]} name="pick_bc"
      %cut: f32[2,3,2] = Slice(%cat) {axes=[2], starts=[2], ends=[4], steps=[1]} name="cut"
      %rows: f32[1,3,2] = Slice(%pick_b) {axes=[0], starts=[0], ends=[1], steps=[1]} name="rows"
      output "pick_b" = %pick_b
      output "pick_bc" = %pick_bc
      output "cut" = %cut
      output "rows" = %rows
    }""", "simplify-concat-slice", """
      CHECK: %cat: f32[2,3,7] = Concat(%a, %b, %c)
      CHECK-NEXT: %pick_bc: f32[2,3,6] = Concat(%b, %c) {axis=2}
      // A slice through the middle of an operand stays.
      CHECK-NEXT: %cut: f32[2,3,2] = Slice(%cat)
      CHECK-NEXT: %rows: f32[1,3,2] = Slice(%b)
      CHECK: output "pick_b" = %b""")


def test_empty_operands_are_dropped():
    check_pass("""graph "g" {
      input %a: f32[0,3]
      input %b: f32[2,3]
      %cat: f32[2,3] = Concat(%a, %b) name="cat"
      %y: f32[2,3] = Relu(%cat) name="y"
      output "y" = %y
    }""", "simplify-concat-slice", """
      CHECK-NOT: Concat
      CHECK: %y: f32[2,3] = Relu(%b)""")
