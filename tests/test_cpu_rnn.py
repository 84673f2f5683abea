"""The recurrent ops lowered for the cpu backend (lowering/rnn.py) against the interpreter,
which runs their NumPy references whole: LSTM and RNN in every direction, with per-batch
sequence lengths (run-time and constant, including 0 and lengths past the sequence),
initial states, peepholes, every ONNX activation with alpha/beta, clip, weights as run-time
inputs or constants (FullyConnected with fused epilogues), batch-major ONNX models
(layout=1) and all outputs; at 1 and 2 threads and in an AVX2 build. Also: lowering keeps
the numbers on the graph and leaves primitives only, and a long sequence compiles in
reasonable time."""
from __future__ import annotations

import time

import numpy as np
import pytest

from ember.driver import compile_graph
from ember.graph import verify_graph
from ember.lowering import lower_graph
from ember.ops.recurrent import GRUAttrs, RecurrentAttrs
from tests.helpers import evaluate_graph, single_node_graph

F32, F64 = np.float32, np.float64
BACKENDS = {"t1": {"num_threads": 1}, "t2": {"num_threads": 2}, "avx2": {"num_threads": 1, "march": "x86-64-v3"}}
DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}
DEFAULTS = {"RNN": ("Tanh",), "LSTM": ("Sigmoid", "Tanh", "Tanh")}


