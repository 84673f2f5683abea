"""Builds examples/lenet.onnx (a LeNet-5 style digit classifier, 1x1x28x28 -> 10 classes,
seeded random weights) and examples/lenet.ref.npz (a seeded input and the output ONNX Runtime
computes for it). Run once; both files are committed so the README's first command needs
neither this script nor ONNX Runtime.

    python examples/make_lenet.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(2026)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        data = rng.standard_normal(shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        return numpy_helper.from_array(data, name)

    initializers = [
        weight("conv1.weight", 6, 1, 5, 5), weight("conv1.bias", 6),
        weight("conv2.weight", 16, 6, 5, 5), weight("conv2.bias", 16),
        weight("fc1.weight", 120, 256), weight("fc1.bias", 120),
        weight("fc2.weight", 84, 120), weight("fc2.bias", 84),
        weight("fc3.weight", 10, 84), weight("fc3.bias", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], name="conv1",
                         kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2",
                         kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["f1"], name="fc1", transB=1),
        helper.make_node("Relu", ["f1"], ["a1"], name="relu3"),
        helper.make_node("Gemm", ["a1", "fc2.weight", "fc2.bias"], ["f2"], name="fc2", transB=1),
        helper.make_node("Relu", ["f2"], ["a2"], name="relu4"),
        helper.make_node("Gemm", ["a2", "fc3.weight", "fc3.bias"], ["logits"], name="fc3", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "lenet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ember-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    import onnxruntime as ort

    model = build()
    onnx.save(model, HERE / "lenet.onnx")
    image = np.random.default_rng(7).random((1, 1, 28, 28), dtype=np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (probabilities,) = session.run(None, {"image": image})
    np.savez(HERE / "lenet.ref.npz", in_image=image, out_0=probabilities)
    print(f"wrote {HERE / 'lenet.onnx'} and {HERE / 'lenet.ref.npz'}")


if __name__ == "__main__":
    main()
