"""ONNX's backend node test suite (every case onnx.backend.test.case.node generates: 1884 with
onnx 1.23) on the interpreter through ember.onnx_backend, compared as ONNX's runner compares
(rtol 1e-3, atol 1e-7).

All cases run once per session in two worker processes with a time limit per case (see
bench/onnx_node_runner.py); each case is then one test here. tests/onnx_node_expected.py is
the one list of expected failures: a case that fails but is not listed fails its test, and a
listed case that passes fails too (remove it from the list), so the list stays exact. The
whole suite takes about 20 s on two cores (generating the data the first time, ~10 s more).
`python bench/conformance.py` prints the same results per op type."""
from __future__ import annotations

import pytest
from onnx import numpy_helper

from bench.onnx_node_data import generate, load_index, read_case
from bench.onnx_node_runner import Result, compare, run_cases
from ember.onnx_backend import prepare
from tests.onnx_node_expected import EXPECTED_FAILURES

BACKEND = "interpreter"
TIMEOUT_S = 120.0


def _cases():
    try:
        return load_index(generate())
    except ImportError as err:  # an onnx wheel without the backend test cases
        pytest.skip(f"ONNX backend node test cases are unavailable: {err}", allow_module_level=True)


CASES = _cases()
NAMES = [c.name for c in CASES]


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    return {r.name: r for r in run_cases(CASES, BACKEND, jobs=2, timeout=TIMEOUT_S)}


def test_expected_failures_name_real_cases():
    stale = sorted(set(EXPECTED_FAILURES) - set(NAMES))
    assert not stale, f"tests/onnx_node_expected.py lists cases the suite does not have: {stale}"


@pytest.mark.parametrize("name", NAMES)
def test_node_case(name, results):
    result = results[name]
    if name in EXPECTED_FAILURES:
        if result.status == "pass":
            pytest.fail(f"{name} passes now: remove it from EXPECTED_FAILURES in tests/onnx_node_expected.py")
        pytest.xfail(EXPECTED_FAILURES[name])
    assert result.status == "pass", f"{result.status}: {result.detail}"


DATA_DEPENDENT = [name for name, why in EXPECTED_FAILURES.items() if why.startswith("data-dependent output shape")]


@pytest.mark.parametrize("name", DATA_DEPENDENT)
def test_data_dependent_case_folds_when_its_inputs_are_constant(name):
    """The cases refused because an output shape depends on run-time data pass once that data
    is constant (the inputs become initializers): the op folds at import."""
    model, inputs, expected = read_case(next(c for c in CASES if c.name == name))
    graph = model.graph
    graph.initializer.extend(numpy_helper.from_array(a, vi.name) for vi, a in zip(graph.input, inputs, strict=False))
    del graph.input[:]
    compare(expected, prepare(model, backend=BACKEND).run([]))
