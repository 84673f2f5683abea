"""LIR passes: every pass has a before/after text test (the whole printed program must match)
and each check also runs the interpreter, on the planned arena, before and after on random
inputs. Negative cases pin down where sharing must NOT happen and that the planner then keeps
the buffers apart."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember  # noqa: F401  (registers passes and lowerings)
from ember.backends.interpreter import InterpretedProgram
from ember.lir.ir import Program
from ember.lir.passes import DEFAULT_LIR_PIPELINE, LIR_PASSES, get_lir_pass, run_lir_pipeline
from ember.lir.text import parse_program, print_program
from ember.memory import plan_memory
from ember.support.errors import EmberError


def run_program(program: Program, inputs: list[np.ndarray]) -> list[np.ndarray]:
    plan_memory(program)
    return InterpretedProgram(program).run(inputs)


def random_inputs(program: Program, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(b.type.shape).astype(b.type.dtype.numpy) for b in program.inputs]


def check(before: str, passes: list[str], expected: str) -> Program:
    """Runs `passes` (verifying after each) on the parsed `before`, compares the printed
    result with `expected` exactly, and the interpreter's outputs before and after."""
    before, expected = textwrap.dedent(before), textwrap.dedent(expected)
    reference = parse_program(before)
    program = parse_program(before)
    run_lir_pipeline(program, passes)
    assert print_program(program) == expected
    for seed in range(3):
        inputs = random_inputs(reference, seed)
        for want, got in zip(run_program(reference, inputs), run_program(program, inputs), strict=True):
            np.testing.assert_array_equal(got, want)
    return program


def assert_apart(program: Program, *names: str) -> None:
    """The planner gave the named activations disjoint bytes (they are live together)."""
    plan = plan_memory(program)
    spans = {p.buffer.name: (p.offset, p.offset + p.size) for p in plan.placements}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (lo1, hi1), (lo2, hi2) = spans[a], spans[b]
            assert hi1 <= lo2 or hi2 <= lo1, f"{a} {spans[a]} overlaps {b} {spans[b]}"


# dead stores and lifetimes -------------------------------------------------------------

DSE_INPUT = """\
    program "p" {
      input %a: f32[2] "a"
      input %x: f32[4] "x"
      output %y: f32[4] "y"
      alloc %dead: f32[4]
      Relu @out %dead, @in %x
      dealloc %dead
      alloc %t: f32[4]
      view %hi: f32[2] of %t at 8
      Exp @out %hi, @in %a
      dealloc %hi
      Relu @out %t, @in %x
      view %lo: f32[2] of %t at 0
      Exp @out %lo, @in %a
      dealloc %lo
      Neg @out %y, @in %t
      dealloc %t
    }
"""


def test_dse_removes_unread_and_overwritten_stores_but_sees_through_views():
    # %dead is never read; the first Exp writes half of %t, which Relu overwrites whole
    # before anyone reads it; the second Exp writes through a view that Neg reads via %t.
    check(DSE_INPUT, ["dse"], """\
        program "p" {
          input %a: f32[2] "a"
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          alloc %dead: f32[4]
          dealloc %dead
          alloc %t: f32[4]
          view %hi: f32[2] of %t at 8
          dealloc %hi
          Relu @out %t, @in %x
          view %lo: f32[2] of %t at 0
          Exp @out %lo, @in %a
          dealloc %lo
          Neg @out %y, @in %t
          dealloc %t
        }
    """)


def test_delete_dead_allocs_drops_buffers_and_views_left_unused():
    check(DSE_INPUT, ["dse", "delete-dead-allocs"], """\
        program "p" {
          input %a: f32[2] "a"
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          alloc %t: f32[4]
          Relu @out %t, @in %x
          view %lo: f32[2] of %t at 0
          Exp @out %lo, @in %a
          dealloc %lo
          Neg @out %y, @in %t
          dealloc %t
        }
    """)


