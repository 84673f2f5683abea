"""fold-qdq against ONNX Runtime on models that onnxruntime.quantization.quantize_static
writes (QDQ, per-channel, U8S8): a small model built here and the shared ResNet-18 /
MobileNetV2. Criterion (issue 15): integer outputs within 1 unit of ONNX Runtime's on >= 99.9%
of elements, on the interpreter and the cpu backend's integer kernels."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SHARED_MODELS


def _quantize_static(src, dst, feeds: list[dict[str, np.ndarray]]) -> None:
    quantization = pytest.importorskip("onnxruntime.quantization")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    quantization.quantize_static(str(src), str(dst), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 per_channel=True, activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)


def _small_model(path) -> None:
    """Conv+bias, Relu, Conv (stride 2), Flatten, Gemm (transB, bias), Relu, MatMul, Add bias."""
    from onnx import TensorProto, helper, numpy_helper, save

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w1", r.standard_normal((8, 3, 3, 3)) * 0.3), ("b1", r.standard_normal(8) * 0.1),
        ("w2", r.standard_normal((8, 8, 3, 3)) * 0.2), ("b2", r.standard_normal(8) * 0.1),
        ("w3", r.standard_normal((16, 8 * 4 * 4)) * 0.1), ("b3", r.standard_normal(16) * 0.1),
        ("w4", r.standard_normal((16, 10)) * 0.3), ("b4", r.standard_normal(10) * 0.1)]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["r3"]),
             helper.make_node("MatMul", ["r3", "w4"], ["m"]),
             helper.make_node("Add", ["m", "b4"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _compare_with_ort(path, inputs: list[dict[str, np.ndarray]], backends=("cpu",)) -> dict:
    """Ember vs ONNX Runtime on a QDQ model whose outputs are DequantizeLinear results: the
    differences in units of the output scale."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    import ember

    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    stats = {}
    for backend in backends:
        compiled = ember.compile(str(path), backend=backend)
        ops = compiled.stats["ops"]["optimized"]
        units = []
        for feed in inputs:
            expected = session.run(None, feed)
            actual = compiled.run(feed)
            for out, ref in zip(model.graph.output, expected, strict=True):
                last = producers[out.name]
                assert last.op_type == "DequantizeLinear"
                scale = float(inits[last.input[1]])
                units.append(np.abs(actual[out.name].astype(np.float64) - ref) / scale)
        all_units = np.concatenate([u.ravel() for u in units])
        stats[backend] = (ops, float(np.mean(all_units <= 1.0 + 1e-3)), float(all_units.max()))
    return stats


def test_small_qdq_model_from_onnxruntime_runs_on_integer_ops_and_matches(tmp_path):
    pytest.importorskip("onnxruntime")
    _small_model(tmp_path / "f.onnx")
    r = np.random.default_rng(1)
    feeds = [{"x": r.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    _quantize_static(tmp_path / "f.onnx", tmp_path / "q.onnx", feeds)
    stats = _compare_with_ort(tmp_path / "q.onnx", feeds + [{"x": r.standard_normal((2, 3, 8, 8)).astype(np.float32)}],
                              backends=("interpreter", "cpu"))
    for backend, (ops, within, worst) in stats.items():
        assert ops.get("QLinearConv") == 2, (backend, ops)
        assert ops.get("Conv", 0) == 0 and ops.get("Gemm", 0) == 0 and ops.get("MatMul", 0) == 0, (backend, ops)
        assert within >= 0.999 and worst <= 2, (backend, within, worst)


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2"])
def test_shared_model_quantized_by_onnxruntime_matches_it_on_cpu(name, tmp_path):
    pytest.importorskip("onnxruntime")
    src = SHARED_MODELS / f"{name}.onnx"
    if not src.exists():
        pytest.skip(f"{src} is absent")
    r = np.random.default_rng(2)
    feeds = [{"input": r.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(2)]
    _quantize_static(src, tmp_path / "q.onnx", feeds[:1])
    ((ops, within, worst),) = _compare_with_ort(tmp_path / "q.onnx", feeds).values()
    assert ops.get("Conv", 0) == 0 and ops.get("QLinearConv", 0) >= 20, ops
    assert within >= 0.999 and worst <= 2, (within, worst)
