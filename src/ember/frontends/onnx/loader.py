"""Reading an ONNX model: from a file path or a ModelProto, with external tensor data
resolved safely (only inside the model's folder), and the default-domain opset checked.

Nothing here builds IR; importer.py does that from the ModelProto this returns."""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto

from ember.frontends.onnx.weights import Payloads, WireFormatError, read_without_payloads
from ember.support import limits
from ember.support.errors import ModelImportError, UnsupportedOpError

MIN_OPSET = 1
MAX_OPSET = 28
DEFAULT_DOMAINS = ("", "ai.onnx")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")  # Windows absolute paths


@dataclass
class LoadedModel:
    # Read from a file, the main graph's initializers have no raw_data here (`payloads` says
    # where it lies; the importer reads it into the weights): complete() gives the whole proto.
    model: ModelProto
    label: str  # how errors name the model: its path, or "the ModelProto"
    opset: int  # the default-domain opset version
    # Read for one compile (ember.compile reading a file): the importer hands the ModelProto
    # back once the graph holds its weights, so a compile's peak memory holds them once, not
    # twice (BERT: the proto's 20 MB outlived the import until the compile returned).
    single_use: bool = False
    released: bool = False
    # Read from a file: the main graph's initializers come without raw_data, which the
    # importer reads from the file into each weight's array (weights.py).
    payloads: Payloads | None = None

    def release(self) -> None:
        """Drops the ModelProto (its memory returns once nothing else holds it); a later
        import of this LoadedModel is refused."""
        self.model = ModelProto()
        self.payloads = None
        self.released = True

    def complete(self) -> ModelProto:
        """The whole ModelProto, the initializers' raw_data read back in, for callers that
        hand the proto on (a model compiled per input shape imports it again and again)."""
        if self.payloads is not None:
            with self.payloads.reader() as read:
                for index, tensor in enumerate(self.model.graph.initializer):
                    data = read(index)
                    if data is not None:
                        tensor.raw_data = data.tobytes()
            self.payloads = None
        return self.model


def load_model(model: str | os.PathLike | ModelProto | LoadedModel, single_use: bool = False) -> LoadedModel:
    """The checked ModelProto of a file path or a ModelProto, with its label and opset.
    single_use: a file read for one compile, whose importer may release the proto."""
    if isinstance(model, LoadedModel):
        if model.released:
            raise ModelImportError(f"{model.label} was read for one compile, which has imported it: "
                                   "read the model again (load_model) to import it again")
        return model  # read and checked already (ember.compile reads a file once)
    payloads = None
    if isinstance(model, ModelProto):
        label = "the given ModelProto"
        external = next(iter(_external_tensors(model)), None)
        if external is not None:
            raise ModelImportError(
                f"{label} stores tensor '{external.name}' as external data "
                f"('{_external_info(external).get('location', '?')}') but its folder is unknown: "
                "pass the model's file path to load_onnx instead, or load the data first "
                "(onnx.load(path) with load_external_data=True)"
            )
        proto = model
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        label = f"'{path}'"
        proto, payloads = _read_file(path)
        _resolve_external_data(proto, path)
    else:
        raise ModelImportError(f"load_onnx takes a file path or an onnx.ModelProto, got {type(model).__name__}")
    _check_model(proto, label)
    # Only a file read here is ours to release: a caller's ModelProto stays whole.
    return LoadedModel(proto, label, _default_opset(proto, label),
                       single_use=single_use and not isinstance(model, ModelProto), payloads=payloads)


def model_bytes(model: str | os.PathLike | ModelProto) -> bytes:
    """A model file's or a ModelProto's serialized ONNX, weights included (external data read
    in), for another process to compile (model_from_bytes)."""
    return load_model(model).complete().SerializeToString()


def model_from_bytes(data: bytes) -> ModelProto:
    proto = ModelProto()
    proto.ParseFromString(data)
    return proto


def _read_file(path: Path) -> tuple[ModelProto, Payloads | None]:
    """The file's ModelProto: without the main graph's initializer payloads (and where they
    lie) where the wire walk follows the file, else whole through onnx.load."""
    if not path.exists():
        raise ModelImportError(f"ONNX model file '{path}' does not exist")
    if not path.is_file():
        raise ModelImportError(f"ONNX model path '{path}' is not a file")
    if path.stat().st_size == 0:
        raise ModelImportError(f"cannot read ONNX model '{path}': the file is empty")
    try:
        stripped, payloads = read_without_payloads(path)
        return ModelProto.FromString(stripped), payloads
    except (WireFormatError, DecodeError, ValueError, OSError):
        pass  # onnx.load reads it whole, or says what is wrong with it
    try:
        return onnx.load(os.fspath(path), load_external_data=False), None
    except Exception as err:  # noqa: BLE001  (DecodeError and anything else the parser raises)
        reason = str(err).strip() or type(err).__name__
        raise ModelImportError(f"cannot read ONNX model '{path}': {reason} "
                               "(the file is truncated or not an ONNX model)") from None


def _check_model(proto: ModelProto, label: str) -> None:
    """Bytes that happen to parse as a protobuf are not necessarily a model."""
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise ModelImportError(f"{label} is not an ONNX model: it has no IR version or no graph "
                               "(the file is truncated or not an ONNX model)")
    if not proto.graph.output:
        raise ModelImportError(f"{label}: the ONNX graph declares no outputs (is the file truncated?)")
    _check_text(proto.graph, label)