LIFETIMES_INPUT = """\
    program "p" {
      input %x: f32[2,2] "x"
      output %y: f32[4] "y"
      alloc %t: f32[2,2]
      alloc %u: f32[4]
      view %r: f32[4] of %t at 0
      alloc %unused: f32[4]
      Relu @out %t, @in %x
      Exp @out %u, @in %r
      Neg @out %y, @in %u
      dealloc %r
      dealloc %u
      dealloc %t
      dealloc %unused
    }
"""


def test_hoist_dealloc_ends_lives_after_last_use_views_before_bases():
    check(LIFETIMES_INPUT, ["hoist-dealloc"], """\
        program "p" {
          input %x: f32[2,2] "x"
          output %y: f32[4] "y"
          alloc %t: f32[2,2]
          alloc %u: f32[4]
          view %r: f32[4] of %t at 0
          alloc %unused: f32[4]
          dealloc %unused
          Relu @out %t, @in %x
          Exp @out %u, @in %r
          dealloc %r
          dealloc %t
          Neg @out %y, @in %u
          dealloc %u
        }
    """)


def test_sink_alloc_starts_lives_before_first_use_bases_before_views():
    check(LIFETIMES_INPUT, ["sink-alloc"], """\
        program "p" {
          input %x: f32[2,2] "x"
          output %y: f32[4] "y"
          alloc %t: f32[2,2]
          Relu @out %t, @in %x
          alloc %u: f32[4]
          view %r: f32[4] of %t at 0
          Exp @out %u, @in %r
          Neg @out %y, @in %u
          dealloc %r
          dealloc %u
          dealloc %t
          alloc %unused: f32[4]
          dealloc %unused
        }
    """)


# buffer sharing --------------------------------------------------------------------------

def test_share_buffers_writes_elementwise_result_over_dying_operand():
    check("""\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          alloc %a: f32[4]
          Exp @out %a, @in %x
          alloc %b: f32[4]
          Relu @out %b, @in %a
          dealloc %a
          Neg @out %y, @in %b
          dealloc %b
        }
    """, ["share-buffers"], """\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          alloc %a: f32[4]
          Exp @out %a, @in %x
          Relu @out %a, @in %a
          Neg @out %y, @in %a
          dealloc %a
        }
    """)


def test_share_buffers_places_dying_operand_inside_a_result_view():
    # %row is a slice of %c, so %a cannot take its place; %a moves into %row instead.
    check("""\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[2,4] "y"
          alloc %c: f32[2,4]
          alloc %a: f32[4]
          Exp @out %a, @in %x
          view %row: f32[4] of %c at 16
          Relu @out %row, @in %a
          dealloc %a
          view %row0: f32[4] of %c at 0
          Neg @out %row0, @in %x
          dealloc %row0
          dealloc %row
          Relu @out %y, @in %c
          dealloc %c
        }
    """, ["share-buffers"], """\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[2,4] "y"
          alloc %c: f32[2,4]
          view %row: f32[4] of %c at 16
          view %a: f32[4] of %row at 0
          Exp @out %a, @in %x
          Relu @out %row, @in %a
          dealloc %a
          view %row0: f32[4] of %c at 0
          Neg @out %row0, @in %x
          dealloc %row0
          dealloc %row
          Relu @out %y, @in %c
          dealloc %c
        }
    """)


READ_AFTER = """\
    program "p" {
      input %x: f32[4] "x"
      output %y: f32[4] "y"
      alloc %a: f32[4]
      Exp @out %a, @in %x
      alloc %b: f32[4]
      Relu @out %b, @in %a
      Add @out %y, @in %a, @in %b
      dealloc %a
      dealloc %b
    }
"""

PLACEHOLDERS = """\
    program "p" {
      weight @w: f32[4] = [1.0, 2.0, 3.0, 4.0]
      input %x: f32[4] "x"
      output %y: f32[4] "y"
      output %z: f32[4] "z"
      alloc %a: f32[4]
      Exp @out %a, @in %x
      Relu @out %y, @in %a
      dealloc %a
      alloc %b: f32[4]
      Relu @out %b, @in %x
      alloc %c: f32[4]
      Neg @out %c, @in @w
      Add @out %z, @in %b, @in %c
      dealloc %b
      dealloc %c
    }
"""

