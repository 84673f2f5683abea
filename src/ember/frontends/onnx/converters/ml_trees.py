"""Converters for ai.onnx.ml's tree ensembles: TreeEnsembleRegressor and TreeEnsembleClassifier
(their *_as_tensor attributes included) and TreeEnsemble (ai.onnx.ml opset 5). Each becomes one
TreeEnsemble op (ops/ml.py) over canonical node arrays built and validated here (ids that do
not resolve, lengths that disagree, features out of range, cycles: a ModelImportError naming
the tree and node), then the base values, the post transform and, for the classifier, the
labels, built from existing ops (converters/ml.py).

Semantics are ONNX Runtime's (tree_ensemble_common.h, tree_ensemble_aggregator.h):
  - a tree's root is its first listed node; leaf entries on branch nodes are ignored; a
    single-target ensemble counts only the first entry of each leaf;
  - x is compared in the thresholds' type (x is cast to it), NaN goes to the false branch
    unless the node tracks missing values to the true branch (BRANCH_NEQ: NaN != t is true);
  - a single-target regressor applies no post transform but PROBIT;
  - classifier labels come from the scores plus base values before the post transform (the
    first maximum); a two-class classifier whose leaves weigh one class only (the binary form
    scikit-learn exports) labels by a threshold on that score (0.5 when every weight is >= 0,
    else 0) and writes the scores [1 - s, s] (weights >= 0) or [-s, s], [sigmoid(-s),
    sigmoid(s)] with LOGISTIC; a class no leaf weighs is written as 0.
Forms where ONNX Runtime's result depends on which classes a row's leaves happened to score,
or where it drops the trees' scores or writes uninitialized memory, are refused rather than
guessed. Two points follow the ONNX specification (and its reference) instead, where ONNX
Runtime 1.32 departs from it: TreeEnsemble's post_transform codes (1 is SOFTMAX, 2 LOGISTIC;
ONNX Runtime reads them the other way round) and BRANCH_MEMBER, a float membership test
(ONNX Runtime takes integer-valued sets only and truncates the feature to an integer)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.ml import (
    ML_DOMAIN,
    POST_TRANSFORMS,
    as_float,
    as_matrix,
    check_attributes,
    class_labels,
    const,
    pick_labels,
    post_transform,
    post_transform_name,
    threshold_labels,
)
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops import OpError
from ember.ops.ml import AGGREGATES, MISSING_TRUE, TREE_MODES, TreeEnsembleAttrs, check_forest
from ember.ops.tensor import AxisAttrs
from ember.support.errors import ModelImportError, UnsupportedError
from ember.types import DType

_DTYPES = {np.dtype(np.float32): DType.FLOAT32, np.dtype(np.float64): DType.FLOAT64}


@dataclass
class Forest:
    """The canonical arrays of ops/ml.py, plus each node's tree (-1 for nodes added here)."""

    nodes: np.ndarray
    thresholds: np.ndarray
    leaf_targets: np.ndarray
    leaf_weights: np.ndarray
    roots: np.ndarray
    tree_of: np.ndarray

    def always_scored(self, n_targets: int) -> np.ndarray:
        """Per target: whether every row gets an entry for it, because some tree has one in
        every leaf (a sufficient condition, over each tree's listed leaves)."""
        leaf = np.flatnonzero((self.nodes[:, 1] & 7) == 0)
        has = np.zeros((leaf.size, n_targets), bool)
        counts = self.nodes[leaf, 3] - self.nodes[leaf, 2]
        owner = np.repeat(np.arange(leaf.size), counts)
        first = np.repeat(self.nodes[leaf, 2] - (np.cumsum(counts) - counts), counts)
        has[owner, self.leaf_targets[first + np.arange(owner.size)]] = True
        scored = np.zeros(n_targets, bool)
        trees = self.tree_of[leaf]
        for tree in np.unique(trees):
            scored |= has[trees == tree].all(axis=0)
        return scored


