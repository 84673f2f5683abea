"""Layer 4: the pass protocol, the registry of passes by name and the pass manager."""
from ember.passes.manager import (
    PASSES,
    GraphPass,
    PassManager,
    PassTiming,
    get_pass,
    register_pass,
)

__all__ = ["PASSES", "GraphPass", "PassManager", "PassTiming", "get_pass", "register_pass"]
