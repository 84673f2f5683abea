"""Seeded random inputs, for runs where the user gave no values (the profiler, the network
debugger, the report, the kernel tuner): standard normal floats, zeros for integer and bool
inputs, drawn in the order given from one generator seeded 0, so every tool sees the same."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def seeded_inputs(specs: Sequence[Any]) -> dict[str, np.ndarray]:
    """Values for `specs` (each with a name and a TensorType), by name."""
    rng = np.random.default_rng(0)
    values = {}
    for spec in specs:
        if spec.type.dtype.is_float:
            values[spec.name] = rng.standard_normal(spec.type.shape).astype(spec.type.dtype.numpy)
        else:
            values[spec.name] = np.zeros(spec.type.shape, spec.type.dtype.numpy)
    return values