def _floats(ctx: NodeContext, name: str, required: bool = True) -> np.ndarray | None:
    """A float list attribute, or its *_as_tensor double form (as an array of its type)."""
    tensor = ctx.attr_tensor(f"{name}_as_tensor", None)
    plain = ctx.attr_floats(name, None)
    if tensor is not None and plain:
        raise ModelImportError(f"both '{name}' and '{name}_as_tensor' are set")
    if tensor is not None:
        if tensor.dtype.kind != "f":
            raise ModelImportError(f"'{name}_as_tensor' must hold floats, got {tensor.dtype}")
        return tensor.reshape(-1).astype(np.float64 if tensor.dtype == np.float64 else np.float32)
    if plain is None:
        if required:
            raise ModelImportError(f"required attribute '{name}' is missing")
        return None
    return np.asarray(plain, np.float32)


def _flags(ctx: NodeContext, name: str, count: int) -> np.ndarray:
    values = np.asarray(ctx.attr_ints(name, ()) or (0,) * count, np.int64)
    if values.size != count:
        raise ModelImportError(f"'{name}' has {values.size} entries for {count} nodes")
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        raise ModelImportError(f"'{name}'[{bad[0]}] is {values[bad[0]]}: a flag must be 0 or 1")
    return values.astype(bool)


def _check(forest: Forest, features: int, n_targets: int) -> Forest:
    try:
        check_forest(forest.nodes, forest.roots, forest.leaf_targets, features, n_targets)
    except OpError as err:
        raise ModelImportError(str(err)) from None
    return forest


# TreeEnsembleRegressor / TreeEnsembleClassifier ------------------------------------------


def legacy_forest(ctx: NodeContext, prefix: str, n_targets: int, features: int, first_entry_only: bool) -> Forest:
    """The nodes_* attributes and the <prefix>_* leaf entries ('target' or 'class')."""
    tree_ids = np.asarray(ctx.attr_ints("nodes_treeids", ()), np.int64)
    m = tree_ids.size
    if m == 0:
        raise ModelImportError("the ensemble has no nodes ('nodes_treeids' is empty)")
    columns: dict[str, np.ndarray] = {}
    for name in ("nodes_nodeids", "nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids"):
        columns[name] = np.asarray(ctx.attr_ints(name, ()), np.int64)
    modes = ctx.attr_strs("nodes_modes", ()) or ()
    values = _floats(ctx, "nodes_values")
    assert values is not None
    for name, size in [*((n, c.size) for n, c in columns.items()), ("nodes_modes", len(modes)),
                       ("nodes_values", values.size)]:
        if size != m:
            raise ModelImportError(f"'{name}' has {size} entries, but 'nodes_treeids' has {m}")
    missing = _flags(ctx, "nodes_missing_value_tracks_true", m)
    try:
        kind = np.asarray([TREE_MODES.index(mode) for mode in modes], np.int64)
    except ValueError:
        unknown = next(mode for mode in modes if mode not in TREE_MODES)
        raise ModelImportError(f"node mode '{unknown}' is not one of {', '.join(TREE_MODES)}") from None
    node_ids = columns["nodes_nodeids"]
    index: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(tree_ids.tolist(), node_ids.tolist(), strict=True)):
        if index.setdefault(key, i) != i:
            raise ModelImportError(f"node {key[1]} of tree {key[0]} is listed twice")

    def resolve(ids: np.ndarray, what: str, where: np.ndarray) -> np.ndarray:
        out = np.zeros(m, np.int64)
        for i in np.flatnonzero(where):
            found = index.get((int(tree_ids[i]), int(ids[i])))
            if found is None:
                raise ModelImportError(f"node {node_ids[i]} of tree {tree_ids[i]}: its {what} {ids[i]} is not a node "
                                       "of that tree")
            out[i] = found
        return out

    branch = kind != 0
    yes = resolve(columns["nodes_truenodeids"], "true child", branch)
    no = resolve(columns["nodes_falsenodeids"], "false child", branch)
    feature = columns["nodes_featureids"]
    bad = np.flatnonzero(branch & ((feature < 0) | (feature >= features)))
    if bad.size:
        i = bad[0]
        raise ModelImportError(f"node {node_ids[i]} of tree {tree_ids[i]} splits on feature {feature[i]}, but the "
                               f"input has {features} features")
    # Leaf entries, grouped by leaf in listing order.
    w_trees = np.asarray(ctx.attr_ints(f"{prefix}_treeids", ()), np.int64)
    w_nodes = np.asarray(ctx.attr_ints(f"{prefix}_nodeids", ()), np.int64)
    w_ids = np.asarray(ctx.attr_ints(f"{prefix}_ids", ()), np.int64)
    weights = _floats(ctx, f"{prefix}_weights", required=False)
    weights = np.zeros(0, np.float32) if weights is None else weights
    for name, size in ((f"{prefix}_nodeids", w_nodes.size), (f"{prefix}_ids", w_ids.size),
                       (f"{prefix}_weights", weights.size)):
        if size != w_trees.size:
            raise ModelImportError(f"'{name}' has {size} entries, but '{prefix}_treeids' has {w_trees.size}")
    owner = np.zeros(w_trees.size, np.int64)
    for e, key in enumerate(zip(w_trees.tolist(), w_nodes.tolist(), strict=True)):
        found = index.get(key)
        if found is None:
            raise ModelImportError(f"leaf weight {e} names node {key[1]} of tree {key[0]}, which does not exist")
        owner[e] = found
    bad = np.flatnonzero((w_ids < 0) | (w_ids >= n_targets))
    if bad.size:
        raise ModelImportError(f"leaf weight {bad[0]} is for {prefix} {w_ids[bad[0]]}, out of range [0, {n_targets})")
    keep = ~branch[owner]  # ONNX Runtime ignores weights on branch nodes
    order = np.flatnonzero(keep)[np.argsort(owner[keep], kind="stable")]
    owner, w_ids, weights = owner[order], w_ids[order], weights[order]
    if first_entry_only and owner.size:
        first = np.concatenate([[True], owner[1:] != owner[:-1]])
        owner, w_ids, weights = owner[first], w_ids[first], weights[first]
    starts = np.searchsorted(owner, np.arange(m), "left")
    ends = np.searchsorted(owner, np.arange(m), "right")
    nodes = np.stack([np.where(branch, feature, 0), kind | np.where(branch & missing, MISSING_TRUE, 0),
                      np.where(branch, yes, starts), np.where(branch, no, ends)], axis=1)
    trees, first_index = np.unique(tree_ids, return_index=True)
    roots = np.sort(first_index)
    tree_number = np.searchsorted(trees, tree_ids)
    return Forest(nodes.astype(np.int32), np.where(branch, values, 0).astype(values.dtype), w_ids.astype(np.int32),
                  weights, roots.astype(np.int32), tree_number)


