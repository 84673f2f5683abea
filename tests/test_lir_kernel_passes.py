"""The cpu backend's LIR passes, with before/after text and numbers: "fuse-elementwise" (checked
with the interpreter, which runs ElementwiseChain step by step) and "select-kernels" (the
chosen kernel, packed weights, tables and scratch in the text; the C it leads to checked
against the interpreter). Also: every instruction of ResNet-18 and MobileNetV2 shows its
kernel in `ember dump --stage lir`, and that text round-trips."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import ember.codegen  # noqa: F401  (registers the passes)
from ember.backends.cpu import CpuBackend
from ember.driver import load_model, prepare_program
from ember.lir.ir import MARKERS
from ember.lir.passes import run_lir_pipeline
from ember.lir.text import parse_program, print_program
from ember.passes import PassContext
from ember.runtime import CompiledModel, TensorSpec
from tests.conftest import require_shared_models
from tests.test_lir_passes import random_inputs, run_program


def _run(before: str, passes: list[str], backend: CpuBackend | None = None) -> tuple[object, object]:
    reference = parse_program(textwrap.dedent(before))
    program = parse_program(textwrap.dedent(before))
    run_lir_pipeline(program, passes, context=PassContext(backend=backend or CpuBackend(num_threads=1)))
    return reference, program


CHAIN = """\
    program "p" {
      input %x: f32[2,8] "x"
      input %b: f32[8] "b"
      output %y: f32[2,8] "y"
      alloc %s: f32[2,8]
      Sigmoid @out %s, @in %x
      alloc %m: f32[2,8]
      Mul @out %m, @in %s, @in %b
      dealloc %s
      Sub @out %y, @in %m, @in %x
      dealloc %m
    }
"""


def test_fuse_elementwise_makes_one_chain_and_drops_the_intermediates():
    reference, program = _run(CHAIN, ["fuse-elementwise"])
    assert print_program(program) == textwrap.dedent("""\
        program "p" {
          input %x: f32[2,8] "x"
          input %b: f32[8] "b"
          output %y: f32[2,8] "y"
          ElementwiseChain @out %y, @in %x, @in %b {steps=["Sigmoid(x0)", "Mul(v0, x1)", "Sub(v1, x0)"]}
        }
    """)
    for seed in range(3):
        inputs = random_inputs(reference, seed)
        np.testing.assert_allclose(run_program(program, inputs)[0], run_program(reference, inputs)[0], rtol=1e-6)


def test_fuse_elementwise_stops_where_an_intermediate_is_read_later():
    text = CHAIN.replace("      dealloc %m\n", "").replace('output %y: f32[2,8] "y"',
                                                        'output %y: f32[2,8] "y"\n      output %z: f32[2,8] "z"')
    text = text.replace("    }\n", "      Exp @out %z, @in %m\n      dealloc %m\n    }\n")
    _, program = _run(text, ["fuse-elementwise"])
    chains = [i for i in program.instrs if i.name == "ElementwiseChain"]
    assert [list(c.attrs.steps) for c in chains] == [["Sigmoid(x0)", "Mul(v0, x1)"]]
    assert [i.name for i in program.instrs if i.name not in MARKERS] == ["ElementwiseChain", "Sub", "Exp"]


def test_fuse_elementwise_keeps_integer_division_alone():
    text = """\
        program "p" {
          input %x: i32[4] "x"
          input %d: i32[4] "d"
          output %y: i32[4] "y"
          alloc %q: i32[4]
          Div @out %q, @in %x, @in %d
          Neg @out %y, @in %q
          dealloc %q
        }
    """
    _, program = _run(text, ["fuse-elementwise"])
    assert [i.name for i in program.instrs if i.name not in MARKERS] == ["Div", "Neg"]


# A quantized residual Add: its skip operand dequantized where it was quantized, a MatMul (a
# convolution in a real model) between that and the Add, whose result is quantized again.
SKIP = """\
    program "p" {
      input %q0: u8[4,8] "q0"
      input %r: u8[4,8] "r"
      input %s1: f32[1] "s1"
      input %x: f32[4,8] "x"
      input %k: f32[8,8] "k"
      output %y: u8[4,8] "y"
      output %z: f32[4,8] "z"
      alloc %q: u8[4,8]
      copy @out %q, @in %q0
      alloc %s: f32[4,8]
      ElementwiseChain @out %s, @in %q, @in %s1 {steps=["Cast(x0) {to=f32}", "Mul(v0, x1)"]}
      MatMul @out %z, @in %x, @in %k
      dealloc %q
      alloc %u: f32[4,8]
      Cast @out %u, @in %r {to=f32}
      alloc %w: f32[4,8]
      Add @out %w, @in %u, @in %s
      dealloc %u
      dealloc %s
      Cast @out %y, @in %w {to=u8}
      dealloc %w
    }
