"""Layer 8: C code generation: the C kernel registry (kernels/), the LIR passes that fuse
elementwise chains and select kernels, the emitter that prints a planned program, and the
portable kernel library in runtime/."""
from ember.codegen import fuse_elementwise, select_kernels  # noqa: F401  (register the LIR passes)
from ember.codegen.emitter import CodegenOptions, CProgram, generate_c
from ember.codegen.runtime_files import RUNTIME_SOURCES, runtime_source

__all__ = ["RUNTIME_SOURCES", "CProgram", "CodegenOptions", "generate_c", "runtime_source"]