VIEW_ALIVE = """\
    program "p" {
      input %x: f32[4] "x"
      output %y: f32[4] "y"
      output %y2: f32[2,2] "y2"
      alloc %a: f32[4]
      Exp @out %a, @in %x
      view %v: f32[2,2] of %a at 0
      alloc %b: f32[4]
      Relu @out %b, @in %a
      Neg @out %y, @in %b
      dealloc %b
      Neg @out %y2, @in %v
      dealloc %v
      dealloc %a
    }
"""

BROADCAST_AND_NOT_ELEMENTWISE = """\
    program "p" {
      input %x: f32[4] "x"
      input %m: f32[2,4] "m"
      input %k: f32[4,4] "k"
      output %y: f32[2,4] "y"
      alloc %a: f32[4]
      Exp @out %a, @in %x
      alloc %b: f32[2,4]
      Add @out %b, @in %a, @in %m
      dealloc %a
      alloc %c: f32[2,4]
      MatMul @out %c, @in %b, @in %k
      dealloc %b
      Neg @out %y, @in %c
      dealloc %c
    }
"""


@pytest.mark.parametrize("text, apart", [
    (READ_AFTER, ("a", "b")),                  # %a is read after %b is written
    (PLACEHOLDERS, ("b", "c")),                # outputs, inputs and weights are never shared
    (VIEW_ALIVE, ("a", "b")),                  # a view of %a is still read later
    (BROADCAST_AND_NOT_ELEMENTWISE, ("b", "c")),  # %a is broadcast; MatMul is not elementwise
], ids=["read-after-write", "placeholders", "view-alive", "broadcast-and-matmul"])
def test_share_buffers_leaves_unsafe_candidates_and_planner_keeps_them_apart(text, apart):
    check(text, ["share-buffers"], text)
    program = parse_program(textwrap.dedent(text))
    run_lir_pipeline(program, DEFAULT_LIR_PIPELINE)
    assert_apart(program, *apart)


# views --------------------------------------------------------------------------------

def test_copy_elimination_forwards_into_outputs_and_out_of_inputs():
    # %a can live in output %y; %b can alias input %x (only read); output %w must stay a copy.
    check("""\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          output %z: f32[4] "z"
          output %w: f32[4] "w"
          alloc %a: f32[4]
          Exp @out %a, @in %x
          copy @out %y, @in %a
          alloc %b: f32[4]
          copy @out %b, @in %x
          Add @out %z, @in %a, @in %b
          dealloc %a
          dealloc %b
          copy @out %w, @in %x
        }
    """, ["copy-elimination"], """\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          output %z: f32[4] "z"
          output %w: f32[4] "w"
          view %a: f32[4] of %y at 0
          Exp @out %a, @in %x
          view %b: f32[4] of %x at 0
          Add @out %z, @in %a, @in %b
          dealloc %a
          dealloc %b
          copy @out %w, @in %x
        }
    """)


def test_copy_elimination_deletes_copy_onto_the_same_bytes():
    check("""\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          alloc %a: f32[4]
          Exp @out %a, @in %x
          view %v: f32[4] of %a at 0
          copy @out %v, @in %a
          dealloc %v
          Neg @out %y, @in %a
          dealloc %a
        }
    """, ["copy-elimination"], """\
        program "p" {
          input %x: f32[4] "x"
          output %y: f32[4] "y"
          alloc %a: f32[4]
          Exp @out %a, @in %x
          view %v: f32[4] of %a at 0
          dealloc %v
          Neg @out %y, @in %a
          dealloc %a
        }
    """)


