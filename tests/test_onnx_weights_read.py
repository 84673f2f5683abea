"""Reading a model file's weights apart (frontends/onnx/weights.py): the proto protobuf
parses leaves out the main graph's initializer payloads, which are read straight into the
weights; every element type imports as onnx.load + numpy_helper would have it."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.frontends.onnx.importer import load_onnx
from ember.frontends.onnx.loader import load_model
from ember.frontends.onnx.weights import read_without_payloads
from ember.support.errors import ModelImportError

rng = np.random.default_rng(3)


def _model(path):
    """Initializers of several element types, raw and typed, and a subgraph initializer."""
    big = rng.standard_normal((256, 256)).astype(np.float32)
    inits = [
        numpy_helper.from_array(big, "w"),
        numpy_helper.from_array(rng.integers(-9, 9, (4,)).astype(np.int64), "i64"),
        numpy_helper.from_array(rng.standard_normal(6).astype(np.float16), "f16"),
        numpy_helper.from_array(np.array([True, False, True]), "flags"),
        helper.make_tensor("typed", TensorProto.FLOAT, [3], [1.5, -2.0, 0.25]),  # float_data, no raw_data
        helper.make_tensor("bf", TensorProto.BFLOAT16, [2],
                           np.array([1.0, -3.0], ml_dtypes.bfloat16).view(np.uint16).tobytes(), raw=True),
        numpy_helper.from_array(np.float32(7.0), "scalar"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    then_graph = helper.make_graph(
        [helper.make_node("Identity", ["inner"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
        initializer=[numpy_helper.from_array(np.array([4.0, 5.0], np.float32), "inner")])
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["typed"], ["e"])], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Cast", ["i64"], ["i64f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["f16"], ["f16f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["flags"], ["flagsf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["bf"], ["bff"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["typed", "scalar"], ["typed7"]),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_graph, else_branch=else_graph),
    ]
    outputs = [("y", [1, 256]), ("i64f", [4]), ("f16f", [6]), ("flagsf", [3]), ("bff", [2]), ("typed7", [3])]
    graph = helper.make_graph(
        nodes, "weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs]
        + [helper.make_tensor_value_info("branch", TensorProto.FLOAT, [2])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return model


def test_the_parsed_proto_leaves_the_payloads_out_and_says_where_they_lie(tmp_path):
    path = tmp_path / "m.onnx"
    _model(path)
    stripped, payloads = read_without_payloads(path)
    assert len(stripped) < path.stat().st_size - 256 * 256 * 4  # the big weight is not in it
    data = path.read_bytes()
    whole = onnx.load(str(path))
    with payloads.reader() as read:
        for index, tensor in enumerate(whole.graph.initializer):
            span = payloads.spans[index]
            if tensor.HasField("raw_data"):
                offset, length = span
                assert data[offset:offset + length] == tensor.raw_data
                assert read(index).tobytes() == tensor.raw_data
            else:
                assert span is None and read(index) is None
    parsed = onnx.ModelProto.FromString(stripped)
    assert [t.name for t in parsed.graph.initializer] == [t.name for t in whole.graph.initializer]
    assert not any(t.raw_data for t in parsed.graph.initializer)
    # A subgraph's initializers stay whole in the proto.
    (then,) = [a.g for a in parsed.graph.node[-1].attribute if a.name == "then_branch"]
    assert then.initializer[0].raw_data


def _imports_alike(path, proto) -> None:
    """The model file at `path` imports, its weights read apart, as `proto` does whole."""
    loaded = load_model(path)
    assert loaded.payloads is not None
    apart = load_onnx(loaded)
    whole = load_onnx(proto)
    assert set(apart.constants) == set(whole.constants) and len(whole.constants) >= 6
    for name, constant in whole.constants.items():
        got = apart.constants[name].data
        assert got.dtype == constant.data.dtype and got.shape == constant.data.shape, name
        np.testing.assert_array_equal(got, constant.data)
        assert not got.flags.writeable


def test_weights_read_apart_import_as_from_the_whole_proto(tmp_path):
    path = tmp_path / "m.onnx"
    _imports_alike(path, _model(path))


def test_each_element_type_converts_from_bytes_read_apart(tmp_path):
    from ember.frontends.onnx.dtypes import tensor_to_array

    proto = _model(tmp_path / "m.onnx")
    for tensor in proto.graph.initializer:
        if not tensor.HasField("raw_data"):
            continue
        raw = np.frombuffer(tensor.raw_data, np.uint8).copy()
        stripped = onnx.TensorProto()
        stripped.CopyFrom(tensor)
        stripped.ClearField("raw_data")
        got = tensor_to_array(stripped, tensor.name, raw)
        want = numpy_helper.to_array(tensor)
        if tensor.data_type == TensorProto.BFLOAT16:
            assert got.dtype == np.dtype(ml_dtypes.bfloat16)
            want = np.asarray(want).view(np.uint16).view(ml_dtypes.bfloat16) if want.dtype != got.dtype else want
        assert got.shape == want.shape and got.dtype == want.dtype, tensor.name
        np.testing.assert_array_equal(got.astype(np.float64), np.asarray(want).astype(np.float64))


def test_complete_gives_the_whole_proto_back(tmp_path):
    path = tmp_path / "m.onnx"
    proto = _model(path)
    loaded = load_model(path)
    assert loaded.complete().SerializeToString() == proto.SerializeToString()
    assert loaded.payloads is None


def test_a_file_that_changes_before_its_weights_are_read_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    _model(path)
    loaded = load_model(path)
    with open(path, "ab") as stream:
        stream.write(b"\0" * 16)
    with pytest.raises(ModelImportError, match="changed while"):
        load_onnx(loaded)


def test_a_payload_whose_size_disagrees_with_its_shape_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    tensor = numpy_helper.from_array(np.ones(4, np.float32), "w")
    tensor.raw_data = tensor.raw_data[:12]  # 3 floats for a shape of 4
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializer=[tensor])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelImportError, match="initializer 'w' holds 12 bytes"):
        load_onnx(str(path))


def test_external_data_and_weights_read_apart_in_one_model(tmp_path):
    path = tmp_path / "m.onnx"
    proto = _model(path)
    reference = onnx.ModelProto()
    reference.CopyFrom(proto)  # saving as external data changes the proto in place
    onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
              size_threshold=1024)  # the big weight goes to m.data, the small ones stay inline
    assert (tmp_path / "m.data").stat().st_size >= 256 * 256 * 4
    _imports_alike(path, reference)
