"""The fast fold simulator (ember.isa.fold_sim) against the issue-by-issue one
(ember.isa.simulate): the same output and the same issue and cycle counts for every mapping
of the mapper's test cases, and the scheduler's compute term when streamed as it schedules."""
from __future__ import annotations

import numpy as np
import pytest

from ember.isa.describe import load_target
from ember.isa.fold_sim import count_cycles, run_folds, supported
from ember.isa.mapper import map_kernel
from ember.isa.schedule import schedule
from ember.isa.simulate import evaluate_expr, run_mapping
from tests.test_isa_mapper import CASES, NPU, kernel


@pytest.mark.parametrize("case, target, name", CASES, ids=[f"{c[1].name}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_folds_agree_with_the_issue_by_issue_simulator(case, target, name):
    rng = np.random.default_rng(5)
    expr = case.expr
    extents = expr.extents
    arrays = {a.tensor: rng.integers(-4, 5, size=tuple(i.span(extents) for i in a.indices)).astype(np.float64)
              for a in (expr.a, expr.b)}
    out_shape = tuple(i.span(extents) for i in expr.output.indices)
    expected = evaluate_expr(expr, arrays, out_shape)
    mappings, _ = map_kernel(case, target.instruction(name))
    for mapping in mappings[:6]:
        assert supported(mapping) is None, str(mapping)
        slow = run_mapping(mapping, arrays, out_shape)
        fast = run_folds(mapping, arrays, out_shape, dtype=np.float64)
        np.testing.assert_array_equal(fast.out, expected, err_msg=str(mapping))
        assert (fast.issues, fast.cycles) == (slow.issues, slow.cycles), str(mapping)


def test_streamed_folds_count_what_the_scheduler_counts():
    case = kernel("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:2048, j:40, k:300")
    mapping = next(m for m in map_kernel(case, NPU.instruction("systolic.ws.f32"))[0] if m.role("A") == "A")
    plan = schedule(mapping, NPU)
    stream = dict(plan.levels[1].tile)["t'"]
    assert stream < 2048  # the scratchpads do not hold the whole stream: it is tiled
    issues, cycles = count_cycles(mapping, stream)
    assert 2048 % stream == 0 and cycles == plan.compute_cycles
    # each fold pays the array's fill and drain: whole streams are cheaper than tiled ones
    assert count_cycles(mapping)[1] < cycles and count_cycles(mapping)[0] < issues
    # a stream that does not divide: its last tile costs its own length, in both
    ragged = kernel("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:3000, j:40, k:300")
    mapping = next(m for m in map_kernel(ragged, NPU.instruction("systolic.ws.f32"))[0] if m.role("A") == "A")
    plan = schedule(mapping, NPU)
    stream = dict(plan.levels[1].tile)["t'"]
    assert 3000 % stream != 0 and count_cycles(mapping, stream)[1] == plan.compute_cycles


def test_a_compound_instruction_index_is_refused_by_name():
    target = load_target("x86-avx512")
    mapping = map_kernel(kernel("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:4, j:16, k:4"),
                         target.instruction("vfmadd231ps.bcst"))[0][0]
    assert supported(mapping) is None
