"""Optimizations of the low-level IR: named passes (one module per pass or small family),
their registry and the default pipeline. Importing the package registers every pass."""
from ember.lir.passes import dse, lifetimes, share, views  # noqa: F401  (registers the passes)
from ember.lir.passes.pipeline import DEFAULT_LIR_PIPELINE
from ember.lir.passes.registry import (
    LIR,
    LIR_PASSES,
    LirPass,
    get_lir_pass,
    lir_pass_manager,
    program_properties,
    register_lir_pass,
    run_lir_pipeline,
)

__all__ = ["DEFAULT_LIR_PIPELINE", "LIR", "LIR_PASSES", "LirPass", "get_lir_pass", "lir_pass_manager",
           "program_properties", "register_lir_pass", "run_lir_pipeline"]
