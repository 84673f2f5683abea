"""Bad input at run time and compile time gives a clear ember error, never a NumPy traceback."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.support.errors import EmberError, InputError
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def lenet():
    return ember.compile(EXAMPLES / "lenet.onnx", backend="interpreter")


def test_public_face(lenet):
    assert lenet.input_names == ["image"]
    assert lenet.output_names == ["probabilities"]
    for key in ("ops", "weight_bytes", "instructions"):
        assert key in lenet.stats
    assert lenet.stats["ops"]["imported"]["Conv"] == 2


def test_missing_and_unknown_inputs_are_named(lenet):
    with pytest.raises(InputError, match=r"missing inputs \['image'\]"):
        lenet.run({})
    image = np.zeros((1, 1, 28, 28), np.float32)
    with pytest.raises(InputError, match=r"unknown inputs \['extra'\]"):
        lenet.run({"image": image, "extra": image})


def test_wrong_shape_and_dtype_are_named(lenet):
    with pytest.raises(InputError, match=r"input 'image' must have shape \[1, 1, 28, 28\], got \[1, 28, 28\]"):
        lenet.run({"image": np.zeros((1, 28, 28), np.float32)})
    with pytest.raises(InputError, match=r"input 'image' must have element type float32 \(f32\), got float64"):
        lenet.run({"image": np.zeros((1, 1, 28, 28))})
    with pytest.raises(InputError, match="must be a NumPy array"):
        lenet.run({"image": [[0.0]]})
    with pytest.raises(InputError, match="takes a dict"):
        lenet.run([np.zeros((1, 1, 28, 28), np.float32)])


def test_non_contiguous_input_is_accepted(lenet):
    image = np.asfortranarray(np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32))
    expected = lenet.run({"image": np.ascontiguousarray(image)})["probabilities"]
    np.testing.assert_array_equal(lenet.run({"image": image})["probabilities"], expected)


def test_bad_model_arguments(tmp_path):
    with pytest.raises(EmberError, match="path to an ONNX file or an onnx.ModelProto"):
        ember.compile(42)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01not a model at all" * 10)
    with pytest.raises(EmberError, match="garbage.onnx"):
        ember.compile(garbage)
    with pytest.raises(EmberError, match="unknown backend 'warp-drive'"):
        ember.compile(EXAMPLES / "lenet.onnx", backend="warp-drive")


def test_compile_defaults_to_native_code_where_a_compiler_exists(monkeypatch):
    """ember.compile without backend= runs the cpu backend (the interpreter took ResNet-18 to
    538 ms against 12-21 ms); without a C compiler it says so and uses the interpreter."""
    from ember.backends.cpu.native import NativeProgram
    from ember.backends.interpreter import InterpretedProgram

    assert isinstance(ember.compile(EXAMPLES / "lenet.onnx").executable, NativeProgram)
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.warns(ember.EmberWarning, match="no C compiler found .* interpreter backend instead"):
        compiled = ember.compile(EXAMPLES / "lenet.onnx")
    assert isinstance(compiled.executable, InterpretedProgram)


def test_native_runs_read_each_runs_own_arrays(lenet):
    """The cpu executable reuses its arenas' pointer tables and takes addresses through a
    buffer view where it can: read-only, strided and 0-d-free inputs alike must reach the
    native code, and each run must see its own arrays."""
    model = ember.compile(EXAMPLES / "lenet.onnx", backend="cpu")
    rng = np.random.default_rng(1)
    for _ in range(2):
        image = rng.random((1, 1, 28, 28), dtype=np.float32)
        expected = lenet.run({"image": image})["probabilities"]
        read_only = image.copy()
        read_only.flags.writeable = False
        for value in (image, read_only, np.asfortranarray(image), image[:, :, :, ::-1][:, :, :, ::-1]):
            np.testing.assert_allclose(model.run({"image": value})["probabilities"], expected, rtol=1e-4, atol=1e-6)