def _ensemble(ctx: NodeContext, x: Value, forest: Forest, n_targets: int, aggregate: str,
              base: np.ndarray | None = None) -> Value:
    """The TreeEnsemble op over x [N, F] (cast to the thresholds' type): scores [N, K]."""
    dtype = _DTYPES[forest.thresholds.dtype]
    x = as_float(ctx, x, dtype)
    arrays = [forest.nodes, forest.thresholds, forest.leaf_targets, forest.leaf_weights, forest.roots]
    names = ("nodes", "thresholds", "leaf_targets", "leaf_weights", "roots")
    operands = [ctx.add_constant(np.ascontiguousarray(a), f"{ctx.name}_{n}") for a, n in zip(arrays, names,
                                                                                              strict=True)]
    base_values = () if base is None else tuple(float(v) for v in base)
    return ctx.emit1("TreeEnsemble", [x, *operands], TreeEnsembleAttrs(n_targets, aggregate, base_values))


def _input(ctx: NodeContext) -> Value:
    x = ctx.require(0, "X")
    if x.type.dtype not in (DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64, DType.FLOAT16):
        raise UnsupportedError(f"input X is {x.type.dtype}; tree ensembles take float, double, int32 or int64 "
                               "(float16 for TreeEnsemble)")
    return as_matrix(ctx, x)


def _base_values(ctx: NodeContext, sizes: Sequence[int]) -> np.ndarray:
    base = _floats(ctx, "base_values", required=False)
    base = np.zeros(0, np.float32) if base is None else base
    if base.size not in sizes:
        raise UnsupportedError(f"{base.size} base values (expected {' or '.join(map(str, sorted(set(sizes))))}): "
                               "ONNX Runtime would ignore or misread them")
    return base


def _columns(ctx: NodeContext, scores: Value, column: int) -> Value:
    """scores[:, column:column + 1]."""
    return ctx.emit1("Gather", [scores, const(ctx, [column], DType.INT64, f"column{column}")], AxisAttrs(1))


