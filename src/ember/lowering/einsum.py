"""Lowering of Einsum onto Transpose, Reshape, Slice, ReduceSum and MatMul.

Each operand's axes get labels (its letters; '...' becomes one label per broadcast axis,
aligned from the right). Per operand, a repeated label takes the diagonal (the two axes
flattened, then every (n + 1)-th element) and a label no later step needs is summed away.
Operands then contract left to right, two at a time, as one batched MatMul: labels both
share and still need are batch axes (kept apart, so MatMul broadcasts a size-1 side),
labels both share and no longer need are the contraction K, the rest are M and N. A last
Transpose puts the labels in output order. Half-precision operands compute in float32."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember.graph import Graph, Node, Value
from ember.lowering.engine import lowering
from ember.ops.elementwise import CastAttrs
from ember.ops.linalg import EinsumAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.tensor import ReshapeAttrs, SliceAttrs, TransposeAttrs
from ember.support.errors import UnsupportedError
from ember.types import DType

HALF = (DType.FLOAT16, DType.BFLOAT16)


def compute_dtype(dtype: DType) -> DType:
    """Half-precision values compute in float32 (the references compute in float64 and round
    once, so a half-precision chain of ops would drift); other types compute as they are."""
    return DType.FLOAT32 if dtype in HALF else dtype


def cast(graph: Graph, x: Value, dtype: DType, name: str) -> Value:
    return x if x.type.dtype is dtype else graph.add("Cast", x, attrs=CastAttrs(dtype), name=name)


def reshape(graph: Graph, x: Value, shape: Sequence[int], name: str) -> Value:
    shape = tuple(shape)
    return x if x.type.shape == shape else graph.add("Reshape", x, attrs=ReshapeAttrs(shape), name=name)


def transpose(graph: Graph, x: Value, perm: Sequence[int], name: str) -> Value:
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    # Moving size-1 axes moves no data: a Reshape says the same without a copy.
    moved = [p for i, p in enumerate(perm) if x.type.shape[p] != 1]
    if moved == sorted(moved):
        return reshape(graph, x, [x.type.shape[p] for p in perm], name)
    return graph.add("Transpose", x, attrs=TransposeAttrs(perm), name=name)


def slice_axis(graph: Graph, x: Value, axis: int, start: int, end: int, name: str, step: int = 1) -> Value:
    axis %= x.type.rank
    if (start, end, step) == (0, x.type.shape[axis], 1):
        return x
    return graph.add("Slice", x, attrs=SliceAttrs((axis,), (start,), (end,), (step,)), name=name)


def reduce_sum(graph: Graph, x: Value, axes: Sequence[int], keepdims: bool, name: str) -> Value:
    if not axes:
        return x
    return graph.add("ReduceSum", x, attrs=ReduceAttrs(tuple(sorted(axes)), keepdims), name=name)


Labels = list[str]


def _parse(equation: str, ranks: list[int], name: str) -> tuple[list[Labels], Labels]:
    """Per operand its axis labels, and the output's. '...' axes are labelled '.0', '.1', ...
    counted from the right, so operands with fewer broadcast axes share the trailing ones."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    ellipsis_rank = 0
    per_operand: list[Labels] = []
    for term, rank in zip(terms, ranks, strict=True):
        letters = term.replace("...", "")
        extra = rank - len(letters)
        ellipsis_rank = max(ellipsis_rank, extra)
        before, dots, after = term.partition("...")
        middle = [f".{extra - 1 - i}" for i in range(extra)] if dots else []
        per_operand.append(list(before) + middle + list(after))
    ellipsis = [f".{ellipsis_rank - 1 - i}" for i in range(ellipsis_rank)]
    if arrow:
        before, dots, after = rhs.partition("...")
        if not dots and ellipsis_rank:
            raise UnsupportedError(f"{name}: Einsum '{equation}' drops its '...' axes from the output")
        return per_operand, list(before) + (ellipsis if dots else []) + list(after)
    counts: dict[str, int] = {}
    for labels in per_operand:
        for label in labels:
            counts[label] = counts.get(label, 0) + 1
    return per_operand, ellipsis + sorted(c for c, n in counts.items() if n == 1 and not c.startswith("."))


class _Term:
    """An intermediate tensor and the label of each of its axes."""

    def __init__(self, value: Value, labels: Labels) -> None:
        self.value, self.labels = value, labels

    def size(self, label: str) -> int:
        return self.value.type.shape[self.labels.index(label)]


def _diagonals(graph: Graph, term: _Term, name: str) -> _Term:
    """Takes the diagonal over each label the term repeats ('ii' -> 'i')."""
    while len(set(term.labels)) != len(term.labels):
        label = next(lab for lab in term.labels if term.labels.count(lab) > 1)
        first = term.labels.index(label)
        second = term.labels.index(label, first + 1)
        others = [i for i in range(len(term.labels)) if i not in (first, second)]
        x = transpose(graph, term.value, others + [first, second], f"{name}.diag")
        n = term.value.type.shape[first]
        lead = [term.value.type.shape[i] for i in others]
        flat = reshape(graph, x, lead + [n * n], f"{name}.diag")
        # Elements (0, 0), (1, 1), ... sit n + 1 apart in the flattened pair.
        diag = slice_axis(graph, flat, -1, 0, n * n, f"{name}.diag", step=n + 1)
        term = _Term(diag, [term.labels[i] for i in others] + [label])
    return term


