"""The default LIR optimization pipeline, as data (after Glow's IRFunctionPassPipeline).
A backend that wants another order passes its own list to run_lir_pipeline."""
from __future__ import annotations

DEFAULT_LIR_PIPELINE: list[str] = [
    "dse",                 # drop instructions whose results are never read
    "delete-dead-allocs",  # ... and the buffers they wrote
    "concat-in-place",     # producers write into their slice of a concat (before reshapes, so a
                           # reshape feeding a concat can then forward its producer into the slice)
    "slice-views",         # contiguous slices become views of their input
    "reshape-views",       # reshapes and order-keeping transposes become views, no copy
    "copy-elimination",    # copies (irgen's output copies, leftover concat parts) become views
    "share-buffers",       # elementwise results overwrite operands that die there
    "hoist-dealloc",       # end every lifetime right after its last use
    "sink-alloc",          # start every lifetime right before its first use
    "dse",                 # sharing and views can expose new dead stores
    "delete-dead-allocs",  # drop markers of buffers left unused
]