"""


def test_fuse_elementwise_computes_a_single_use_producer_in_its_reader():
    """Rule 5: the skip's dequantize, read only by the Add's chain, moves into it; its 8-bit
    source is read there (its dealloc moves after it) and the float tensor is gone. With
    another reader it stays."""
    reference, program = _run(SKIP, ["fuse-elementwise"])
    text = print_program(program)
    assert 'ElementwiseChain @out %y, @in %q, @in %s1, @in %r {steps=["Cast(x0) {to=f32}", "Mul(v0, x1)", ' \
           '"Cast(x2) {to=f32}", "Add(v2, v1)", "Cast(v3) {to=u8}"]}' in text
    assert [(i.name, i.operand(0).name) for i in program.instrs] == [
        ("alloc", "q"), ("copy", "q"), ("MatMul", "z"), ("ElementwiseChain", "y"), ("dealloc", "q")]
    for seed in range(3):
        inputs = random_inputs(reference, seed)
        for got, want in zip(run_program(program, inputs), run_program(reference, inputs), strict=True):
            np.testing.assert_array_equal(got, want)
    _, kept = _run(SKIP.replace("MatMul @out %z, @in %x", "MatMul @out %z, @in %s"), ["fuse-elementwise"])
    assert [list(i.attrs.steps) for i in kept.instrs if i.name == "ElementwiseChain"] == [
        ["Cast(x0) {to=f32}", "Mul(v0, x1)"], ["Cast(x0) {to=f32}", "Add(v0, x1)", "Cast(v1) {to=u8}"]]


def test_fuse_elementwise_inlines_producers_of_producers():
    """A producer that took in its own producer moves on into its reader, with the deallocs
    it carried."""
    text = """\
        program "p" {
          input %q0: u8[4,8] "q0"
          input %s1: f32[1] "s1"
          input %x: f32[4,8] "x"
          input %k: f32[8,8] "k"
          output %y: f32[4,8] "y"
          output %z1: f32[4,8] "z1"
          output %z2: f32[4,8] "z2"
          alloc %q: u8[4,8]
          copy @out %q, @in %q0
          alloc %s: f32[4,8]
          Cast @out %s, @in %q {to=f32}
          MatMul @out %z1, @in %x, @in %k
          dealloc %q
          alloc %t: f32[4,8]
          Mul @out %t, @in %s, @in %s1
          dealloc %s
          MatMul @out %z2, @in %z1, @in %k
          Add @out %y, @in %t, @in %x
          dealloc %t
        }
    """
    reference, program = _run(text, ["fuse-elementwise"])
    assert [(i.name, i.operand(0).name) for i in program.instrs] == [
        ("alloc", "q"), ("copy", "q"), ("MatMul", "z1"), ("MatMul", "z2"), ("ElementwiseChain", "y"), ("dealloc", "q")]
    assert list(program.instrs[4].attrs.steps) == ["Cast(x0) {to=f32}", "Mul(v0, x1)", "Add(v1, x2)"]
    for seed in range(2):
        inputs = random_inputs(reference, seed)
        for got, want in zip(run_program(program, inputs), run_program(reference, inputs), strict=True):
            np.testing.assert_array_equal(got, want)


SELECT = """\
    program "p" {
      weight @w: f32[16,40]
      input %x: f32[3,16] "x"
      input %k: f32[16,40] "k"
      output %y: f32[3,40] "y"
      output %z: f32[3,40] "z"
      MatMul @out %y, @in %x, @in @w  # "packed"
      MatMul @out %z, @in %x, @in %k  # "direct"
    }
