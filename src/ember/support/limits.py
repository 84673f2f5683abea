"""One resource budget for everything a model file can make Ember allocate.

A 120-byte model can ask for a 2 GB constant (ConstantOfShape, Expand, Tile, Range folded at
import), declare a tensor of 10^12 elements, or point at 100 GB of external data. Each such
request is checked against one of these limits before anything is allocated, and a refusal is
a ResourceLimitError that names the node (or tensor), the size asked for and the limit.

Defaults fit a machine with a few GB of memory while leaving room for real models (the largest
single weight of a 7B-parameter LLM in float32 is about 0.5 GB). Each limit is read from an
environment variable at the moment it is checked, so a user (or a test) raises it without
touching code:

  EMBER_MAX_TENSOR_BYTES   any one tensor: an input, a weight, external data, a node's result
  EMBER_MAX_FOLD_BYTES     a constant computed at compile time; larger results are not folded
                           (the node stays and computes at run time, under the tensor limit)
  EMBER_MAX_ARENA_BYTES    a compiled model's activation memory (the memory plan's arena)
  EMBER_MAX_GRAPH_NODES    nodes in one graph (unrolled loops included)
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ember.support.errors import EmberError, UnsupportedError

HOW_TO_RAISE = "raise the limit with the EMBER_MAX_* environment variables, see ember/support/limits.py"


class ResourceLimitError(EmberError):
    """A model asks for more memory (or nodes) than a limit of ember.support.limits allows."""


@dataclass(frozen=True)
class Limits:
    max_tensor_bytes: int = 4 << 30
    max_fold_bytes: int = 64 << 20
    max_arena_bytes: int = 8 << 30
    max_graph_nodes: int = 2_000_000


_ENV = {"max_tensor_bytes": "EMBER_MAX_TENSOR_BYTES", "max_fold_bytes": "EMBER_MAX_FOLD_BYTES",
        "max_arena_bytes": "EMBER_MAX_ARENA_BYTES", "max_graph_nodes": "EMBER_MAX_GRAPH_NODES"}


def current() -> Limits:
    """The limits in force: the defaults, each overridden by its environment variable."""
    values: dict[str, int] = {}
    for field, variable in _ENV.items():
        text = os.environ.get(variable)
        if text is None or text == "":
            continue
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise EmberError(f"{variable}={text!r} is not an integer number of bytes") from None
        if value <= 0:
            raise EmberError(f"{variable}={text!r} must be positive")
        values[field] = value
    return Limits(**values)


def check_tensor(nbytes: int, what: str) -> None:
    """Refuses a tensor larger than max_tensor_bytes. `what` names it for the user."""
    limit = current().max_tensor_bytes
    if nbytes > limit:
        raise ResourceLimitError(f"{what} needs {nbytes} bytes, more than the tensor size limit of {limit} "
                                 f"bytes ({HOW_TO_RAISE})")


# Not a budget but a hard limit: NumPy (and a 64-bit address) indexes at most 2^63 - 1 bytes,
# the product of every dimension but the zero ones: an empty [0, 2^40, 2^40] has no elements
# but no array can have its shape.
MAX_EXTENT_BYTES = (1 << 63) - 1


def check_shape(shape: Sequence[int], itemsize: int, what: str) -> None:
    """Refuses a tensor of `shape` larger than max_tensor_bytes, or an empty one whose other
    dimensions could not be indexed. `what` names it for the user."""
    check_tensor(math.prod(shape) * itemsize, what)
    extent = math.prod(d for d in shape if d != 0) * itemsize
    if extent > MAX_EXTENT_BYTES:
        raise UnsupportedError(f"{what}: an empty tensor whose other dimensions multiply to {extent} bytes, past "
                               "the 2^63 - 1 bytes an array can index")


# Not a budget but a hard limit: the interpreter and constant folding hold tensors in NumPy
# arrays, which have at most 64 dimensions.
MAX_RANK = 64


def check_rank(rank: int, what: str) -> None:
    """Refuses a tensor of more dimensions than MAX_RANK. `what` names it for the user."""
    if rank > MAX_RANK:
        raise UnsupportedError(f"{what} has rank {rank}, above {MAX_RANK}, the most Ember supports (NumPy's limit)")


def may_fold(nbytes: int) -> bool:
    """Whether a constant of `nbytes` may be computed at compile time."""
    return nbytes <= current().max_fold_bytes
