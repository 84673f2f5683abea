"""The compile cache is not trusted (backends/cpu/cache.py): a truncated, garbage, FIFO,
folder, symlinked, foreign or planted entry in place of a cached library or of the kernel
library's object is rebuilt, never loaded; the cache folder must be this user's own; an
unusable cache folder or HOME gives a clear error or a private fallback."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember.backends.cpu import CpuBackend
from ember.backends.cpu.build import find_compiler
from ember.driver import compile_graph
from ember.graph import Graph
from ember.support.errors import EmberError
from ember.types import DType, TensorType

X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def _graph(op: str = "Tanh") -> Graph:
    g = Graph(f"cache_{op}")
    x = g.add_input("x", TensorType(DType.FLOAT32, (3, 4)))
    g.set_outputs([("y", g.add(op, x))])
    return g


def _run(op: str = "Tanh") -> tuple[np.ndarray, Path]:
    model = compile_graph(_graph(op), CpuBackend(num_threads=1))
    return model.run({"x": X})["y"], model.executable.library


_FRESH = """
import json, sys
sys.path[:0] = [{root!r}]
from tests.test_compile_cache import _run
result, library = _run({op!r})
print(json.dumps([result.tolist(), str(library)]))
"""


def _run_fresh(op: str = "Tanh") -> tuple[np.ndarray, Path]:
    """_run in a new process: a library this process loaded stays mapped (and the loader
    would hand back that mapping for the same path), so what happens after the cache is
    sabotaged is what the next process sees."""
    root = str(Path(__file__).resolve().parents[1])
    result = subprocess.run([sys.executable, "-c", _FRESH.format(root=root, op=op)], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-3000:]
    values, library = json.loads(result.stdout.strip().splitlines()[-1])
    return np.array(values, np.float32), Path(library)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ember-cache")
    os.chmod(folder, 0o700)
    return folder


@pytest.fixture(autouse=True)
def _use(cache, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache))


def _sabotage(entry: Path, how: str, cache: Path) -> None:
    if how == "truncated":
        entry.write_bytes(entry.read_bytes()[:1000])
    elif how == "garbage":
        entry.write_bytes(b"\x7fELF" + os.urandom(4000))
    elif how == "fifo":
        entry.unlink()
        os.mkfifo(entry)
    elif how == "folder":
        entry.unlink()
        entry.mkdir()
        (entry / "inside").write_text("x")
    elif how == "symlink":
        target = cache / "elsewhere.so"
        shutil.copy(entry, target)
        entry.unlink()
        entry.symlink_to(target)
    elif how == "another model":  # its library and its record, copied over
        _, other = _run_fresh("Sigmoid")
        shutil.copy(other, entry)
        shutil.copy(other.with_name(other.name + ".sha256"), entry.with_name(entry.name + ".sha256"))
    elif how == "no record":
        entry.with_name(entry.name + ".sha256").unlink()


@pytest.mark.parametrize("how", ["truncated", "garbage", "fifo", "folder", "symlink", "another model", "no record"])
def test_a_bad_cached_library_is_rebuilt_not_loaded(how, cache):
    expected, library = _run_fresh()
    _sabotage(library, how, cache)
    again, rebuilt = _run_fresh()
    assert rebuilt == library
    np.testing.assert_array_equal(again, expected)
    assert stat.S_ISREG(os.lstat(rebuilt).st_mode)


def test_a_planted_library_never_runs_its_constructor(cache, tmp_path):
    _, library = _run_fresh("Abs")
    marker = tmp_path / "constructor-ran"
    planted = tmp_path / "planted.c"
    planted.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void boom(void) '
                       f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run([find_compiler(), "-shared", "-fPIC", str(planted), "-o", str(library)], check=True)
    result, _ = _run_fresh("Abs")
    np.testing.assert_array_equal(result, np.abs(X))
    assert not marker.exists()


@pytest.mark.parametrize("how", ["garbage", "truncated"])
def test_a_corrupted_kernel_library_object_is_rebuilt(how, cache):
    expected, _ = _run_fresh()
    objects = list((cache / "cpu").glob("runtime-*.o"))  # the kernel library's pieces, the combined object
    assert objects
    for obj in objects:
        _sabotage(obj, how, cache)
    for library in (cache / "cpu").glob("*.so"):  # force a link against the object
        library.unlink()
    again, _ = _run_fresh()
    np.testing.assert_array_equal(again, expected)


def test_a_cache_folder_others_may_write_is_refused(cache, tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    (shared / "cpu").mkdir(parents=True)
    os.chmod(shared / "cpu", 0o777)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(shared))
    with pytest.raises(EmberError, match="writable by other users"):
        _run()


def test_an_unusable_cache_folder_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(EmberError, match="cannot use the cache folder .* set EMBER_CACHE_DIR"):
        _run()


def test_an_empty_home_does_not_put_the_cache_at_the_root(monkeypatch):
    from ember.support.paths import cache_dir

    monkeypatch.delenv("EMBER_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "")
    folder = cache_dir()
    assert not str(folder).startswith("/.cache")
    assert folder.name.startswith("ember-cache-") or folder.parts[-2:] == (".cache", "ember")