@converter("TreeEnsembleRegressor", domain=ML_DOMAIN)
def tree_ensemble_regressor(ctx: NodeContext) -> Value:
    check_attributes(ctx)
    x = _input(ctx)
    n_targets = ctx.attr_int("n_targets", None)
    if n_targets is None or n_targets < 1:
        raise ModelImportError(f"n_targets must be set and at least 1, got {n_targets}")
    aggregate = ctx.attr_str("aggregate_function", "SUM")
    if aggregate not in AGGREGATES:
        raise ModelImportError(f"aggregate_function '{aggregate}' is not one of {', '.join(AGGREGATES)}")
    name = post_transform_name(ctx)
    forest = _check(legacy_forest(ctx, "target", n_targets, x.type.shape[1], n_targets == 1), x.type.shape[1],
                    n_targets)
    base = _base_values(ctx, (0, n_targets))
    scores = _ensemble(ctx, x, forest, n_targets, aggregate, base)  # added where scored, as ONNX Runtime does
    if n_targets == 1 and name != "PROBIT":
        name = "NONE"  # ONNX Runtime's single-target path applies only PROBIT
    return as_float(ctx, post_transform(ctx, scores, name))


@converter("TreeEnsembleClassifier", domain=ML_DOMAIN)
def tree_ensemble_classifier(ctx: NodeContext) -> list[Value | None]:
    check_attributes(ctx)
    x = _input(ctx)
    labels = class_labels(ctx, "classlabels_int64s", "classlabels_strings")
    n_classes = len(ctx.attr_ints("classlabels_int64s", None) or ctx.attr_strs("classlabels_strings", None) or ())
    if n_classes < 1:
        raise ModelImportError("no class labels (classlabels_int64s or classlabels_strings)")
    name = post_transform_name(ctx)
    forest = _check(legacy_forest(ctx, "class", n_classes, x.type.shape[1], False), x.type.shape[1], n_classes)
    ids = sorted({int(i) for i in forest.leaf_targets})
    raw = _ensemble(ctx, x, forest, n_classes, "SUM")
    dtype = raw.type.dtype
    scored = forest.always_scored(n_classes)
    if n_classes == 2 and len(ids) == 1:
        return [*_binary(ctx, labels, forest, raw, ids[0], scored, name)]
    if n_classes == 2:
        raise UnsupportedError("a two-class TreeEnsembleClassifier whose leaves weigh both classes: ONNX Runtime "
                               "labels its rows 0 or 1 by the sign of class 1's score (not by the larger score, "
                               "not with the class labels); export the binary form (leaves weighing one class)")
    base = _base_values(ctx, (0, n_classes))
    if base.size == 0 and not scored.all():
        raise UnsupportedError(f"class {int(np.flatnonzero(~scored)[0])} is not scored in every leaf of any tree: "
                               "ONNX Runtime then leaves it out of the argmax row by row")
    scores = ctx.emit1("Add", [raw, const(ctx, base, dtype, "base_values")]) if base.size else raw
    return [pick_labels(ctx, labels, scores), as_float(ctx, post_transform(ctx, scores, name))]


def _binary(ctx: NodeContext, labels: np.ndarray | None, forest: Forest, raw: Value, c: int, scored: np.ndarray,
            name: str) -> tuple[Value | None, Value]:
    """Two classes, leaves weighing class c only (ONNX Runtime's binary case). The unscored
    class is written as 0 whatever its base value; the label is a threshold on the scored
    class's score s (with base_values[0] added when c is 0)."""
    if not scored[c]:
        raise UnsupportedError(f"a binary TreeEnsembleClassifier whose class {c} is not scored in every leaf of any "
                               "tree: ONNX Runtime's scores then depend on each row's leaves")
    base = _base_values(ctx, (0, 1, 2))
    dtype = raw.type.dtype
    threshold = 0.5 if np.all(forest.leaf_weights >= 0) else 0.0
    s = _columns(ctx, raw, c)
    zero = const(ctx, np.zeros(s.type.shape), dtype, "unscored")
    if c == 1:
        if base.size == 2:
            raise UnsupportedError("a binary TreeEnsembleClassifier scoring class 1 with two base values: ONNX "
                                   "Runtime replaces the trees' score by base_values[1]")
        pair = ctx.emit1("Concat", [zero, s], AxisAttrs(1))
        return threshold_labels(ctx, labels, s, threshold), as_float(ctx, post_transform(ctx, pair, name))
    if base.size:
        s = ctx.emit1("Add", [s, const(ctx, float(base[0]), dtype, "base0")])
    label = threshold_labels(ctx, labels, s, threshold)
    if base.size == 2:
        return label, as_float(ctx, post_transform(ctx, ctx.emit1("Concat", [s, zero], AxisAttrs(1)), name))
    if name == "PROBIT":
        raise UnsupportedError("a binary TreeEnsembleClassifier with PROBIT: ONNX Runtime writes one probit score "
                               "into a two-column output")
    if name == "LOGISTIC":
        columns = [ctx.emit1("Sigmoid", [ctx.emit1("Neg", [s])]), ctx.emit1("Sigmoid", [s])]
    elif threshold == 0.5:  # every weight >= 0: [1 - s, s], untransformed
        columns = [ctx.emit1("Sub", [const(ctx, 1.0, dtype, "one"), s]), s]
    else:
        columns = [ctx.emit1("Neg", [s]), s]
    return label, as_float(ctx, ctx.emit1("Concat", columns, AxisAttrs(1)))


