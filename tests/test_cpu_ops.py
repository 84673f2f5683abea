"""Op conformance on the cpu backend: every case in tests/op_cases.py runs on the interpreter
(checked against the op table's reference) and on cpu (checked against the interpreter)."""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401
from ember.driver import compile_graph
from ember.ops import OPS
from tests.helpers import evaluate_graph, relative_error
from tests.op_cases import CASES

CASE_IDS = [f"{i}-{c.id}" for i, c in enumerate(CASES)]


def test_every_op_has_a_case():
    covered = {c.op for c in CASES}
    missing = sorted(set(OPS) - covered)
    assert not missing, f"ops without a conformance case in tests/op_cases.py: {missing}"


def test_every_op_runs_on_cpu_or_is_exempt():
    from ember.codegen.exemptions import C_EXEMPT
    from ember.codegen.kernels import C_KERNELS
    from ember.lowering import LOWERINGS

    missing = [name for name, op in OPS.items()
               if name not in C_KERNELS and name not in C_EXEMPT and (op.primitive or name not in LOWERINGS)]
    assert not missing, f"ops with neither a C kernel, a lowering nor an exemption: {missing}"
    stale = [name for name in C_EXEMPT if name in C_KERNELS]
    assert not stale, f"exempt ops that have a kernel now: {stale}"


def _compare(actual: dict, expected: dict, tolerance: float) -> None:
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        if value.dtype.kind in "biu":
            np.testing.assert_array_equal(actual[name], value, err_msg=name)
        else:
            assert relative_error(actual[name], value) <= tolerance, name


@pytest.mark.parametrize("index", range(len(CASES)), ids=CASE_IDS)
def test_interpreter_matches_reference(index):
    graph, feeds = CASES[index].build()
    expected = evaluate_graph(graph, feeds)
    _compare(compile_graph(graph, "interpreter").run(feeds), expected, 1e-5)


@pytest.fixture(scope="module")
def cpu_threads():
    return 2


@pytest.mark.parametrize("index", range(len(CASES)), ids=CASE_IDS)
def test_cpu_matches_interpreter(index, cpu_threads):
    from ember.codegen.exemptions import C_EXEMPT

    if CASES[index].op in C_EXEMPT:
        pytest.skip(f"{CASES[index].op} has no C kernel: {C_EXEMPT[CASES[index].op]}")
    graph, feeds = CASES[index].build()
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = CASES[index].build()
    from ember.backends.cpu import CpuBackend

    actual = compile_graph(graph, CpuBackend(num_threads=cpu_threads)).run(feeds)
    _compare(actual, expected, 1e-5)
