"""Graph IR: construction, verifier, text round trip and its diagnostics, DOT export."""
from __future__ import annotations

import numpy as np
import pytest

from ember.graph import Graph, graph_to_dot, parse_graph, print_graph, verify_graph
from ember.ops.nn import ConvAttrs, GemmAttrs
from ember.ops.tensor import ReshapeAttrs
from ember.support.errors import ParseError, VerificationError
from ember.types import DType, QuantParams, TensorType
from tests.helpers import weights_of

F32 = DType.FLOAT32


def small_cnn() -> Graph:
    rng = np.random.default_rng(0)
    g = Graph("small cnn")
    x = g.add_input("input/0", TensorType(F32, (1, 2, 6, 6)))
    w = g.add_constant(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "conv.w")
    b = g.add_constant(rng.standard_normal(4).astype(np.float32), "conv.b")
    y = g.add("Conv", x, w, b, attrs=ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1)), name="conv")
    y = g.add("Relu", y, name="relu")
    flat = g.add("Reshape", y, attrs=ReshapeAttrs((1, 144)), name="flatten")
    fc = g.add_constant(rng.standard_normal((3, 144)).astype(np.float32), "fc.w")
    logits = g.add("Gemm", flat, fc, None, attrs=GemmAttrs(transB=True), name="fc")
    g.set_outputs([("logits", logits)])
    return g


def test_print_shows_types_attrs_and_names():
    text = print_graph(small_cnn())
    assert 'graph "small cnn" {' in text
    assert '  input %"input/0": f32[1,2,6,6]' in text
    assert "  const @conv.w: f32[4,2,3,3]\n" in text  # large weights by name and type only
    assert "  const @conv.b: f32[4] = [" in text  # small ones inline
    assert '%conv: f32[1,4,6,6] = Conv(%"input/0", @conv.w, @conv.b) ' \
           '{strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1]} name="conv"' in text
    assert '= Gemm(%flatten, @fc.w, none) {transB=true} name="fc"' in text
    assert '  output "logits" = %fc' in text


def test_text_round_trip():
    g = small_cnn()
    text = print_graph(g)
    parsed = parse_graph(text, weights_of(g))
    assert print_graph(parsed) == text
    for name, const in g.constants.items():
        np.testing.assert_array_equal(parsed.constants[name].data, const.data)


def test_round_trip_keeps_special_floats_and_quantized_types():
    g = Graph("special")
    x = g.add_input("x", TensorType(F32, (3,)))
    c = g.add_constant(np.array([np.inf, -np.inf, 1e-30], np.float32), "c")
    g.set_outputs([("y", g.add("Add", x, c))])
    text = print_graph(g)
    assert "[inf, -inf, 1.0000000031710769e-30]" in text
    assert print_graph(parse_graph(text)) == text
    q = TensorType(DType.INT8, (2,), QuantParams((0.5,), (3,)))
    assert str(q) == "i8[2]q(0.5,3)"


def test_parse_reports_line_and_reason():
    bad = 'graph "g" {\n  input %x: f32[2]\n  %y: f32[3] = Relu(%x) name="r"\n  output "y" = %y\n}\n'
    with pytest.raises(ParseError, match=r"line 3: .*declared f32\[3\] but Relu infers f32\[2\]"):
        parse_graph(bad)
    with pytest.raises(ParseError, match=r"line 2: .*'%z' is not a defined value"):
        parse_graph('graph "g" {\n  %y: f32[2] = Relu(%z) name="r"\n}\n')
    with pytest.raises(ParseError, match="unknown op 'Frobnicate'"):
        parse_graph('graph "g" {\n  input %x: f32[2]\n  %y: f32[2] = Frobnicate(%x) name="r"\n}\n')
    with pytest.raises(ParseError, match="no inline data"):
        parse_graph('graph "g" {\n  const @w: f32[100]\n}\n')


def test_add_node_rejects_bad_types_with_location():
    g = Graph()
    a = g.add_input("a", TensorType(F32, (2, 3)))
    b = g.add_input("b", TensorType(F32, (4, 5)))
    with pytest.raises(VerificationError, match=r"node 'mm' \(MatMul\): MatMul contraction mismatch"):
        g.add("MatMul", a, b, name="mm")


def test_verifier_catches_use_before_definition_and_type_drift():
    g = small_cnn()
    g.nodes.reverse()
    with pytest.raises(VerificationError, match="is not defined before this node"):
        verify_graph(g)
    g = small_cnn()
    g.nodes[1].outputs[0].type = TensorType(F32, (1, 4, 6, 7))
    with pytest.raises(VerificationError, match=r"node 'relu' \(Relu\): result 0 is typed"):
        verify_graph(g)


def test_sort_restores_topological_order():
    g = small_cnn()
    expected = [n.name for n in g.nodes]
    g.nodes.reverse()
    g.sort()
    assert [n.name for n in g.nodes] == expected
    verify_graph(g)


def test_remove_unused_drops_dead_nodes_and_constants():
    g = small_cnn()
    x = g.inputs[0]
    g.add("Sigmoid", x, name="dead")
    g.add_constant(np.zeros(3, np.float32), "unused")
    assert g.remove_unused()
    assert "dead" not in [n.name for n in g.nodes]
    assert "unused" not in g.constants


def test_dot_export_names_ops_and_edges():
    dot = graph_to_dot(small_cnn())
    assert dot.startswith('digraph "small cnn" {')
    assert 'label="Conv\\nconv\\nconv.w: f32[4,2,3,3]\\nconv.b: f32[4]"' in dot
    assert 'in0 -> n0 [label="f32[1,2,6,6]"]' in dot
    assert "-> out0" in dot
