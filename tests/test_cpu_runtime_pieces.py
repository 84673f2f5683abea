"""The cpu backend's kernel library in pieces (backends/cpu/build.py, runtime_files.PIECES): a
model links only the library files its C names; each piece is cached under a key that changes
with its file, any header, its -D flags, the compiler and the flags; ember_gemm.c compiled in
pieces exports exactly what it exports whole (its tile functions stay hidden); a corrupted
piece is rebuilt; two processes building the same pieces at once both succeed; pieces a compile
starts building in the background before its C exists are waited for, not compiled twice."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import ember.backends.cpu.backend as cpu_backend
import ember.backends.cpu.build as build
from ember.codegen.kernels.layouts import depthwise_kernel
from ember.codegen.runtime_files import (
    OPTIONAL_PIECES,
    PIECES,
    RUNTIME_SOURCES,
    pieces,
    pieces_named_by,
    runtime_source,
    sources_named_by,
)
from ember.support.errors import EmberError
from tests.helpers import single_node_graph

FLAGS = build.BASE_FLAGS + build.target_flags()
USES_GEMM = '#include "ember_gemm.h"\nlong probe(long n, long k) { return ember_gemm_scratch_bytes(n, k, 1); }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cpu"


def test_a_source_selects_the_files_it_names_and_their_callees():
    assert sources_named_by("int main(void) { return 0; }") == []
    assert sources_named_by("ember_gemm(...);") == ["ember_gemm.c"]
    assert sources_named_by("g.pack = ember_pack_im2col;") == ["ember_gemm.c", "ember_transpose.c", "ember_conv.c"]
    assert sources_named_by("ember_winograd_bf16(&g);") == [
        "ember_gemm.c", "ember_winograd.c", "ember_gemm_bf16.c", "ember_winograd_bf16.c"]
    assert sources_named_by("ember_not_a_library_function(); ember_gemmx();") == []


def test_a_file_s_optional_pieces_are_linked_where_the_source_names_their_functions():
    gemm = [("ember_gemm.c", defines) for defines in pieces("ember_gemm.c")]
    core = ("ember_depthwise.c", ("-DEMBER_DEPTHWISE_PIECE=0",))
    assert pieces_named_by("ember_depthwise(&g, NULL, w);") == [*gemm, core]
    assert pieces_named_by("ember_depthwise(&g, ember_dw_3x3_s22, w); ember_depthwise(&g, ember_dw_3x3_s11, w);"
                           ) == [*gemm, ("ember_depthwise.c", ("-DEMBER_DEPTHWISE_PIECE=1",)), core]
    assert len(pieces_named_by("ember_depthwise(&g, ember_dw_any_s21, w);")) == len(gemm) + 2
    assert pieces_named_by("ember_winograd(&g);") == [*gemm, ("ember_winograd.c", ())]
    # Every optional function is one of its file's pieces, and the file's core piece is not optional.
    for name, functions in OPTIONAL_PIECES.items():
        assert set(functions.values()) < set(pieces(name))


@pytest.mark.parametrize("kernel, strides, dilations, name", [
    ((3, 3), (1, 1), (1, 1), "ember_dw_3x3_s11"), ((3, 3), (2, 1), (1, 1), "ember_dw_3x3_s21"),
    ((5, 5), (2, 2), (1, 1), "ember_dw_5x5_s22"), ((7, 7), (1, 2), (1, 1), "ember_dw_any_s12"),
    ((1, 3), (1, 1), (1, 1), "ember_dw_any_s11"), ((8, 8), (2, 2), (1, 1), "ember_dw_any_s22"),
    ((9, 9), (1, 1), (1, 1), "NULL"), ((3, 3), (3, 3), (1, 1), "NULL"), ((3, 3), (1, 1), (2, 2), "NULL"),
])
def test_a_depthwise_convolution_names_the_kernel_of_its_taps_and_strides(kernel, strides, dilations, name):
    assert depthwise_kernel(kernel, strides, dilations) == name
    assert name == "NULL" or name in OPTIONAL_PIECES["ember_depthwise.c"]


def test_piece_keys_change_with_every_input(cache, monkeypatch):
    compiler = build.find_compiler()
    gemm = build._piece_path(compiler, FLAGS, "ember_gemm.c", pieces("ember_gemm.c")[0])
    conv = build._piece_path(compiler, FLAGS, "ember_conv.c", ())
    assert len({build._piece_path(compiler, FLAGS, "ember_gemm.c", d) for d in pieces("ember_gemm.c")}) == 5
    assert build._piece_path(compiler, [*FLAGS, "-O2"], "ember_gemm.c", pieces("ember_gemm.c")[0]) != gemm
    monkeypatch.setattr(build, "compiler_identity", lambda _: "another compiler 1.0")
    assert build._piece_path(compiler, FLAGS, "ember_conv.c", ()) != conv
    monkeypatch.undo()
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache.parent))

    def edited(target: str):
        return lambda name: runtime_source(name) + ("\n/* edited */\n" if name == target else "")

    monkeypatch.setattr(build, "runtime_source", edited("ember_gemm.h"))  # a header: every piece
    assert build._piece_path(compiler, FLAGS, "ember_gemm.c", pieces("ember_gemm.c")[0]) != gemm
    assert build._piece_path(compiler, FLAGS, "ember_conv.c", ()) != conv
    monkeypatch.setattr(build, "runtime_source", edited("ember_conv.c"))  # a .c file: its own pieces only
    assert build._piece_path(compiler, FLAGS, "ember_gemm.c", pieces("ember_gemm.c")[0]) == gemm
    assert build._piece_path(compiler, FLAGS, "ember_conv.c", ()) != conv


def _exports(library: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if " T " in line}


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm not found (binutils)")
@pytest.mark.parametrize("name", sorted(PIECES))
def test_a_file_in_pieces_exports_what_it_exports_whole(name, tmp_path):
    compiler = build.find_compiler().split()
    for header in RUNTIME_SOURCES:
        (tmp_path / header).write_text(runtime_source(header))
    flags = ["-O1", "-std=gnu11", "-fPIC", "-fopenmp", *build.target_flags()]
    objects = []
    for index, defines in enumerate(pieces(name)):
        objects.append(str(tmp_path / f"piece{index}.o"))
        subprocess.run([*compiler, *flags, *defines, f"-I{tmp_path}", "-c", str(tmp_path / name), "-o", objects[-1]],
                       check=True)
    subprocess.run([*compiler, "-shared", *objects, "-o", str(tmp_path / "pieces.so")], check=True)
    subprocess.run([*compiler, *flags, "-shared", f"-I{tmp_path}", str(tmp_path / name), "-o",
                    str(tmp_path / "whole.so")], check=True)
    whole = _exports(tmp_path / "whole.so")
    assert whole and _exports(tmp_path / "pieces.so") == whole
    assert not any("_tile_" in symbol or "_rows_" in symbol for symbol in whole)


def test_a_model_links_only_the_files_it_names_and_a_bad_piece_is_rebuilt(cache):
    library = ctypes.CDLL(str(build.build_library(USES_GEMM)))
    assert library.probe(64, 8) > 0
    built = sorted(path.name for path in cache.glob("runtime-ember_*.o"))
    assert len(built) == len(pieces("ember_gemm.c")) and all(n.startswith("runtime-ember_gemm-") for n in built)
    assert not build.library_is_built()  # the other files of the library are not built
    piece = next(cache.glob("runtime-ember_gemm-*.o"))
    piece.write_bytes(b"garbage")
    for entry in cache.glob("*.so"):
        entry.unlink()
    for entry in cache.glob("runtime-*.o"):
        if not entry.name.startswith("runtime-ember_"):
            entry.unlink()  # the combined object: relinked from the pieces
    rebuilt = build.build_library(USES_GEMM)
    assert build.intact(piece) and piece.read_bytes() != b"garbage"
    assert ctypes.CDLL(str(rebuilt)).probe(64, 8) == library.probe(64, 8)


_BUILD = """
import sys
sys.path[:0] = [{root!r}]
import ember.backends.cpu.build as build
print(build._runtime_object(build.find_compiler(), build.BASE_FLAGS + build.target_flags(), ["ember_winograd_bf16.c"]))
"""


def test_two_processes_building_the_same_pieces_both_succeed(cache):
    root = str(Path(__file__).resolve().parents[1])
    runs = [subprocess.Popen([sys.executable, "-c", _BUILD.format(root=root)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ)) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err[-2000:] for _, err in outputs]
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1 and build.intact(Path(paths.pop()))
    assert not list(cache.glob("build-*"))  # no build folder left behind


def test_a_cold_build_compiles_the_model_beside_the_library_pieces(cache, monkeypatch):
    """On an empty cache the model's C, the pool and every missing piece are one parallel
    batch: the model does not wait for the library. A second model reuses everything but
    compiles its own C alone."""
    batches: list[int] = []
    run_parallel = build._run_parallel

    def record(jobs):
        batches.append(len(jobs))
        run_parallel(jobs)

    monkeypatch.setattr(build, "_run_parallel", record)
    library = build.build_library(USES_GEMM)
    compiler = build.find_compiler()
    pool = 1 if build.speaks_libgomp_abi(compiler) else 0
    assert batches == [1 + len(pieces("ember_gemm.c")) + pool]
    assert ctypes.CDLL(str(library)).probe(64, 8) > 0
    build.build_library(USES_GEMM.replace("probe", "probe_again"))
    assert batches[1:] == [1]


def _gemm_piece_compiles(monkeypatch, before=None) -> list[str]:
    """Records the -D flag of every ember_gemm.c piece the compiler is run on (from any thread);
    `before(command)` runs first."""
    seen: list[str] = []
    run_compiler = build._run_compiler

    def record(command, cwd=None):
        if before is not None:
            before(command)
        seen.extend(flag for flag in command if flag.startswith("-DEMBER_GEMM_PIECE="))
        run_compiler(command, cwd)

    monkeypatch.setattr(build, "_run_compiler", record)
    return seen


def test_a_build_waits_for_the_pieces_a_prebuild_has_under_way(cache, monkeypatch):
    """The pieces are held back until the model's build has claimed them: it waits for the
    background builds instead of starting its own, so each piece compiles once."""
    release = threading.Event()
    held = lambda command: "-DEMBER_GEMM_PIECE=0" in command and release.wait(60)  # noqa: E731
    seen = _gemm_piece_compiles(monkeypatch, held)
    flags = build.library_flags()
    assert build.prebuild_library(["ember_gemm.c"], flags) == len(pieces("ember_gemm.c"))
    assert build.prebuild_library(["ember_gemm.c"], flags) == 0  # under way already
    threading.Timer(0.5, release.set).start()
    library = ctypes.CDLL(str(build.build_library(USES_GEMM)))
    assert library.probe(64, 8) > 0
    assert sorted(seen) == sorted(flag for defines in pieces("ember_gemm.c") for flag in defines)
    assert build.prebuild_library(["ember_gemm.c"], flags) == 0  # built: nothing to start


def test_a_piece_whose_background_build_failed_is_built_by_the_model(cache, monkeypatch):
    failed: list[bool] = []

    def fail_once(command):
        if "-DEMBER_GEMM_PIECE=1" in command and not failed:
            failed.append(True)
            raise EmberError("the compiler was killed")

    seen = _gemm_piece_compiles(monkeypatch, fail_once)
    build.prebuild_library(["ember_gemm.c"], build.library_flags())
    library = ctypes.CDLL(str(build.build_library(USES_GEMM)))
    assert failed and library.probe(64, 8) > 0
    assert seen.count("-DEMBER_GEMM_PIECE=1") == 1 and len(seen) == len(pieces("ember_gemm.c"))


def test_the_cpu_backend_prebuilds_the_gemm_core_for_graphs_that_need_it(monkeypatch):
    started: list[list[str]] = []
    monkeypatch.setattr(cpu_backend, "prebuild_library", lambda names, flags: started.append(names) or 0)
    x = np.ones((4, 8), np.float32)
    relu, _ = single_node_graph("Relu", [x])
    matmul, _ = single_node_graph("MatMul", [x, np.ones((8, 3), np.float32)], constant=(1,))
    cpu_backend.CpuBackend().begin_compile(relu)
    assert started == []
    cpu_backend.CpuBackend(sanitize=True).begin_compile(matmul)
    assert started == []  # sanitized libraries build their own way
    cpu_backend.CpuBackend().begin_compile(matmul)
    assert started == [["ember_gemm.c"]]


def test_a_model_builds_only_the_depthwise_kernels_it_names(cache):
    source = ('#include "ember_gemm.h"\n'
              "void *probe(void) { return (void *)ember_dw_3x3_s22; }\n"
              "long probe_bytes(const ember_conv_geom *g) { return ember_depthwise_scratch_bytes(g, 1); }\n")
    assert ctypes.CDLL(str(build.build_library(source))).probe()
    compiler, flags = build.find_compiler(), build.library_flags()
    built = {defines for defines in pieces("ember_depthwise.c")
             if build.intact(build._piece_path(compiler, flags, "ember_depthwise.c", defines))}
    assert built == {("-DEMBER_DEPTHWISE_PIECE=0",), ("-DEMBER_DEPTHWISE_PIECE=1",)}
