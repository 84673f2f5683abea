"""Reading an ONNX file without holding its weights twice.

onnx.load reads the whole file into one bytes object and parses it, and every later read of a
tensor's raw_data copies it again: importing a model took about three times its size at the
peak (MiniLM-L3, 66 MB of weights: 204 MB, where ONNX Runtime's whole run peaks at 181 MB).
Here the file is mapped, and the protobuf wire format walked only as deep as the main graph's
initializers (ModelProto.graph, GraphProto.initializer, TensorProto.raw_data): everything but
those raw_data fields is copied into a small buffer that protobuf parses as usual, and each
payload is read from the file straight into the array the graph keeps, when the importer asks
for it. The pages of the payloads are never touched through the mapping. Anything the walk does
not expect (a group, a truncated field) makes the caller fall back to onnx.load, whose error a
malformed file then gets."""
from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODEL_GRAPH = 7          # ModelProto.graph
GRAPH_INITIALIZER = 5    # GraphProto.initializer
TENSOR_RAW_DATA = 9      # TensorProto.raw_data
LENGTH_DELIMITED = 2


class WireFormatError(Exception):
    """The file is not the protobuf this walk expects (the caller falls back to onnx.load)."""


def _varint(data: mmap.mmap | bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireFormatError("a truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: mmap.mmap, start: int, end: int):
    """(field number, wire type, value start, value end, field start) of each field."""
    pos = start
    while pos < end:
        field_start = pos
        key, pos = _varint(data, pos, end)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, value_end = _varint(data, pos, end)
        elif wire_type == 1:
            value_end = pos + 8
        elif wire_type == LENGTH_DELIMITED:
            length, pos = _varint(data, pos, end)
            value_end = pos + length
        elif wire_type == 5:
            value_end = pos + 4
        else:
            raise WireFormatError(f"wire type {wire_type} (groups are not used by ONNX)")
        if value_end > end or number == 0:
            raise WireFormatError("a field runs past its message")
        yield number, wire_type, pos, value_end, field_start
        pos = value_end


def _delimited(number: int, body: bytes | bytearray) -> bytes:
    return _encode_varint(number << 3 | LENGTH_DELIMITED) + _encode_varint(len(body)) + bytes(body)


@dataclass(frozen=True)
class Payloads:
    """Where each main-graph initializer's raw_data lies in the model file (in initializer
    order; None: the tensor has none, e.g. typed fields or external data)."""

    path: Path
    spans: tuple[tuple[int, int] | None, ...]
    file_size: int

    @contextmanager
    def reader(self) -> Iterator[Callable[[int], np.ndarray | None]]:
        """read(index): the raw bytes of initializer `index`, read into a new uint8 array (None:
        it has none), from the file opened once for all of them."""
        with open(self.path, "rb") as stream:
            if os.fstat(stream.fileno()).st_size != self.file_size:
                raise OSError(f"'{self.path}' changed while its model was being imported")

            def read(index: int) -> np.ndarray | None:
                span = self.spans[index] if index < len(self.spans) else None
                if span is None:
                    return None
                offset, length = span
                data = np.empty(length, np.uint8)
                stream.seek(offset)
                if stream.readinto(data.data) != length:
                    raise OSError(f"'{self.path}' ended inside a tensor's data")
                return data

            yield read


def read_without_payloads(path: Path) -> tuple[bytes, Payloads]:
    """The model file's bytes with the main graph's initializer raw_data left out, and where
    those payloads lie. Raises WireFormatError where the walk cannot follow the file."""
    with open(path, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if size == 0:
            raise WireFormatError("the file is empty")
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
            spans: list[tuple[int, int] | None] = []
            model = bytearray()
            for number, wire_type, start, end, field_start in _fields(data, 0, size):
                if number == MODEL_GRAPH and wire_type == LENGTH_DELIMITED:
                    model += _delimited(MODEL_GRAPH, _graph_without_payloads(data, start, end, spans))
                else:
                    model += data[field_start:end]
    return bytes(model), Payloads(path, tuple(spans), size)


def _graph_without_payloads(data: mmap.mmap, start: int, end: int, spans: list[tuple[int, int] | None]) -> bytearray:
    graph = bytearray()
    for number, wire_type, value_start, value_end, field_start in _fields(data, start, end):
        if number != GRAPH_INITIALIZER or wire_type != LENGTH_DELIMITED:
            graph += data[field_start:value_end]
            continue
        tensor = bytearray()
        span = None
        for t_number, t_wire, t_start, t_end, t_field in _fields(data, value_start, value_end):
            if t_number == TENSOR_RAW_DATA and t_wire == LENGTH_DELIMITED:
                span = (t_start, t_end - t_start)  # a repeated bytes field: the last one counts
            else:
                tensor += data[t_field:t_end]
        spans.append(span)
        graph += _delimited(GRAPH_INITIALIZER, tensor)
    return graph
