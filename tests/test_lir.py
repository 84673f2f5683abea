"""Low-level IR: irgen rules, verifier, text round trip, interpreter against the graph."""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401  (registers passes and lowerings)
from ember.driver import compile_graph
from ember.graph import Graph
from ember.lir.ir import Buffer, BufferKind, Instr, Program
from ember.lir.irgen import generate_program
from ember.lir.text import parse_program, print_program
from ember.lir.verify import verify_program
from ember.lowering import lower_graph
from ember.support.errors import ParseError, VerificationError
from ember.types import DType, TensorType
from tests.helpers import evaluate_graph, random_inputs
from tests.test_graph_ir import small_cnn

F32 = DType.FLOAT32


def lowered_cnn() -> Graph:
    g = small_cnn()
    lower_graph(g)
    return g


def test_irgen_allocs_writes_outputs_directly_and_deallocs_after_last_use():
    program = generate_program(lowered_cnn())
    text = print_program(program)
    lines = [line.strip() for line in text.splitlines()]
    assert 'input %"input/0": f32[1,2,6,6] "input/0"' in lines
    assert 'output %logits: f32[1,3] "logits"' in lines
    assert "alloc %conv: f32[1,4,6,6]" in lines
    conv = lines.index("alloc %conv: f32[1,4,6,6]") + 1
    assert lines[conv].startswith('Conv @out %conv, @in %"input/0", @in @conv.w, @in @conv.b')
    assert lines[conv].endswith('# "conv"')
    # The Relu reads %conv last, so %conv dies right after it.
    assert lines[conv + 2].startswith("Relu @out %relu, @in %conv")
    assert lines[conv + 3] == "dealloc %conv"
    # The final MatMul writes the output placeholder, with no activation in between.
    assert any(line.startswith("MatMul @out %logits") for line in lines)
    verify_program(program)


def test_text_round_trip():
    program = generate_program(lowered_cnn())
    text = print_program(program)
    weights = {w.name: w.data for w in program.weights}
    assert print_program(parse_program(text, weights)) == text


def test_parser_checks_operand_kinds():
    text = ('program "p" {\n  input %x: f32[2] "x"\n  output %y: f32[2] "y"\n'
            '  Relu @in %y, @in %x\n}\n')
    with pytest.raises(ParseError, match=r"line 4: operand 0 of Relu must be @out"):
        parse_program(text)


def test_verifier_rejects_writes_to_inputs_and_use_after_dealloc():
    x = Buffer("x", TensorType(F32, (2,)), BufferKind.INPUT, external_name="x")
    y = Buffer("y", TensorType(F32, (2,)), BufferKind.OUTPUT, external_name="y")
    t = Buffer("t", TensorType(F32, (2,)), BufferKind.ACTIVATION)
    program = Program("p", inputs=[x], outputs=[y], instrs=[Instr("Relu", [x, y])])
    with pytest.raises(VerificationError, match="writes input 'x'"):
        verify_program(program)
    program.instrs = [Instr("alloc", [t]), Instr("Relu", [t, x]), Instr("dealloc", [t]), Instr("Relu", [y, t])]
    with pytest.raises(VerificationError, match="'t' is used outside its lifetime"):
        verify_program(program)
    program.instrs = [Instr("alloc", [t]), Instr("Exp", [t, x]), Instr("Relu", [y, t, x])]
    with pytest.raises(VerificationError, match="takes at most 2 operands, got 3"):
        verify_program(program)


def test_outputs_reading_inputs_constants_or_shared_values_are_copied():
    g = Graph("copies")
    x = g.add_input("x", TensorType(F32, (2,)))
    c = g.add_constant(np.array([1.0, 2.0], np.float32), "c")
    y = g.add("Exp", x, name="e")
    g.set_outputs([("x_again", x), ("c", c), ("y", y), ("y_again", y)])
    program = generate_program(g)
    text = print_program(program)
    assert "copy @out %x_again, @in %x" in text
    assert "copy @out %c_1, @in @c" in text
    assert "copy @out %y_again, @in %y" in text
    compiled = compile_graph(g)
    data = np.array([0.5, -1.0], np.float32)
    out = compiled.run({"x": data})
    np.testing.assert_array_equal(out["x_again"], data)
    np.testing.assert_array_equal(out["c"], [1.0, 2.0])
    np.testing.assert_allclose(out["y"], np.exp(data), rtol=1e-6)
    np.testing.assert_array_equal(out["y_again"], out["y"])


def test_interpreter_matches_graph_semantics():
    reference_graph = small_cnn()
    inputs = random_inputs(reference_graph)
    expected = evaluate_graph(reference_graph, inputs)
    compiled = compile_graph(small_cnn())
    actual = compiled.run(inputs)
    np.testing.assert_allclose(actual["logits"], expected["logits"], rtol=1e-5, atol=1e-5)
    assert compiled.stats["ops"]["imported"] == {"Conv": 1, "Gemm": 1, "Relu": 1, "Reshape": 1}
    assert "Gemm" not in compiled.stats["ops"]["lowered"]
    assert compiled.stats["ops"]["lowered"]["MatMul"] == 1
