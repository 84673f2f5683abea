"""Random tree ensembles in ONNX's ai.onnx.ml forms, for tests/test_ml_ops.py: the legacy
TreeEnsembleRegressor / TreeEnsembleClassifier attributes and TreeEnsemble (ai.onnx.ml opset 5),
every node mode, missing-value tracking, several targets, and inputs drawn from the
thresholds themselves (so ties, NaN and equality splits are exercised)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, helper, numpy_helper

LEGACY_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
ML = "ai.onnx.ml"


@dataclass
class Tree:
    """Nodes in listing order: (node id, mode, feature, threshold, true id, false id, missing)."""

    nodes: list[tuple] = field(default_factory=list)
    leaves: list[int] = field(default_factory=list)  # node ids of the leaves


def random_tree(rng: np.random.Generator, depth: int, features: int, values: np.ndarray, modes: tuple[str, ...],
                missing_rate: float) -> Tree:
    """A random binary tree up to `depth`, node ids shuffled (ids need not follow the order)."""
    tree = Tree()
    ids = iter(rng.permutation(4 << depth).tolist())

    def grow(level: int) -> int:
        node_id = next(ids)
        if level == depth or (level > 0 and rng.random() < 0.25):
            tree.nodes.append((node_id, "LEAF", 0, 0.0, 0, 0, 0))
            tree.leaves.append(node_id)
            return node_id
        at = len(tree.nodes)
        tree.nodes.append(None)
        yes, no = grow(level + 1), grow(level + 1)
        tree.nodes[at] = (node_id, str(rng.choice(modes)), int(rng.integers(features)), float(rng.choice(values)),
                          yes, no, int(rng.random() < missing_rate))
        return node_id

    grow(0)
    return tree


def _node_attrs(trees: list[Tree]) -> dict:
    attrs: dict[str, list] = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_modes", "nodes_featureids",
                                              "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                                              "nodes_missing_value_tracks_true")}
    for t, tree in enumerate(trees):
        for node_id, mode, feature, threshold, yes, no, missing in tree.nodes:
            for key, value in zip(attrs, (t, node_id, mode, feature, threshold, yes, no, missing), strict=True):
                attrs[key].append(value)
    return attrs


def leaf_entries(rng: np.random.Generator, trees: list[Tree], n_targets: int, dense: bool,
                 positive: bool = False) -> dict:
    """Per leaf: every target (dense) or 1-3 random ones, with random weights."""
    out: dict[str, list] = {"treeids": [], "nodeids": [], "ids": [], "weights": []}
    for t, tree in enumerate(trees):
        for leaf in tree.leaves:
            targets = range(n_targets) if dense else rng.choice(n_targets, int(rng.integers(1, 4)))
            for target in targets:
                out["treeids"].append(t)
                out["nodeids"].append(leaf)
                out["ids"].append(int(target))
                weight = rng.uniform(0, 1) if positive else rng.normal()
                out["weights"].append(float(np.float32(weight)))
    return out


def model(node, inputs, outputs, ml_opset: int = 3) -> bytes:
    graph = helper.make_graph([node], "forest", inputs, outputs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])
    proto.ir_version = 8
    return proto.SerializeToString()


def regressor(trees: list[Tree], entries: dict, n_targets: int, features: int, rows: int, aggregate: str = "SUM",
              post: str = "NONE", base: list[float] | None = None, dtype=TensorProto.FLOAT) -> bytes:
    attrs = _node_attrs(trees)
    attrs.update({f"target_{k}": v for k, v in entries.items()})
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=n_targets,
                            aggregate_function=aggregate, post_transform=post, **attrs,
                            **({"base_values": base} if base else {}))
    return model(node, [helper.make_tensor_value_info("X", dtype, [rows, features])],
                 [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [rows, n_targets])])


def classifier(trees: list[Tree], entries: dict, labels: list[int], features: int, rows: int, post: str = "NONE",
               base: list[float] | None = None) -> bytes:
    attrs = _node_attrs(trees)
    attrs.update({f"class_{k}": v for k, v in entries.items()})
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "scores"], domain=ML,
                            classlabels_int64s=labels, post_transform=post, **attrs,
                            **({"base_values": base} if base else {}))
    return model(node, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [rows, features])],
                 [helper.make_tensor_value_info("label", TensorProto.INT64, [rows]),
                  helper.make_tensor_value_info("scores", TensorProto.FLOAT, [rows, len(labels)])])


def tree_ensemble5(rng: np.random.Generator, n_trees: int, depth: int, features: int, n_targets: int, rows: int,
                   values: np.ndarray, aggregate: int = 1, post: int = 0, dtype=np.float32,
                   modes: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6), missing_rate: float = 0.3) -> bytes:
    """TreeEnsemble (ai.onnx.ml opset 5): interior nodes and leaves in separate arrays, modes
    0-6 (6: set membership), one weight per leaf."""
    cols: dict[str, list] = {k: [] for k in ("featureids", "modes", "splits", "truenodeids", "falsenodeids",
                                             "trueleafs", "falseleafs", "missing")}
    leaf_targets: list[int] = []
    leaf_weights: list[float] = []
    members: list[float] = []
    roots = []

    def leaf() -> int:
        leaf_targets.append(int(rng.integers(n_targets)))
        leaf_weights.append(float(rng.normal()))
        return len(leaf_targets) - 1

    def grow(level: int) -> tuple[int, int]:
        if level == depth or (level > 0 and rng.random() < 0.25):
            return leaf(), 1
        at = len(cols["modes"])
        for k in cols:
            cols[k].append(0)
        mode = int(rng.choice(modes))
        cols["modes"][at], cols["featureids"][at] = mode, int(rng.integers(features))
        cols["splits"][at] = float(rng.choice(values))
        cols["missing"][at] = int(rng.random() < missing_rate)
        if mode == 6:  # ONNX Runtime takes integer-valued, non-empty sets only; the ONNX reference
            # ends a set at a 0 (its loop tests the value's truth), so sets hold no 0
            integers = np.setdiff1d(np.unique(np.round(values)), [0.0])
            members.extend(rng.choice(integers, int(rng.integers(1, min(3, integers.size) + 1)),
                                      replace=False).tolist() + [np.nan])
        (cols["truenodeids"][at], cols["trueleafs"][at]) = grow(level + 1)
        (cols["falsenodeids"][at], cols["falseleafs"][at]) = grow(level + 1)
        return at, 0

    for _ in range(n_trees):
        roots.append(grow(0)[0])
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    extra = {"membership_values": numpy_helper.from_array(np.asarray(members, dtype))} if members else {}
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=n_targets, aggregate_function=aggregate,
        post_transform=post, tree_roots=roots, nodes_featureids=cols["featureids"],
        nodes_modes=numpy_helper.from_array(np.asarray(cols["modes"], np.uint8)),
        nodes_splits=numpy_helper.from_array(np.asarray(cols["splits"], dtype)),
        nodes_truenodeids=cols["truenodeids"], nodes_falsenodeids=cols["falsenodeids"],
        nodes_trueleafs=cols["trueleafs"], nodes_falseleafs=cols["falseleafs"],
        nodes_missing_value_tracks_true=cols["missing"], leaf_targetids=leaf_targets,
        leaf_weights=numpy_helper.from_array(np.asarray(leaf_weights, dtype)), **extra)
    return model(node, [helper.make_tensor_value_info("X", kind, [rows, features])],
                 [helper.make_tensor_value_info("Y", kind, [rows, n_targets])], ml_opset=5)


def inputs_from(rng: np.random.Generator, values: np.ndarray, rows: int, features: int, nan_rate: float = 0.1,
                dtype=np.float32) -> np.ndarray:
    """Rows drawn from the split values and their neighbours, some NaN."""
    pool = np.concatenate([values, values + 0.25, values - 0.25, np.round(values)])
    x = rng.choice(pool, (rows, features)).astype(dtype)
    x[rng.random(x.shape) < nan_rate] = np.nan
    return x
