"""The attention family lowered for the cpu backend (lowering/attention.py) against the
interpreter, which runs the ops' NumPy references whole: Attention (3-D and 4-D, GQA, bool,
float and short masks, causal and sliding windows, KV cache, key padding, scale, softcap,
every qk_matmul_output mode, fully masked rows), RotaryEmbedding (halves and interleaved,
partial rotation, with and without position_ids) and LinearAttention (every update rule,
grouped heads, a past state); at 1 and 2 threads and in an AVX2 build. Also: lowering keeps
the numbers on the graph, and leaves primitives only."""
from __future__ import annotations

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.graph import verify_graph
from ember.lowering import lower_graph
from ember.ops.attention import AttentionAttrs, LinearAttentionAttrs, RotaryAttrs
from tests.helpers import evaluate_graph, single_node_graph

F32, F64 = np.float32, np.float64
BACKENDS = {"t1": {"num_threads": 1}, "t2": {"num_threads": 2}, "avx2": {"num_threads": 1, "march": "x86-64-v3"}}


def _rand(shape, dtype=F32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _bool(shape, seed=0, p=0.7) -> np.ndarray:
    return np.random.default_rng(seed).random(shape) < p


def check(op: str, arrays: list, attrs, backend: str = "t1", constant: tuple[int, ...] = ()) -> dict:
    """cpu (lowered) against the interpreter (the reference); returns the interpreter's results."""
    from ember.backends.cpu import CpuBackend

    graph, feeds = single_node_graph(op, arrays, attrs, constant=constant)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs, constant=constant)
    actual = compile_graph(graph, CpuBackend(**BACKENDS[backend])).run(feeds)
    tol = 1e-4 if arrays[0].dtype == F32 else 1e-10
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        np.testing.assert_allclose(actual[name], value, rtol=tol, atol=tol, err_msg=name)
    return expected


# Attention --------------------------------------------------------------------------------

