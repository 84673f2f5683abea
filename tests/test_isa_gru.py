"""The mapped GRU (ember.isa.emit_rnn): two mapped GEMMs and the gate arithmetic, built with the
system compiler and checked against Ember's interpreter on ONNX GRU models."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
import ember.codegen.runtime
from ember.isa.describe import load_target
from ember.isa.emit_rnn import GruCode, emit_gru, gru_kernels
from ember.support.errors import UnsupportedError

X86 = load_target("x86-avx512")
RUNTIME = Path(ember.codegen.runtime.__file__).resolve().parent


def _avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def gru_model(w: np.ndarray, r: np.ndarray, bias: np.ndarray, seq: int, batch: int, initial: bool,
              linear_before_reset: bool = True):
    hidden, inputs = r.shape[1], w.shape[1]
    inputs_ = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inputs])]
    if initial:
        inputs_.append(helper.make_tensor_value_info("H0", TensorProto.FLOAT, [1, batch, hidden]))
    node = helper.make_node("GRU", ["X", "W", "R", "B", "", "H0" if initial else ""], ["Y", "Y_h"],
                            hidden_size=hidden, linear_before_reset=int(linear_before_reset))
    graph = helper.make_graph([node], "gru", inputs_,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [seq, 1, batch, hidden]),
                               helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, batch, hidden])],
                              [numpy_helper.from_array(w[None], "W"), numpy_helper.from_array(r[None], "R"),
                               numpy_helper.from_array(bias[None], "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(tmp_path: Path, code: GruCode):
    files = []
    for file_name, text in code.sources:
        (tmp_path / file_name).write_text(text)
        files.append(str(tmp_path / file_name))
    library = tmp_path / f"{code.name}.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{RUNTIME}", *code.flags.split(), *files,
                    "-o", str(library)], check=True)
    function = getattr(ctypes.CDLL(str(library)), code.name)
    function.argtypes = [ctypes.c_void_p] * 7
    return function


@pytest.mark.skipif(shutil.which("gcc") is None or not _avx512(), reason="needs gcc and an AVX-512 CPU")
@pytest.mark.parametrize("linear_before_reset", [True, False])
@pytest.mark.parametrize("seq, batch, inputs, hidden, initial", [(4, 3, 10, 20, False), (3, 1, 40, 24, True),
                                                                 (2, 5, 33, 70, True)])
def test_mapped_gru_matches_the_interpreter(tmp_path, seq, batch, inputs, hidden, initial, linear_before_reset):
    rng = np.random.default_rng(seq * 100 + hidden)
    w = (rng.standard_normal((3 * hidden, inputs)) * 0.3).astype(np.float32)
    r = (rng.standard_normal((3 * hidden, hidden)) * 0.3).astype(np.float32)
    bias = (rng.standard_normal(6 * hidden) * 0.3).astype(np.float32)
    x = rng.standard_normal((seq, batch, inputs)).astype(np.float32)
    h0 = rng.standard_normal((1, batch, hidden)).astype(np.float32) if initial else None
    feed = {"X": x} | ({"H0": h0} if initial else {})
    model = gru_model(w, r, bias, seq, batch, initial, linear_before_reset)
    expected = ember.compile(model, backend="interpreter").run(feed)["Y"]

    code = emit_gru(X86, seq, batch, inputs, hidden, linear_before_reset=linear_before_reset)
    files = ["mapped_gru_xw.c", "mapped_gru_hr.c"] + ([] if linear_before_reset else ["mapped_gru_hh.c"])
    assert [name for name, _ in code.sources] == files + ["mapped_gru.c"]
    assert (code.input_gemm.m, code.input_gemm.n, code.input_gemm.k) == (seq * batch, 3 * hidden, inputs)
    assert (code.recurrent_gemm.m, code.recurrent_gemm.k) == (batch, hidden)
    assert code.recurrent_gemm.n == (3 if linear_before_reset else 2) * hidden
    assert code.reset_gemm is None if linear_before_reset else (code.reset_gemm.m, code.reset_gemm.n) == (batch, hidden)
    assert all(s.mapping.kernel.repeat == seq for s in code.schedules[1:])
    function = build(tmp_path, code)
    packed_w, packed_r = code.pack(w, r)
    y = np.full((seq, batch, hidden), np.nan, np.float32)
    workspace = np.zeros(code.workspace_elements, np.float32)
    function(x.ctypes.data, packed_w.ctypes.data, packed_r.ctypes.data, bias.ctypes.data,
             h0.ctypes.data if h0 is not None else None, y.ctypes.data, workspace.ctypes.data)
    np.testing.assert_allclose(y, expected.reshape(seq, batch, hidden), rtol=1e-5, atol=2e-5)


def test_gru_kernels_are_the_gemms_of_the_op():
    input_gates, recurrent_gates = gru_kernels(25, 4, 512, 1024)
    assert str(input_gates.expr).startswith("C[i, j]:f32 += A[i, k]:f32 * B[j, k]:f32")
    assert input_gates.expr.extents == {"i": 100, "j": 3072, "k": 512}
    assert recurrent_gates.expr.extents == {"i": 4, "j": 3072, "k": 1024} and recurrent_gates.repeat == 25
    _, zr, reset = gru_kernels(25, 4, 512, 1024, linear_before_reset=False)
    assert zr.expr.extents == {"i": 4, "j": 2048, "k": 1024} and zr.repeat == 25
    assert reset.expr.extents == {"i": 4, "j": 1024, "k": 1024} and reset.repeat == 25


def test_bad_grus_are_refused():
    with pytest.raises(UnsupportedError, match="hidden must be a positive integer"):
        emit_gru(X86, 4, 1, 8, 0)
    with pytest.raises(UnsupportedError, match="not a C identifier"):
        emit_gru(X86, 4, 1, 8, 8, name="gru; exit")
