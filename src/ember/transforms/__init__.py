"""Layer 5: graph optimization passes, one file per pass. Importing registers them."""
from ember.transforms import constant_fold, dce  # noqa: F401  (registration)

DEFAULT_PIPELINE: list[str] = [
    "constant-fold",  # evaluate nodes whose operands are all constants
    "dce",  # drop nodes and constants nothing reads
]