def _sum_unneeded(graph: Graph, term: _Term, needed: set[str], name: str) -> _Term:
    axes = [i for i, label in enumerate(term.labels) if label not in needed]
    return _Term(reduce_sum(graph, term.value, axes, False, f"{name}.sum"),
                 [label for label in term.labels if label in needed])


def _contract(graph: Graph, a: _Term, b: _Term, needed: set[str], name: str) -> _Term:
    """a and b (no repeated labels, nothing unneeded left) as one batched MatMul."""
    shared = [label for label in a.labels if label in b.labels]
    batch = [label for label in shared if label in needed]
    summed = [label for label in shared if label not in needed]
    # A contracted label of size 1 on one side broadcasts: sum the other side first.
    for label in summed:
        if a.size(label) != b.size(label):
            big = a if a.size(label) > b.size(label) else b
            big.value = reduce_sum(graph, big.value, [big.labels.index(label)], True, f"{name}.bsum")
    m_labels = [label for label in a.labels if label not in shared]
    n_labels = [label for label in b.labels if label not in shared]
    a_x = transpose(graph, a.value, [a.labels.index(lab) for lab in batch + m_labels + summed], f"{name}.a")
    b_x = transpose(graph, b.value, [b.labels.index(lab) for lab in batch + summed + n_labels], f"{name}.b")
    out_batch = [max(a.size(lab), b.size(lab)) for lab in batch]
    out_shape = out_batch + [a.size(lab) for lab in m_labels] + [b.size(lab) for lab in n_labels]
    if not summed:  # nothing to sum: an elementwise (outer, Hadamard) product broadcasts
        a_x = reshape(graph, a_x, [a.size(lab) for lab in batch + m_labels] + [1] * len(n_labels), f"{name}.a")
        b_x = reshape(graph, b_x, [b.size(lab) for lab in batch] + [1] * len(m_labels)
                      + [b.size(lab) for lab in n_labels], f"{name}.b")
        return _Term(graph.add("Mul", a_x, b_x, name=f"{name}.mul"), batch + m_labels + n_labels)
    if any(a.size(lab) == 0 for lab in summed):  # an empty sum: zeros (and no MatMul with K = 0)
        zeros = np.zeros(out_shape, a.value.type.dtype.numpy)
        return _Term(graph.add_constant(zeros, f"{name}.zeros"), batch + m_labels + n_labels)
    m = math.prod(a.size(lab) for lab in m_labels)
    n = math.prod(b.size(lab) for lab in n_labels)
    k = math.prod(a.size(lab) for lab in summed)
    a_batch = [a.size(lab) for lab in batch]
    b_batch = [b.size(lab) for lab in batch]
    a_x = reshape(graph, a_x, a_batch + [m, k], f"{name}.a")
    b_x = reshape(graph, b_x, b_batch + [k, n], f"{name}.b")
    product = graph.add("MatMul", a_x, b_x, name=f"{name}.matmul")
    return _Term(reshape(graph, product, out_shape, f"{name}.y"), batch + m_labels + n_labels)


@lowering("Einsum")
def lower_einsum(graph: Graph, node: Node) -> list[Value]:
    attrs: EinsumAttrs = node.attrs
    name = node.name
    out_type = node.outputs[0].type
    operands = [node.input(i) for i in range(len(node.inputs))]
    per_operand, out_labels = _parse(attrs.equation, [x.type.rank for x in operands], node.location)
    # Pure data movement (a transpose, a diagonal) needs no arithmetic, so no wider type.
    moves_only = len(operands) == 1 and set(per_operand[0]) <= set(out_labels)
    dtype = out_type.dtype if moves_only else compute_dtype(out_type.dtype)
    terms = [_diagonals(graph, _Term(cast(graph, x, dtype, f"{name}.in"), labels), name)
             for x, labels in zip(operands, per_operand, strict=True)]

    def needed_after(index: int) -> set[str]:
        return set(out_labels).union(*(t.labels for t in terms[index + 1:]))

    result = _sum_unneeded(graph, terms[0], needed_after(0), name)
    for i in range(1, len(terms)):
        needed = needed_after(i)
        right = _sum_unneeded(graph, terms[i], needed | set(result.labels), name)
        result = _sum_unneeded(graph, result, needed | set(right.labels), name)
        result = _contract(graph, result, right, needed, name)
    y = transpose(graph, result.value, [result.labels.index(lab) for lab in out_labels], f"{name}.out")
    if y.type.shape != out_type.shape:  # a broadcast '...' axis that only size-1 operands had
        raise UnsupportedError(f"{node.location}: Einsum '{attrs.equation}' result {y.type.shape} "
                               f"does not reach {out_type.shape} without broadcasting")
    return [cast(graph, y, out_type.dtype, f"{name}.out")]
