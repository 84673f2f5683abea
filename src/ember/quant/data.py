"""Calibration data from files, as `ember quantize --calibration DATA` reads it:

    a folder   each .npz in it (name order) holds one sample's inputs by name; a .npy holds the
               one input of a single-input model. Other files are ignored.
    a .npz     batches: each array, named after a model input, holds that input's samples
    a .npy     a single-input model's samples

An array holds one sample when its shape is the input's shape; several when it has one more
leading axis (N, *shape) or, when the input's first axis is a batch of b, when it is a multiple
of b along that axis (the samples concatenated, each b rows). Keys may carry the "in_" prefix of
the reference .npz files (`in_<input name>`; their `out_<i>` arrays are skipped). Anything
else (an unknown name, a missing input, an array of another shape, a pickled object, a file
that is not NumPy's) is a CalibrationError naming the file and the input; dtypes, NaN and
Inf are checked with the samples (profile.check_calibration), before any work.

May import types and support/ (quant/ is layer 5)."""
from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ember.quant.profile import CalibrationError
from ember.types import TensorType

Feed = dict[str, np.ndarray]


def _samples(array: np.ndarray, shape: tuple[int, ...], where: str, name: str) -> list[np.ndarray]:
    if array.shape == shape:
        return [array]
    if array.ndim == len(shape) + 1 and array.shape[1:] == shape:
        return list(array)
    if shape and array.ndim == len(shape) and array.shape[1:] == shape[1:] and shape[0] > 0 \
            and array.shape[0] % shape[0] == 0 and array.shape[0] > 0:
        return [array[i:i + shape[0]] for i in range(0, array.shape[0], shape[0])]
    raise CalibrationError(f"{where}, input '{name}': shape {list(array.shape)} is not the model's {list(shape)}, "
                           f"N samples of it [N, {', '.join(map(str, shape))}], nor samples concatenated on its "
                           f"first axis")


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
        return {"": np.load(path, allow_pickle=False)}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise CalibrationError(f"cannot read calibration file '{path}': {err}") from None


def _named(arrays: Mapping[str, np.ndarray], inputs: Mapping[str, TensorType], where: str) -> dict[str, np.ndarray]:
    """`arrays` keyed by model input names (a lone unnamed .npy array: the single input)."""
    if set(arrays) == {""}:
        if len(inputs) != 1:
            raise CalibrationError(f"{where}: a .npy file holds one array, the model takes {len(inputs)} inputs "
                                   f"({', '.join(inputs)}): give .npz files keyed by input name")
        return {next(iter(inputs)): arrays[""]}
    named = dict(arrays)
    if not set(arrays) & set(inputs) and any(key.startswith("in_") for key in arrays):  # a reference .npz
        named = {key.removeprefix("in_"): a for key, a in arrays.items() if not key.startswith("out_")}
    unknown, missing = sorted(set(named) - set(inputs)), sorted(set(inputs) - set(named))
    if unknown or missing:
        parts = [f"unknown inputs {unknown}" if unknown else "", f"missing inputs {missing}" if missing else ""]
        raise CalibrationError(f"{where}: {'; '.join(p for p in parts if p)} (the model's inputs: {sorted(inputs)})")
    return named


def _feeds(arrays: Mapping[str, np.ndarray], inputs: Mapping[str, TensorType], where: str) -> list[Feed]:
    named = _named(arrays, inputs, where)
    split = {name: _samples(np.asarray(named[name]), tuple(t.shape), where, name) for name, t in inputs.items()}
    counts = {name: len(s) for name, s in split.items()}
    if len(set(counts.values())) > 1:
        raise CalibrationError(f"{where}: the inputs hold different numbers of samples {counts}")
    return [{name: split[name][i] for name in inputs} for i in range(min(counts.values(), default=0))]


def load_calibration(path: str | os.PathLike, inputs: Mapping[str, TensorType]) -> list[Feed]:
    """The samples in `path` (a folder, an .npz of batches or an .npy) for a model whose inputs
    are `inputs` (name -> static type), in order."""
    source = Path(path)
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.suffix in (".npz", ".npy") and p.is_file())
        feeds = [feed for p in files for feed in _feeds(_read(p), inputs, f"calibration file '{p}'")]
    elif source.is_file() and source.suffix in (".npz", ".npy"):
        feeds = _feeds(_read(source), inputs, f"calibration file '{source}'")
    elif source.exists():
        raise CalibrationError(f"calibration data '{source}': give a folder of .npy/.npz files, an .npz or an .npy")
    else:
        raise CalibrationError(f"calibration data '{source}' does not exist")
    if not feeds:
        raise CalibrationError(f"calibration data '{source}' holds no samples (.npz/.npy files with the model's "
                               f"inputs {sorted(inputs)})")
    return feeds


def split_held_out(feeds: Sequence[Feed], fraction: float = 0.2) -> tuple[list[Feed], list[Feed]]:
    """(calibration, held out): the last `fraction` of the samples (at least one, when there
    are two or more) held out for the accuracy report; with one sample, nothing is held out."""
    if not 0.0 <= fraction < 1.0:
        raise CalibrationError(f"held-out fraction {fraction}: give a value in [0, 1)")
    if len(feeds) < 2 or fraction == 0.0:
        return list(feeds), []
    held = max(1, round(len(feeds) * fraction))
    return list(feeds[:-held]), list(feeds[-held:])