def _rand(shape, dtype=F32, seed=0, scale=1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _operands(op: str, seq: int, batch: int, inputs: int, hidden: int, direction: str, *, bias=True,
              lens=None, h0=False, c0=False, peepholes=False, dtype=F32) -> list:
    """X, W, R, B?, sequence_lens?, initial_h?, (initial_c?, P?) for an RNN or LSTM."""
    d, gates = DIRS[direction], (4 if op == "LSTM" else 1)
    arrays = [_rand((seq, batch, inputs), dtype), _rand((d, gates * hidden, inputs), dtype, 1, 0.5),
              _rand((d, gates * hidden, hidden), dtype, 2, 0.5),
              _rand((d, 2 * gates * hidden), dtype, 3, 0.5) if bias else None,
              None if lens is None else np.asarray(lens, np.int32 if op == "RNN" else np.int64),
              _rand((d, batch, hidden), dtype, 4) if h0 else None]
    if op == "LSTM":
        arrays += [_rand((d, batch, hidden), dtype, 5) if c0 else None,
                   _rand((d, 3 * hidden), dtype, 6, 0.5) if peepholes else None]
    return arrays


def _attrs(op: str, hidden: int, direction: str, activations=None, alphas=(), betas=(), clip=None) -> RecurrentAttrs:
    """alphas/betas: one per activation (None: its default), as the frontend resolves them."""
    names = tuple(activations) if activations else DEFAULTS[op] * DIRS[direction]
    return RecurrentAttrs(hidden, direction, names, tuple(alphas), tuple(betas), clip)


def check(op: str, arrays: list, attrs, backend: str = "t1", constant: tuple[int, ...] = ()) -> dict:
    """cpu (lowered) against the interpreter (the reference); returns the interpreter's results."""
    from ember.backends.cpu import CpuBackend

    graph, feeds = single_node_graph(op, arrays, attrs, constant=constant)
    expected = compile_graph(graph, "interpreter").run(feeds)
    graph, _ = single_node_graph(op, arrays, attrs, constant=constant)
    actual = compile_graph(graph, CpuBackend(**BACKENDS[backend])).run(feeds)
    tol = 2e-5 if arrays[0].dtype == F32 else 1e-10
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        assert actual[name].shape == value.shape, name
        np.testing.assert_allclose(actual[name], value, rtol=tol, atol=tol, err_msg=name)
    return expected


# name: (op, operands, attrs, operands bound as constants)
CASES = {
    "lstm_forward": lambda: ("LSTM", _operands("LSTM", 5, 3, 4, 6, "forward"), _attrs("LSTM", 6, "forward"), ()),
    "lstm_reverse_states_const_weights": lambda: (
        "LSTM", _operands("LSTM", 4, 2, 3, 5, "reverse", h0=True, c0=True), _attrs("LSTM", 5, "reverse"), (1, 2, 3)),
    "lstm_bidirectional_lens_peepholes": lambda: (
        "LSTM", _operands("LSTM", 6, 4, 3, 5, "bidirectional", lens=[6, 2, 0, 9], h0=True, c0=True, peepholes=True),
        _attrs("LSTM", 5, "bidirectional"), ()),
    "lstm_reverse_lens_const": lambda: (
        "LSTM", _operands("LSTM", 5, 3, 2, 4, "reverse", lens=[3, 5, 1], peepholes=True),
        _attrs("LSTM", 4, "reverse"), (1, 2, 3, 4, 7)),
    "lstm_activations_clip_no_bias": lambda: (
        "LSTM", _operands("LSTM", 4, 2, 3, 3, "bidirectional", bias=False, h0=True),
        _attrs("LSTM", 3, "bidirectional", ("HardSigmoid", "ScaledTanh", "Affine", "Sigmoid", "Elu", "Softsign"),
               (0.3, 0.9, 0.5, None, 1.2, None), (0.4, 1.1, 0.2, None, None, None), clip=0.7), (1, 2)),
    "lstm_peepholes_clip_f64": lambda: (
        "LSTM", _operands("LSTM", 3, 2, 3, 4, "forward", peepholes=True, h0=True, c0=True, dtype=F64),
        _attrs("LSTM", 4, "forward", clip=1.5), (7,)),
    "lstm_seq1_batch1": lambda: ("LSTM", _operands("LSTM", 1, 1, 1, 1, "forward", c0=True),
                                 _attrs("LSTM", 1, "forward"), (1, 2)),
    "lstm_full_const_lens": lambda: ("LSTM", _operands("LSTM", 3, 2, 2, 3, "reverse", lens=[3, 3]),
                                     _attrs("LSTM", 3, "reverse"), (4,)),
    "rnn_forward_const_weights": lambda: ("RNN", _operands("RNN", 5, 2, 4, 7, "forward", h0=True),
                                          _attrs("RNN", 7, "forward"), (1, 2, 3)),
    "rnn_bidirectional_lens": lambda: (
        "RNN", _operands("RNN", 5, 3, 2, 4, "bidirectional", lens=[5, 0, 3]),
        _attrs("RNN", 4, "bidirectional", ("Relu", "LeakyRelu"), (None, 0.2)), ()),
    "rnn_reverse_clip_activations": lambda: (
        "RNN", _operands("RNN", 4, 2, 3, 3, "reverse", bias=False),
        _attrs("RNN", 3, "reverse", ("ThresholdedRelu",), (0.1,), clip=0.5), (1, 2)),
    "rnn_softplus_const_lens": lambda: (
        "RNN", _operands("RNN", 4, 2, 3, 3, "bidirectional", lens=[2, 4]),
        _attrs("RNN", 3, "bidirectional", ("Softplus", "Sigmoid")), (1, 2, 3, 4)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_recurrent_matches_interpreter(case):
    op, arrays, attrs, constant = CASES[case]()
    check(op, arrays, attrs, constant=constant)


@pytest.mark.parametrize("backend", ["t2", "avx2"])
@pytest.mark.parametrize("case", ["lstm_bidirectional_lens_peepholes", "lstm_reverse_states_const_weights",
                                  "rnn_bidirectional_lens"])
def test_recurrent_matches_interpreter_threads_and_avx2(case, backend):
    op, arrays, attrs, constant = CASES[case]()
    check(op, arrays, attrs, backend, constant)


def test_lstm_lens_zero_keeps_initial_state_matches_interpreter():
    """A batch of length 0 writes only zeros into Y, and Y_h/Y_c are its initial states."""
    arrays = _operands("LSTM", 3, 2, 2, 3, "bidirectional", lens=[0, 3], h0=True, c0=True)
    expected = check("LSTM", arrays, _attrs("LSTM", 3, "bidirectional"))
    assert not expected["y0"][:, :, 0].any()
    np.testing.assert_allclose(expected["y1"][:, 0], arrays[5][:, 0], rtol=1e-6)
    np.testing.assert_allclose(expected["y2"][:, 0], arrays[6][:, 0], rtol=1e-6)


@pytest.mark.parametrize("op", ["LSTM", "RNN"])
@pytest.mark.parametrize("seq, batch, lens", [(0, 2, None), (0, 2, [0, 0]), (3, 0, None), (3, 0, [])])
def test_empty_sequence_or_batch_matches_interpreter(op, seq, batch, lens):
    """No step (Y empty, the final states are the initial ones) or no batch."""
    arrays = _operands(op, seq, batch, 2, 3, "bidirectional", h0=True, c0=True, lens=lens)
    check(op, arrays, _attrs(op, 3, "bidirectional"))


def test_gru_matches_interpreter():
    arrays = [_rand((4, 2, 3)), _rand((2, 15, 3), seed=1, scale=0.5), _rand((2, 15, 5), seed=2, scale=0.5),
              _rand((2, 30), seed=3), _rand((2, 2, 5), seed=4)]
    for linear_before_reset in (False, True):
        check("GRU", arrays, GRUAttrs(5, "bidirectional", linear_before_reset), constant=(1, 2, 3))


# Lowering on the graph ----------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_keeps_the_numbers(case):
    op, arrays, attrs, constant = CASES[case]()
    graph, feeds = single_node_graph(op, arrays, attrs, constant=constant)
    before = evaluate_graph(graph, feeds)
    assert lower_graph(graph)
    verify_graph(graph)
    assert all(node.opdef.primitive for node in graph.nodes)
    after = evaluate_graph(graph, feeds)
    for name, value in before.items():
        np.testing.assert_allclose(after[name], value, rtol=2e-5, atol=2e-5, err_msg=name)


def test_constant_weights_become_fully_connected():
    """With constant weights the recurrent product is a FullyConnected taking the step's
    input projection as its residual, and all steps' input projections are ONE GEMM."""
    from ember.backends.cpu import CpuBackend

    seq = 6
    graph, _ = single_node_graph("LSTM", _operands("LSTM", seq, 1, 4, 8, "forward", h0=True),
                                 _attrs("LSTM", 8, "forward"),
                                 constant=(1, 2, 3))
    counts = compile_graph(graph, CpuBackend(num_threads=1)).stats["ops"]["lowered"]
    assert counts.get("FullyConnected") == seq + 1, counts
    assert "MatMul" not in counts, counts


def test_gru_with_linear_before_reset_reads_its_recurrent_weights_once_a_step():
    """linear_before_reset: every gate's recurrent product reads h, so a step is ONE
    FullyConnected over all of R (one pass over its weights); without it the candidate's
    product reads r * h and stays a second one."""
    from ember.backends.cpu import CpuBackend

    seq = 5
    arrays = [_rand((seq, 1, 6)), _rand((1, 24, 6), seed=1, scale=0.5), _rand((1, 24, 8), seed=2, scale=0.5),
              _rand((1, 48), seed=3), _rand((1, 1, 8), seed=4)]
    for linear_before_reset, per_step in ((True, 1), (False, 2)):
        graph, _ = single_node_graph("GRU", arrays, GRUAttrs(8, "forward", linear_before_reset), constant=(1, 2, 3))
        counts = compile_graph(graph, CpuBackend(num_threads=1)).stats["ops"]["lowered"]
        assert counts.get("FullyConnected") == seq * per_step + 1, (linear_before_reset, counts)


def test_long_sequence_compiles_in_reasonable_time():
    """The unrolled graph grows linearly with the sequence (7 kernels a step); the bound is a
    tripwire against a blow-up, loose for a loaded machine (it takes ~10 s alone)."""
    from ember.backends.cpu import CpuBackend

    seq, hidden = 100, 8
    arrays = _operands("LSTM", seq, 1, 4, hidden, "forward", h0=True)
    graph, feeds = single_node_graph("LSTM", arrays, _attrs("LSTM", hidden, "forward"), constant=(1, 2, 3))
    started = time.perf_counter()
    compiled = compile_graph(graph, CpuBackend(num_threads=1))
    assert time.perf_counter() - started < 120
    assert compiled.stats["instructions"] <= 7 * seq + 2, compiled.stats["instructions"]
    graph, _ = single_node_graph("LSTM", arrays, _attrs("LSTM", hidden, "forward"), constant=(1, 2, 3))
    expected = compile_graph(graph, "interpreter").run(feeds)
    actual = compiled.run(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("op", ["LSTM", "RNN"])
def test_batch_major_onnx_model_matches_interpreter(op):
    """layout=1 (X [batch, seq, input], states [batch, dirs, hidden]) with sequence lengths and
    every output, imported from ONNX."""
    from onnx import TensorProto, helper, numpy_helper

    from ember.backends.cpu import CpuBackend
    from ember.driver import compile_model

    seq, batch, inputs, hidden = 4, 3, 2, 3
    arrays = _operands(op, seq, batch, inputs, hidden, "bidirectional", lens=[4, 1, 3], h0=True, c0=True)
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c"] if op == "LSTM" else [])
    feeds = {"X": arrays[0].transpose(1, 0, 2), "initial_h": arrays[5].transpose(1, 0, 2)}
    if op == "LSTM":
        feeds["initial_c"] = arrays[6].transpose(1, 0, 2)
    inits = [numpy_helper.from_array(a, n) for n, a in zip(names[1:5], arrays[1:5], strict=True)]
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction="bidirectional", layout=1)
    graph = helper.make_graph([node], "batch_major",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, feeds[n].shape) for n in feeds],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    expected = compile_model(model, "interpreter").run(feeds)
    actual = compile_model(model, CpuBackend(num_threads=1)).run(feeds)
    assert expected["Y"].shape == (batch, seq, 2, hidden)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=2e-5, atol=2e-5, err_msg=name)


def test_rnn_step_is_one_fused_gemm():
    """With constant weights an RNN step is one FullyConnected: the step's input projection
    as residual and the activation in the epilogue."""
    from ember.backends.cpu import CpuBackend

    seq = 5
    graph, _ = single_node_graph("RNN", _operands("RNN", seq, 2, 3, 4, "forward", h0=True), _attrs("RNN", 4, "forward"),
                                 constant=(1, 2, 3))
    counts = compile_graph(graph, CpuBackend(num_threads=1)).stats["ops"]["lowered"]
    assert counts.get("FullyConnected") == seq + 1, counts
    assert "Tanh" not in counts and "Add" not in counts, counts