"""


def test_select_kernels_records_choice_packed_weight_and_scratch():
    weights = {"w": np.random.default_rng(0).standard_normal((16, 40)).astype(np.float32)}
    program = parse_program(textwrap.dedent(SELECT), weights)
    run_lir_pipeline(program, ["select-kernels"], context=PassContext(backend=CpuBackend(num_threads=2)))
    text = print_program(program)
    assert "  weight @w.panels32: f32[2,16,32] packed panels32 of @w\n" in text
    assert ('MatMul @out %y, @in %x, @in @w kernel matmul_gemm(@in @w.panels32) {b="packed", threads=1}'
            '  # "packed"') in text
    assert "  alloc %direct.scratch: u8[2048]\n  MatMul @out %z, @in %x, @in %k kernel matmul_gemm(@scratch " \
           '%direct.scratch) {b="direct", threads=1}  # "direct"\n  dealloc %direct.scratch\n' in text
    np.testing.assert_array_equal(program.weights[1].data[0, :, :32], weights["w"][:, :32])
    # The text round-trips, packed weight and kernel operands included.
    again = parse_program(text, {b.name: b.data for b in program.weights})
    assert print_program(again) == text
    # And it computes: the blob stores the packed copy, not @w (only the packed copy is read).
    from ember.codegen.emitter import stored_weights
    from ember.memory import plan_memory

    assert [w.name for w in stored_weights(program)] == ["w.panels32"]
    plan_memory(program)
    backend = CpuBackend(num_threads=2)
    compiled = CompiledModel(backend.compile(program), [TensorSpec(b.external_name, b.type) for b in program.inputs],
                             [TensorSpec(b.external_name, b.type) for b in program.outputs], {}, "cpu")
    rng = np.random.default_rng(1)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in (("x", (3, 16)), ("k", (16, 40)))}
    out = compiled.run(feeds)
    np.testing.assert_allclose(out["y"], feeds["x"] @ weights["w"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["z"], feeds["x"] @ feeds["k"], rtol=1e-5, atol=1e-5)


def test_select_kernels_refuses_with_the_kernels_reason():
    from ember.codegen.kernels import C_KERNELS, OpView
    from ember.types import DType, TensorType

    conv = OpView("Conv", None, (TensorType(DType.FLOAT32, (1, 4, 5, 5, 5, 5)),),
                  (TensorType(DType.FLOAT32, (1, 2, 7, 7, 7, 7)), TensorType(DType.FLOAT32, (4, 2, 3, 3, 3, 3)), None),
                  (False, True, False))
    assert C_KERNELS.refusal(conv) == "only 1-D, 2-D (NCHW) and 3-D convolutions have C kernels"
    half = OpView("Relu", None, (TensorType(DType.FLOAT16, (3,)),), (TensorType(DType.FLOAT16, (3,)),), (False,))
    assert "no C kernels for this element type" in C_KERNELS.refusal(half)
    assert C_KERNELS.refusal(OpView("Unique", None, (), (), ())) == "no C kernel for Unique"


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2"])
def test_lir_dump_shows_every_kernel_choice_and_round_trips(name):
    folder = require_shared_models()
    program, _, _ = prepare_program(load_model(folder / f"{name}.onnx"), CpuBackend(num_threads=2))
    compute = [i for i in program.instrs if i.name not in MARKERS]
    assert compute and all(i.kernel is not None for i in compute)
    text = print_program(program)
    lines = [line for line in text.splitlines()
             if line.startswith("  ") and line.split()[0] not in (*MARKERS, "weight", "input", "output")]
    assert len(lines) == len(compute) and all(" kernel " in line for line in lines)
    assert "@scratch %" in text
    expected_packing = {"resnet18": "packed winograd_f4x3 of @", "mobilenetv2": "packed pointwise_panels32 of @"}
    assert expected_packing[name] in text
    again = parse_program(text, {b.name: b.data for b in program.weights})
    assert print_program(again) == text