def test_reshape_views_backward_forward_and_into_outputs():
    check("""\
        program "p" {
          input %x: f32[2,3] "x"
          output %y: f32[6] "y"
          output %z: f32[3,2] "z"
          alloc %a: f32[2,3]
          Exp @out %a, @in %x
          alloc %r: f32[6]
          Reshape @out %r, @in %a {shape=[6]}
          dealloc %a
          Neg @out %y, @in %r
          dealloc %r
          alloc %q: f32[6]
          Reshape @out %q, @in %x {shape=[6]}
          alloc %e: f32[6]
          Exp @out %e, @in %q
          dealloc %q
          Reshape @out %z, @in %e {shape=[3, 2]}
          dealloc %e
        }
    """, ["reshape-views"], """\
        program "p" {
          input %x: f32[2,3] "x"
          output %y: f32[6] "y"
          output %z: f32[3,2] "z"
          alloc %r: f32[6]
          view %a: f32[2,3] of %r at 0
          Exp @out %a, @in %x
          dealloc %a
          Neg @out %y, @in %r
          dealloc %r
          view %q: f32[6] of %x at 0
          view %e: f32[6] of %z at 0
          Exp @out %e, @in %q
          dealloc %q
          dealloc %e
        }
    """)


def test_reshape_views_keep_a_reshape_whose_source_is_overwritten_later():
    # The first Reshape must stay a copy: %a changes afterwards while %r still needs the old
    # value. The second may let %a live inside %f, since %a is not written after it.
    check("""\
        program "p" {
          input %x: f32[2,3] "x"
          input %x2: f32[2,3] "x2"
          output %y: f32[6] "y"
          alloc %a: f32[2,3]
          Exp @out %a, @in %x
          alloc %r: f32[6]
          Reshape @out %r, @in %a {shape=[6]}
          Relu @out %a, @in %x2
          alloc %f: f32[6]
          Reshape @out %f, @in %a {shape=[6]}
          dealloc %a
          Add @out %y, @in %r, @in %f
          dealloc %r
          dealloc %f
        }
    """, ["reshape-views"], """\
        program "p" {
          input %x: f32[2,3] "x"
          input %x2: f32[2,3] "x2"
          output %y: f32[6] "y"
          alloc %f: f32[6]
          view %a: f32[2,3] of %f at 0
          Exp @out %a, @in %x
          alloc %r: f32[6]
          Reshape @out %r, @in %a {shape=[6]}
          Relu @out %a, @in %x2
          dealloc %a
          Add @out %y, @in %r, @in %f
          dealloc %r
          dealloc %f
        }
    """)


def test_slice_views_for_contiguous_runs_only():
    # Rows 1..2 and the run a[2, 1:3] are contiguous; a column is not.
    check("""\
        program "p" {
          input %x: f32[4,3] "x"
          output %y: f32[2,3] "y"
          output %z: f32[4,1] "z"
          output %w: f32[1,2] "w"
          alloc %a: f32[4,3]
          Exp @out %a, @in %x
          alloc %s: f32[2,3]
          Slice @out %s, @in %a {axes=[0], starts=[1], ends=[3], steps=[1]}
          Neg @out %y, @in %s
          dealloc %s
          alloc %c: f32[4,1]
          Slice @out %c, @in %a {axes=[1], starts=[1], ends=[2], steps=[1]}
          Neg @out %z, @in %c
          dealloc %c
          alloc %d: f32[1,2]
          Slice @out %d, @in %a {axes=[0, 1], starts=[2, 1], ends=[3, 3], steps=[1, 1]}
          dealloc %a
          Neg @out %w, @in %d
          dealloc %d
        }
    """, ["slice-views"], """\
        program "p" {
          input %x: f32[4,3] "x"
          output %y: f32[2,3] "y"
          output %z: f32[4,1] "z"
          output %w: f32[1,2] "w"
          alloc %a: f32[4,3]
          Exp @out %a, @in %x
          view %s: f32[2,3] of %a at 12
          Neg @out %y, @in %s
          dealloc %s
          alloc %c: f32[4,1]
          Slice @out %c, @in %a {axes=[1], starts=[1], ends=[2], steps=[1]}
          Neg @out %z, @in %c
          dealloc %c
          view %d: f32[1,2] of %a at 28
          Neg @out %w, @in %d
          dealloc %d
          dealloc %a
        }
    """)


