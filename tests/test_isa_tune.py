"""Measured refinement of emitted GEMMs (ember.isa.tune): the analytic model's best register
tiles are built and timed, the fastest kept and cached per CPU model; a cached choice is
reused without timing, and an unreadable cache is tuned again."""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ember.isa.describe import load_target
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel
from ember.isa.report import choose
from ember.isa.schedule import register_tiles
from ember.isa.tune import CACHE_FILE, candidates, cpu_model, tune_gemm

X86 = load_target("x86-avx512")


def _avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


NATIVE = pytest.mark.skipif(shutil.which("cc") is None or not _avx512(), reason="needs cc and an AVX-512 CPU")
KERNEL = Kernel("gemm", parse_expr("C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:50, j:64, k:40"),
                constants=frozenset({"B"}))


def test_candidates_are_the_model_s_best_tiles_first():
    best = choose(KERNEL, X86)
    assert best is not None
    tiles = register_tiles(best.mapping, X86, 4)
    assert tiles[0] == dict(best.levels[0].tile) and len({tuple(sorted(t.items())) for t in tiles}) == len(tiles)
    codes = candidates(best, 4)
    assert (codes[0].mr, codes[0].nr) == (dict(best.levels[0].tile)["i"], dict(best.levels[0].tile)["j'"])
    assert len({(c.mr, c.nr) for c in codes}) == len(codes) >= 2


@NATIVE
def test_tuning_measures_caches_and_reuses(tmp_path):
    best = choose(KERNEL, X86)
    assert best is not None
    first = tune_gemm(best, count=3, budget_s=0.01, cache=tmp_path)
    assert not first.from_cache and len(first.seconds) == 3 and all(s > 0 for s in first.seconds.values())
    choice = f"{first.code.mr}x{first.code.nr}"
    assert first.seconds[choice] == min(first.seconds.values())
    (entry,) = json.loads((tmp_path / CACHE_FILE).read_text()).values()
    assert entry["choice"] == choice and entry["cpu"] == cpu_model() and entry["gemm"] == "50x64x40"
    again = tune_gemm(best, count=3, budget_s=0.01, cache=tmp_path)
    assert again.from_cache and again.seconds == {} and again.code == first.code
    # The chosen code computes the GEMM.
    (tmp_path / "g.c").write_text(first.code.source)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", *first.code.flags.split(), str(tmp_path / "g.c"), "-o",
                    str(tmp_path / "g.so")], check=True)
    function = ctypes.CDLL(str(tmp_path / "g.so")).mapped_gemm
    function.argtypes = [ctypes.c_void_p] * 4
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((50, 40)).astype(np.float32), rng.standard_normal((40, 64)).astype(np.float32)
    packed, c = first.code.pack_b(b), np.zeros((50, 64), np.float32)
    workspace = np.zeros(first.code.workspace_elements, np.float32)
    function(a.ctypes.data, packed.ctypes.data, c.ctypes.data, workspace.ctypes.data)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@NATIVE
def test_an_unreadable_cache_is_tuned_again(tmp_path):
    (tmp_path / CACHE_FILE).write_text("{not json")
    best = choose(KERNEL, X86)
    assert best is not None
    result = tune_gemm(best, count=2, budget_s=0.005, cache=tmp_path)
    assert not result.from_cache and len(json.loads((tmp_path / CACHE_FILE).read_text())) == 1
