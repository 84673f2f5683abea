"""Real pretrained models shipped inside PyPI wheels (tests/pretrained_models.py): each one
compiles on the interpreter, on backend='auto' and on backend='cpu' and matches ONNX Runtime
(the reference only; it never computes anything for Ember) on realistic inputs.

Tolerances: the largest absolute difference over an output, divided by the largest magnitude
of ONNX Runtime's output (at least 1, as in tests/helpers.relative_error), must stay within
1e-4 on the interpreter and on 'auto', and within 1e-3 on 'cpu'.

Refusals are recorded, not hidden: where 'cpu' refuses a model, the refusal must be an
UnsupportedError naming exactly the ops the registry lists (`cpu_refuses`), and the test
xfails with its text; where the file as shipped is refused (`as_shipped`, `refused`,
`dynamic_refused`) the test checks that refusal and xfails. A refusal that goes away, or one
that changes, fails the test: update the registry. A package that is not installed skips its
models, naming the pip line (.ci/run installs them)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import ember
from ember.support.errors import UnsupportedError
from tests.pretrained_models import MODELS, Inputs, PretrainedModel, refused_ops

TOLERANCE = {"interpreter": 1e-4, "auto": 1e-4, "cpu": 1e-3}

ort = pytest.importorskip("onnxruntime")


def _available(model: PretrainedModel) -> PretrainedModel:
    reason = model.missing_reason()
    if reason:
        pytest.skip(reason)
    return model


@functools.cache
def _session(name: str):
    model = next(m for m in MODELS if m.name == name)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    # The file as written, node by node: no fusions that round differently.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3  # the exporters leave unused initializers ORT warns about
    return ort.InferenceSession(str(model.path()), options, providers=["CPUExecutionProvider"])


def _reference(model: PretrainedModel, feeds: Inputs) -> dict[str, np.ndarray]:
    session = _session(model.name)
    results = session.run(None, feeds)
    return {o.name: r for o, r in zip(session.get_outputs(), results, strict=True)}


def _relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    if expected.size == 0:
        return 0.0
    error = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
    return error / max(1.0, float(np.max(np.abs(expected.astype(np.float64)))))


def _compare(model: PretrainedModel, compiled, feeds: Inputs, tolerance: float, what: str,
             argmax: bool = False) -> dict[str, float]:
    expected = _reference(model, feeds)
    # Fixups may freeze an input (silero's sample rate): Ember gets only what it declares.
    actual = compiled.run({k: v for k, v in feeds.items() if k in compiled.input_names})
    assert set(actual) == set(expected), f"{what}: outputs {sorted(actual)} != {sorted(expected)}"
    errors = {}
    for name, reference in expected.items():
        got = actual[name]
        assert got.shape == reference.shape, f"{what} output {name}: shape {got.shape} != {reference.shape}"
        assert got.dtype == reference.dtype, f"{what} output {name}: dtype {got.dtype} != {reference.dtype}"
        assert np.all(np.isfinite(got) == np.isfinite(reference)), f"{what} output {name}: non-finite values differ"
        errors[name] = _relative_error(got, reference)
        if argmax:
            agree = float(np.mean(got.argmax(-1) == reference.argmax(-1)))
            assert agree == 1.0, f"{what} output {name}: argmax agrees on {100 * agree:.1f}% of rows"
    worst = max(errors.values(), default=0.0)
    assert worst <= tolerance, f"{what}: relative error {worst:.3g} > {tolerance:g} ({errors})"
    return errors


def _check_refusal(err: BaseException, expected: tuple[str, str], what: str) -> None:
    kind, fragment = expected
    names = [c.__name__ for c in type(err).__mro__]
    assert kind in names, f"{what}: expected {kind}, got {type(err).__name__}: {err}"
    assert fragment in str(err), f"{what}: the refusal changed: {type(err).__name__}: {err}"


def _compile(model: PretrainedModel, backend: str):
    return ember.compile(model.proto(), backend=backend, input_shapes=model.input_shapes or None)


@pytest.mark.parametrize("backend", ["interpreter", "auto", "cpu"])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_matches_onnxruntime(model, backend, record_property):
    _available(model)
    feeds = model.make_inputs()
    if model.refused is not None:
        with pytest.raises(Exception) as caught:
            _compile(model, backend)
        _check_refusal(caught.value, model.refused, f"{model.name} on {backend}")
        pytest.xfail(f"{model.name}: refused on every backend: {caught.value}")
    expect_refusal = backend == "cpu" and bool(model.cpu_refuses)
    try:
        compiled = _compile(model, backend)
    except UnsupportedError as err:
        if backend != "cpu":
            raise
        ops = refused_ops(err)
        record_property("cpu_refused_ops", sorted(ops))
        assert ops, f"{model.name}: the cpu refusal names no op: {err}"
        assert ops == model.cpu_refuses, (
            f"{model.name}: cpu refuses {sorted(ops)}, the registry says {sorted(model.cpu_refuses)} "
            f"(update cpu_refuses in tests/pretrained_models.py): {err}")
        pytest.xfail(f"{model.name}: cpu refuses {sorted(ops)}: {err}")
    if backend == "auto":
        record_property("partition", str(compiled.stats.get("partition", "")).splitlines()[:1])
    errors = _compare(model, compiled, feeds, model.quantized_tolerance or TOLERANCE[backend],
                      f"{model.name} on {backend}", argmax=model.quantized_tolerance is not None)
    record_property("relative_errors", errors)
    assert not expect_refusal, (f"{model.name}: cpu now compiles it (errors {errors}): remove cpu_refuses "
                                f"{sorted(model.cpu_refuses)} from tests/pretrained_models.py")


@pytest.mark.parametrize("model", [m for m in MODELS if m.as_shipped], ids=lambda m: m.name)
def test_file_as_shipped(model):
    """The shipped file without the registry's fixups: the recorded refusal, until fixed."""
    path = _available(model).path()
    with pytest.raises(Exception) as caught:
        compiled = ember.compile(str(path), backend="interpreter", input_shapes=model.input_shapes or None)
        compiled.run(model.make_inputs())
        pytest.fail(f"{model.name}: the file as shipped now compiles and runs: drop fixups and as_shipped "
                    f"from tests/pretrained_models.py")
    _check_refusal(caught.value, model.as_shipped, f"{model.name} as shipped")
    pytest.xfail(f"{model.name} as shipped: {type(caught.value).__name__}: {caught.value}")


@pytest.mark.parametrize("model", [m for m in MODELS if m.dynamic_inputs], ids=lambda m: m.name)
def test_dynamic_shapes(model):
    """Compiled without input_shapes: one DynamicModel on 'auto', specialized per input shape."""
    _available(model)
    assert model.dynamic_inputs is not None
    try:
        compiled = ember.compile(model.proto(), backend="auto")
        assert isinstance(compiled, ember.DynamicModel), type(compiled)
        for feeds in model.dynamic_inputs():
            shapes = {k: v.shape for k, v in feeds.items()}
            _compare(model, compiled, feeds, TOLERANCE["auto"], f"{model.name} dynamic at {shapes}")
    except Exception as err:
        if model.dynamic_refused is None:
            raise
        _check_refusal(err, model.dynamic_refused, f"{model.name} dynamic")
        pytest.xfail(f"{model.name} dynamic: {type(err).__name__}: {err}")
    assert model.dynamic_refused is None, f"{model.name}: the DynamicModel now works: drop dynamic_refused"
