"""Tree ensembles (TreeEnsemble, ops/ml.py) compiled to table-driven C, as treelite's and ONNX
Runtime's predictors are: the forest stays in node arrays (weights of the program) and the
emitted loops walk them; nothing is interpreted node by node from Python.

The forest's arrays must be constants: the plan checks them once more (ops/ml.check_forest:
every index in range, no cycle) and reads off what specializes the code:

  - a forest of one comparison without missing-value tracking (what scikit-learn exports:
    BRANCH_LEQ only) walks branch-free: the plan packs the thresholds with the node links
    into one 16-byte record per node (`tree_walk`, a packed copy of the thresholds) in which
    a leaf links to itself, and records each tree's depth (`tree_depths`); GROUP rows then
    step through a tree together for exactly that many levels, a select per row and level
    and no branch, so the walks overlap instead of waiting on each other's loads and
    mispredicted branches (rows that reach a leaf early stay on it);
  - any other forest walks row by row, switching on each node's mode;
  - the leaves' shape: every leaf holding one weight per target in target order ("dense", a
    classifier's class probabilities) adds a contiguous vector; one entry per leaf adds one
    value; anything else loops over the leaf's entries.

Rows are taken in blocks of BLOCK_ROWS; per block the trees are the outer loop and the rows
the inner one, so one tree's nodes stay in cache while a block walks it (ONNX Runtime batches
the same way). Sums run in double, one accumulator row per block row in scratch, with a flag
per target where a target can go unscored (it is then 0, base value or not). Blocks are split
across threads (OpenMP), contiguous chunks of rows per thread."""
from __future__ import annotations

import hashlib
import math

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.linalg import chunk_loop, chunks
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.ml import MISSING_TRUE, check_forest
from ember.support.errors import EmberError

BLOCK_ROWS = 64
GROUP = 8  # rows walking a tree together on the branch-free path
PREAMBLE = """\
/* A tree node as the branch-free walk reads it (kernels/trees.py): a leaf links to itself. */
typedef struct { float thr; int32_t feature, link[2]; } ember_tree_node_f;  /* link: true, false */
typedef struct { double thr; int32_t feature, link[2], pad; } ember_tree_node_d;
"""
_COMPARE = {1: "<=", 2: "<", 3: ">=", 4: ">", 5: "==", 6: "!="}


def _constant_forest(view: OpView) -> str | None:
    if not all(view.constant[1:6]):
        return "the tree ensemble's node and leaf arrays must be constants"
    return None


def _forest(instr: Instr) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _, x, nodes, _, leaf_targets, _, roots = instr.required()
    data = nodes.constant(), roots.constant(), leaf_targets.constant()
    try:
        check_forest(data[0], data[1], data[2], x.type.shape[1], instr.attrs.n_targets)
    except EmberError as err:
        raise EmberError(f"node '{instr.source}' (TreeEnsemble): {err}") from None
    return data


def _leaf_shape(nodes: np.ndarray, leaf_targets: np.ndarray, k: int) -> str:
    """'dense', 'single' or 'sparse' (see the module docstring)."""
    leaves = nodes[(nodes[:, 1] & 7) == 0]
    counts = leaves[:, 3] - leaves[:, 2]
    if np.all(counts == 1):
        return "single"
    if np.all(counts == k):
        index = leaves[:, 2:3] + np.arange(k)[None, :]
        if np.array_equal(leaf_targets[index], np.broadcast_to(np.arange(k), index.shape)):
            return "dense"
    return "sparse"


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    nodes, roots, leaf_targets = _forest(instr)
    out = instr.operand(0)
    rows, k = out.type.shape
    branch = nodes[(nodes[:, 1] & 7) != 0]
    modes = sorted({int(m) for m in branch[:, 1] & 7})
    missing = bool(np.any(branch[:, 1] & MISSING_TRUE))
    blocks = max(1, math.ceil(rows / BLOCK_ROWS))
    # Work estimate: a node visit or so per level, about log2(nodes per tree) levels.
    depth = max(1, math.ceil(math.log2(max(2, nodes.shape[0] / roots.shape[0]))))
    threads = chunks(options, blocks, rows * roots.shape[0] * (depth + k) * 4)
    per_block = BLOCK_ROWS * k * 9  # the double accumulators, and a has-flag byte each
    leaves = _leaf_shape(nodes, leaf_targets, k)
    # Whether a target can go unscored in a row: never when every leaf weighs every target.
    track = instr.attrs.aggregate in ("MIN", "MAX") or not (leaves == "dense" or (leaves == "single" and k == 1))
    params = {"threads": threads, "modes": modes, "missing": missing, "leaves": leaves, "track": track}
    plan = KernelPlan(params, scratch_bytes=threads * (per_block + 8))
    if len(modes) == 1 and not missing:
        thresholds = instr.operand(3)
        plan.packed.append((thresholds, "tree_walk", walk_table(nodes, thresholds.constant())))
        depths = tree_depths(nodes, roots)
        key = hashlib.sha256(depths.tobytes()).hexdigest()[:16]
        plan.tables.append((key, "tree_depths", depths))
        params["walk"] = "grouped"
    return plan


