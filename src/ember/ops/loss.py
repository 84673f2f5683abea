"""Loss ops (for models exported with their loss, and ONNX's conformance suite):
NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

input is [N, C, d1, ...] (log-probabilities, or scores for SoftmaxCrossEntropyLoss), target
[N, d1, ...] holds class indices, weight (optional) [C]. The loss of one element is
-input[n, target, d...] * weight[target]; elements whose target is ignore_index count 0 with
weight 0 (0 even where the input is NaN or infinite, as ONNX's reference and ONNX Runtime
leave them out). reduction: 'none' keeps target's shape, 'sum' sums, 'mean' divides the sum by the
summed weights."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.normalization import SoftmaxAttrs, _log_softmax
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float
from ember.types import DType, TensorType

REDUCTIONS = ("none", "sum", "mean")
# Not primitives: compiled backends lower them (lowering/loss.py); the 'oracle' trait keeps
# them whole on the interpreter, whose NumPy reference checks that lowering.
ORACLE = frozenset({"oracle"})


@dataclass(frozen=True)
class LossAttrs:
    reduction: str = "mean"
    ignore_index: int | None = None


def _check(op: str, attrs: LossAttrs, x: TensorType, target: TensorType, weight: TensorType | None) -> TensorType:
    require_float(x, op)
    if attrs.reduction not in REDUCTIONS:
        raise OpError(f"{op} reduction '{attrs.reduction}' is not one of {', '.join(REDUCTIONS)}")
    if x.rank < 2 or target.shape != (x.shape[0],) + x.shape[2:]:
        raise OpError(f"{op} target {target} does not fit input {x} ([N, C, d...] and [N, d...])")
    if target.dtype not in (DType.INT32, DType.INT64):
        raise OpError(f"{op} target must be i32 or i64, got {target.dtype}")
    if weight is not None and (weight.shape != (x.shape[1],) or weight.dtype != x.dtype):
        raise OpError(f"{op} weight {weight} must be [{x.shape[1]}] of {x.dtype}")
    return x.with_shape(target.shape if attrs.reduction == "none" else ())


def nll_loss(attrs: LossAttrs, log_prob: np.ndarray, target: np.ndarray, weight: np.ndarray | None,
             dtype: np.dtype) -> np.ndarray:
    target = target.astype(np.int64)
    ignored = target == attrs.ignore_index if attrs.ignore_index is not None else np.zeros(target.shape, bool)
    classes = log_prob.shape[1]
    safe = np.where(ignored, 0, target)
    if np.any((safe < 0) | (safe >= classes)):
        raise OpError(f"loss target out of range [0, {classes})")
    picked = np.take_along_axis(log_prob.astype(np.float64), np.expand_dims(safe, 1), axis=1)[:, 0]
    w = np.ones(target.shape) if weight is None else weight.astype(np.float64)[safe]
    w = np.where(ignored, 0.0, w)
    # An ignored element's loss is 0 whatever the input holds there (not 0 times a NaN).
    loss = np.where(ignored, 0.0, -picked * w)
    if attrs.reduction == "sum":
        loss = loss.sum()
    elif attrs.reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):  # no weight at all: NaN, as in ONNX
            loss = loss.sum() / w.sum()
    return np.asarray(loss).astype(dtype)


def _nll_infer(attrs: LossAttrs, types):
    x, target, weight = types
    return (_check("NegativeLogLikelihoodLoss", attrs, x, target, weight),)


def _nll(attrs: LossAttrs, arrays):
    x, target, weight = arrays
    return (nll_loss(attrs, x, target, weight, x.dtype),)


define_op(OpDef("NegativeLogLikelihoodLoss", ("input", "target", "weight?"), ("loss",), _nll_infer, _nll,
                attrs=LossAttrs, primitive=False, traits=ORACLE))


def _sce_infer(attrs: LossAttrs, types):
    x, target, weight = types
    return (_check("SoftmaxCrossEntropyLoss", attrs, x, target, weight), x)


def _sce(attrs: LossAttrs, arrays):
    x, target, weight = arrays
    (log_prob,) = _log_softmax(SoftmaxAttrs(1), [x.astype(np.float64)])
    return (nll_loss(attrs, log_prob, target, weight, x.dtype), log_prob.astype(x.dtype))


define_op(OpDef("SoftmaxCrossEntropyLoss", ("scores", "labels", "weights?"), ("loss", "log_prob"), _sce_infer,
                _sce, attrs=LossAttrs, primitive=False, traits=ORACLE))

__all__ = ["LossAttrs", "nll_loss"]
