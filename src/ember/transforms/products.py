"""Shared by the activation recognizers: reading a product tree as a coefficient times a list
of factors, whatever the association and operand order the exporter chose.

x * 0.5 * (1 + erf(x / sqrt(2))) arrives as Mul(Mul(x, 0.5), Add(..)), Mul(x, Mul(Add(..),
0.5)), Mul(Mul(x, Add(..)), 0.5) and more; all read as (0.5, [x, Add(..)]) here, so each
recognizer states its formula once."""
from __future__ import annotations

from dataclasses import dataclass, field

from ember.graph import Node, Value
from ember.passes import Rewriter
from ember.passes.match import producer, scalar_value


@dataclass
class Product:
    coefficient: float = 1.0
    factors: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)  # the Mul/Div nodes the product spans


def read_product(rw: Rewriter, value: Value) -> Product:
    """Flattens Mul nodes, and Div nodes by a one-element constant, below `value` into a
    coefficient (the product of one-element constants) and the remaining factors. Interior
    nodes are entered only if nothing outside the tree reads them; `value` itself may have
    any readers."""
    product = Product()
    _walk(rw, value, product, is_root=True)
    return product


def _walk(rw: Rewriter, value: Value, product: Product, is_root: bool) -> None:
    constant = scalar_value(value)
    if constant is not None:
        product.coefficient *= constant
        return
    node = producer(value, "Mul", "Div")
    if node is None or not (is_root or rw.has_one_use(value)):
        product.factors.append(value)
        return
    a, b = node.input(0), node.input(1)
    if node.op == "Div":
        divisor = scalar_value(b)
        if divisor is None or divisor == 0:
            product.factors.append(value)
            return
        product.nodes.append(node)
        product.coefficient /= divisor
        _walk(rw, a, product, is_root=False)
        return
    product.nodes.append(node)
    _walk(rw, a, product, is_root=False)
    _walk(rw, b, product, is_root=False)


def split_factor(factors: list[Value], x: Value) -> list[Value] | None:
    """The factors other than one occurrence of x, or None if x is not among them."""
    if x not in factors:
        return None
    rest = list(factors)
    rest.remove(x)
    return rest


def power_of(rw: Rewriter, factors: list[Value], x: Value) -> float | None:
    """The total exponent of x if every factor is x or a once-used Pow(x, constant)."""
    total = 0.0
    for factor in factors:
        if factor is x:
            total += 1
            continue
        node = producer(factor, "Pow")
        exponent = scalar_value(node.inputs[1]) if node is not None else None
        if node is None or node.inputs[0] is not x or exponent is None or not rw.has_one_use(factor):
            return None
        total += exponent
    return total
