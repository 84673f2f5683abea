"""The parts of ONNX's backend API that `ember.onnx_backend` builds on, kept here because the
frontend is the only package that imports onnx: the `onnx.backend.base` classes an Ember
backend derives from, a model's run-time input names, and the one-node model that `run_node`
compiles."""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from onnx import ModelProto, NodeProto, TypeProto, helper
from onnx.backend.base import Backend as BackendBase
from onnx.backend.base import BackendRep as BackendRepBase
from onnx.backend.base import Device, DeviceType
from onnx.defs import onnx_opset_version

from ember.frontends.onnx.loader import MAX_OPSET, load_model
from ember.support.errors import ModelImportError

__all__ = ["BackendBase", "BackendRepBase", "Device", "DeviceType", "model_input_names", "node_model"]


def model_input_names(model: str | os.PathLike | ModelProto) -> list[str]:
    """The model's run-time inputs in order (graph inputs that are not initializers)."""
    proto = load_model(model).model.graph
    initializers = {t.name for t in proto.initializer}
    return [vi.name for vi in proto.input if vi.name not in initializers]


def node_model(node: NodeProto, inputs: Sequence[np.ndarray], opset: int | None = None) -> ModelProto:
    """A model holding just `node`, its present inputs typed after `inputs` (in order) and its
    outputs untyped (Ember infers them)."""
    present = [name for name in node.input if name]
    if len(present) != len(inputs):
        raise ModelImportError(f"node '{node.name or node.op_type}' ({node.op_type}) has {len(present)} inputs, "
                               f"run_node got {len(inputs)} arrays")
    graph_inputs = []
    for name, array in zip(present, inputs, strict=True):
        array = np.asarray(array)
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        graph_inputs.append(helper.make_tensor_value_info(name, elem, array.shape))
    outputs = [helper.make_value_info(name, TypeProto()) for name in node.output if name]
    graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, outputs)
    version = opset or min(onnx_opset_version(), MAX_OPSET)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain or "", version)])
