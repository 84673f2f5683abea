"""Saved models (runtime/artifact.py): every shared model round-trips on cpu, a partitioned
model with an interpreter segment too, a fresh process without onnx runs a saved model, and
corrupted or foreign files are refused before anything is loaded."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.runtime.artifact import ArtifactError
from tests.conftest import EXAMPLES, require_shared_models, shared_model_names

REPO = Path(__file__).resolve().parents[1]
LENET = EXAMPLES / "lenet.onnx"


def _feeds(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in model.inputs:
        if spec.type.dtype.is_float:
            feeds[spec.name] = rng.standard_normal(spec.type.shape).astype(spec.type.dtype.numpy)
        else:
            feeds[spec.name] = np.ones(spec.type.shape, spec.type.dtype.numpy)
    return feeds


@pytest.mark.parametrize("name", shared_model_names())
def test_every_shared_model_round_trips_on_cpu(name, tmp_path):
    path = require_shared_models() / f"{name}.onnx"
    model = ember.compile(str(path), backend="cpu")
    feeds = _feeds(model)
    expected = model.run(feeds)
    loaded = ember.load(model.save(tmp_path / f"{name}.ember"))
    actual = loaded.run(feeds)
    assert loaded.output_names == model.output_names and loaded.backend == "cpu"
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value)


def test_a_partitioned_model_round_trips_with_its_interpreter_segment(tmp_path):
    from ember.backends.cpu import CpuBackend
    from ember.backends.interpreter import InterpreterBackend
    from ember.driver import load_model
    from ember.heterogeneous import compile_partitioned

    class CpuWithoutPooling(CpuBackend):
        def refusal(self, node):
            return "withheld for the test" if node.op == "MaxPool" else super().refusal(node)

    model = compile_partitioned(load_model(str(LENET)), [CpuWithoutPooling(num_threads=1), InterpreterBackend()])
    assert model.backend == "cpu+interpreter"
    feeds = _feeds(model)
    expected = model.run(feeds)
    loaded = ember.load(model.save(tmp_path / "lenet.ember"))
    assert [s["backend"] for s in loaded.stats["segments"]] == [s["backend"] for s in model.stats["segments"]]
    for key, value in loaded.run(feeds).items():
        np.testing.assert_array_equal(value, expected[key])


def test_a_fresh_process_without_onnx_runs_a_saved_model(tmp_path):
    model = ember.compile(str(LENET), backend="cpu", num_threads=1)
    feeds = _feeds(model)
    np.savez(tmp_path / "io.npz", **{f"in_{k}": v for k, v in feeds.items()},
             **{f"out_{k}": v for k, v in model.run(feeds).items()})
    model.save(tmp_path / "lenet.ember")
    script = f"""
import sys
sys.modules["onnx"] = None  # any import of onnx now fails
import numpy as np, ember
data = np.load({str(tmp_path / 'io.npz')!r})
m = ember.load({str(tmp_path / 'lenet.ember')!r})
out = m.run({{k[3:]: data[k] for k in data.files if k.startswith("in_")}})
assert all(np.array_equal(out[k[4:]], data[k]) for k in data.files if k.startswith("out_"))
print("ok", "onnx" in sys.modules and sys.modules["onnx"] is not None)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok False"


def _rewrite(source: Path, target: Path, change) -> None:
    """Copies an artifact member by member, letting `change(name, data)` alter each."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for name in old.namelist():
            data = change(name, old.read(name))
            if data is not None:
                new.writestr(name, data)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("artifact") / "lenet.ember"
    ember.compile(str(LENET), backend="cpu", num_threads=1).save(path)
    return path


def _flip(data: bytes) -> bytes:
    return data[:100] + bytes([data[100] ^ 1]) + data[101:]


def test_a_corrupted_library_is_refused_before_loading(saved, tmp_path):
    bad = tmp_path / "bad.ember"
    _rewrite(saved, bad, lambda name, data: _flip(data) if name.endswith("library.so") else data)
    with pytest.raises(ArtifactError, match=r"member part0/library.so does not match its recorded hash"):
        ember.load(bad)
    damaged = tmp_path / "damaged.ember"
    raw = bytearray(saved.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # inside some member: the zip's own checksum fails
    damaged.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError):
        ember.load(damaged)


@pytest.mark.parametrize("case", ["text file", "zip without manifest", "foreign manifest", "newer version",
                                  "extra member", "missing member", "odd member name", "unknown backend"])
def test_foreign_or_altered_artifacts_are_refused(case, saved, tmp_path):
    bad = tmp_path / "bad.ember"

    def manifest_edit(edit):
        def change(name, data):
            if name != "manifest.json":
                return data
            manifest = json.loads(data)
            edit(manifest)
            return json.dumps(manifest)
        return change

    if case == "text file":
        bad.write_text("not an artifact")
        expected = "not an Ember artifact \\(not a zip archive\\)"
    elif case == "zip without manifest":
        with zipfile.ZipFile(bad, "w") as archive:
            archive.writestr("model.so", b"\x7fELF")
        expected = "not an Ember artifact \\(no manifest.json\\)"
    elif case == "foreign manifest":
        _rewrite(saved, bad, manifest_edit(lambda m: m.update(format="other")))
        expected = "its manifest is not Ember's"
    elif case == "newer version":
        _rewrite(saved, bad, manifest_edit(lambda m: m.update(version=99)))
        expected = "format version 99"
    elif case == "extra member":
        _rewrite(saved, bad, lambda name, data: data)
        with zipfile.ZipFile(bad, "a") as archive:
            archive.writestr("part0/evil.so", b"x")
        expected = "unexpected"
    elif case == "missing member":
        _rewrite(saved, bad, lambda name, data: None if name.endswith("weights.bin") else data)
        expected = "missing"
    elif case == "odd member name":
        _rewrite(saved, bad, manifest_edit(lambda m: m["files"].update({"../escape.so": "0" * 64})))
        expected = "member names Ember does not write"
    else:
        _rewrite(saved, bad, manifest_edit(lambda m: m["parts"][0].update(backend="vendor-npu")))
        expected = "needs backend 'vendor-npu', which is not installed"
    with pytest.raises(ArtifactError, match=expected):
        ember.load(bad)


def test_interpreter_models_round_trip(tmp_path):
    model = ember.compile(str(LENET), backend="interpreter")
    feeds = _feeds(model)
    loaded = ember.load(model.save(tmp_path / "lenet.ember"))
    for key, value in model.run(feeds).items():
        np.testing.assert_array_equal(loaded.run(feeds)[key], value)


def test_a_loaded_model_saves_again_and_leaves_no_files_behind(saved, tmp_path):
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("ember-artifact-*"))
    again = ember.load(saved).save(tmp_path / "again.ember")
    model = ember.load(again)
    assert set(Path(tempfile.gettempdir()).glob("ember-artifact-*")) == before
    feeds = _feeds(model)
    np.testing.assert_array_equal(model.run(feeds)["probabilities"], ember.load(saved).run(feeds)["probabilities"])