def walk_table(nodes: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The ember_tree_node_f/_d records (PREAMBLE) as an int32 array: per node its threshold,
    feature and the two links, a leaf linking to itself (feature 0)."""
    m = nodes.shape[0]
    leaf = (nodes[:, 1] & 7) == 0
    self_index = np.arange(m, dtype=np.int32)
    links = np.stack([np.where(leaf, 0, nodes[:, 0]), np.where(leaf, self_index, nodes[:, 2]),
                      np.where(leaf, self_index, nodes[:, 3])], axis=1).astype(np.int32)
    if thresholds.dtype == np.float32:
        return np.ascontiguousarray(np.concatenate([thresholds.view(np.int32)[:, None], links], axis=1))
    table = np.zeros((m, 6), np.int32)
    table[:, 0:2] = np.ascontiguousarray(thresholds.astype(np.float64)).view(np.int32).reshape(m, 2)
    table[:, 2:5] = links
    return table


def tree_depths(nodes: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Per tree, the levels of its longest root-to-leaf path (all trees a level at a time)."""
    branch = (nodes[:, 1] & 7) != 0
    depths = np.zeros(roots.shape[0], np.int32)
    tree = np.arange(roots.shape[0])
    at = roots.astype(np.int64)
    level = 0
    while at.size:
        inner = branch[at]
        depths[tree[inner]] = level + 1
        tree = np.concatenate([tree[inner], tree[inner]])
        at = np.concatenate([nodes[at[inner], 2], nodes[at[inner], 3]]).astype(np.int64)
        # The same (tree, node) pair reached twice walks once (a shared subtree).
        pairs = np.unique(np.stack([tree, at], axis=1), axis=0) if at.size else np.zeros((0, 2), np.int64)
        tree, at = pairs[:, 0], pairs[:, 1]
        level += 1
    return depths


def _walk(instr: Instr, t: str) -> list[str]:
    """C: from node `n` (a local) to the leaf row x reaches."""
    modes, missing = param(instr, "modes"), param(instr, "missing")
    if not modes:
        return []  # every tree is a single leaf
    if len(modes) == 1 and not missing:
        op = _COMPARE[modes[0]]
        return [
            "for (const int32_t *nn = nd + 4 * n; nn[1] != 0; nn = nd + 4 * n)",
            f"    n = (xr[nn[0]] {op} thr[n]) ? nn[2] : nn[3];",
        ]
    cases = " ".join(f"case {m}: go = v {_COMPARE[m]} th; break;" for m in modes)
    return [
        "for (;;) {",
        "    const int32_t *nn = nd + 4 * n;",
        "    const int32_t mode = nn[1];",
        "    if (mode == 0) break;",
        f"    const {t} v = xr[nn[0]], th = thr[n];",
        "    int go = 0;",
        f"    switch (mode & 7) {{ {cases} default: break; }}",
        f"    if ((mode & {MISSING_TRUE}) && v != v) go = 1;",
        "    n = go ? nn[2] : nn[3];",
        "}",
    ]


def _node_type(t: str) -> str:
    return "ember_tree_node_f" if t == "float" else "ember_tree_node_d"


def _grouped_walks(instr: Instr, t: str, features: int, k: int, n_trees: int,
                   accumulate: list[str]) -> tuple[list[str], list[str]]:
    """C for the branch-free walk: (the body of the loop over trees, taking rows
    [r0, tail) GROUP at a time through tree `tree`; the rows [tail, r1) after it, each taking
    GROUP trees at a time), each leaf then accumulated (`accumulate` reads leaf n into a, h).
    Either way GROUP independent walks overlap: rows of one tree, or trees of one row (a
    batch of one still gets the overlap)."""
    op = _COMPARE[param(instr, "modes")[0]]
    track = param(instr, "track")

    def step(j: int, row_offset: int) -> str:
        # The link is picked by index, not by a ternary: compilers turn that into a branch.
        index = f"{row_offset} + q->feature" if row_offset else "q->feature"
        return f"{{ const {_node_type(t)} *q = walk + n{j}; n{j} = q->link[!(xb[{index}] {op} q->thr)]; }}"

    def leaf(j: int, row: str) -> list[str]:
        return ["{", f"    const int32_t n = n{j};", f"    double *a = acc + ({row}) * {k};",
                *([f"    unsigned char *h = has + ({row}) * {k};"] if track else []),
                *("    " + line for line in accumulate), "}"]

    rows_body = [
        "const int32_t root = roots[tree], levels = depth[tree];",
        f"for (long r = r0; r < tail; r += {GROUP}) {{",
        f"    const {t} *xb = x + r * {features};",
        f"    int32_t {', '.join(f'n{j} = root' for j in range(GROUP))};",
        f"    for (int32_t d = 0; d < levels; d++) {{ {' '.join(step(j, j * features) for j in range(GROUP))} }}",
        *("    " + line for j in range(GROUP) for line in leaf(j, f"r - r0 + {j}")),
        "}",
    ]

    def trees_walk(count: int) -> list[str]:
        levels = " ".join(f"if (depth[tree + {j}] > levels) levels = depth[tree + {j}];" for j in range(1, count))
        return [
            f"int32_t {', '.join(f'n{j} = roots[tree + {j}]' for j in range(count))};",
            f"int32_t levels = depth[tree]; {levels}",
            f"for (int32_t d = 0; d < levels; d++) {{ {' '.join(step(j, 0) for j in range(count))} }}",
            *(line for j in range(count) for line in leaf(j, "r - r0")),
        ]

    tail_rows = [
        "for (long r = tail; r < r1; r++) {",
        f"    const {t} *xb = x + r * {features};",
        "    long tree = 0;",
        f"    for (; tree + {GROUP} <= {n_trees}; tree += {GROUP}) {{",
        *("        " + line for line in trees_walk(GROUP)),
        "    }",
        f"    for (; tree < {n_trees}; tree++) {{",
        *("        " + line for line in trees_walk(1)),
        "    }",
        "}",
    ]
    return rows_body, tail_rows


def _accumulate(instr: Instr, k: int) -> list[str]:
    """C: adds (or takes the min/max of) leaf n's entries into a (the row's accumulators)."""
    aggregate = instr.attrs.aggregate
    leaves = param(instr, "leaves")
    if aggregate in ("SUM", "AVERAGE"):
        mark = " h[lt[e]] = 1;" if param(instr, "track") else ""
        if leaves == "dense":
            return ["const int32_t first = nd[4 * n + 2];",
                    f"for (long j = 0; j < {k}; j++) a[j] += (double)lw[first + j];"]
        if leaves == "single":
            target = "0" if k == 1 else "lt[e]"
            return ["const int32_t e = nd[4 * n + 2];", f"a[{target}] += (double)lw[e];{mark}"]
        return ["for (int32_t e = nd[4 * n + 2], end = nd[4 * n + 3]; e < end; e++) {",
                f"    a[lt[e]] += (double)lw[e];{mark}", "}"]
    better = "<" if aggregate == "MIN" else ">"
    return [
        "for (int32_t e = nd[4 * n + 2], end = nd[4 * n + 3]; e < end; e++) {",
        "    const int32_t j = lt[e]; const double w = (double)lw[e];",
        f"    if (!h[j] || w {better} a[j]) a[j] = w;",
        "    h[j] = 1;",
        "}",
    ]


@C_KERNELS.kernel("tree_ensemble_walk", "TreeEnsemble", accepts=_constant_forest, plan=_plan, preamble=PREAMBLE)
def emit_tree_ensemble(em: Emitter, instr: Instr) -> str:
    out, x, nodes, thresholds, leaf_targets, leaf_weights, roots = instr.required()
    rows, k = out.type.shape
    if rows == 0:
        return "/* empty result */"
    features = x.type.shape[1]
    n_trees = roots.type.shape[0]
    t, w = c_type(x.type.dtype), c_type(out.type.dtype)
    aggregate = instr.attrs.aggregate
    track = param(instr, "track")
    blocks = math.ceil(rows / BLOCK_ROWS)
    value = f"acc[(r - r0) * {k} + j]"
    if aggregate == "AVERAGE":
        value = f"{value} / {n_trees}.0"
    base = instr.attrs.base_values
    if base:
        value = f"{value} + base[j]"
    final = f"(({w})(has[(r - r0) * {k} + j] ? {value} : 0.0))" if track else f"(({w})({value}))"
    grouped = None
    if param(instr, "walk") == "grouped":
        grouped = _grouped_walks(instr, t, features, k, n_trees, _accumulate(instr, k))
    body = [
        f"double *acc = scratch + c * {BLOCK_ROWS * k};",
        f"unsigned char *has = (unsigned char *)(scratch + {param(instr, 'threads') * BLOCK_ROWS * k}) + "
        f"c * {BLOCK_ROWS * k}; (void)has;",
        f"const long r0 = b * {BLOCK_ROWS}, r1 = r0 + {BLOCK_ROWS} < {rows} ? r0 + {BLOCK_ROWS} : {rows};",
        f"for (long e = 0; e < (r1 - r0) * {k}; e++) acc[e] = 0.0;",
        *([f"for (long e = 0; e < (r1 - r0) * {k}; e++) has[e] = 0;"] if track else []),
        *([f"const long tail = r0 + (r1 - r0) / {GROUP} * {GROUP};"] if grouped else []),
        f"for (long tree = 0; tree < {n_trees}; tree++) {{",
        *("    " + line for line in (grouped[0] if grouped else [
            "const int32_t root = roots[tree];",
            "for (long r = r0; r < r1; r++) {",
            f"    const {t} *xr = x + r * {features}; (void)xr;",
            "    int32_t n = root;",
            *("    " + line for line in _walk(instr, t)),
            f"    double *a = acc + (r - r0) * {k};",
            *([f"    unsigned char *h = has + (r - r0) * {k};"] if track else []),
            *("    " + line for line in _accumulate(instr, k)),
            "}",
        ])),
        "}",
        *(grouped[1] if grouped else []),
        f"for (long r = r0; r < r1; r++) for (long j = 0; j < {k}; j++) y[r * {k} + j] = {final};",
    ]
    base_table = ", ".join(float(v).hex() for v in base)
    return "\n".join([
        *([f"static const double base[{k}] = {{{base_table}}};"] if base else []),
        f"{w} *y = {em.pointer(out)};",
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"const int32_t *nd = {em.pointer(nodes, const=True)};",
        *([] if grouped else [f"const {t} *thr = {em.pointer(thresholds, const=True)}; (void)thr;"]),
        f"const int32_t *lt = {em.pointer(leaf_targets, const=True)}; (void)lt;",
        f"const {c_type(leaf_weights.type.dtype)} *lw = {em.pointer(leaf_weights, const=True)};",
        f"const int32_t *roots = {em.pointer(roots, const=True)};",
        *([f"const {_node_type(t)} *walk = (const {_node_type(t)} *){em.packed(instr)};",
           f"const int32_t *depth = {em.table(instr)};"] if grouped else []),
        f"double *scratch = (double *){em.scratch(instr)};",
        *chunk_loop(instr, blocks, body),
    ])
