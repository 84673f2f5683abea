"""Bundles refuse what cannot fit the target's flash and RAM (with the numbers, before
writing), keep their folder clean (an earlier bundle's files and build products replaced,
a foreign folder refused), speak of bundles in errors, and build hosted bundles with
-fopenmp when threads are asked for."""
from __future__ import annotations

import json

import pytest

import ember
from ember.cli import main as cli_main
from ember.codegen.bundle.fit import MANIFEST
from ember.support.errors import EmberError, UnsupportedError
from tests.conftest import require_shared_models
from tests.test_bundle import tiny_model


def test_a_bundle_too_large_for_the_part_is_refused_with_the_numbers(tmp_path):
    bundle = ember.bundle(tiny_model(), target="cortex-m4", output_dir=tmp_path / "ok")
    weights, ram = bundle.layout.constant_bytes, bundle.layout.mutable_bytes + bundle.layout.activation_bytes
    with pytest.raises(UnsupportedError) as err:
        ember.bundle(tiny_model(), target="cortex-m4", output_dir=tmp_path / "small", flash_bytes=weights - 1,
                     ram_bytes=ram - 1)
    text = str(err.value)
    assert f"weights need {weights} B" in text or f"({weights} B) of flash" in text
    assert f"({weights - 1} B)" in text and f"({ram} B) of RAM" in text and "--quantize" not in text[:20]
    assert not (tmp_path / "small").exists()  # refused before anything was written
    ember.bundle(tiny_model(), target="cortex-m4", output_dir=tmp_path / "exact", flash_bytes=weights,
                 ram_bytes=ram)
    # Hosted: checked only against what is given, and the weights count as RAM there.
    with pytest.raises(UnsupportedError, match="weights, io and activations need"):
        ember.bundle(tiny_model(), target="host", output_dir=tmp_path / "host", ram_bytes=ram)


def test_resnet18_for_cortex_m4_is_refused_by_the_board_memory(tmp_path, capsys):
    model = str(require_shared_models() / "resnet18.onnx")
    assert cli_main(["bundle", model, "--target", "cortex-m4", "-o", str(tmp_path / "r")]) == 3
    err = capsys.readouterr().err
    # 44.7 MiB: the weights as stored and the direct convolutions' tap offsets, no Winograd
    # copies on a microcontroller (with them, 71.6)
    assert "does not fit cortex-m4" in err and "mps2 example board" in err and "44.7 MiB" in err
    assert not (tmp_path / "r").exists()
    assert cli_main(["bundle", model, "--target", "host", "-o", str(tmp_path / "h"), "--ram", "1M"]) == 3
    assert "1.0 MiB (1048576 B)" in capsys.readouterr().err


def test_rewriting_a_bundle_folder_leaves_no_stale_file(tmp_path):
    folder = tmp_path / "out"
    first = ember.bundle(tiny_model(), target="cortex-m4", output_dir=folder, prefix="alpha")
    (folder / "alpha.o").write_text("stale object")
    (folder / "libalpha.a").write_text("stale archive")
    second = ember.bundle(tiny_model(), target="host", output_dir=folder, prefix="beta")
    present = sorted(p.name for p in folder.iterdir())
    assert present == sorted([*second.files, MANIFEST])
    assert not set(first.files) - set(second.files) & set(present)
    assert json.loads((folder / MANIFEST).read_text())["files"] == sorted(second.files)


def test_a_foreign_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(EmberError, match="not empty and holds no Ember bundle"):
        ember.bundle(tiny_model(), target="host", output_dir=tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_errors_speak_of_the_bundle(tmp_path, monkeypatch):
    from ember.backends.cpu.portable import bundle_backend
    from ember.codegen.bundle import get_target
    from ember.driver import load_model, prepare_program

    backend = bundle_backend(get_target("cortex-m4"))
    assert backend.describe() == "a bundle for cortex-m4"

    class Refusing:  # a kernel registry that has nothing for Gather, as for an op it lacks
        def __init__(self, inner):
            self.inner = inner

        def refusal(self, view):
            if view.op == "Gather":
                return "float32: no C kernels for this element type (it runs on the interpreter)"
            return self.inner.refusal(view)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    backend.kernels = Refusing(backend.kernels)
    with pytest.raises(UnsupportedError) as err:
        prepare_program(load_model(tiny_model()), backend)
    text = str(err.value)
    assert text.startswith("a bundle for cortex-m4 cannot run: Gather") and "interpreter" not in text
    assert "backend 'cpu'" not in text


def test_hosted_bundles_with_threads_build_with_openmp(tmp_path):
    threaded = ember.bundle(tiny_model(), target="host", output_dir=tmp_path / "t", num_threads=2)
    makefile = (threaded.directory / "Makefile").read_text()
    assert "-fopenmp $(EXTRA_CFLAGS)" in makefile and "LDFLAGS = $(TARGET_FLAGS) -fopenmp" in makefile
    single = ember.bundle(tiny_model(), target="host", output_dir=tmp_path / "s")
    assert "-fopenmp" not in (single.directory / "Makefile").read_text()
    with pytest.raises(EmberError, match="run on one thread"):
        ember.bundle(tiny_model(), target="cortex-m4", output_dir=tmp_path / "m", num_threads=2)