def test_concat_in_place_producers_write_their_slices_and_leftovers_are_copied():
    check("""\
        program "p" {
          input %x: f32[1,4] "x"
          input %x2: f32[2,4] "x2"
          output %y: f32[4,4] "y"
          alloc %a: f32[1,4]
          Exp @out %a, @in %x
          alloc %b: f32[2,4]
          Neg @out %b, @in %x2
          Concat @out %y, @in %a, @in %b, @in %x {axis=0}
          dealloc %a
          dealloc %b
        }
    """, ["concat-in-place"], """\
        program "p" {
          input %x: f32[1,4] "x"
          input %x2: f32[2,4] "x2"
          output %y: f32[4,4] "y"
          view %a: f32[1,4] of %y at 0
          Exp @out %a, @in %x
          view %b: f32[2,4] of %y at 16
          Neg @out %b, @in %x2
          view %y.part: f32[1,4] of %y at 48
          copy @out %y.part, @in %x
          dealloc %y.part
          dealloc %a
          dealloc %b
        }
    """)


def test_concat_in_place_skips_inner_axes():
    text = """\
        program "p" {
          input %x: f32[2,1] "x"
          output %y: f32[2,2] "y"
          alloc %a: f32[2,1]
          Exp @out %a, @in %x
          Concat @out %y, @in %a, @in %a {axis=1}
          dealloc %a
        }
    """
    check(text, ["concat-in-place"], text)


def test_concat_of_one_operand_twice_places_it_once_and_copies_the_other():
    check("""\
        program "p" {
          input %x: f32[1,2] "x"
          output %y: f32[2,2] "y"
          alloc %a: f32[1,2]
          Exp @out %a, @in %x
          Concat @out %y, @in %a, @in %a {axis=0}
          dealloc %a
        }
    """, ["concat-in-place"], """\
        program "p" {
          input %x: f32[1,2] "x"
          output %y: f32[2,2] "y"
          view %a: f32[1,2] of %y at 0
          Exp @out %a, @in %x
          view %y.part: f32[1,2] of %y at 8
          copy @out %y.part, @in %a
          dealloc %y.part
          dealloc %a
        }
    """)


# the pipeline and the registry --------------------------------------------------------

def test_default_pipeline_chains_views_through_concat_reshape_and_slice():
    # A GRU-like tail: per-step results reshaped and concatenated into the output; every
    # step's producer ends up writing straight into the output.
    program = check("""\
        program "p" {
          input %x: f32[2,4] "x"
          output %y: f32[2,1,4] "y"
          alloc %s0: f32[1,4]
          Slice @out %s0, @in %x {axes=[0], starts=[0], ends=[1], steps=[1]}
          alloc %h0: f32[1,4]
          Tanh @out %h0, @in %s0
          dealloc %s0
          alloc %r0: f32[1,1,4]
          Reshape @out %r0, @in %h0 {shape=[1, 1, 4]}
          alloc %s1: f32[1,4]
          Slice @out %s1, @in %x {axes=[0], starts=[1], ends=[2], steps=[1]}
          alloc %h1: f32[1,4]
          Add @out %h1, @in %s1, @in %h0
          dealloc %s1
          dealloc %h0
          alloc %r1: f32[1,1,4]
          Reshape @out %r1, @in %h1 {shape=[1, 1, 4]}
          dealloc %h1
          Concat @out %y, @in %r0, @in %r1 {axis=0}
          dealloc %r0
          dealloc %r1
        }
    """, DEFAULT_LIR_PIPELINE, """\
        program "p" {
          input %x: f32[2,4] "x"
          output %y: f32[2,1,4] "y"
          view %s0: f32[1,4] of %x at 0
          view %r0: f32[1,1,4] of %y at 0
          view %h0: f32[1,4] of %r0 at 0
          Tanh @out %h0, @in %s0
          dealloc %s0
          view %s1: f32[1,4] of %x at 16
          view %r1: f32[1,1,4] of %y at 16
          view %h1: f32[1,4] of %r1 at 0
          Add @out %h1, @in %s1, @in %h0
          dealloc %h0
          dealloc %h1
          dealloc %s1
          dealloc %r0
          dealloc %r1
        }
    """)
    assert program.activations() == []


