"""Model frontends: translate external model formats into the graph IR (graph/ir.py).

Each subpackage owns one format and is the only place in Ember that imports that format's
library (e.g. only frontends/onnx imports `onnx`)."""
