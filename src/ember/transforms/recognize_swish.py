"""Recognition of the swish family: SiLU (x * sigmoid(x)) and HardSwish."""
from __future__ import annotations

from ember.graph import Node, Value
from ember.ops.activations import HARD_SWISH_ALPHA, HARD_SWISH_BETA
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import close_to, producer, scalar_value
from ember.transforms.products import read_product


def _gate_input(rw: Rewriter, gate: Value, coefficient: float) -> tuple[str, Value] | None:
    """(op, x) if `gate` times `coefficient` is the swish gate of x for op:
    Sigmoid(x) with coefficient 1 -> Silu; HardSigmoid(x, 1/6, 1/2) with coefficient 1, or
    Clip(x + 3, 0, 6) with coefficient 1/6 -> HardSwish."""
    node = producer(gate, "Sigmoid", "HardSigmoid", "Clip")
    if node is None or not rw.has_one_use(gate):
        return None
    if node.op == "Sigmoid" and close_to(coefficient, 1.0):
        return "Silu", node.input(0)
    if node.op == "HardSigmoid" and close_to(coefficient, 1.0):
        if close_to(node.attrs.alpha, HARD_SWISH_ALPHA) and close_to(node.attrs.beta, HARD_SWISH_BETA):
            return "HardSwish", node.input(0)
        return None
    if node.op == "Clip" and close_to(coefficient, 1 / 6):
        if node.attrs.min != 0 or node.attrs.max is None or not close_to(node.attrs.max, 6.0):
            return None
        shifted = node.input(0)
        add = producer(shifted, "Add")
        if add is None or not rw.has_one_use(shifted):
            return None
        a, b = add.input(0), add.input(1)
        if close_to(scalar_value(b), 3.0):
            return "HardSwish", a
        if close_to(scalar_value(a), 3.0):
            return "HardSwish", b
    return None


@pattern("Mul", "Div")
def recognize_swish(rw: Rewriter, node: Node) -> Value | None:
    product = read_product(rw, node.outputs[0])
    if len(product.factors) != 2:
        return None
    for x, gate in (product.factors, product.factors[::-1]):
        found = _gate_input(rw, gate, product.coefficient)
        if found is None or found[1] is not x or x.type != node.outputs[0].type:
            continue
        return rw.add(found[0], x)
    return None


@register_pass
class RecognizeSwish(RewritePass):
    """Preconditions: the gate is read only by the product (else it is computed anyway);
    constants match to 1e-4 relative; the result has x's type.
    Rules (products read through any association and order, divisions by constants as
    multiplications):
    1. x * Sigmoid(x)                      -> Silu(x).
    2. x * HardSigmoid(x, alpha=1/6, beta=1/2) -> HardSwish(x) (the form the ONNX importer
       gives HardSwish).
    3. x * Clip(x + 3, 0, 6) / 6           -> HardSwish(x) (PyTorch's x * relu6(x + 3) / 6)."""

    name = "recognize-swish"
    patterns = (recognize_swish,)
