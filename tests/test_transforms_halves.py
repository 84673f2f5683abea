"""compute-halves-in-float32: ops on float16/bfloat16 compute in float32 between Casts; Casts
and Reshapes keep their 16-bit types; an op whose attributes fix a 16-bit result stays."""
from __future__ import annotations

from tests.filecheck import check_pass


def test_an_op_on_float16_computes_in_float32_between_casts():
    check_pass("""graph "g" {
      input %x: f16[2,3]
      input %y: f16[2,3]
      %s: f16[2,3] = Add(%x, %y) name="s"
      %m: f16[2] = ReduceMax(%s) {axes=[1], keepdims=false} name="m"
      output "m" = %m
    }""", "compute-halves-in-float32", """
      CHECK: : f32[2,3] = Cast(%x) {to=f32}
      CHECK-NEXT: : f32[2,3] = Cast(%y) {to=f32}
      CHECK-NEXT: : f32[2,3] = Add(
      CHECK: %s: f16[2,3] = Cast(
      CHECK: : f32[2] = ReduceMax(
      CHECK: %m: f16[2] = Cast(""")


def test_bfloat16_results_of_other_types_are_not_cast_back():
    check_pass("""graph "g" {
      input %x: bf16[4]
      %i: i64[] = ArgMax(%x) {axis=0, keepdims=false} name="i"
      %r: bf16[2,2] = Reshape(%x) {shape=[2, 2]} name="r"
      output "i" = %i
      output "r" = %r
    }""", "compute-halves-in-float32", """
      CHECK: f32[4] = Cast(%x) {to=f32}
      CHECK: %i: i64[] = ArgMax(
      CHECK: %r: bf16[2,2] = Reshape(%x)""")


def test_an_op_that_names_its_16_bit_result_type_stays():
    check_pass("""graph "g" {
      input %x: i8[4]
      input %s: f16[]
      %y: f16[4] = DequantizeLinear(%x, %s, none) {to=f16, axis=0} name="y"
      output "y" = %y
    }""", "compute-halves-in-float32", """
      CHECK: %y: f16[4] = DequantizeLinear(%x, %s, none) {to=f16, axis=0}
      CHECK-NOT: Cast""")
