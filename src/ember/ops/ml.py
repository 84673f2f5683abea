"""Classical machine-learning ops (what ONNX's ai.onnx.ml domain needs beyond existing ops):
TreeEnsemble, the one form every ONNX tree op imports to (TreeEnsembleRegressor,
TreeEnsembleClassifier, and TreeEnsemble of ai.onnx.ml opset 5).

The forest is data, not attributes: constant operands in one canonical layout, validated once
at import (frontends/onnx/converters/ml_trees.py) and again wherever they are read
(`check_forest`: the reference and the C kernel's plan), so no node array can make a walk
leave the arrays or loop:

  nodes        i32 [M, 4]  per node: feature, mode, true child, false child. mode is one of
                           TREE_MODES' indices, plus MISSING_TRUE where a NaN feature takes
                           the true branch. A leaf (mode 0) keeps its entries in columns 2, 3:
                           [start, end) into the leaf arrays.
  thresholds   T [M]       the split values (T: the element type of x; unused at leaves)
  leaf_targets i32 [L]     per leaf entry, its target (class) index
  leaf_weights W [L]       per leaf entry, its weight (W: the result's element type)
  roots        i32 [R]     the root node of each tree

A branch sends a row to the true child when `x[feature] <op> threshold` (NaN compares false,
except for BRANCH_NEQ where it compares true, as in ONNX Runtime), or when the feature is NaN
and the node has MISSING_TRUE. Set-membership splits (TreeEnsemble-5's BRANCH_MEMBER) arrive
here as chains of BRANCH_EQ nodes. The result is [N, n_targets]: per row and target, the
aggregate over trees (SUM, AVERAGE: the sum over the number of trees, MIN, MAX) of the
entries of the leaves reached, plus the target's base value; a target no reached leaf has an
entry for is 0, base value or not (ONNX Runtime's rule). Sums run in float64. Post transforms
are separate ops."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.types import DType

TREE_MODES = ("LEAF", "BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
MISSING_TRUE = 8  # flag on a branch's mode: a NaN feature takes the true branch
AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
_FLOATS = (DType.FLOAT32, DType.FLOAT64)


@dataclass(frozen=True)
class TreeEnsembleAttrs:
    """n_targets: columns of the result; aggregate: one of AGGREGATES; base_values: none, or
    one per target, added where the target is scored."""

    n_targets: int
    aggregate: str = "SUM"
    base_values: tuple[float, ...] = ()


def _tree_ensemble_infer(attrs: TreeEnsembleAttrs, types):
    x, nodes, thresholds, leaf_targets, leaf_weights, roots = types
    if x.rank != 2 or x.dtype not in _FLOATS:
        raise OpError(f"TreeEnsemble needs x as [rows, features] of f32 or f64, got {x}")
    if nodes.dtype is not DType.INT32 or nodes.rank != 2 or nodes.shape[1] != 4 or nodes.shape[0] < 1:
        raise OpError(f"TreeEnsemble nodes must be i32[M, 4] with M >= 1, got {nodes}")
    if thresholds.shape != (nodes.shape[0],) or thresholds.dtype is not x.dtype:
        raise OpError(f"TreeEnsemble thresholds must be {x.dtype}[{nodes.shape[0]}] (one per node, the type of x), "
                      f"got {thresholds}")
    if leaf_targets.dtype is not DType.INT32 or leaf_targets.rank != 1:
        raise OpError(f"TreeEnsemble leaf_targets must be i32[L], got {leaf_targets}")
    if leaf_weights.shape != leaf_targets.shape or leaf_weights.dtype not in _FLOATS:
        raise OpError(f"TreeEnsemble leaf_weights must be f32 or f64 [{leaf_targets.shape[0]}], got {leaf_weights}")
    if roots.dtype is not DType.INT32 or roots.rank != 1 or roots.shape[0] < 1:
        raise OpError(f"TreeEnsemble roots must be i32[R] with R >= 1, got {roots}")
    if attrs.n_targets < 1:
        raise OpError(f"TreeEnsemble needs n_targets >= 1, got {attrs.n_targets}")
    if attrs.aggregate not in AGGREGATES:
        raise OpError(f"TreeEnsemble aggregate '{attrs.aggregate}' is not one of {', '.join(AGGREGATES)}")
    if len(attrs.base_values) not in (0, attrs.n_targets):
        raise OpError(f"TreeEnsemble has {len(attrs.base_values)} base values for {attrs.n_targets} targets")
    return (leaf_weights.with_shape((x.shape[0], attrs.n_targets)),)


def check_forest(nodes: np.ndarray, roots: np.ndarray, leaf_targets: np.ndarray, n_features: int,
                 n_targets: int) -> None:
    """Raises OpError unless every walk from a root stays inside the arrays and ends at a
    leaf: modes known, features, children, leaf entry ranges, targets and roots in range,
    and no cycle anywhere among the nodes."""
    nodes = np.asarray(nodes)
    m = nodes.shape[0]
    feature, mode, yes, no = (nodes[:, i].astype(np.int64) for i in range(4))
    kind = mode & 7
    bad = np.flatnonzero(((mode & ~(7 | MISSING_TRUE)) != 0) | (kind >= len(TREE_MODES)) | ((kind == 0) & (mode != 0)))
    if bad.size:
        raise OpError(f"TreeEnsemble node {bad[0]} has an unknown mode {mode[bad[0]]}")
    branch = kind != 0
    for what, values, limit in (("feature", feature, n_features), ("true child", yes, m), ("false child", no, m)):
        out = np.flatnonzero(branch & ((values < 0) | (values >= limit)))
        if out.size:
            raise OpError(f"TreeEnsemble node {out[0]}: {what} {values[out[0]]} is out of range [0, {limit})")
    leaf = np.flatnonzero(~branch & ((yes < 0) | (yes > no) | (no > leaf_targets.shape[0])))
    if leaf.size:
        raise OpError(f"TreeEnsemble leaf {leaf[0]}: entries [{yes[leaf[0]]}, {no[leaf[0]]}) are out of range "
                      f"[0, {leaf_targets.shape[0]}]")
    target = np.flatnonzero((leaf_targets < 0) | (leaf_targets >= n_targets))
    if target.size:
        raise OpError(f"TreeEnsemble leaf entry {target[0]}: target {leaf_targets[target[0]]} is out of range "
                      f"[0, {n_targets})")
    root = np.flatnonzero((roots < 0) | (roots >= m))
    if root.size:
        raise OpError(f"TreeEnsemble root {root[0]} is node {roots[root[0]]}, out of range [0, {m})")
    cycle = find_cycle(yes, no, branch)
    if cycle is not None:
        raise OpError(f"TreeEnsemble nodes form a cycle through node {cycle}")


def find_cycle(yes: np.ndarray, no: np.ndarray, branch: np.ndarray) -> int | None:
    """A node on or below a cycle of the branch graph (children indices in range), or None.
    Peels nodes no remaining node points to, a layer at a time (vectorized: as many rounds
    as the longest path is long)."""
    m = branch.shape[0]
    parents = np.flatnonzero(branch)
    edges_from = np.concatenate([parents, parents])
    edges_to = np.concatenate([yes[parents], no[parents]])
    indegree = np.bincount(edges_to, minlength=m)
    order = np.argsort(edges_from, kind="stable")
    edges_from, edges_to = edges_from[order], edges_to[order]
    starts = np.searchsorted(edges_from, np.arange(m + 1))
    removed = np.zeros(m, bool)
    frontier = np.flatnonzero(indegree == 0)
    while frontier.size:
        removed[frontier] = True
        children = edges_to[_ranges(starts[frontier], starts[frontier + 1] - starts[frontier])]
        np.subtract.at(indegree, children, 1)
        frontier = np.unique(children[indegree[children] == 0])
    left = np.flatnonzero(~removed)
    return int(left[0]) if left.size else None


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start, start + length) over the pairs."""
    total = int(lengths.sum())
    offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + np.arange(total) - offsets


