"""Layer 4: the pass infrastructure shared by both IRs (the pass base with declared
requires/ensures, registries of passes by name, the pass manager, the IR kind and the pass
context), pass instrumentation (print/time after every pass) and the local-rewrite engine.
The graph IR's registry is PASSES; the LIR's is in lir/passes/registry.py."""
from ember.passes.context import IRKind, PassContext
from ember.passes.instrument import (
    PassInstrumentation,
    PassRecord,
    PassTimer,
    PrintAfterAll,
    format_timings,
    instrumented,
)
from ember.passes.manager import (
    GRAPH_IR,
    PASSES,
    GraphPass,
    Pass,
    PassManager,
    PassRegistry,
    PassTiming,
    debug_mode,
    get_pass,
    register_pass,
)
from ember.passes.rewrite import Pattern, RewritePass, Rewriter, apply_patterns, pattern

__all__ = [
    "GRAPH_IR", "PASSES", "GraphPass", "IRKind", "Pass", "PassContext", "PassInstrumentation", "PassManager",
    "PassRecord", "PassRegistry", "PassTimer", "PassTiming", "Pattern", "PrintAfterAll", "RewritePass", "Rewriter",
    "apply_patterns", "debug_mode", "format_timings", "get_pass", "instrumented", "pattern", "register_pass",
]
