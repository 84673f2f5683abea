"""Profiling a float graph on calibration inputs: per-tensor min, max and a histogram of every
float value a node computes (and of the graph's float inputs), evaluated node by node with the
op table's NumPy references (the oracle: no lowering, nothing fused away, so every tensor the
quantizer may ask about has its own range).

A profile is JSON that carries a hash of the graph it was taken on (its printed text, which
names every node, value and type, plus the bytes of every constant); `Profile.check_graph`
refuses another graph, as Glow's GraphPreLowerHash does. Bad calibration data (unknown or
missing input names, wrong shapes or dtypes, an empty set, NaN/Inf) is refused with a
CalibrationError naming the problem before anything is evaluated.

May import graph/, ops/, types and support/ (layer 5: not transforms/, lowering/, partition/)."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.graph import Graph, print_graph
from ember.support.errors import EmberError
from ember.support.progress import step

FORMAT = "ember-quant-profile"
VERSION = 2
# 4096 bins over [-amax, amax]: 2048 over |x|, the resolution TensorRT's entropy calibration
# searches (calibrate.py), and 2048 per side for percentiles.
BINS = 4096


class CalibrationError(EmberError):
    """Calibration data that does not fit the model (names, shapes, dtypes, emptiness, NaN/Inf)."""


class ProfileError(EmberError):
    """A profile that cannot be used: unreadable, of another format, or taken on another graph."""


def graph_hash(graph: Graph) -> str:
    digest = hashlib.sha256(print_graph(graph).encode())
    for name in sorted(graph.constants):
        data = np.ascontiguousarray(graph.constants[name].data)
        digest.update(name.encode() + b"\0" + str(data.dtype).encode() + data.tobytes())
    return digest.hexdigest()


@dataclass
class TensorStats:
    """Running range and a histogram of the finite values over [-amax, amax] (amax grows: the
    old counts are re-binned into the wider range, each bin's count going to the bin of its
    centre). Infinities and NaNs (a mask of -inf inside the model) are only counted: no range
    or histogram could hold them, and a tensor that has them is not one to quantize."""

    min: float = float("inf")
    max: float = float("-inf")
    amax: float = 0.0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))
    nonfinite: int = 0

    def update(self, x: np.ndarray) -> None:
        finite = np.isfinite(x)
        if not finite.all():
            self.nonfinite += int(x.size - np.count_nonzero(finite))
            x = x[finite]
        if x.size == 0:
            return
        lo, hi = float(np.min(x)), float(np.max(x))
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        amax = max(abs(lo), abs(hi))
        if amax > self.amax:
            if self.amax > 0 and self.hist.any():
                centres = (np.arange(BINS) + 0.5) / BINS * 2 * self.amax - self.amax
                self.hist = np.histogram(centres, BINS, (-amax, amax), weights=self.hist)[0].astype(np.int64)
            self.amax = amax
        if self.amax > 0:
            self.hist += np.histogram(x.astype(np.float64), BINS, (-self.amax, self.amax))[0]
        else:
            self.hist[BINS // 2] += x.size

    def to_json(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "amax": self.amax, "nonfinite": self.nonfinite,
                "hist": {str(i): int(c) for i, c in enumerate(self.hist) if c}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TensorStats:
        hist = np.zeros(BINS, np.int64)
        for i, c in d["hist"].items():
            if not 0 <= int(i) < BINS or int(c) < 0:
                raise ValueError(f"histogram bin {i} = {c}")
            hist[int(i)] = int(c)
        return cls(float(d["min"]), float(d["max"]), float(d["amax"]), hist, int(d.get("nonfinite", 0)))


@dataclass
class Profile:
    """Ranges per tensor name, the hash of the graph they were taken on, and the quantization
    options chosen with it (`ember quantize` records its --schema, --calibration-method,
    --percentile and --keep-float there, so that compile(quantize=path) and bundles quantize
    as the accuracy report measured; options given to quantize_graph override them)."""

    graph_hash: str
    tensors: dict[str, TensorStats]
    samples: int
    options: dict[str, Any] = field(default_factory=dict)

    def check_graph(self, graph: Graph) -> None:
        found = graph_hash(graph)
        if found != self.graph_hash:
            raise ProfileError(f"the profile was taken on another graph (hash {self.graph_hash[:12]}..., this graph "
                               f"'{graph.name}' has {found[:12]}...): profile the model being quantized")

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump({"format": FORMAT, "version": VERSION, "graph_hash": self.graph_hash, "samples": self.samples,
                       "options": self.options, "tensors": {k: v.to_json() for k, v in self.tensors.items()}}, f)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as err:
            raise ProfileError(f"cannot read the quantization profile '{path}': {err}") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ProfileError(f"'{path}' is not an Ember quantization profile (format {FORMAT} v{VERSION})")
        if d.get("version") != VERSION:
            raise ProfileError(f"'{path}' is a version {d.get('version')} quantization profile; this Ember reads "
                               f"version {VERSION} (its histograms differ): profile the model again")
        try:
            return cls(str(d["graph_hash"]), {str(k): TensorStats.from_json(v) for k, v in d["tensors"].items()},
                       int(d["samples"]), _options(d.get("options", {})))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise ProfileError(f"the quantization profile '{path}' is malformed: {type(err).__name__} {err}") from None


OPTION_TYPES: dict[str, tuple[type, ...]] = {"schema": (str,), "method": (str,), "percentile": (int, float),
                                             "keep_float": (list, tuple)}


def _options(options: Any) -> dict[str, Any]:
    """A profile's recorded quantization options, checked for names and types (values are
    checked where they are used)."""
    if not isinstance(options, Mapping):
        raise TypeError(f"options {options!r} is not a mapping")
    for key, value in options.items():
        names_ok = not isinstance(value, list | tuple) or all(isinstance(v, str) for v in value)
        if key not in OPTION_TYPES or not isinstance(value, OPTION_TYPES[key]) or not names_ok:
            raise ValueError(f"option {key}={value!r} (known: {', '.join(OPTION_TYPES)})")
    return dict(options)


def check_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """quantize_options as compile() takes them: known names, values of the right types."""
    try:
        return _options(options or {})
    except (TypeError, ValueError) as err:
        raise EmberError(f"quantize_options: {err}") from None


def check_calibration(graph: Graph, inputs: Iterable[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The calibration set as a list of feeds, each checked against the graph's inputs."""
    feeds = [dict(feed) for feed in inputs]
    if not feeds:
        raise CalibrationError("the calibration set is empty: give at least one input per model input")
    expected = {p.name: p.type for p in graph.inputs}
    for i, feed in enumerate(feeds):
        unknown, missing = sorted(set(feed) - set(expected)), sorted(set(expected) - set(feed))
        if unknown or missing:
            raise CalibrationError(f"calibration sample {i}: " + "; ".join(
                part for part in (f"unknown inputs {unknown}" if unknown else "",
                                  f"missing inputs {missing}" if missing else "") if part)
                + f" (the model's inputs: {sorted(expected)})")
        for name, value in feed.items():
            t = expected[name]
            array = np.asarray(value)
            if array.dtype != t.dtype.numpy:
                raise CalibrationError(f"calibration sample {i}, input '{name}': dtype {array.dtype}, the model "
                                       f"takes {t.dtype.numpy}")
            if array.shape != tuple(t.shape):
                raise CalibrationError(f"calibration sample {i}, input '{name}': shape {list(array.shape)}, the "
                                       f"model takes {list(t.shape)}")
            if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
                raise CalibrationError(f"calibration sample {i}, input '{name}': "
                                       f"{int(np.sum(~np.isfinite(array)))} NaN/Inf values")
            feed[name] = array
    return feeds


def profile_graph(graph: Graph, inputs: Iterable[Mapping[str, np.ndarray]]) -> Profile:
    """Evaluates `graph` on every calibration feed and records each float value's range."""
    feeds = check_calibration(graph, inputs)
    stats: dict[str, TensorStats] = {}
    for index, feed in enumerate(feeds):
        step(f"calibrating: sample {index + 1} of {len(feeds)}")
        env: dict[Any, np.ndarray] = {p: feed[p.name] for p in graph.inputs}
        env.update({c: c.data for c in graph.constants.values()})
        for p in graph.inputs:
            if p.type.dtype.is_float:
                stats.setdefault(p.name, TensorStats()).update(env[p])
        for node in graph.nodes:
            results = node.opdef.evaluate(node.attrs, [None if v is None else env[v] for v in node.inputs])
            for value, result in zip(node.outputs, results, strict=True):
                env[value] = result
                if value.type.dtype.is_float:
                    stats.setdefault(value.name, TensorStats()).update(np.asarray(result))
    return Profile(graph_hash(graph), stats, len(feeds))
