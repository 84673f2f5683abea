"""Models written in plain PyTorch (tests/torch_models.py: ResNet-18, MobileNetV2, an LSTM
tagger, an MLP, a transformers BertModel with random weights) compiled by
ember.compile(module, example_inputs=...) on the interpreter and the cpu backend: every
output matches eager PyTorch within 1e-4."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch frontend's tests need torch (pip install -e '.[torch]')")

import torch.utils._pytree as pytree  # noqa: E402

import ember  # noqa: E402
from tests.torch_models import MODELS  # noqa: E402

TOLERANCE = 1e-4


def eager_outputs(module, inputs) -> list[np.ndarray]:
    with torch.no_grad():
        result = module(*inputs)
    return [t.numpy() for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]


def assert_matches(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {i}: {g.dtype}{g.shape} vs eager {w.dtype}{w.shape}"
        error = float(np.max(np.abs(g - w))) if g.size else 0.0
        assert error <= TOLERANCE * max(1.0, float(np.max(np.abs(w)))), f"output {i}: max error {error}"


def _needs(name: str) -> None:
    if name == "bert":
        pytest.importorskip("transformers", reason="the BERT test needs transformers")


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    _needs(request.param)
    module, inputs = MODELS[request.param]()
    return request.param, module, inputs, eager_outputs(module, inputs)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_ember_compile_matches_eager(model, backend):
    name, module, inputs, expected = model
    compiled = ember.compile(module, example_inputs=inputs, backend=backend)
    assert len(compiled.input_names) == len(inputs)
    outputs = compiled.run({n: t.numpy() for n, t in zip(compiled.input_names, inputs, strict=True)})
    assert_matches(list(outputs.values()), expected)


def test_bert_with_eager_attention_and_named_outputs():
    pytest.importorskip("transformers", reason="the BERT test needs transformers")
    module, inputs = MODELS["bert"](layers=1, attention="eager")
    ids, mask = inputs
    compiled = ember.compile(module, example_inputs={"attention_mask": mask, "input_ids": ids},  # by keyword
                             backend="interpreter")
    assert compiled.input_names == ["attention_mask", "input_ids"]  # the keywords' order
    assert compiled.output_names == ["last_hidden_state", "pooler_output"]
    outputs = compiled.run({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    assert_matches(list(outputs.values()), eager_outputs(module, inputs))


def test_parameters_and_buffers_become_constants():
    from ember.frontends.torch import load_torch

    module, inputs = MODELS["resnet18"](size=32)
    graph = load_torch(module, inputs)
    assert [p.name for p in graph.inputs] == ["x"]
    weights = sum(c.data.size for c in graph.constants.values())
    assert weights >= sum(p.numel() for p in module.parameters())


def test_backend_lists_partition_a_torch_model():
    module, inputs = MODELS["mlp"]()
    compiled = ember.compile(module, example_inputs=inputs, backend=["cpu", "interpreter"], num_threads=1)
    outputs = compiled.run({"x": inputs[0].numpy()})
    assert_matches(list(outputs.values()), eager_outputs(module, inputs))
