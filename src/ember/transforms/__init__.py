"""Layer 5: graph optimization passes, one file per pass (plus small helper modules shared by
several passes: dense.py, products.py). Importing this package registers them.

May import passes/, graph/, ops/, types and support/ only: transforms and lowering are
independent of each other."""
from ember.transforms import (  # noqa: F401  (registration)
    concat_slice,
    constant_fold,
    cse,
    dce,
    eliminate_noops,
    flush_denormals,
    fold_batchnorm,
    fold_conv_arithmetic,
    fold_qdq,
    fully_connected,
    fuse_activations,
    fuse_attention,
    fuse_inverted_residual,
    layouts,
    merge_pad,
    recognize_gelu,
    recognize_layernorm,
    recognize_softmax,
    recognize_swish,
    reshapes,
    transposes,
    widen_halves,
)
from ember.transforms.pipeline import CANONICAL_PIPELINE, DEFAULT_PIPELINE

__all__ = ["CANONICAL_PIPELINE", "DEFAULT_PIPELINE"]
