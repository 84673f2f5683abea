"""Models with symbolic dimensions (specialize.py, runtime/dynamic.py, runtime/padding.py):
compiled per shape on first use, one compile per bucket, padding refused where samples mix,
an LRU bound, concurrent first runs sharing one compile, and clear input errors."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.support.errors import EmberError, InputError, UnsupportedError

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"


def _with_dynamic_batch(path: Path) -> onnx.ModelProto:
    model = onnx.load(str(path))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


@pytest.fixture(scope="module")
def mlp() -> onnx.ModelProto:
    if not (MODELS / "mlp.onnx").exists():
        pytest.skip(f"{MODELS} is absent (the shared reference models)")
    return _with_dynamic_batch(MODELS / "mlp.onnx")


def test_dynamic_batch_runs_1_to_16_with_one_compile_per_bucket(mlp):
    model = ember.compile(mlp, backend="cpu", num_threads=1, dynamic={"batch": [1, 4, 16]})
    oracle = ember.compile(mlp, backend="interpreter")  # itself dynamic: exact shapes
    rng = np.random.default_rng(0)
    for batch in range(1, 17):
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        (name,) = model.output_names
        got, expected = model.run({"input": x})[name], oracle.run({"input": x})[name]
        assert got.shape == (batch, 10)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert model.stats["compiles"] == 3
    assert oracle.stats["compiles"] == 16


def _conv_net() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    init = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
            numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["m"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"], axis=1),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "convnet",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_batch_on_a_backend_list_and_a_conv_net():
    model = ember.compile(_conv_net(), backend=["cpu", "interpreter"], dynamic={"batch": [4, 8]})
    oracle = ember.compile(_conv_net(), backend="interpreter")
    rng = np.random.default_rng(4)
    for batch in (2, 3, 4, 7):
        x = rng.standard_normal((batch, 3, 12, 12)).astype(np.float32)
        got = model.run({"x": x})["y"]
        assert got.shape == (batch, 5)
        np.testing.assert_allclose(got, oracle.run({"x": x})["y"], rtol=1e-4, atol=1e-5)
    assert model.stats["compiles"] == 2


def _attention_model() -> onnx.ModelProto:
    """A BERT-style block over a dynamic sequence: self-attention, residual, LayerNorm."""
    rng = np.random.default_rng(1)
    hidden = 16
    weights = {n: rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.3 for n in ("wq", "wk", "wv")}
    init = [numpy_helper.from_array(v, n) for n, v in weights.items()]
    init += [numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
             numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["s2"]),
             helper.make_node("Softmax", ["s2"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["a"]),
             helper.make_node("Add", ["a", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_bert_style_block_runs_sequence_lengths_8_to_128_one_compile_each():
    model = ember.compile(_attention_model(), backend="cpu", num_threads=1)
    oracle = ember.compile(_attention_model(), backend="interpreter")
    rng = np.random.default_rng(2)
    lengths = [8, 13, 32, 64, 100, 128, 13]
    for length in lengths:
        x = rng.standard_normal((1, length, 16)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": x})["y"], oracle.run({"x": x})["y"], rtol=1e-4, atol=1e-4)
    assert model.stats["compiles"] == len(set(lengths))


def test_padding_a_dimension_the_model_mixes_along_is_refused_naming_the_node():
    model = ember.compile(_attention_model(), backend="interpreter", dynamic={"seq": [16]})
    x = np.zeros((1, 10, 16), np.float32)
    # Q @ K^T puts the sequence on two axes (rows from Q, columns from K): samples mix.
    with pytest.raises(UnsupportedError, match=r"dimension 'seq' cannot be padded to a bucket: node '\w+' \(MatMul\) "
                                               r"reads the padded axis in both operands"):
        model.run({"x": x})
    batch_buckets = ember.compile(_attention_model(), backend="interpreter", dynamic={"batch": [4]})
    assert batch_buckets.run({"x": np.ones((3, 10, 16), np.float32)})["y"].shape == (3, 10, 16)


def test_concurrent_first_runs_of_one_shape_share_one_compile(mlp):
    model = ember.compile(mlp, backend="interpreter")
    x = np.ones((3, 784), np.float32)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: model.run({"input": x})["logits"], range(8)))
    assert model.stats["compiles"] == 1
    assert all(np.array_equal(r, results[0]) for r in results)


def test_the_specialization_cache_is_bounded(mlp):
    model = ember.compile(mlp, backend="interpreter")
    model.cache_size = 2
    for batch in (1, 2, 3, 1):
        model.run({"input": np.ones((batch, 784), np.float32)})
    assert model.stats["compiles"] == 4 and model.stats["evictions"] == 2


def test_input_errors_name_the_symbol_and_the_inputs(mlp):
    model = ember.compile(mlp, backend="interpreter", dynamic={"batch": [2, 4]})
    with pytest.raises(InputError, match="'batch' is 5, larger than its largest bucket 4"):
        model.run({"input": np.ones((5, 784), np.float32)})
    with pytest.raises(InputError, match="must have 784 at dimension 1"):
        model.run({"input": np.ones((2, 7), np.float32)})
    with pytest.raises(InputError, match="element type float32"):
        model.run({"input": np.ones((2, 784), np.float64)})
    with pytest.raises(EmberError, match="the model has no dimension 'seq'"):
        ember.compile(mlp, backend="interpreter", dynamic={"seq": [2]})


def test_inconsistent_symbol_sizes_are_refused():
    model = ember.compile(_two_input_model(), backend="interpreter")
    with pytest.raises(InputError, match="'n' is 3 in input 'b' but 2 in input 'a'"):
        model.run({"a": np.ones((2,), np.float32), "b": np.ones((3,), np.float32)})
    assert model.run({"a": np.ones((2,), np.float32), "b": np.ones((2,), np.float32)})["c"].tolist() == [2.0, 2.0]


def _two_input_model() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "add",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
