"""The ONNX frontend: `load_onnx` imports an ONNX model file or ModelProto as a graph IR.

This package is the only part of Ember that imports `onnx`. Layout: loader.py (reading files,
external data, opset), dtypes.py (element types, tensors), registry.py (the CONVERTERS table),
context.py (what a converter sees of a node, and import-time constant folding),
converters/ (one module per op family), importer.py (the pipeline) and backend_api.py (the
parts of onnx.backend that ember.onnx_backend builds on)."""
from ember.frontends.onnx.context import ConstantRequired
from ember.frontends.onnx.importer import load_onnx
from ember.frontends.onnx.loader import model_bytes, model_from_bytes
from ember.frontends.onnx.registry import CONVERTERS, Converter, converter

__all__ = ["CONVERTERS", "ConstantRequired", "Converter", "converter", "load_onnx", "model_bytes", "model_from_bytes"]
