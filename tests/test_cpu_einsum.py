"""Einsum lowered for the cpu backend (lowering/einsum.py: Transpose, Reshape, Slice,
ReduceSum, MatMul, Mul) against the interpreter, which runs NumPy's einsum: transposes, sums,
traces and diagonals, inner, outer and batched products, chains of three operands, '...'
broadcasting, implicit outputs, size-1 and size-0 axes, float and integer types; at 1 and 2
threads and in an AVX2 build. Also: lowering keeps the numbers and leaves primitives only."""
from __future__ import annotations

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.graph import verify_graph
from ember.lowering import lower_graph
from ember.ops.linalg import EinsumAttrs
from ember.support.errors import EmberError
from tests.helpers import evaluate_graph, single_node_graph

BACKENDS = {"t1": {"num_threads": 1}, "t2": {"num_threads": 2}, "avx2": {"num_threads": 1, "march": "x86-64-v3"}}

# equation: operand shapes
CASES = {
    "ij->ji": [(3, 4)],
    "ij->i": [(3, 4)],
    "ij->": [(5, 7)],
    "->": [()],
    "ii": [(4, 4)],
    "ii->i": [(5, 5)],
    "...ii->...i": [(3, 5, 5)],
    "iij->j": [(3, 3, 2)],
    "i,i": [(5,), (5,)],
    "i,j->ij": [(3,), (4,)],
    "ij,ij->ij": [(3, 4), (3, 4)],
    "ij,jk": [(2, 3), (3, 4)],
    "ij,kj->ik": [(2, 3), (4, 3)],
    "bij,bjk->bik": [(5, 2, 3), (5, 3, 4)],
    "bhqd,bhkd->bhqk": [(2, 3, 4, 5), (2, 3, 6, 5)],
    "...ij,...jk->...ik": [(1, 2, 3), (4, 3, 2)],
    "...,...->...": [(2, 1), (3,)],
    "abc,cd,de->abe": [(2, 3, 4), (4, 5), (5, 2)],
    "bn,anm,bm->ba": [(2, 3), (4, 3, 5), (2, 5)],
    "ijk,jil->kl": [(2, 3, 4), (3, 2, 5)],
    "...i,...i->...i": [(1, 6), (4, 6)],
    "ij,jk->ik": [(3, 0), (0, 4)],
    "ab,b->a": [(1, 9), (9,)],
}


def _arrays(equation: str, dtype=np.float32, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = CASES[equation]
    if np.dtype(dtype).kind == "f":
        return [rng.standard_normal(s).astype(dtype) for s in shapes]
    return [rng.integers(-5, 6, s).astype(dtype) for s in shapes]


def check(equation: str, arrays: list[np.ndarray], backend: str = "t1") -> None:
    from ember.backends.cpu import CpuBackend

    graph, feeds = single_node_graph("Einsum", arrays, EinsumAttrs(equation))
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph("Einsum", arrays, EinsumAttrs(equation))
    actual = compile_graph(graph, CpuBackend(**BACKENDS[backend])).run(feeds)
    tol = 1e-5 if arrays[0].dtype == np.float32 else 1e-12
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype and actual[name].shape == value.shape, name
        np.testing.assert_allclose(actual[name], value, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("equation", sorted(CASES))
def test_einsum_matches_interpreter(equation):
    check(equation, _arrays(equation))


@pytest.mark.parametrize("equation", ["bij,bjk->bik", "...ii->...i", "i,j->ij", "abc,cd,de->abe"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_einsum_matches_interpreter_other_types(equation, dtype):
    check(equation, _arrays(equation, dtype))


@pytest.mark.parametrize("backend", ["t2", "avx2"])
@pytest.mark.parametrize("equation", ["bhqd,bhkd->bhqk", "bn,anm,bm->ba", "...ij,...jk->...ik"])
def test_einsum_matches_interpreter_threads_and_avx2(equation, backend):
    check(equation, _arrays(equation), backend)


@pytest.mark.parametrize("equation, shapes", [("ij->i", [(3, 0)]), ("ij,jk->ik", [(0, 3), (3, 4)]),
                                              ("bij,bjk->bik", [(0, 2, 3), (0, 3, 4)]), ("ii->i", [(0, 0)])])
def test_einsum_empty_axes_matches_interpreter(equation, shapes):
    rng = np.random.default_rng(1)
    check(equation, [rng.standard_normal(s).astype(np.float32) for s in shapes])


def test_einsum_spaces_and_larger_matmul_matches_interpreter():
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((3, 37, 65)).astype(np.float32), rng.standard_normal((65, 33)).astype(np.float32)]
    check(" bik , kj -> bij ", arrays, "t2")


def test_einsum_dropping_broadcast_axes_is_refused():
    """NumPy refuses an output without '...' when the operands have '...' axes; so does the
    lowering, naming the node, instead of summing them quietly."""
    from ember.backends.cpu import CpuBackend

    graph, _ = single_node_graph("Einsum", [np.ones((2, 3), np.float32)], EinsumAttrs("...i->i"))
    with pytest.raises(EmberError, match=r"node 'node' \(Einsum\).*drops its '\.\.\.' axes"):
        compile_graph(graph, CpuBackend(num_threads=1))


@pytest.mark.parametrize("equation", sorted(CASES))
def test_lowering_preserves_numbers(equation):
    arrays = _arrays(equation, np.float64)
    graph, feeds = single_node_graph("Einsum", arrays, EinsumAttrs(equation))
    before = evaluate_graph(graph, feeds)
    lower_graph(graph)
    verify_graph(graph)
    assert "Einsum" not in graph.op_counts()
    assert all(node.opdef.primitive for node in graph.nodes)
    after = evaluate_graph(graph, feeds)
    np.testing.assert_allclose(after["y0"], before["y0"], rtol=1e-12, atol=1e-12)
    assert after["y0"].shape == before["y0"].shape


def test_contractions_become_matmuls_without_copies_of_b():
    """'bhqd,bhkd->bhqk' is one MatMul with K transposed, 'ij,jk' one MatMul and nothing else."""
    for equation, ops in [("ij,jk", {"MatMul": 1}), ("bhqd,bhkd->bhqk", {"MatMul": 1, "Transpose": 1}),
                          ("ij->ji", {"Transpose": 1}), ("ij->i", {"ReduceSum": 1})]:
        graph, _ = single_node_graph("Einsum", _arrays(equation), EinsumAttrs(equation))
        lower_graph(graph)
        assert graph.op_counts() == ops, equation
