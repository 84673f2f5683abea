"""torch.compile(model, backend="ember"): found through the torch_dynamo_backends entry point;
the test models match eager within 1e-4 on the interpreter and cpu; a new input shape
compiles once and is cached; changed weights recompile; graph breaks run eagerly between
Ember's graphs; options reach the backend, and unknown ones are refused."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch frontend's tests need torch (pip install -e '.[torch]')")

import torch.utils._pytree as pytree  # noqa: E402

import ember  # noqa: E402
from tests.test_torch_models import assert_matches, eager_outputs  # noqa: E402
from tests.torch_models import MODELS, mlp  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def compiles(monkeypatch):
    """Counts the graphs the backend compiles (one per captured graph and input shape)."""
    calls = []
    original = ember._compile_graph_on

    def counting(graph, backend, options):
        calls.append((backend, dict(options)))
        return original(graph, backend, options)

    monkeypatch.setattr(ember, "_compile_graph_on", counting)
    return calls


def _leaves(result) -> list[np.ndarray]:
    return [t.numpy() for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]


def test_backend_is_registered_by_entry_point():
    assert "ember" in torch._dynamo.list_backends()


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_match_eager(name, backend, compiles):
    if name == "bert":
        pytest.importorskip("transformers", reason="the BERT test needs transformers")
    module, inputs = MODELS[name]()
    expected = eager_outputs(module, inputs)
    compiled = torch.compile(module, backend="ember", options={"backend": backend})
    # Dynamo leaves nn.LSTM to eager unless told otherwise.
    with torch.no_grad(), torch._dynamo.config.patch(allow_rnn=True):
        result = compiled(*inputs)
    assert type(result) is type(module(*inputs))
    assert_matches(_leaves(result), expected)
    assert compiles, "Dynamo handed Ember no graph: the model ran eagerly"


@pytest.mark.parametrize("dynamic", [False, None])
def test_new_shape_compiles_once_and_is_cached(compiles, dynamic):
    module, (x,) = mlp(batch=4)
    compiled = torch.compile(module, backend="ember", dynamic=dynamic, options={"backend": "interpreter"})
    with torch.no_grad():
        for batch in (4, 2, 3, 4, 2, 3):
            assert_matches(_leaves(compiled(x[:batch])), eager_outputs(module, (x[:batch],)))
        if dynamic is False:  # a static graph per shape
            assert len(compiles) == 3
        seen = len(compiles)  # by default, Dynamo's symbolic-shape graph takes each size after the first
        for batch in (4, 2, 3, 2):
            assert_matches(_leaves(compiled(x[:batch])), eager_outputs(module, (x[:batch],)))
    assert len(compiles) == seen


def test_changed_weights_recompile(compiles):
    module, (x,) = mlp()
    compiled = torch.compile(module, backend="ember", options={"backend": "interpreter"})
    with torch.no_grad():
        compiled(x)
        module.layers[0].weight.mul_(2.0)
        assert_matches(_leaves(compiled(x)), eager_outputs(module, (x,)))
        compiled(x)
    assert len(compiles) == 2


class DataDependent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.tanh(self.a(x))
        if y.sum() > 0:  # a graph break: Dynamo runs the test eagerly
            return self.b(y) * 2
        return self.b(-y)


def test_graph_breaks_run_eagerly(compiles):
    module = DataDependent().eval()
    compiled = torch.compile(module, backend="ember", options={"backend": "interpreter"})
    with torch.no_grad():
        for sign in (1.0, -1.0):
            x = torch.full((3, 8), sign) + torch.randn(3, 8) * 0.01
            module.a.weight.copy_(torch.eye(8))
            assert_matches(_leaves(compiled(x)), eager_outputs(module, (x,)))
    assert len(compiles) >= 3  # the graph before the break, and each branch after it


def test_options_reach_the_backend(compiles):
    module, (x,) = mlp()
    compiled = torch.compile(module, backend="ember", options={"backend": "cpu", "num_threads": 1})
    with torch.no_grad():
        assert_matches(_leaves(compiled(x)), eager_outputs(module, (x,)))
    assert compiles == [("cpu", {"num_threads": 1})]


@pytest.mark.parametrize("options, message", [
    ({"threads": 2}, "unknown torch.compile option"),
    ({"num_threads": 0}, "must be a positive integer"),
    ({"backend": "no-such-backend"}, "unknown backend 'no-such-backend'"),
])
def test_bad_options_are_refused(options, message):
    module, (x,) = mlp()
    compiled = torch.compile(module, backend="ember", options=options)
    with torch.no_grad(), pytest.raises(Exception, match=message):
        compiled(x)


def test_grad_mode_with_trainable_weights_is_refused():
    module, (x,) = mlp()
    compiled = torch.compile(module, backend="ember", options={"backend": "interpreter"})
    with pytest.raises(Exception, match="inference only"):
        compiled(x)


def test_training_mode_batch_norm_is_refused():
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    x = torch.randn(2, 3, 8, 8)
    compiled = torch.compile(module, backend="ember", options={"backend": "interpreter"})
    with torch.no_grad(), pytest.raises(Exception, match="training-mode form"):
        compiled(x)


def test_inputs_cross_without_copies():
    from ember.frontends.torch.dynamo import _as_array

    x = torch.randn(4, 5)
    assert np.shares_memory(_as_array(x), x.numpy())
    transposed = x.t()
    assert np.array_equal(_as_array(transposed), transposed.numpy())


def test_precision_option_reaches_the_backend(compiles):
    from ember.backends import get_backend

    if "bf16" not in get_backend("cpu").precisions:
        pytest.skip("the cpu backend has no bf16 kernels on this CPU")
    module, (x,) = mlp()
    compiled = torch.compile(module, backend="ember", options={"backend": "cpu", "precision": "bf16"})
    with torch.no_grad():
        result, expected = compiled(x), module(x)
    assert compiles == [("cpu", {"precision": "bf16"})]
    assert float((result - expected).abs().max()) < 2e-2  # bf16-rounded operands, float32 sums


class Unsupported(torch.nn.Module):
    def forward(self, x):
        return torch.erfinv(torch.tanh(x))  # the unsupported op


def test_unsupported_ops_name_the_model_line():
    compiled = torch.compile(Unsupported().eval(), backend="ember", options={"backend": "interpreter"})
    with torch.no_grad(), pytest.raises(Exception) as caught:
        compiled(torch.randn(3))
    line = next(i for i, text in enumerate(open(__file__), 1) if "# the unsupported op" in text)
    assert f"aten.erfinv.default at {__file__}:{line} in forward: return torch.erfinv" in str(caught.value)
