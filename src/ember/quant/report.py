"""The accuracy report of a quantized model against its float original on held-out inputs,
per output: the largest absolute error (next to the largest float magnitude, for scale), the
cosine similarity of each sample's output to the float one (mean and worst), and, for outputs
with a class axis, how often the arg-max agrees (top-1 agreement).

    report = ember.quant.accuracy_report(float_model, quantized_model, held_out_feeds)
    print(report.format())

The models are anything with `run(feed) -> {output name: array}` (ember.compile's result):
this module computes on their outputs and compiles nothing (quant/ sits below the driver).
A class axis: the last axis of a rank-2 output [batch, classes] with two or more classes, or
the axes given as class_axes={output name: axis}.

May import types and support/ (quant/ is layer 5)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from ember.quant.profile import CalibrationError

Outputs = Mapping[str, np.ndarray]


class Runnable(Protocol):
    def run(self, feed: Mapping[str, np.ndarray]) -> Outputs: ...


@dataclass
class OutputAccuracy:
    name: str
    shape: tuple[int, ...]
    max_abs_error: float
    max_abs_float: float
    cosine_mean: float
    cosine_min: float
    top1_agreement: float | None  # a fraction; None without a class axis
    top1_rows: int  # arg-max rows compared


@dataclass
class AccuracyReport:
    samples: int
    outputs: list[OutputAccuracy]
    inputs: str = "held-out"  # what the samples were

    def format(self) -> str:
        lines = [f"accuracy of the quantized model against float on {self.samples} {self.inputs} sample(s):"]
        for o in self.outputs:
            line = (f"  output '{o.name}' {list(o.shape)}: max |error| {o.max_abs_error:.4g} (max |float| "
                    f"{o.max_abs_float:.4g}), cosine mean {o.cosine_mean:.5f} min {o.cosine_min:.5f}")
            if o.top1_agreement is not None:
                agreed = round(o.top1_agreement * o.top1_rows)
                line += f", top-1 agreement {100 * o.top1_agreement:.2f}% ({agreed}/{o.top1_rows})"
            lines.append(line)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "inputs": self.inputs, "outputs": [asdict(o) for o in self.outputs]}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays as flat vectors (1 when both are zero, 0 when one is)."""
    x, y = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0.0 or ny == 0.0:
        return 1.0 if nx == ny else 0.0
    return float(np.dot(x, y) / (nx * ny))


def _class_axis(name: str, shape: tuple[int, ...], class_axes: Mapping[str, int] | None) -> int | None:
    if class_axes is not None and name in class_axes:
        return class_axes[name] % len(shape)
    return 1 if len(shape) == 2 and shape[1] >= 2 else None


def compare_outputs(reference: Sequence[Outputs], actual: Sequence[Outputs],
                    class_axes: Mapping[str, int] | None = None) -> AccuracyReport:
    """The report from the outputs already computed: float `reference` and quantized `actual`,
    one mapping per sample, the same names in each."""
    if not reference or len(reference) != len(actual):
        raise CalibrationError(f"an accuracy report needs the same number (>= 1) of float and quantized results, "
                               f"got {len(reference)} and {len(actual)}")
    results = []
    for name in reference[0]:
        pairs = [(np.asarray(r[name]), np.asarray(a[name])) for r, a in zip(reference, actual, strict=True)]
        shape = tuple(pairs[0][0].shape)
        errors = [float(np.max(np.abs(r.astype(np.float64) - a.astype(np.float64)), initial=0.0)) for r, a in pairs]
        cosines = [cosine(r, a) for r, a in pairs]
        axis = _class_axis(name, shape, class_axes)
        agreement, rows = None, 0
        if axis is not None:
            same = np.concatenate([(np.argmax(r, axis) == np.argmax(a, axis)).ravel() for r, a in pairs])
            agreement, rows = float(np.mean(same)), int(same.size)
        results.append(OutputAccuracy(name, shape, max(errors), max(float(np.max(np.abs(r), initial=0.0))
                                                                    for r, _ in pairs),
                                      float(np.mean(cosines)), min(cosines), agreement, rows))
    return AccuracyReport(len(reference), results)


def accuracy_report(float_model: Runnable, quantized_model: Runnable, feeds: Sequence[Mapping[str, np.ndarray]],
                    class_axes: Mapping[str, int] | None = None, inputs: str = "held-out") -> AccuracyReport:
    """Runs both models on every feed (held-out inputs; `inputs` says what they are, for the
    text) and compares their outputs."""
    if not feeds:
        raise CalibrationError("an accuracy report needs at least one held-out input")
    # Copies: a backend may hand back the same output buffers on every run.
    reference = [{k: np.array(v) for k, v in float_model.run(feed).items()} for feed in feeds]
    actual = [{k: np.array(v) for k, v in quantized_model.run(feed).items()} for feed in feeds]
    report = compare_outputs(reference, actual, class_axes)
    report.inputs = inputs
    return report
