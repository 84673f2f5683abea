"""The ONNX frontend: `load_onnx` imports an ONNX model file or ModelProto as a graph IR.

This package is the only part of Ember that imports `onnx`. Layout: loader.py (reading files,
external data, opset), dtypes.py (element types, tensors), registry.py (the CONVERTERS table),
context.py (what a converter sees of a node, and import-time constant folding),
converters/ (one module per op family) and importer.py (the pipeline)."""
from ember.frontends.onnx.importer import load_onnx
from ember.frontends.onnx.registry import CONVERTERS, Converter, converter

__all__ = ["CONVERTERS", "Converter", "converter", "load_onnx"]