# name: (arrays, attrs, operands bound as constants)
ATTENTION = {
    "4d": lambda: ([_rand((2, 3, 4, 8)), _rand((2, 3, 6, 8), seed=1), _rand((2, 3, 6, 5), seed=2)],
                   AttentionAttrs(), ()),
    "3d_gqa": lambda: ([_rand((2, 4, 4 * 8)), _rand((2, 6, 2 * 8), seed=1), _rand((2, 6, 2 * 5), seed=2)],
                       AttentionAttrs(q_num_heads=4, kv_num_heads=2, scale=0.3), ()),
    "3d_mqa_causal_window": lambda: ([_rand((1, 5, 3 * 4)), _rand((1, 7, 4), seed=1), _rand((1, 7, 3), seed=2)],
                                     AttentionAttrs(is_causal=True, q_num_heads=3, kv_num_heads=1,
                                                    left_window_size=2), ()),
    "float_mask_causal_softcap_bias_out": lambda: (
        [_rand((2, 3, 4, 8)), _rand((2, 3, 6, 8), seed=1), _rand((2, 3, 6, 8), seed=2), _rand((2, 1, 4, 6), seed=3)],
        AttentionAttrs(is_causal=True, softcap=2.0, qk_matmul_output_mode=2), ()),
    "bool_mask_masked_row_softmax_out": lambda: (
        [_rand((1, 2, 3, 8)), _rand((1, 2, 4, 8), seed=1), _rand((1, 2, 4, 8), seed=2),
         np.array([[True, False, True, True], [False, False, False, False], [True, True, True, False]])],
        AttentionAttrs(qk_matmul_output_mode=3), ()),
    "constant_bool_mask_masked_row": lambda: (
        [_rand((1, 2, 3, 8)), _rand((1, 2, 4, 8), seed=1), _rand((1, 2, 4, 8), seed=2),
         np.array([[True, False, True, True], [False, False, False, False], [True, True, True, False]])],
        AttentionAttrs(), (3,)),
    "past_present_causal_scores_out": lambda: (
        [_rand((2, 3, 4, 8)), _rand((2, 3, 2, 8), seed=1), _rand((2, 3, 2, 6), seed=2), _rand((4, 9), seed=3),
         _rand((2, 3, 7, 8), seed=4), _rand((2, 3, 7, 6), seed=5)],
        AttentionAttrs(is_causal=True, scale=0.1, qk_matmul_output_mode=1), ()),
    "short_bool_mask_with_past": lambda: (
        [_rand((1, 2, 3, 4)), _rand((1, 2, 3, 4), seed=1), _rand((1, 2, 3, 4), seed=2), _bool((2, 3, 4), seed=3),
         _rand((1, 2, 2, 4), seed=4), _rand((1, 2, 2, 4), seed=5)],
        AttentionAttrs(), ()),
    "nonpad_causal_windows": lambda: (
        [_rand((3, 2, 2, 8)), _rand((3, 2, 6, 8), seed=1), _rand((3, 2, 6, 8), seed=2), None, None, None,
         np.array([6, 3, 1], np.int64)],
        AttentionAttrs(is_causal=True, left_window_size=3, right_window_size=0), ()),
    "nonpad_bool_mask": lambda: (
        [_rand((2, 2, 3, 4)), _rand((2, 2, 5, 4), seed=1), _rand((2, 2, 5, 4), seed=2), _bool((2, 1, 3, 5), seed=3),
         None, None, np.array([5, 2], np.int64)],
        AttentionAttrs(is_causal=True), ()),
    "bidirectional_window": lambda: ([_rand((1, 1, 5, 3)), _rand((1, 1, 5, 3), seed=1), _rand((1, 1, 5, 3), seed=2)],
                                     AttentionAttrs(left_window_size=1, right_window_size=2), ()),
    "decode_size1": lambda: ([_rand((1, 1, 1, 1)), _rand((1, 1, 1, 1), seed=1), _rand((1, 1, 1, 1), seed=2)],
                             AttentionAttrs(is_causal=True), ()),
    "empty_batch": lambda: ([_rand((0, 2, 3, 4)), _rand((0, 2, 5, 4), seed=1), _rand((0, 2, 5, 4), seed=2)],
                            AttentionAttrs(is_causal=True), ()),
    "empty_queries": lambda: ([_rand((1, 2, 0, 4)), _rand((1, 2, 5, 4), seed=1), _rand((1, 2, 5, 4), seed=2)],
                              AttentionAttrs(), ()),
    "odd_sizes_f64_gqa_mask": lambda: (
        [_rand((3, 6, 5, 7), F64), _rand((3, 2, 9, 7), F64, 1), _rand((3, 2, 9, 3), F64, 2), _rand((9,), F64, 3)],
        AttentionAttrs(softcap=1.5, qk_matmul_output_mode=3), ()),
}


def _attention(case: str, backend: str) -> dict:
    arrays, attrs, constant = ATTENTION[case]()
    return check("Attention", arrays, attrs, backend, constant)


@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_attention_matches_interpreter(case):
    _attention(case, "t1")


@pytest.mark.parametrize("backend", ["t2", "avx2"])
@pytest.mark.parametrize("case", ["3d_gqa", "float_mask_causal_softcap_bias_out", "nonpad_causal_windows"])
def test_attention_matches_interpreter_threads_and_avx2(case, backend):
    _attention(case, backend)


def test_attention_fully_masked_rows_give_zeros():
    expected = _attention("bool_mask_masked_row_softmax_out", "t1")
    assert np.all(expected["y0"][:, :, 1] == 0) and np.all(expected["y3"][:, :, 1] == 0)
    assert np.all(np.isfinite(expected["y0"]))


# RotaryEmbedding --------------------------------------------------------------------------


def _rotary_case(rank: int, interleaved: bool, dim: int, positions: bool, dtype=F32):
    b, heads, s, head = 2, 3, 5, 8
    x = _rand((b, heads, s, head) if rank == 4 else (b, s, heads * head), dtype)
    half = (dim or head) // 2
    if positions:
        cos, sin = _rand((11, half), dtype, 1), _rand((11, half), dtype, 2)
        pos = np.random.default_rng(3).integers(0, 11, (b, s)).astype(np.int64)
        return [x, cos, sin, pos], RotaryAttrs(interleaved, heads if rank == 3 else 0, dim)
    return [x, _rand((b, s, half), dtype, 1), _rand((b, s, half), dtype, 2)], \
        RotaryAttrs(interleaved, heads if rank == 3 else 0, dim)


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dim", [0, 4])
@pytest.mark.parametrize("positions", [False, True])
def test_rotary_matches_interpreter(rank, interleaved, dim, positions):
    arrays, attrs = _rotary_case(rank, interleaved, dim, positions)
    check("RotaryEmbedding", arrays, attrs)