# TreeEnsemble (ai.onnx.ml opset 5) --------------------------------------------------------

_TE5_MODES = (1, 2, 3, 4, 5, 6)  # LEQ, LT, GTE, GT, EQ, NEQ as canonical modes; 6 is BRANCH_MEMBER
_TE5_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")


def _ints(ctx: NodeContext, name: str, count: int | None = None) -> np.ndarray:
    values = np.asarray(ctx.attr_ints(name), np.int64)
    if count is not None and values.size != count:
        raise ModelImportError(f"'{name}' has {values.size} entries, but 'nodes_featureids' has {count}")
    return values


def te5_forest(ctx: NodeContext, features: int) -> tuple[Forest, int]:
    splits = ctx.attr_tensor("nodes_splits").reshape(-1)
    if splits.dtype.kind != "f":
        raise ModelImportError(f"'nodes_splits' must hold floats, got {splits.dtype}")
    dtype = np.float64 if splits.dtype == np.float64 else np.float32
    feature = _ints(ctx, "nodes_featureids")
    m = feature.size
    if m == 0:
        raise ModelImportError("the ensemble has no nodes ('nodes_featureids' is empty)")
    modes = ctx.attr_tensor("nodes_modes").reshape(-1).astype(np.int64)
    for name, size in (("nodes_splits", splits.size), ("nodes_modes", modes.size)):
        if size != m:
            raise ModelImportError(f"'{name}' has {size} entries, but 'nodes_featureids' has {m}")
    yes, no = _ints(ctx, "nodes_truenodeids", m), _ints(ctx, "nodes_falsenodeids", m)
    yes_leaf = _flags(ctx, "nodes_trueleafs", m)
    no_leaf = _flags(ctx, "nodes_falseleafs", m)
    missing = _flags(ctx, "nodes_missing_value_tracks_true", m)
    targets = _ints(ctx, "leaf_targetids")
    weights = ctx.attr_tensor("leaf_weights").reshape(-1)
    if weights.dtype.kind != "f":
        raise ModelImportError(f"'leaf_weights' must hold floats, got {weights.dtype}")
    n_leaves = targets.size
    if weights.size != n_leaves:
        raise ModelImportError(f"'leaf_weights' has {weights.size} entries, but 'leaf_targetids' has {n_leaves}")
    n_targets = ctx.attr_int("n_targets", None)
    if n_targets is None:
        n_targets = int(targets.max()) + 1 if targets.size else 1
    bad = np.flatnonzero((modes < 0) | (modes > 6))
    if bad.size:
        raise ModelImportError(f"node {bad[0]} has mode {modes[bad[0]]}, not one of 0 (BRANCH_LEQ) to 6 "
                               "(BRANCH_MEMBER)")
    bad = np.flatnonzero((feature < 0) | (feature >= features))
    if bad.size:
        raise ModelImportError(f"node {bad[0]} splits on feature {feature[bad[0]]}, but the input has {features}")
    for ids, leaf, what in ((yes, yes_leaf, "true"), (no, no_leaf, "false")):
        limit = np.where(leaf, n_leaves, m)
        out = np.flatnonzero((ids < 0) | (ids >= limit))
        if out.size:
            i = out[0]
            raise ModelImportError(f"node {i}: {what} {'leaf' if leaf[i] else 'node'} {ids[i]} is out of range "
                                   f"[0, {limit[i]})")
    roots = _ints(ctx, "tree_roots")
    out = np.flatnonzero((roots < 0) | (roots >= m))
    if roots.size == 0 or out.size:
        raise ModelImportError(f"tree_roots {roots.tolist()[:8]} must be node indices in [0, {m})")
    # Canonical numbering: the branch nodes, then one node per leaf, then set-membership chains.
    canon_yes = np.where(yes_leaf, m + yes, yes)
    canon_no = np.where(no_leaf, m + no, no)
    members = np.flatnonzero(modes == 6)
    thresholds = splits.astype(dtype)
    kind = np.where(modes == 6, 5, modes + 1)
    extra: list[list[int]] = []
    extra_thresholds: list[float] = []
    if members.size:
        values = ctx.attr_tensor("membership_values", None)
        if values is None:
            raise ModelImportError("BRANCH_MEMBER nodes need 'membership_values'")
        values = values.reshape(-1).astype(np.float64)
        sets = np.split(values, np.flatnonzero(np.isnan(values)) + 1)
        if len(sets) - 1 != members.size or sets[-1].size:
            raise ModelImportError(f"'membership_values' holds {len(sets) - 1} NaN-terminated sets for "
                                   f"{members.size} BRANCH_MEMBER nodes")
        for i, members_of in zip(members.tolist(), sets, strict=False):
            chain = members_of[:-1]  # without the NaN terminator
            thresholds[i] = chain[0] if chain.size else np.nan  # an empty set matches nothing
            link = int(canon_no[i])
            for value in chain[:0:-1]:  # the chain's tail, built back to front
                extra.append([int(feature[i]), 5 | (MISSING_TRUE if missing[i] else 0), int(canon_yes[i]), link])
                extra_thresholds.append(float(value))
                link = m + n_leaves + len(extra) - 1
            canon_no[i] = link
    flags = np.where(missing, MISSING_TRUE, 0)
    branch_rows = np.stack([feature, kind | flags, canon_yes, canon_no], axis=1)
    leaf_rows = np.stack([np.zeros(n_leaves, np.int64), np.zeros(n_leaves, np.int64), np.arange(n_leaves),
                          np.arange(n_leaves) + 1], axis=1)
    nodes = np.concatenate([branch_rows, leaf_rows, np.asarray(extra, np.int64).reshape(-1, 4)])
    all_thresholds = np.concatenate([thresholds, np.zeros(n_leaves, dtype), np.asarray(extra_thresholds, dtype)])
    # A tree that is a single leaf: its root's both branches name that same leaf.
    degenerate = yes_leaf[roots] & no_leaf[roots] & (yes[roots] == no[roots])
    roots = np.where(degenerate, m + yes[roots], roots)
    forest = Forest(nodes.astype(np.int32), all_thresholds.astype(dtype), targets.astype(np.int32), weights,
                    roots.astype(np.int32), np.full(nodes.shape[0], -1))
    return _check(forest, features, n_targets), n_targets


