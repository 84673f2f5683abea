"""Layer 4: the pass protocol, the registry of passes by name, the pass manager, pass
instrumentation (print/time after every pass) and the local-rewrite engine."""
from ember.passes.instrument import (
    PassInstrumentation,
    PassTimer,
    PrintAfterAll,
    instrumented,
)
from ember.passes.manager import (
    PASSES,
    GraphPass,
    PassManager,
    PassTiming,
    debug_mode,
    get_pass,
    register_pass,
)
from ember.passes.rewrite import Pattern, RewritePass, Rewriter, apply_patterns, pattern

__all__ = [
    "PASSES", "GraphPass", "PassInstrumentation", "PassManager", "PassTimer", "PassTiming", "Pattern",
    "PrintAfterAll", "RewritePass", "Rewriter", "apply_patterns", "debug_mode", "get_pass", "instrumented",
    "pattern", "register_pass",
]
