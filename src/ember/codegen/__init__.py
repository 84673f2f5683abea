"""Layer 8: C code generation from a planned low-level program (C_KERNELS per instruction,
the portable kernel library in runtime/, weight packing)."""
from ember.codegen.emitter import CProgram, generate_c
from ember.codegen.runtime_files import RUNTIME_SOURCES, runtime_source

__all__ = ["RUNTIME_SOURCES", "CProgram", "generate_c", "runtime_source"]
