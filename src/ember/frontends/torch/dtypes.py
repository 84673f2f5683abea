"""Element types between torch and Ember, and tensors to NumPy arrays. Complex and other types
Ember has no counterpart for are refused with the type's name."""
from __future__ import annotations

import numpy as np
import torch

from ember.support.errors import UnsupportedOpError
from ember.types import DType

_TO_DTYPE: dict[torch.dtype, DType] = {
    torch.float32: DType.FLOAT32, torch.float64: DType.FLOAT64, torch.float16: DType.FLOAT16,
    torch.bfloat16: DType.BFLOAT16, torch.int8: DType.INT8, torch.int16: DType.INT16, torch.int32: DType.INT32,
    torch.int64: DType.INT64, torch.uint8: DType.UINT8, torch.bool: DType.BOOL,
}


def to_dtype(dtype: torch.dtype, what: str) -> DType:
    found = _TO_DTYPE.get(dtype)
    if found is None:
        kind = "complex numbers" if dtype.is_complex else "this element type"
        raise UnsupportedOpError(f"{what} has element type {dtype}: Ember does not support {kind}")
    return found


def to_torch_dtype(dtype: DType) -> torch.dtype:
    for torch_dtype, ember in _TO_DTYPE.items():
        if ember is dtype:
            return torch_dtype
    raise UnsupportedOpError(f"element type {dtype} has no torch counterpart")


def tensor_to_array(tensor: torch.Tensor, what: str) -> np.ndarray:
    """A copy of a (parameter, buffer or constant) tensor's data as a NumPy array."""
    dtype = to_dtype(tensor.dtype, what)
    data = tensor.detach().cpu().contiguous()
    if dtype in (DType.BFLOAT16,):
        # NumPy has no bfloat16: through its bits.
        return data.view(torch.int16).numpy().view(dtype.numpy).copy()
    return data.numpy().copy()