def leaves_reached(x: np.ndarray, nodes: np.ndarray, thresholds: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """[N, R]: the leaf each row reaches in each tree (all trees walked together, a level
    at a time). The forest must have passed check_forest."""
    feature, mode, yes, no = (nodes[:, i].astype(np.int64) for i in range(4))
    kind, missing = mode & 7, (mode & MISSING_TRUE) != 0
    n_rows = x.shape[0]
    pos = np.broadcast_to(roots.astype(np.int64), (n_rows, roots.shape[0])).copy()
    rows = np.arange(n_rows)[:, None]
    for _ in range(nodes.shape[0] + 1):  # acyclic: no path is longer
        k = kind[pos]
        active = k != 0
        if not active.any():
            break
        v = x[rows, np.where(active, feature[pos], 0)]
        t = thresholds[pos]
        with np.errstate(invalid="ignore"):
            go = np.select([k == 1, k == 2, k == 3, k == 4, k == 5, k == 6],
                           [v <= t, v < t, v >= t, v > t, v == t, v != t], False)
        go |= missing[pos] & np.isnan(v)
        pos = np.where(active, np.where(go, yes[pos], no[pos]), pos)
    return pos


def _tree_ensemble(attrs: TreeEnsembleAttrs, arrays):
    x, nodes, thresholds, leaf_targets, leaf_weights, roots = arrays
    check_forest(nodes, roots, leaf_targets, x.shape[1], attrs.n_targets)
    k = attrs.n_targets
    n_nodes = nodes.shape[0]
    starts, ends = nodes[:, 2].astype(np.int64), nodes[:, 3].astype(np.int64)
    leaf = (nodes[:, 1] & 7) == 0
    # Per node, its entries folded into dense rows: [M, K] values and which targets it has.
    counts = np.where(leaf, ends - starts, 0)
    owner = np.repeat(np.arange(n_nodes), counts)
    entry = _ranges(np.where(leaf, starts, 0), counts)
    cells = owner * k + leaf_targets[entry].astype(np.int64)
    weights = leaf_weights[entry].astype(np.float64)
    has = np.zeros(n_nodes * k, bool)
    has[cells] = True
    if attrs.aggregate in ("SUM", "AVERAGE"):
        dense = np.zeros(n_nodes * k)
        np.add.at(dense, cells, weights)
    else:
        dense = np.full(n_nodes * k, np.inf if attrs.aggregate == "MIN" else -np.inf)
        (np.minimum if attrs.aggregate == "MIN" else np.maximum).at(dense, cells, weights)
    dense, has = dense.reshape(n_nodes, k), has.reshape(n_nodes, k)
    reached = leaves_reached(x, nodes, thresholds, roots)
    scores = np.zeros((x.shape[0], k))
    scored = np.zeros(scores.shape, bool)
    if attrs.aggregate in ("SUM", "AVERAGE"):
        for t in range(roots.shape[0]):
            scores += dense[reached[:, t]]
            scored |= has[reached[:, t]]
        if attrs.aggregate == "AVERAGE":
            scores /= roots.shape[0]
    else:
        better = np.less if attrs.aggregate == "MIN" else np.greater
        for t in range(roots.shape[0]):
            values, present = dense[reached[:, t]], has[reached[:, t]]
            take = present & (~scored | better(values, scores))
            scores = np.where(take, values, scores)
            scored |= present
    base = np.asarray(attrs.base_values or (0.0,) * k, np.float64)
    scores = np.where(scored, scores + base, 0.0)
    return (scores.astype(leaf_weights.dtype),)


define_op(OpDef("TreeEnsemble", ("x", "nodes", "thresholds", "leaf_targets", "leaf_weights", "roots"), ("scores",),
                _tree_ensemble_infer, _tree_ensemble, attrs=TreeEnsembleAttrs,
                doc="A forest of decision trees over the rows of x (ai.onnx.ml's tree ensembles)"))

__all__ = ["AGGREGATES", "MISSING_TRUE", "TREE_MODES", "TreeEnsembleAttrs", "check_forest", "find_cycle",
           "leaves_reached"]
