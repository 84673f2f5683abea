"""An ONNX model with every intermediate tensor made a graph output, for comparing a
compiled model's steps against ONNX Runtime (`ember debug --reference ort`). Tensors whose
type shape inference cannot tell are left out (ONNX Runtime needs each output's type)."""
from __future__ import annotations

import os
from typing import Any

import onnx

from ember.frontends.onnx.importer import node_names
from ember.support.errors import ModelImportError


def with_every_tensor_as_output(model: str | os.PathLike | Any) -> tuple[bytes, dict[str, list[str]]]:
    """The serialized model (a path or ModelProto) with each node output that shape inference
    types added to the graph's outputs, and each node's output tensor names by its name in
    Ember's graph."""
    try:
        proto = onnx.load(os.fspath(model)) if isinstance(model, str | os.PathLike) else model
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception as err:  # noqa: BLE001  (onnx raises many types for a bad file)
        raise ModelImportError(f"cannot read {model} for ONNX Runtime: {err}") from None
    typed = {info.name: info for info in inferred.graph.value_info}
    present = {output.name for output in inferred.graph.output}
    for node in inferred.graph.node:
        for name in node.output:
            if name and name not in present and name in typed:
                inferred.graph.output.append(typed[name])
                present.add(name)
    # Keyed as the importer names nodes (an unnamed node: op type and index), so a debugger can
    # match steps of models whose nodes carry no names.
    names = node_names(inferred.graph.node)
    outputs = {name: list(node.output) for name, node in zip(names, inferred.graph.node, strict=True)}
    return inferred.SerializeToString(), outputs
