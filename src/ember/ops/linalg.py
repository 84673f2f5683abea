"""Linear algebra ops: Einsum (any equation NumPy's einsum accepts, with '...' broadcasting)
and Det (batched determinants). Floats are computed in float64 and rounded once."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import broadcast_shapes, require_float, same_dtype
from ember.types import DType, TensorType


@dataclass(frozen=True)
class EinsumAttrs:
    equation: str


def parse_einsum(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The output shape of `equation` on operands of `shapes` (raises OpError)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise OpError(f"Einsum '{equation}' has {len(terms)} operands, got {len(shapes)}")
    sizes: dict[str, int] = {}
    ellipsis: tuple[int, ...] = ()
    counts: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        letters = term.replace("...", "")
        if not letters.isalpha() and letters:
            raise OpError(f"Einsum '{equation}': bad term '{term}'")
        extra = len(shape) - len(letters)
        if extra < 0 or (extra and "..." not in term):
            raise OpError(f"Einsum '{equation}': term '{term}' does not fit an operand of shape {list(shape)}")
        before = term.index("...") if "..." in term else len(term)
        dims = list(shape)
        if "..." in term:
            ellipsis = broadcast_shapes(ellipsis, tuple(dims[before:before + extra]))
            dims = dims[:before] + dims[before + extra:]
        for letter, dim in zip(letters, dims, strict=True):
            counts[letter] = counts.get(letter, 0) + 1
            if sizes.setdefault(letter, dim) != dim:
                raise OpError(f"Einsum '{equation}': '{letter}' is {sizes[letter]} and {dim}")
    if arrow:
        out_letters = rhs.replace("...", "")
        if any(c not in sizes for c in out_letters):
            raise OpError(f"Einsum '{equation}': output letters must appear in the inputs")
        at = rhs.index("...") if "..." in rhs else None
        out = [sizes[c] for c in out_letters]
        if at is not None:
            return tuple(out[:at] + list(ellipsis) + out[at:])
        return tuple(out)
    return ellipsis + tuple(sizes[c] for c in sorted(c for c, n in counts.items() if n == 1))


def _einsum_infer(attrs: EinsumAttrs, types):
    dtype = same_dtype(types, "Einsum")
    if dtype is DType.BOOL:
        raise OpError("Einsum does not take bool")
    return (TensorType(dtype, parse_einsum(attrs.equation, [t.shape for t in types])),)


def _einsum(attrs: EinsumAttrs, arrays):
    dtype = arrays[0].dtype
    wide = [a.astype(np.float64) if a.dtype.kind == "f" or dtype.kind not in "iu" else a for a in arrays]
    return (np.asarray(np.einsum(attrs.equation.replace(" ", ""), *wide)).astype(dtype),)


# Not a primitive (lowered onto Transpose, Reshape, ReduceSum and MatMul by lowering/einsum.py),
# but the interpreter runs this reference whole: the lowering is checked against it.
define_op(OpDef("Einsum", ("inputs*",), ("y",), _einsum_infer, _einsum, attrs=EinsumAttrs, primitive=False,
                traits=frozenset({"oracle"})))


def _det_infer(attrs, types):
    (x,) = types
    require_float(x, "Det")
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise OpError(f"Det needs square matrices [..., M, M], got {x}")
    return (x.with_shape(x.shape[:-2]),)


define_op(OpDef("Det", ("x",), ("y",), _det_infer,
                lambda a, xs: (np.asarray(np.linalg.det(xs[0].astype(np.float64))).astype(xs[0].dtype),)))

__all__ = ["EinsumAttrs", "parse_einsum"]
