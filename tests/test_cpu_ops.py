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


def test_kernel_registry_names_real_instructions():
    from ember.codegen.kernels import C_KERNELS
    from ember.lir.ir import INSTRS

    unknown = sorted(op for op in C_KERNELS.ops() if op not in INSTRS)
    assert not unknown, f"C kernels registered for instructions that do not exist: {unknown}"


def _compare(actual: dict, expected: dict, tolerance: float) -> None:
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        if value.dtype.kind in "biu":
            np.testing.assert_array_equal(actual[name], value, err_msg=name)
        else:
            assert relative_error(actual[name], value) <= tolerance, name


@pytest.mark.parametrize("index", range(len(CASES)), ids=CASE_IDS)
def test_lowering_and_pipeline_keep_the_reference_semantics(index):
    """The interpreter lowers every non-primitive op, so for those this checks the lowering
    rules against the op's own reference; for primitives it checks what the pipeline does
    around an unchanged reference (optimization, memory plan, views). The references
    themselves are checked against ONNX Runtime by tests/test_onnx_node_suite.py."""
    graph, feeds = CASES[index].build()
    expected = evaluate_graph(graph, feeds)
    _compare(compile_graph(graph, "interpreter").run(feeds), expected, 1e-5)


@pytest.fixture(scope="module")
def cpu_threads():
    return 2


@pytest.mark.parametrize("index", range(len(CASES)), ids=CASE_IDS)
def test_cpu_matches_interpreter(index, cpu_threads):
    from ember.backends.cpu import CpuBackend
    from ember.support.errors import UnsupportedError

    graph, feeds = CASES[index].build()
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = CASES[index].build()
    try:
        compiled = compile_graph(graph, CpuBackend(num_threads=cpu_threads))
    except UnsupportedError as err:
        # Refusals come from the kernel registry, naming the op and the reason.
        assert "backend 'cpu' cannot run" in str(err)
        pytest.skip(str(err))
    actual = compiled.run(feeds)
    _compare(actual, expected, 1e-5)