def _check_text(graph: GraphProto, label: str) -> None:
    """ONNX's proto2 strings are not checked for UTF-8 by protobuf: invalid bytes come back as
    `bytes`, not `str`, and would break every name-handling step later. Node names only label
    things, so they are decoded with escapes; a tensor name is how values are wired and named
    by the user, so an invalid one is refused."""
    def tensor_name(name: str | bytes, where: str) -> None:
        if isinstance(name, bytes):
            raise ModelImportError(f"{label}: {where} name {name[:60]!r} is not valid UTF-8 text")

    for vi in [*graph.input, *graph.output, *graph.value_info]:
        tensor_name(vi.name, "a graph input/output")
    for tensor in graph.initializer:
        tensor_name(tensor.name, "an initializer")
    for node in graph.node:
        if isinstance(node.name, bytes):
            node.name = node.name.decode("utf-8", "backslashreplace")
        for name in [*node.input, *node.output]:
            tensor_name(name, f"a tensor of node '{node.name}'")
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                _check_text(attr.g, label)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _check_text(sub, label)


def _default_opset(proto: ModelProto, label: str) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions and proto.opset_import and all(n.domain not in DEFAULT_DOMAINS for n in proto.graph.node):
        return MAX_OPSET  # only other domains (e.g. ai.onnx.ml): no default-domain op to version
    if not versions:
        raise ModelImportError(f"{label} imports no opset of the default ONNX domain "
                               "(the file is truncated or not an ONNX model)")
    if len(set(versions)) > 1:
        raise ModelImportError(f"{label} imports the default ONNX domain more than once, at opsets "
                               f"{', '.join(map(str, sorted(set(versions))))}: which one its ops follow is ambiguous")
    opset = versions[0]
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UnsupportedOpError(f"{label} uses ONNX opset {opset}; Ember supports opsets {MIN_OPSET} to "
                                 f"{MAX_OPSET} (convert it with onnx.version_converter)")
    return opset


# external data ----------------------------------------------------------------------------

def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == AttributeProto.TENSORS:
                yield from attr.tensors
            elif attr.type == AttributeProto.GRAPH:
                yield from _graph_tensors(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graph_tensors(sub)


def _external_tensors(proto: ModelProto) -> Iterator[TensorProto]:
    return (t for t in _graph_tensors(proto.graph) if t.data_location == TensorProto.EXTERNAL)


def _external_info(tensor: TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _resolve_external_data(proto: ModelProto, model_path: Path) -> None:
    """Reads every external tensor's bytes into raw_data, refusing locations outside the
    model's folder (absolute paths, '..' escapes, symlinks that point out).

    The check is made on the opened descriptor, not on the path before opening it: a path
    checked and then opened can be swapped for a symlink in between (a time-of-check to
    time-of-use race). The file is opened once, without blocking (a FIFO must not hang the
    import), and the folder it really lies in, its kind and its size come from that descriptor."""
    folder = Path(os.path.realpath(model_path.parent if str(model_path.parent) else "."))
    for tensor in _external_tensors(proto):
        info = _external_info(tensor)
        what = f"external data of tensor '{tensor.name}' in '{model_path}'"
        location = info.get("location")
        if not location:
            raise ModelImportError(f"{what} has no location")
        if os.path.isabs(location) or location.startswith(("/", "\\")) or _DRIVE.match(location):
            raise ModelImportError(f"{what}: location '{location}' is an absolute path; external data "
                                   "must lie inside the model's folder")
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else None
        except ValueError:
            raise ModelImportError(f"{what}: offset '{info.get('offset')}' or length '{info.get('length')}' "
                                   "is not an integer") from None
        tensor.raw_data = _read_inside(folder, location, offset, length, what)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT


def _read_inside(folder: Path, location: str, offset: int, length: int | None, what: str) -> bytes:
    """`length` bytes (None: to the end) at `offset` of `location`, which must resolve to a
    regular file inside `folder` at the moment it is opened."""
    try:
        fd = os.open(folder / location, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ModelImportError(f"{what}: file '{location}' does not exist in '{folder}'") from None
    except OSError as err:
        raise ModelImportError(f"{what}: cannot open '{location}' in '{folder}': {err.strerror}") from None
    try:
        target = Path(_opened_path(fd, folder / location))
        if target != folder and folder not in target.parents:
            raise ModelImportError(f"{what}: location '{location}' escapes the model's folder '{folder}' "
                                   "(via '..' or a symlink); refusing to read it")
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ModelImportError(f"{what}: '{location}' is not a regular file")
        size = status.st_size
        length = size - offset if length is None else length
        if offset < 0 or length < 0 or offset + length > size:
            raise ModelImportError(f"{what}: offset {offset} and length {length} do not fit "
                                   f"'{location}' ({size} bytes)")
        limits.check_tensor(length, what)
        chunks = []
        done = 0
        while done < length:
            chunk = os.pread(fd, min(length - done, 1 << 26), offset + done)
            if not chunk:
                raise ModelImportError(f"{what}: '{location}' shrank while it was read ({done} of {length} bytes)")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _opened_path(fd: int, fallback: Path) -> str:
    """The real path of the file open on `fd`: the kernel's own record of it (/proc/self/fd on
    Linux), which no later rename or symlink swap changes. Where /proc is absent, the path
    resolved after opening (best effort)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)
