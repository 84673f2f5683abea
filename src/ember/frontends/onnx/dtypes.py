"""ONNX element types and tensors as Ember sees them: TensorProto data types to DType, and
TensorProto (initializers, attribute tensors) to NumPy arrays with Ember's dtypes."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, numpy_helper

from ember.support.errors import ModelImportError, UnsupportedOpError
from ember.types import DType

ONNX_TO_DTYPE: dict[int, DType] = {
    TensorProto.FLOAT: DType.FLOAT32,
    TensorProto.FLOAT16: DType.FLOAT16,
    TensorProto.BFLOAT16: DType.BFLOAT16,
    TensorProto.DOUBLE: DType.FLOAT64,
    TensorProto.INT8: DType.INT8,
    TensorProto.INT16: DType.INT16,
    TensorProto.INT32: DType.INT32,
    TensorProto.INT64: DType.INT64,
    TensorProto.UINT8: DType.UINT8,
    TensorProto.UINT16: DType.UINT16,
    TensorProto.UINT32: DType.UINT32,
    TensorProto.UINT64: DType.UINT64,
    TensorProto.BOOL: DType.BOOL,
    TensorProto.FLOAT8E4M3FN: DType.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ: DType.FLOAT8E4M3FNUZ,
    TensorProto.FLOAT8E5M2: DType.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ: DType.FLOAT8E5M2FNUZ,
    TensorProto.FLOAT4E2M1: DType.FLOAT4E2M1,
    TensorProto.INT4: DType.INT4,
    TensorProto.UINT4: DType.UINT4,
    TensorProto.INT2: DType.INT2,
    TensorProto.UINT2: DType.UINT2,
}


def onnx_type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"unknown type {elem_type}"


def to_dtype(elem_type: int, what: str) -> DType:
    """The DType for an ONNX element type; `what` names the tensor for the error."""
    try:
        return ONNX_TO_DTYPE[elem_type]
    except KeyError:
        supported = ", ".join(onnx_type_name(t).lower() for t in ONNX_TO_DTYPE)
        raise UnsupportedOpError(
            f"{what} has element type {onnx_type_name(elem_type)}, which Ember does not support "
            f"(supported: {supported})"
        ) from None


# Element types whose raw_data is the little-endian NumPy layout, one element per item.
_PLAIN_RAW = {DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT8, DType.INT16, DType.INT32, DType.INT64,
              DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64, DType.BOOL}


def tensor_to_array(tensor: TensorProto, what: str, raw: np.ndarray | None = None) -> np.ndarray:
    """Converts a TensorProto whose data is inline (external data already resolved), or whose
    raw_data was read apart into `raw` (uint8; the array is then a view of it)."""
    dtype = to_dtype(tensor.data_type, what)
    if any(d < 0 for d in tensor.dims):
        raise ModelImportError(f"{what} has a negative dimension in its shape {list(tensor.dims)}")
    if raw is not None and dtype in _PLAIN_RAW:
        element = np.dtype(dtype.numpy).newbyteorder("<")
        count = int(np.prod(tensor.dims, dtype=np.int64))
        if raw.size != count * element.itemsize:
            raise ModelImportError(f"{what} holds {raw.size} bytes of data; its shape {list(tensor.dims)} "
                                   f"of {dtype} needs {count * element.itemsize}")
        array = raw.view(element).reshape(tuple(tensor.dims)).astype(dtype.numpy, copy=False)
        array.flags.writeable = False  # as numpy_helper's arrays are: weights are not written
        return array
    if raw is not None:
        whole = TensorProto()
        whole.CopyFrom(tensor)
        whole.raw_data = raw.tobytes()
        tensor = whole
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as err:  # noqa: BLE001  (any decoding failure is a bad model)
        raise ModelImportError(f"cannot decode the data of {what}: {err}") from None
    if dtype is DType.BFLOAT16 and array.dtype != np.dtype(ml_dtypes.bfloat16):
        # Older onnx releases return the raw bits as uint16.
        array = np.asarray(array, dtype=np.uint16).view(ml_dtypes.bfloat16)
    if array.dtype != dtype.numpy:
        array = array.astype(dtype.numpy)
    return np.asarray(array, order="C")  # (np.ascontiguousarray would make 0-d arrays 1-d)
