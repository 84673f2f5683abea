"""Recognition of GELU from its erf and tanh expansions."""
from __future__ import annotations

import math

from ember.graph import Node, Value
from ember.ops.activations import GELU_TANH_CUBIC, GELU_TANH_SCALE, GeluAttrs
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import close_to, producer, scalar_value
from ember.transforms.products import power_of, read_product


def _one_plus(rw: Rewriter, value: Value) -> Value | None:
    """t for a once-used Add(t, 1) or Add(1, t)."""
    node = producer(value, "Add")
    if node is None or not rw.has_one_use(value):
        return None
    a, b = node.inputs
    if close_to(scalar_value(b), 1.0):
        return a
    if close_to(scalar_value(a), 1.0):
        return b
    return None


def _scaled(rw: Rewriter, value: Value, coefficient: float) -> Value | None:
    """The single factor f of a once-used value reading as coefficient * f."""
    if not rw.has_one_use(value):
        return None
    product = read_product(rw, value)
    if len(product.factors) != 1 or not close_to(product.coefficient, coefficient):
        return None
    return product.factors[0]


def _erf_argument_is(rw: Rewriter, phi: Value, x: Value) -> bool:
    """phi = erf(x / sqrt(2)), the division possibly written as a multiplication."""
    erf = producer(phi, "Erf")
    return erf is not None and rw.has_one_use(phi) and _scaled(rw, erf.input(0), 1 / math.sqrt(2)) is x


def _tanh_argument_is(rw: Rewriter, phi: Value, x: Value) -> bool:
    """phi = tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), x^3 as Pow(x, 3) or products of x."""
    tanh = producer(phi, "Tanh")
    if tanh is None or not rw.has_one_use(phi):
        return False
    polynomial = _scaled(rw, tanh.input(0), GELU_TANH_SCALE)
    add = producer(polynomial, "Add")
    if polynomial is None or add is None or not rw.has_one_use(polynomial):
        return False
    a, b = add.input(0), add.input(1)
    for linear, cubic in ((a, b), (b, a)):
        if linear is not x or not rw.has_one_use(cubic):
            continue
        product = read_product(rw, cubic)
        if close_to(product.coefficient, GELU_TANH_CUBIC) and power_of(rw, product.factors, x) == 3:
            return True
    return False


@pattern("Mul", "Div")
def recognize_gelu(rw: Rewriter, node: Node) -> Value | None:
    """0.5 * x * (1 + phi) in any association and order, phi one of the two forms above."""
    product = read_product(rw, node.outputs[0])
    if len(product.factors) != 2 or not close_to(product.coefficient, 0.5):
        return None
    for x, gate in (product.factors, product.factors[::-1]):
        phi = _one_plus(rw, gate)
        if phi is None or x.type != node.outputs[0].type or not x.type.dtype.is_float:
            continue
        if _erf_argument_is(rw, phi, x):
            return rw.add("Gelu", x, attrs=GeluAttrs("none"))
        if _tanh_argument_is(rw, phi, x):
            return rw.add("Gelu", x, attrs=GeluAttrs("tanh"))
    return None


@register_pass
class RecognizeGelu(RewritePass):
    """Preconditions: every intermediate node of the expansion is read only inside it (else
    the expansion is needed anyway and nothing is gained); constants match to 1e-4 relative
    (exporters round them to float32); the result has x's type.
    Rules:
    1. 0.5 * x * (1 + erf(x / sqrt(2)))  -> Gelu(x, approximate="none").
    2. 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  -> Gelu(x, approximate="tanh").
    Products are read through any association and operand order of Mul, with divisions by
    constants as multiplications (x / sqrt(2) == x * 0.7071..., (..) / 2 == 0.5 * (..))."""

    name = "recognize-gelu"
    patterns = (recognize_gelu,)
