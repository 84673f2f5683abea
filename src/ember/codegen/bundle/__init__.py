"""Ahead-of-time bundles: a compiled model as portable C plus weights, to link into an
application or microcontroller firmware with no runtime, no allocator and no interpreter
(Glow's bundles; TVM's AOT executor). `write_bundle(program, plan, dir, target, prefix)`
writes one from a planned low-level program; `ember.bundle(model, ...)` compiles a model and
calls it. Files: writer (orchestration), layout (memory contract), header (the API),
sources (model and weights C), library (kernel library, symbol prefix), makefile, examples
(bundle_main and board files), targets (compilers and flags)."""
from ember.codegen.bundle.layout import Layout, TensorSlot
from ember.codegen.bundle.targets import TARGETS, Target, get_target
from ember.codegen.bundle.writer import Bundle, sanitize_prefix, write_bundle

__all__ = ["TARGETS", "Bundle", "Layout", "Target", "TensorSlot", "get_target", "sanitize_prefix", "write_bundle"]
