"""Whole models: every shared reference model compiles with the interpreter and matches its
reference outputs; both IRs round-trip through text on every model; the bundled example runs."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.driver import compile_model
from ember.graph import parse_graph, print_graph
from ember.lir import parse_program, print_program
from tests.conftest import EXAMPLES, require_shared_models, shared_model_names
from tests.helpers import relative_error, weights_of

MODELS = shared_model_names() or ["(shared models absent)"]


def _reference(path):
    data = np.load(path.with_suffix(".ref.npz"))
    return data


def _check_model(path, backend="interpreter"):
    model = ember.compile(path, backend=backend)
    ref = _reference(path)
    inputs = {name: ref[f"in_{name}"] for name in model.input_names}
    outputs = model.run(inputs)
    for index, name in enumerate(model.output_names):
        error = relative_error(outputs[name], ref[f"out_{index}"])
        assert error <= 1e-4, f"{path.stem} output {name}: relative error {error:.3g}"
    return model


@pytest.mark.parametrize("name", MODELS)
def test_shared_model_matches_reference(name):
    folder = require_shared_models()
    model = _check_model(folder / f"{name}.onnx")
    ops = model.stats["ops"]
    assert set(ops) == {"imported", "optimized", "lowered"}
    assert sum(ops["imported"].values()) > 0


@pytest.mark.parametrize("name", MODELS)
def test_both_irs_round_trip_on_shared_model(name):
    folder = require_shared_models()
    texts = {}

    def observe(stage, artifact):
        if stage in ("graph", "lowered"):
            text = print_graph(artifact)
            assert print_graph(parse_graph(text, weights_of(artifact))) == text, stage
            texts[stage] = text
        elif stage == "lir":
            text = print_program(artifact)
            weights = {w.name: w.data for w in artifact.weights}
            assert print_program(parse_program(text, weights)) == text
            texts[stage] = text

    compile_model(folder / f"{name}.onnx", observer=observe)
    assert set(texts) == {"graph", "lowered", "lir"}


def test_bundled_example_matches_its_reference():
    _check_model(EXAMPLES / "lenet.onnx")
