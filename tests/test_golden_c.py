"""Golden generated C for a few tiny models: a diff of tests/golden/*.c shows what a change does
to the code the cpu backend prints. After a deliberate change, regenerate with

    EMBER_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_c.py

and review the diff of tests/golden/ like any code change. The tiny models cover every
convolution algorithm, the GEMM with packed and in-place B, pooling, softmax, layer norm and
a fused elementwise chain. The C does not depend on the host (kernel choice depends only on
shapes and options), so the files are the same on every machine."""
from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ember.backends.cpu import CpuBackend
from ember.driver import prepare_program
from ember.graph import Graph
from ember.ops.nn import ConvAttrs
from ember.types import DType, TensorType

GOLDEN = Path(__file__).parent / "golden"


def _weights(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _conv(g: Graph, x, w: np.ndarray, name: str, stride: int = 1, pad: int = 0, group: int = 1):
    attrs = ConvAttrs((stride, stride), (pad,) * 4, (1, 1), group)
    bias = g.add_constant(_weights(len(name), w.shape[0]), f"{name}.b")
    return g.add("Conv", x, g.add_constant(w, f"{name}.w"), bias, attrs=attrs, name=name)


def convolutions() -> Graph:
    """Winograd F(4x4, 3x3) + residual + ReLU, depthwise, strided direct, 1x1 pointwise (pixels as rows
    on the small map) and max pooling."""
    g = Graph("convolutions")
    x = g.add_input("x", TensorType(DType.FLOAT32, (1, 32, 16, 16)))
    a = g.add("Relu", g.add("Add", _conv(g, x, _weights(1, 32, 32, 3, 3), "wino", pad=1), x, name="res"), name="act")
    d = g.add("Relu", _conv(g, a, _weights(2, 32, 1, 3, 3), "dw", stride=2, pad=1, group=32), name="dw_act")
    s = _conv(g, d, _weights(3, 24, 32, 3, 3), "strided", stride=2, pad=1)
    p = _conv(g, s, _weights(4, 96, 24, 1, 1), "pointwise")
    pooled = g.add("MaxPool", p, attrs=_pool_attrs(), name="pool")
    g.set_outputs([("y", pooled)])
    return g


def _pool_attrs():
    from ember.ops.nn import PoolAttrs

    return PoolAttrs(kernel=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1))


def dense() -> Graph:
    """MatMul with a constant (packed) and a computed (in place) right operand, layer norm,
    a Gelu-Add-Tanh elementwise chain and softmax."""
    from ember.ops.normalization import LayerNormAttrs, SoftmaxAttrs

    g = Graph("dense")
    x = g.add_input("x", TensorType(DType.FLOAT32, (4, 48)))
    h = g.add("MatMul", x, g.add_constant(_weights(5, 48, 40), "fc.w"), name="fc")
    n = g.add("LayerNormalization", h, g.add_constant(_weights(6, 40), "ln.scale"),
              g.add_constant(_weights(7, 40), "ln.bias"), attrs=LayerNormAttrs(axis=-1, epsilon=1e-5), name="ln")
    from ember.ops.activations import GeluAttrs

    gelu = g.add("Gelu", n, attrs=GeluAttrs(), name="gelu")
    t = g.add("Tanh", g.add("Add", gelu, h, name="skip"), name="squash")
    scores = g.add("MatMul", t, g.add("Transpose", t, attrs=_perm(), name="tr"), name="scores")
    g.set_outputs([("p", g.add("Softmax", scores, attrs=SoftmaxAttrs(axis=-1), name="softmax"))])
    return g


def _perm():
    from ember.ops.tensor import TransposeAttrs

    return TransposeAttrs((1, 0))


MODELS: dict[str, Callable[[], Graph]] = {"convolutions": convolutions, "dense": dense}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_generated_c_matches_golden(name, monkeypatch):
    # The code for an AVX-512 host (dense's few-row GEMM takes the ISA Mapper's kernel), the
    # same text on any host: generation only, nothing is built.
    monkeypatch.setattr("ember.backends.cpu.backend.mapped_target", lambda: "x86-avx512")
    monkeypatch.setattr("ember.backends.cpu.backend.l2_cache_bytes", lambda: 2 << 20)  # blocks sized by the L2
    backend = CpuBackend(num_threads=2)
    program, _, _ = prepare_program(MODELS[name](), backend)
    source = backend.generate(program).source
    path = GOLDEN / f"{name}.c"
    if os.environ.get("EMBER_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"{path} is missing: run with EMBER_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text()
    if source != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), source.splitlines(True), str(path), "generated"))
        pytest.fail(f"generated C differs from {path.name} (EMBER_UPDATE_GOLDEN=1 regenerates it):\n{diff[:6000]}")


def test_golden_models_cover_every_convolution_algorithm():
    backend = CpuBackend(num_threads=2)
    program, _, _ = prepare_program(convolutions(), backend)
    chosen = {i.kernel.name for i in program.instrs if i.kernel is not None}
    assert {"conv_winograd4", "conv_depthwise", "conv_direct", "conv_pixel_rows"} <= chosen, chosen