@converter("TreeEnsemble", domain=ML_DOMAIN)
def tree_ensemble(ctx: NodeContext) -> Value:
    check_attributes(ctx)
    x = _input(ctx)
    out_dtype = x.type.dtype
    if out_dtype not in (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16):
        raise UnsupportedError(f"TreeEnsemble takes float, double or float16 X, got {out_dtype}")
    aggregate = ctx.attr_int("aggregate_function", 1)
    transform = ctx.attr_int("post_transform", 0)
    if not 0 <= aggregate < len(_TE5_AGGREGATES) or not 0 <= transform < len(POST_TRANSFORMS):
        raise ModelImportError(f"aggregate_function {aggregate} or post_transform {transform} is out of range")
    forest, n_targets = te5_forest(ctx, x.type.shape[1])
    weights_dtype = np.float64 if forest.leaf_weights.dtype == np.float64 else np.float32
    forest.leaf_weights = forest.leaf_weights.astype(weights_dtype)
    scores = _ensemble(ctx, x, forest, n_targets, _TE5_AGGREGATES[aggregate])
    name = POST_TRANSFORMS[transform]
    if n_targets == 1 and name != "PROBIT":
        name = "NONE"  # ONNX Runtime's single-target path applies only PROBIT
    return as_float(ctx, post_transform(ctx, scores, name), out_dtype)