def test_every_lir_pass_documents_numbered_rules_and_has_a_text_test():
    import ember.codegen  # noqa: F401  (registers the cpu backend's LIR passes)

    source = "".join(p.read_text() for p in Path(__file__).parent.glob("test_lir*.py"))
    for name, cls in LIR_PASSES.items():
        assert re.search(r"^\s*1\.", cls.__doc__ or "", re.MULTILINE), f"LIR pass {name} lists no numbered rules"
        assert f'"{name}"' in source, f"LIR pass {name} has no text test here"
    assert set(DEFAULT_LIR_PIPELINE) <= set(LIR_PASSES)


def test_unknown_lir_pass_names_the_known_ones():
    with pytest.raises(EmberError, match="unknown LIR pass 'nope'.*share-buffers"):
        get_lir_pass("nope")


# randomized graphs through the whole pipeline -----------------------------------------

def _random_graph(seed: int):
    """Inputs, then elementwise ops, reshapes, slices and concats on random earlier values
    (the shapes that make views, in-place writes and their refusals likely), and a few
    outputs, sometimes repeated or reading an input."""
    from ember.graph import Graph
    from ember.ops.tensor import AxisAttrs, ReshapeAttrs, SliceAttrs
    from ember.types import DType, TensorType

    rng = np.random.default_rng(seed)
    g = Graph(f"random{seed}")
    values = [g.add_input(f"x{i}", TensorType(DType.FLOAT32, tuple(int(d) for d in rng.integers(1, 5, 2))))
              for i in range(int(rng.integers(1, 3)))]
    for _ in range(int(rng.integers(3, 25))):
        v = values[int(rng.integers(len(values)))]
        r, c = v.type.shape
        like = [u for u in values if u.type.shape == v.type.shape]
        kind = int(rng.integers(5))
        if kind == 0:
            values.append(g.add(str(rng.choice(["Relu", "Tanh", "Neg", "Sigmoid"])), v))
        elif kind == 1:
            values.append(g.add(str(rng.choice(["Add", "Mul", "Sub"])), v, like[int(rng.integers(len(like)))]))
        elif kind == 2:
            shape = [(c, r), (1, r * c), (r * c, 1)][int(rng.integers(3))]
            values.append(g.add("Reshape", v, attrs=ReshapeAttrs(shape)))
        elif kind == 3:
            axis = int(rng.integers(2))
            start = int(rng.integers(v.type.shape[axis]))
            stop = int(rng.integers(start + 1, v.type.shape[axis] + 1))
            values.append(g.add("Slice", v, attrs=SliceAttrs((axis,), (start,), (stop,), (1,))))
        else:
            axis = int(rng.integers(2))
            fits = [u for u in values if u.type.shape[1 - axis] == v.type.shape[1 - axis]]
            parts = [fits[int(rng.integers(len(fits)))] for _ in range(int(rng.integers(1, 4)))]
            values.append(g.add("Concat", v, *parts, attrs=AxisAttrs(axis)))
    picks = [values[-1]] + [values[int(i)] for i in rng.integers(0, len(values), int(rng.integers(0, 3)))]
    g.set_outputs([(f"o{i}", v) for i, v in enumerate(picks)])
    return g


def test_random_graphs_compute_the_same_through_passes_and_planned_arena():
    from ember.driver import compile_graph
    from tests.helpers import evaluate_graph
    from tests.helpers import random_inputs as graph_inputs

    for seed in range(120):
        inputs = graph_inputs(_random_graph(seed), seed)
        expected = evaluate_graph(_random_graph(seed), inputs)
        actual = compile_graph(_random_graph(seed)).run(inputs)
        for name, value in expected.items():
            np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed} {name}")
