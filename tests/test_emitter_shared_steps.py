"""Steps whose C is the same (a long elementwise chain split into chains of the same ops in
the same arena place) are compiled once: the repeats are `#define`d to the first, and the
program still computes what the interpreter computes, profiled or not."""
from __future__ import annotations

import re

import numpy as np

from ember.backends import get_backend
from ember.codegen import generate_c
from ember.driver import compile_graph, prepare_program
from ember.graph import Graph
from ember.types import DType, TensorType

OPS = ("Relu", "Neg", "Tanh")


def _chain(n: int) -> Graph:
    g = Graph(f"chain{n}")
    value = g.add_input("x", TensorType(DType.FLOAT32, (4, 16)))
    for i in range(n):
        value = g.add(OPS[i % len(OPS)], value)
    g.set_outputs([("y", value)])
    return g


def test_repeated_steps_are_defined_once_and_compute_the_same():
    backend = get_backend("cpu", num_threads=1)
    program, _, _ = prepare_program(_chain(400), backend)
    source = generate_c(program, backend.kernels).source
    defined = re.findall(r"^EMBER_STEP\w* (step\d+)\(", source, re.M)
    aliases = dict(re.findall(r"^#define (step\d+) (step\d+)$", source, re.M))
    table = source[source.index("ember_run_steps["):source.index("};")]
    calls = re.findall(r"\b(step\d+),", table)
    assert len(calls) == len(program.compute_instrs()) > 10
    assert aliases and len(defined) < len(calls) // 2
    assert set(calls) == set(defined) | set(aliases) and set(aliases.values()) <= set(defined)
    bodies = re.findall(r"^EMBER_STEP\w* step\d+\([^)]*\)\n(\{.*?^\})", source, re.M | re.S)
    assert len(bodies) == len(set(bodies)) == len(defined)

    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    native = compile_graph(_chain(400), backend)
    expected = compile_graph(_chain(400), "interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(native.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
    outputs, profile = native.run({"x": x}, profile=True)
    np.testing.assert_array_equal(outputs["y"], native.run({"x": x})["y"])
    assert len(profile.steps) == len(calls)

