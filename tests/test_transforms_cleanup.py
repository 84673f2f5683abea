"""The clean-up passes: dead code elimination, constant folding and common subexpression
elimination (text before/after and numerics)."""
from __future__ import annotations

from tests.filecheck import check_pass


def test_dce_drops_dead_nodes_and_constants():
    check_pass("""graph "g" {
      input %x: f32[4]
      const @unused: f32[4] = [1.0, 2.0, 3.0, 4.0]
      const @c: f32[4] = [1.0, 1.0, 1.0, 1.0]
      %dead: f32[4] = Add(%x, @c) name="dead"
      %y: f32[4] = Relu(%x) name="y"
      output "y" = %y
    }""", "dce", """
      CHECK-NOT: const
      CHECK-NOT: Add
      CHECK: %y: f32[4] = Relu(%x)""")


def test_constant_fold_evaluates_constant_subgraphs():
    check_pass("""graph "g" {
      input %x: f32[2,3]
      const @a: f32[3,2]
      %t: f32[2,3] = Transpose(@a) {perm=[1, 0]} name="t"
      %s: f32[2,3] = Mul(%t, %t) name="s"
      %y: f32[2,3] = Add(%x, %s) name="y"
      output "y" = %y
    }""", "constant-fold", """
      CHECK: const @s_1: f32[2,3] = [
      CHECK-NOT: Transpose
      CHECK-NOT: Mul
      CHECK: %y: f32[2,3] = Add(%x, @s_1)""")


CSE_GRAPH = """graph "g" {
  input %x: f32[2,4]
  const @c1: f32[4] = [1.0, 2.0, 3.0, 4.0]
  const @c2: f32[4] = [1.0, 2.0, 3.0, 4.0]
  const @c3: f32[4] = [-0.0, 2.0, 3.0, 4.0]
  const @c4: f32[4] = [0.0, 2.0, 3.0, 4.0]
  %a: f32[2,4] = Add(%x, @c1) name="a"
  %b: f32[2,4] = Add(@c2, %x) name="b"
  %ra: f32[2,4] = Relu(%a) name="ra"
  %rb: f32[2,4] = Relu(%b) name="rb"
  %s: f32[2,4] = Sub(%ra, %rb) name="s"
  %t: f32[2,4] = Sub(%rb, %ra) name="t"
  %u: f32[2,4] = Mul(%x, @c3) name="u"
  %v: f32[2,4] = Mul(%x, @c4) name="v"
  %w: f32[2,4] = Add(%s, %t) name="w"
  %z: f32[2,4] = Add(%u, %v) name="z"
  output "w" = %w
  output "z" = %z
}"""


def test_cse_merges_equal_constants_and_nodes_but_not_lookalikes():
    check_pass(CSE_GRAPH, "cse", """
      // The equal constants merge; -0.0 and 0.0 differ in bits, so those two stay apart.
      CHECK: const @c1
      CHECK-NOT: const @c2
      CHECK: const @c3
      CHECK: const @c4
      // Add is commutative, so Add(@c2, %x) is Add(%x, @c1); the Relu chain follows.
      CHECK: %a: f32[2,4] = Add(%x, @c1)
      CHECK-NEXT: %ra: f32[2,4] = Relu(%a)
      // Visiting in topological order, Sub(%rb, %ra) has become Sub(%ra, %ra) by the time
      // it is visited, so it merges too: chains of duplicates collapse in one run.
      CHECK-NEXT: %s: f32[2,4] = Sub(%ra, %ra)
      CHECK-NEXT: %u: f32[2,4] = Mul(%x, @c3)
      CHECK-NEXT: %v: f32[2,4] = Mul(%x, @c4)
      CHECK-NEXT: %w: f32[2,4] = Add(%s, %s)
      CHECK-NEXT: %z: f32[2,4] = Add(%u, %v)""")


def test_cse_merges_multi_result_nodes_and_outputs():
    check_pass("""graph "g" {
      input %x: f32[3]
      %a: f32[3] = Exp(%x) name="a"
      %b: f32[3] = Exp(%x) name="b"
      output "a" = %a
      output "b" = %b
    }""", "cse", """
      CHECK: %a: f32[3] = Exp(%x)
      CHECK-NOT: Exp
      CHECK: output "a" = %a
      CHECK-NEXT: output "b" = %a""")
