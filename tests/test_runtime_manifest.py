"""The kernel library's manifest (codegen/runtime_files.py: EXPORTS, CALLS) against the C it
describes, so it cannot go stale: each library .c file compiled on its own defines exactly
the external functions the manifest gives it and calls into exactly the files CALLS names;
the generated C of models calls only exported functions, and the bundle's source selection
(bundle/library.py) includes the files defining them. Symbols come from `nm`, not from
reading the C."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.codegen.bundle import library
from ember.codegen.runtime_files import CALLS, EXPORTS, RUNTIME_SOURCES, runtime_source, sources_for
from tests.conftest import EXAMPLES

LIBRARY_C = [name for name in RUNTIME_SOURCES if name.endswith(".c")]
# As the cpu backend builds (OpenMP), and as a host bundle builds (the host's vector width, no
# OpenMP): the two sides of the library's #if branches.
HOST_ISA = ["-march=native"] if platform.machine().lower() in ("x86_64", "amd64") else []
VARIANTS = {"openmp": ["-fopenmp"], "bundle": HOST_ISA}


def _compiler() -> str:
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    pytest.skip("no C compiler")


def _nm(obj: Path, *args: str) -> list[tuple[str, str]]:
    """(type letter, name) of the symbols `nm` lists with `args`."""
    if shutil.which("nm") is None:
        pytest.skip("nm not found: install the Debian package binutils")
    out = subprocess.run(["nm", *args, str(obj)], capture_output=True, text=True, check=True).stdout
    return [(m[0], m[1]) for m in re.findall(r"^(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$", out, re.M)]


def _compile(folder: Path, name: str, flags: list[str]) -> Path:
    obj = folder / f"{Path(name).stem}.o"
    result = subprocess.run([_compiler(), "-c", "-O1", "-std=gnu11", "-w", *flags, f"-I{folder}", str(folder / name),
                             "-o", str(obj)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{name} does not compile:\n{result.stderr[-3000:]}"
    return obj


@pytest.fixture(scope="module")
def runtime_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("runtime")
    for name in RUNTIME_SOURCES:
        (folder / name).write_text(runtime_source(name))
    return folder


@pytest.fixture(scope="module", params=list(VARIANTS))
def objects(request, tmp_path_factory) -> dict[str, Path]:
    """Each library .c file compiled on its own."""
    out = tmp_path_factory.mktemp(f"objects-{request.param}")
    for name in RUNTIME_SOURCES:
        (out / name).write_text(runtime_source(name))
    return {name: _compile(out, name, VARIANTS[request.param]) for name in LIBRARY_C}


def test_manifest_names_library_files():
    assert set(EXPORTS.values()) <= set(LIBRARY_C)
    assert set(CALLS) == set(LIBRARY_C), "CALLS needs one entry per library .c file"
    for name, callees in CALLS.items():
        assert set(callees) <= set(LIBRARY_C) - {name}, name
    assert all(symbol.startswith("ember_") for symbol in EXPORTS)


def test_each_object_defines_exactly_its_exports(objects):
    for name, obj in objects.items():
        defined = _nm(obj, "-g", "--defined-only")
        functions = {symbol for kind, symbol in defined if kind == "T"}
        others = sorted(f"{symbol} ({kind})" for kind, symbol in defined if kind != "T")
        assert not others, (f"{name} defines global symbols that are not functions: {others} (make them static; "
                            "bundles rename only the manifest's functions)")
        declared = {symbol for symbol, source in EXPORTS.items() if source == name}
        assert functions == declared, (
            f"{name}: external functions not in runtime_files.EXPORTS: {sorted(functions - declared)}; "
            f"in EXPORTS but not defined: {sorted(declared - functions)}")


def test_each_object_calls_into_the_files_calls_names(objects):
    for name, obj in objects.items():
        undefined = {symbol for _, symbol in _nm(obj, "-u") if symbol.startswith("ember_")}
        unknown = sorted(undefined - set(EXPORTS))
        assert not unknown, f"{name} calls ember_ functions nobody exports: {unknown}"
        assert {EXPORTS[s] for s in undefined} == set(CALLS[name]), (
            f"{name} calls into {sorted({EXPORTS[s] for s in undefined})}, runtime_files.CALLS says "
            f"{sorted(CALLS[name])}")


def test_library_objects_link_together(objects):
    """All exports together resolve every ember_ call between the files (no symbol twice)."""
    seen: dict[str, str] = {}
    for name, obj in objects.items():
        for _, symbol in _nm(obj, "-g", "--defined-only"):
            assert symbol not in seen, f"{symbol} defined in {seen[symbol]} and {name}"
            seen[symbol] = name


# the generated C ---------------------------------------------------------------------------

def conv_model():
    """Reaches every library entry point the kernels emit: Winograd (3x3, 32 channels each
    way, 49 output tiles), depthwise, direct, im2col (dilated) convolutions and a GEMM."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [weight("w1", 32, 32, 3, 3), weight("w2", 32, 1, 3, 3), weight("w3", 16, 32, 1, 1),
             weight("w4", 8, 16, 3, 3), weight("w5", 8, 8, 3, 3), weight("w6", 8 * 7 * 7, 10)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=32),
             helper.make_node("Conv", ["c2", "w3"], ["c3"]),
             helper.make_node("Sigmoid", ["c3"], ["s3"]),
             helper.make_node("Conv", ["s3", "w4"], ["c4"], pads=[2, 2, 2, 2], strides=[2, 2], dilations=[2, 2]),
             helper.make_node("Conv", ["c4", "w5"], ["c5"], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c5"], ["f"]),
             helper.make_node("MatMul", ["f", "w6"], ["y"])]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def generated_sources() -> dict[str, str]:
    return {"lenet": ember.compile(EXAMPLES / "lenet.onnx", backend="cpu").executable.source,
            "convs": ember.compile(conv_model(), backend="cpu").executable.source}


