"""Compiled models saved as one file, loaded in another process without importing or
compiling the model again (and without onnx installed).

The file is a zip archive: `manifest.json` (format, version, the model's inputs and
outputs, and its parts: one per segment, each naming its backend, its calling contract and
the SHA-256 of each of its files) and the parts' files (a native library, a weight blob, LIR
text...). Loading checks everything before anything runs: a file that is not a zip, a zip
without Ember's manifest, another format version, a missing or extra member, a member whose
hash differs, a name that is not one Ember writes, a backend that is not installed: each is
refused with an ArtifactError. Only then is a native library written (into a fresh private
folder) and loaded.

Hashes catch corruption, not a forger: an artifact is code, like a shared library, so load
only artifacts you trust."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ember.runtime.compiled import CompiledModel, TensorSpec
from ember.runtime.segmented import SegmentedExecutable, SegmentStep
from ember.support.errors import EmberError, UnsupportedError
from ember.types import DType, TensorType

FORMAT = "ember-artifact"
VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
_MEMBER = re.compile(r"part\d{1,6}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}|constants/\d{1,6}\.npy")


class ArtifactError(EmberError):
    """A saved model that cannot be loaded: not Ember's, corrupted, or for another version."""


def save(model: CompiledModel, path: str | os.PathLike) -> Path:
    """Writes `model` to `path` (a new file; an existing one is replaced atomically)."""
    executable = model.executable
    members: dict[str, bytes] = {}
    if isinstance(executable, SegmentedExecutable):
        parts = [_part(i, step.backend, step.model, members) | {
            "inputs_by_name": step.inputs, "outputs_by_name": step.outputs, "after": sorted(step.after),
            "index": step.index} for i, step in enumerate(executable.steps)]
        constants = {}
        for i, (name, array) in enumerate(sorted(executable.constants.items())):
            buffer = io.BytesIO()
            np.save(buffer, array, allow_pickle=False)
            members[f"constants/{i}.npy"] = buffer.getvalue()
            constants[name] = f"constants/{i}.npy"
        layout = {"kind": "segmented", "model_inputs": executable.model_inputs,
                  "model_outputs": executable.model_outputs, "constants": constants}
    else:
        parts = [_part(0, model.backend, model, members)]
        layout = {"kind": "single"}
    manifest = {"format": FORMAT, "version": VERSION, "backend": model.backend,
                "inputs": [_spec(s) for s in model.inputs], "outputs": [_spec(s) for s in model.outputs],
                "stats": _plain(model.stats), "layout": layout, "parts": parts,
                "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(members.items())}}
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
            for name, data in sorted(members.items()):
                archive.writestr(name, data)
        os.replace(temporary, target)
    except OSError as err:
        raise EmberError(f"cannot write the artifact {target}: {err}") from None
    finally:
        temporary.unlink(missing_ok=True)
    return target


def load(path: str | os.PathLike) -> CompiledModel:
    """A model saved by `save`, verified (see the module docstring) before it is loaded."""
    manifest, members = _read(Path(path))
    parts = manifest["parts"]
    layout = manifest["layout"]
    if layout.get("kind") == "single":
        (part,) = parts
        return _model(part, members, manifest["inputs"], manifest["outputs"], manifest["stats"], manifest["backend"])
    if layout.get("kind") != "segmented":
        raise ArtifactError(f"{path}: unknown layout {layout.get('kind')!r}")
    steps = []
    for part in parts:
        step_model = _model(part, members, part["inputs"], part["outputs"], {}, part["backend"])
        steps.append(SegmentStep(int(part["index"]), str(part["backend"]), step_model,
                                 [str(n) for n in part["inputs_by_name"]], [str(n) for n in part["outputs_by_name"]],
                                 frozenset(int(a) for a in part["after"])))
    constants = {name: np.load(io.BytesIO(members[member]), allow_pickle=False)
                 for name, member in layout["constants"].items()}
    executable = SegmentedExecutable(steps, list(layout["model_inputs"]), list(layout["model_outputs"]), constants)
    return CompiledModel(executable, [_tensor_spec(s) for s in manifest["inputs"]],
                         [_tensor_spec(s) for s in manifest["outputs"]], dict(manifest["stats"]), manifest["backend"])


def _part(index: int, backend: str, model: CompiledModel, members: dict[str, bytes]) -> dict[str, Any]:
    saver = getattr(model.executable, "artifact", None)
    if saver is None:
        raise UnsupportedError(f"backend '{backend}' makes executables that cannot be saved (no artifact())")
    files, meta = saver()
    for name, data in files.items():
        members[f"part{index}/{name}"] = bytes(data)
    return {"backend": backend, "folder": f"part{index}", "meta": meta, "files": sorted(files),
            "inputs": [_spec(s) for s in model.inputs], "outputs": [_spec(s) for s in model.outputs]}


def _model(part: Mapping[str, Any], members: Mapping[str, bytes], inputs: list, outputs: list,
           stats: Mapping[str, Any], backend_name: str) -> CompiledModel:
    from ember.backends import available_backends, get_backend

    name = str(part["backend"])
    if name not in available_backends():
        raise ArtifactError(f"the artifact needs backend '{name}', which is not installed "
                            f"(available: {', '.join(available_backends())})")
    folder = str(part["folder"])
    if not re.fullmatch(r"part\d{1,6}", folder):
        raise ArtifactError(f"the manifest names a part folder Ember does not write: {folder!r}")
    files = {file: members[f"{folder}/{file}"] for file in part["files"]}
    executable = get_backend(name).load_executable(files, part["meta"])
    return CompiledModel(executable, [_tensor_spec(s) for s in inputs], [_tensor_spec(s) for s in outputs],
                         dict(stats), backend_name)


def is_artifact(path: str | os.PathLike) -> bool:
    """Whether `path` looks like an Ember artifact (a zip archive with Ember's manifest), to
    tell one from a model file; load() still checks everything."""
    try:
        if not Path(path).is_file() or not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as archive:
            return MANIFEST in archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return False


def _read(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    if not path.is_file():
        raise ArtifactError(f"{path}: no such artifact file")
    if not zipfile.is_zipfile(path):
        raise ArtifactError(f"{path} is not an Ember artifact (not a zip archive)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if MANIFEST not in names:
                raise ArtifactError(f"{path} is not an Ember artifact (no {MANIFEST})")
            info = archive.getinfo(MANIFEST)
            if info.file_size > MAX_MANIFEST_BYTES:
                raise ArtifactError(f"{path}: its manifest is {info.file_size} bytes, more than an Ember manifest")
            manifest = json.loads(archive.read(MANIFEST))
            _check_manifest(path, manifest, names)
            members = {}
            for name, digest in manifest["files"].items():
                data = archive.read(name)
                if hashlib.sha256(data).hexdigest() != digest:
                    raise ArtifactError(f"{path}: member {name} does not match its recorded hash (corrupted)")
                members[name] = data
    except (zipfile.BadZipFile, zipfile.LargeZipFile, json.JSONDecodeError, UnicodeDecodeError, KeyError,
            OSError, EOFError) as err:
        raise ArtifactError(f"{path} is damaged: {type(err).__name__}: {err}") from None
    return manifest, members


def _check_manifest(path: Path, manifest: Any, names: list[str]) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path} is not an Ember artifact (its manifest is not Ember's)")
    if manifest.get("version") != VERSION:
        raise ArtifactError(f"{path} has artifact format version {manifest.get('version')!r}; this Ember reads "
                            f"version {VERSION}: save it again with this version")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(n, str) and _MEMBER.fullmatch(n) for n in files):
        raise ArtifactError(f"{path}: the manifest lists member names Ember does not write")
    extra = sorted(set(names) - set(files) - {MANIFEST})
    missing = sorted(set(files) - set(names))
    if extra or missing:
        raise ArtifactError(f"{path}: members {extra or missing} are {'unexpected' if extra else 'missing'}")
    for key in ("inputs", "outputs", "parts", "layout", "stats", "backend"):
        if key not in manifest:
            raise ArtifactError(f"{path}: the manifest has no '{key}'")


def _spec(spec: TensorSpec) -> list[Any]:
    if spec.type.quant is not None:
        raise UnsupportedError(f"'{spec.name}' has a quantized type: saving those is not supported yet")
    return [spec.name, spec.type.dtype.value, list(spec.type.shape)]


def _tensor_spec(item: list[Any]) -> TensorSpec:
    name, dtype, shape = item
    return TensorSpec(str(name), TensorType(DType(dtype), tuple(int(d) for d in shape)))


def _plain(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The statistics that are plain JSON (numbers, strings, lists and dicts of them)."""
    kept = {}
    for key, value in stats.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        kept[str(key)] = value
    return kept
