"""Models with dynamic dimensions: compiled per input shape on first use.

A DynamicModel has CompiledModel's face (input_names, output_names, run, stats). Each run
binds the symbolic dimensions from the given arrays (checking that a symbol means the same
size everywhere), rounds bucketed symbols up to their bucket, and runs the specialization for
that shape: compiled by the first run that needs it while runs of other shapes go on,
waited for by concurrent runs that need the same one, kept in an LRU cache of `cache_size`.

Buckets pad: a batch of 5 runs on the batch-8 specialization with three rows of zeros, and
the outputs are sliced back. That is exact only when the samples stay independent, which
runtime/padding.py checks on each bucket's graph; a model that mixes along the dimension is
refused with the node that does it."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.runtime.compiled import CompiledModel, plain_array
from ember.support.errors import EmberError, InputError
from ember.types import DType

Binding = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class DynamicInput:
    """An input's element type and dimensions: a number or a symbol name each."""

    name: str
    dtype: DType
    dims: tuple[int | str, ...]


@dataclass
class Specialization:
    """A compiled model for one binding; output_axes[symbol][output name]: the axis of that
    output carrying the (padded) symbol, None where it does not depend on it."""

    model: CompiledModel
    output_axes: dict[str, dict[str, int | None]]


Compiler = Callable[[dict[str, tuple[int, ...]], Sequence[str]], Specialization]


class DynamicModel:
    def __init__(self, inputs: list[DynamicInput], output_names: list[str], compile_for: Compiler,
                 buckets: Mapping[str, Sequence[int]] | None = None, cache_size: int = 16,
                 backend: str = "") -> None:
        symbols = {d for spec in inputs for d in spec.dims if isinstance(d, str)}
        self.inputs = inputs
        self._output_names = output_names
        self._compile_for = compile_for
        self.buckets = _checked_buckets(buckets or {}, symbols)
        if cache_size < 1:
            raise EmberError(f"cache_size must be at least 1, got {cache_size}")
        self.cache_size = cache_size
        self.backend = backend
        self._cache: OrderedDict[Binding, Future[Specialization]] = OrderedDict()
        self._lock = threading.Lock()
        self.stats: dict[str, Any] = {"compiles": 0, "evictions": 0, "symbols": sorted(symbols),
                                      "buckets": {k: list(v) for k, v in self.buckets.items()}}

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self._output_names)

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        binding = self._bind(inputs)
        compiled = {s: min(b for b in self.buckets[s] if b >= v) if s in self.buckets else v
                    for s, v in binding.items()}
        spec = self.specialization(compiled)
        feeds = {}
        for item in self.inputs:
            array = inputs[item.name]
            pads = [(0, compiled[d] - binding[d]) if isinstance(d, str) else (0, 0) for d in item.dims]
            feeds[item.name] = np.pad(array, pads) if any(p for _, p in pads) else array
        results = spec.model.run(feeds)
        for symbol in self.buckets:
            if compiled[symbol] == binding[symbol]:
                continue
            for name, axis in spec.output_axes[symbol].items():
                if axis is not None:
                    results[name] = np.ascontiguousarray(np.take(results[name], range(binding[symbol]), axis=axis))
        return results

    def specialization(self, binding: Mapping[str, int]) -> Specialization:
        """The compiled model for `binding` (symbol -> size), compiling it on first use."""
        key: Binding = tuple(sorted(binding.items()))
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                owner = False
            else:
                future = self._cache[key] = Future()
                owner = True
                self._evict()
        if owner:
            try:
                shapes = {item.name: tuple(binding[d] if isinstance(d, str) else d for d in item.dims)
                          for item in self.inputs}
                future.set_result(self._compile_for(shapes, sorted(self.buckets)))
                with self._lock:
                    self.stats["compiles"] += 1
            except BaseException as err:
                with self._lock:
                    self._cache.pop(key, None)  # a later run may try again
                future.set_exception(err)
        return future.result()

    def _evict(self) -> None:
        while len(self._cache) > self.cache_size:
            oldest = next((k for k, f in self._cache.items() if f.done()), None)
            if oldest is None:
                return  # everything is still compiling: over the bound until those finish
            del self._cache[oldest]
            self.stats["evictions"] += 1

    def _bind(self, inputs: Mapping[str, Any]) -> dict[str, int]:
        if not isinstance(inputs, Mapping):
            raise InputError(f"run() takes a dict of input name -> array, got {type(inputs).__name__}")
        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in self.input_names]
        if missing or unknown:
            raise InputError(f"missing inputs {missing}, unknown inputs {unknown} (the model takes {self.input_names})")
        binding: dict[str, int] = {}
        where: dict[str, str] = {}
        for item in self.inputs:
            value = plain_array(item.name, inputs[item.name])
            if value.dtype != item.dtype.numpy:
                raise InputError(f"input '{item.name}' must have element type {item.dtype.numpy}, got {value.dtype}")
            if value.ndim != len(item.dims):
                raise InputError(f"input '{item.name}' must have rank {len(item.dims)} ({list(item.dims)}), "
                                 f"got shape {list(value.shape)}")
            for axis, (dim, size) in enumerate(zip(item.dims, value.shape, strict=True)):
                if isinstance(dim, int):
                    if dim != size:
                        raise InputError(f"input '{item.name}' must have {dim} at dimension {axis}, "
                                         f"got shape {list(value.shape)}")
                elif dim in binding and binding[dim] != size:
                    raise InputError(f"'{dim}' is {size} in input '{item.name}' but {binding[dim]} in {where[dim]}")
                else:
                    binding[dim], where[dim] = size, f"input '{item.name}'"
        for symbol, size in binding.items():
            if symbol in self.buckets and size > self.buckets[symbol][-1]:
                raise InputError(f"'{symbol}' is {size}, larger than its largest bucket {self.buckets[symbol][-1]}")
            if size == 0:
                raise InputError(f"'{symbol}' is 0: empty inputs are not run")
        return binding

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.dtype}[{','.join(map(str, s.dims))}]" for s in self.inputs)
        return f"<DynamicModel backend={self.backend} ({ins}), {len(self._cache)} specializations>"


def _checked_buckets(buckets: Mapping[str, Sequence[int]], symbols: set[str]) -> dict[str, list[int]]:
    checked = {}
    for symbol, sizes in buckets.items():
        if symbol not in symbols:
            raise EmberError(f"dynamic: the model has no dimension '{symbol}' (its symbols: {sorted(symbols)})")
        values = sorted(set(sizes))
        if not values or not all(isinstance(v, int) and v > 0 for v in values):
            raise EmberError(f"dynamic['{symbol}'] must list positive integer sizes, got {list(sizes)!r}")
        checked[symbol] = values
    return checked