def test_generated_c_calls_only_exports(generated_sources, runtime_dir):
    called: set[str] = set()
    for model, source in generated_sources.items():
        (runtime_dir / f"{model}.c").write_text(source)
        obj = _compile(runtime_dir, f"{model}.c", ["-fopenmp"])
        undefined = {symbol for _, symbol in _nm(obj, "-u") if symbol.startswith("ember_")}
        assert undefined, f"{model}: the generated C calls no library function (is the scan broken?)"
        unknown = sorted(undefined - set(EXPORTS))
        assert not unknown, f"{model} calls functions missing from EXPORTS: {unknown}"
        # The bundle copies the files defining them (and what those call).
        needed = library.needed_sources(source)
        assert needed == sources_for(undefined), model
        assert {EXPORTS[s] for s in undefined} <= set(needed), model
        called |= undefined
    # The models reach every entry point the kernels emit.
    assert {"ember_gemm", "ember_pack_im2col", "ember_conv_direct", "ember_winograd4", "ember_depthwise"} <= called, (
        sorted(called))


def test_symbols_header_renames_every_export():
    text = library.symbols_header("kws")
    renames = dict(re.findall(r"^#define (ember_\w+) (\w+)$", text, re.M))
    assert renames == {symbol: f"kws_{symbol}" for symbol in EXPORTS}


def test_sources_for_follows_calls():
    assert sources_for({"ember_gemm"}) == ["ember_gemm.c"]
    assert sources_for({"ember_winograd", "ember_expf"}) == ["ember_gemm.c", "ember_winograd.c"]
    assert sources_for(set()) == []
    # Calls pull files in transitively (conv's im2row transposes with ember_transpose.c), and
    # nothing more: neither the depthwise kernel nor Winograd for a direct convolution.
    assert sources_for({"ember_conv_direct"}) == ["ember_gemm.c", "ember_transpose.c", "ember_conv.c"]