@pytest.mark.parametrize("backend", ["t2", "avx2"])
def test_rotary_matches_interpreter_threads_and_avx2(backend):
    arrays, attrs = _rotary_case(4, True, 6, True, F64)
    check("RotaryEmbedding", arrays, attrs, backend)


# LinearAttention --------------------------------------------------------------------------


def _linear_case(rule: str, q_heads: int, kv_heads: int, t: int, past: bool, per_head: bool, dtype=F32):
    b, d_k, d_v = 2, 4, 3
    arrays = [_rand((b, t, q_heads * d_k), dtype) * 0.5, _rand((b, t, kv_heads * d_k), dtype, 1) * 0.5,
              _rand((b, t, kv_heads * d_v), dtype, 2)]
    arrays.append(_rand((b, kv_heads, d_k, d_v), dtype, 3) if past else None)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    decay_width = kv_heads if per_head else kv_heads * d_k
    arrays.append(-np.abs(_rand((b, t, decay_width), dtype, 4)) if gated else None)
    arrays.append(np.random.default_rng(5).random((b, t, kv_heads if per_head else 1)).astype(dtype) if delta else None)
    while arrays[-1] is None:
        arrays.pop()
    return arrays, LinearAttentionAttrs(q_heads, kv_heads, rule)


RULES = ["linear", "gated", "delta", "gated_delta"]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("heads, t, past, per_head", [((2, 2), 3, False, False), ((4, 2), 2, True, True),
                                                      ((3, 1), 1, False, True)])
def test_linear_attention_matches_interpreter(rule, heads, t, past, per_head):
    arrays, attrs = _linear_case(rule, *heads, t, past, per_head)
    check("LinearAttention", arrays, attrs)


@pytest.mark.parametrize("backend", ["t2", "avx2"])
def test_linear_attention_matches_interpreter_threads_and_avx2(backend):
    arrays, attrs = _linear_case("gated_delta", 4, 2, 3, True, False, F64)
    check("LinearAttention", arrays, attrs, backend)


def test_linear_attention_explicit_scale_matches_interpreter():
    arrays, attrs = _linear_case("delta", 2, 2, 2, False, True)
    check("LinearAttention", arrays, LinearAttentionAttrs(2, 2, "delta", scale=0.7))


# Lowering on the graph ---------------------------------------------------------------------


def _lowering_cases():
    cases = {f"attention_{name}": ("Attention", *make()) for name, make in ATTENTION.items()}
    for rank, interleaved in [(3, False), (4, True)]:
        arrays, attrs = _rotary_case(rank, interleaved, 4, rank == 4)
        cases[f"rotary_{rank}d"] = ("RotaryEmbedding", arrays, attrs, ())
    for rule in RULES:
        arrays, attrs = _linear_case(rule, 4, 2, 2, rule == "gated", rule != "linear")
        cases[f"linear_{rule}"] = ("LinearAttention", arrays, attrs, ())
    return cases


LOWERING = _lowering_cases()


@pytest.mark.parametrize("case", sorted(LOWERING))
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the softmax of a fully masked row
def test_lowering_preserves_numbers(case):
    op, arrays, attrs, constant = LOWERING[case]
    graph, feeds = single_node_graph(op, arrays, attrs, constant=constant)
    before = evaluate_graph(graph, feeds)
    assert lower_graph(graph)
    verify_graph(graph)
    assert all(node.opdef.primitive for node in graph.nodes)
    assert op not in graph.op_counts()
    after = evaluate_graph(graph, feeds)
    for name, value in before.items():
        assert after[name].dtype == value.dtype and after[name].shape == value.shape, name
        np.testing.assert_allclose(after[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_interpreter_runs_the_reference_whole():
    """The oracle is not lowered: its program holds the Attention instruction itself."""
    from ember.backends.interpreter import InterpreterBackend

    arrays, attrs, _ = ATTENTION["4d"]()
    graph, _ = single_node_graph("Attention", arrays, attrs)
    assert InterpreterBackend().supports(graph.nodes[0])
    lower_graph(graph, InterpreterBackend().should_lower)
    assert graph.op_counts() == {"Attention": 1}
