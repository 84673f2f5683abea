"""AOT bundles (ember.bundle, `ember bundle`): the header's API is stable (snapshots), bundles
are deterministic and self-contained, two bundles link into one program, and the MLP and
MobileNetV2 bundles built natively, for aarch64-linux (run under qemu-aarch64) and for
Cortex-M4 (sizes; run on QEMU's mps2-an386) match the interpreter within 1e-4.

Each bundle is written and built once per module (fixtures). Tests needing a tool that is
missing (cross compilers, QEMU, newlib) skip and name the Debian package; .ci/run installs
them. EMBER_UPDATE_SNAPSHOTS=1 rewrites tests/snapshots/ after a deliberate header change."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.backends.cpu import CpuBackend
from ember.cli import main as cli_main
from ember.codegen.bundle import TARGETS, Bundle, sanitize_prefix, write_bundle
from ember.codegen.bundle.examples import board_files
from ember.codegen.emitter import CodegenOptions
from ember.codegen.runtime_files import EXPORTS
from ember.driver import load_model, prepare_program
from ember.support.errors import EmberError, UnsupportedError
from tests.conftest import require_shared_models
from tests.helpers import relative_error

SNAPSHOTS = Path(__file__).parent / "snapshots"
TOLERANCE = 1e-4
# Makes the kernel library of the tiny host bundles compile in a fraction of a second (the
# AVX-512 tile takes seconds); the model bundles build with the full library.
FAST_LIBRARY = "EXTRA_CFLAGS=-DEMBER_PORTABLE_TILE"
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")
# Tiny bundles by prefix: different weights, so two linked bundles are told apart.
SEEDS = {"model": 0, "alpha": 1, "beta": 2, "ember": 3}


def tiny_model(seed: int = 0):
    """Two inputs (one with an unsafe name), two outputs, weights, a GEMM kernel from the
    library, a Gather with its run-time index check, and a vectorized math function."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("w", (4, 3)), ("b", (3,)), ("table", (5, 3)))]
    nodes = [helper.make_node("MatMul", ["x.in", "w"], ["xw"], name="fc/matmul"),
             helper.make_node("Add", ["xw", "b"], ["xwb"], name="fc/add"),
             helper.make_node("Relu", ["xwb"], ["y"], name="fc/relu"),
             helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0, name="lookup"),
             helper.make_node("Tanh", ["rows"], ["z*/"], name="squash")]
    graph = helper.make_graph(
        nodes, "tiny net",
        [helper.make_tensor_value_info("x.in", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("z*/", TensorProto.FLOAT, [3, 3])],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def tiny_inputs(ids=(4, 0, -2)) -> dict[str, np.ndarray]:
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    return {"x.in": x, "ids": np.array(ids, np.int64)}


# tools ----------------------------------------------------------------------------------

def require(*tools: str, package: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not found: install the Debian package {package} (.ci/run does)")


def require_newlib() -> None:
    require("arm-none-eabi-gcc", package="gcc-arm-none-eabi")
    probe = subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard",
                            "-mfpu=fpv4-sp-d16", "-print-file-name=libc.a"], capture_output=True, text=True)
    if not os.path.isabs(probe.stdout.strip()):
        pytest.skip("newlib for arm-none-eabi not found: install the Debian package libnewlib-arm-none-eabi")


def make(directory: Path, *args: str) -> str:
    # The Makefile picks the target's compiler unless CC is set: keep the caller's CC out.
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "AR", "CFLAGS", "MAKEFLAGS")}
    result = subprocess.run(["make", "-C", str(directory), "-j2", *args], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, f"make {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def run_bundle(bundle: Bundle, inputs: list[np.ndarray], runner: list[str] | None = None,
               firmware: bool = False) -> list[np.ndarray]:
    """Writes the inputs as raw files, runs bundle_main (or the firmware under QEMU), reads
    the outputs back with the dtypes and shapes of the bundle's layout."""
    folder = bundle.directory
    for sub in ("in", "out"):
        shutil.rmtree(folder / sub, ignore_errors=True)
        (folder / sub).mkdir()
    for slot, value in zip(bundle.layout.inputs, inputs, strict=True):
        np.ascontiguousarray(value, dtype=slot.dtype.numpy).tofile(folder / "in" / f"input_{slot.index}.bin")
    if firmware:
        make(folder, "run-qemu", "IN=in", "OUT=out")
    else:
        subprocess.run([*(runner or []), str(folder / "bundle_main"), str(folder / "in"), str(folder / "out")],
                       check=True, timeout=300)
    return [np.fromfile(folder / "out" / f"output_{slot.index}.bin", slot.dtype.numpy).reshape(slot.shape)
            for slot in bundle.layout.outputs]


def header_macros(bundle: Bundle) -> dict[str, int]:
    text = bundle.header.read_text()
    return {m[0]: int(m[1]) for m in re.findall(r"^#define (\w+) (\d+)\b", text, re.M)}


# bundles, each written and built once --------------------------------------------------

_BUILT: dict[tuple[str, str, str], Bundle] = {}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    def get(model_name: str, target: str, prefix: str = "model", *make_args: str) -> Bundle:
        key = (model_name, target, prefix)
        if key not in _BUILT:
            model = tiny_model(SEEDS[prefix]) if model_name == "tiny" else \
                str(require_shared_models() / f"{model_name}.onnx")
            folder = tmp_path_factory.mktemp(f"{model_name}-{target}-{prefix}")
            bundle = ember.bundle(model, target=target, output_dir=folder, prefix=prefix)
            make(folder, *make_args)
            _BUILT[key] = bundle
        return _BUILT[key]

    return get


def reference(model_name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Inputs and the interpreter's outputs for a model."""
    if model_name == "tiny":
        feeds = tiny_inputs()
        model = ember.compile(tiny_model(), backend="interpreter")
    else:
        path = require_shared_models() / f"{model_name}.onnx"
        model = ember.compile(path, backend="interpreter")
        ref = np.load(path.with_suffix(".ref.npz"))
        feeds = {name: ref[f"in_{name}"] for name in model.input_names}
    outputs = model.run(feeds)
    return [feeds[n] for n in model.input_names], [outputs[n] for n in model.output_names]


def check_outputs(actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        error = relative_error(a, e)
        assert error <= TOLERANCE, f"output {index}: relative error {error:.3g}"


# the API ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["aarch64-linux", "cortex-m4"])
def test_header_matches_snapshot(target, tmp_path):
    bundle = ember.bundle(tiny_model(), target=target, output_dir=tmp_path)
    snapshot = SNAPSHOTS / f"tiny_{target}.h"
    text = bundle.header.read_text()
    if os.environ.get("EMBER_UPDATE_SNAPSHOTS") == "1":
        snapshot.write_text(text)
    assert snapshot.exists(), f"no snapshot {snapshot.name}: run with EMBER_UPDATE_SNAPSHOTS=1"
    assert text == snapshot.read_text(), (f"{bundle.header.name} changed: if deliberate, update the snapshot "
                                          "(EMBER_UPDATE_SNAPSHOTS=1) and say so in the change")


def test_bundle_is_deterministic_and_self_contained(tmp_path):
    first = ember.bundle(tiny_model(), target="cortex-m4", output_dir=tmp_path / "a")
    second = ember.bundle(tiny_model(), target="cortex-m4", output_dir=tmp_path / "b")
    assert first.files == second.files
    for name in first.files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    expected = {"model.c", "model.h", "model.weights.bin", "model_weights.c", "Makefile", "bundle_main.c"}
    assert expected <= set(first.files)
    layout = first.layout
    assert (tmp_path / "a" / "model.weights.bin").stat().st_size == layout.constant_bytes
    # The model and library sources include no header beyond stdint/string/math (OpenMP only
    # under _OPENMP, x86 intrinsics only under __AVX512F__ / __AVX2__), and call no allocator or I/O.
    examples = {"bundle_main.c", TARGETS["cortex-m4"].board.startup_name}
    assert examples <= set(first.files)
    sources = [n for n in first.files if n.endswith((".c", ".h")) and n not in examples]
    for name in sources:
        text = (tmp_path / "a" / name).read_text()
        for include in re.findall(r'#include [<"]([^>"]+)[>"]', text):
            assert include in ("stdint.h", "string.h", "math.h", "omp.h", "immintrin.h") or include in first.files, (
                name, include)
        assert not re.search(r"\b(malloc|calloc|free|fopen|printf|fprintf|exit)\s*\(", text), name
        if "#include <omp.h>" in text:
            assert re.search(r"#ifdef _OPENMP\s*\n#include <omp.h>", text), f"{name}: unguarded omp.h"
        if "#include <immintrin.h>" in text:
            assert re.search(r"#if defined\(__AVX[0-9A-Z]*__\)[^\n]*\n#include <immintrin.h>", text), (
                f"{name}: unguarded immintrin.h")


def test_layout_in_header_is_consistent(tmp_path):
    bundle = ember.bundle(tiny_model(), target="host", output_dir=tmp_path)
    macros = header_macros(bundle)
    layout = bundle.layout
    assert macros["MODEL_CONSTANT_MEM_SIZE"] == layout.constant_bytes
    # One activations region: the planned arena, the kernels' scratch inside it.
    assert "SCRATCH" not in bundle.header.read_text()
    assert macros["MODEL_ACTIVATIONS_MEM_SIZE"] == layout.arena_bytes == layout.activation_bytes
    assert macros["MODEL_ACTIVATIONS_MEM_SIZE"] % macros["MODEL_MEM_ALIGN"] == 0
    assert macros["MODEL_ACTIVATIONS_MEM_SIZE"] >= macros["MODEL_ARENA_LOWER_BOUND"]
    end = 0
    for slot in layout.slots:
        offset = macros[f"MODEL_{slot.macro}_OFFSET"]
        assert offset % macros["MODEL_MEM_ALIGN"] == 0 and offset >= end
        end = offset + macros[f"MODEL_{slot.macro}_SIZE"]
    assert end <= macros["MODEL_MUTABLE_MEM_SIZE"]


def test_targets_keep_their_own_flags(tmp_path):
    for name, target in TARGETS.items():
        bundle = ember.bundle(tiny_model(), target=name, output_dir=tmp_path / name)
        makefile = (bundle.directory / "Makefile").read_text()
        if name != "host":
            assert not re.search(r"-m(arch|cpu|tune)=native", makefile), name
        if not name.startswith("x86_64") and name != "host":
            assert not re.search(r"-m(avx|sse|arch=x86)", makefile), name
        for flag in target.flags:
            assert flag in makefile
    assert "-march=armv8-a" in (tmp_path / "aarch64-linux" / "Makefile").read_text()
    assert "-mcpu=cortex-m4" in (tmp_path / "cortex-m4" / "Makefile").read_text()


def test_bundle_from_a_prepared_program(tmp_path):
    """CpuBackend.bundle generates the C with a static entry and hands it to write_bundle;
    ember.bundle is exactly that, and write_bundle takes any C generated with a static entry."""
    backend = CpuBackend(num_threads=1)
    program, plan, _ = prepare_program(load_model(tiny_model()), backend)
    direct = backend.bundle(program, plan, tmp_path / "direct", target="cortex-m4", prefix="Tiny Net")
    assert direct.prefix == "tiny_net"
    wrapped = ember.bundle(tiny_model(), target="cortex-m4", output_dir=tmp_path / "wrapped", prefix="tiny_net")
    assert direct.files == wrapped.files
    for name in direct.files:
        assert (direct.directory / name).read_bytes() == (wrapped.directory / name).read_bytes(), name
    source = (direct.directory / "tiny_net.c").read_text()
    assert len(re.findall(r"^static int tiny_net_entry\(", source, re.M)) == 1
    assert "ember_run" not in source
    assert "return tiny_net_entry(weights, in, out, activations);" in source

    cprogram = backend.generate(program, CodegenOptions(entry="other_entry", static_entry=True))
    other = write_bundle(program, plan, cprogram, tmp_path / "other", target="host", prefix="other")
    assert "return other_entry(weights, in, out, activations);" in (other.directory / "other.c").read_text()
    assert other.layout.constant_bytes == direct.layout.constant_bytes

    class LinksMore(CpuBackend):
        c_sources = {"extra.c": "int extra(void) { return 0; }"}

    with pytest.raises(UnsupportedError, match="bundles carry"):
        LinksMore(num_threads=1).bundle(program, plan, tmp_path / "no", target="host")


def test_bundle_carries_the_library_sources_it_needs(tmp_path):
    """The manifest (runtime_files.EXPORTS) decides: the tiny model calls ember_gemm only, so
    only ember_gemm.c is copied and compiled; every export is renamed."""
    bundle = ember.bundle(tiny_model(), target="host", output_dir=tmp_path, prefix="kws")
    library_c = sorted(n for n in bundle.files if n.startswith("ember_") and n.endswith(".c"))
    assert library_c == ["ember_gemm.c"]
    assert '#include "ember_gemm.c"' in (tmp_path / "kws_kernels.c").read_text()
    renames = dict(re.findall(r"^#define (ember_\w+) (\w+)$", (tmp_path / "kws_ember_symbols.h").read_text(), re.M))
    assert renames == {symbol: f"kws_{symbol}" for symbol in EXPORTS}


def test_bare_metal_targets_carry_their_board(tmp_path):
    """Startup file, memory map, link flags and emulator are the target's data: the bundle's
    files and Makefile rules come from them."""
    for name, target in TARGETS.items():
        assert (target.board is not None) == target.bare_metal, name
        if target.board is None:
            continue
        board = target.board
        bundle = ember.bundle(tiny_model(), target=name, output_dir=tmp_path / name)
        folder = bundle.directory
        for file, text in board_files(target).items():
            assert (folder / file).read_text() == text, (name, file)
        assert (folder / board.startup_name).read_text() == board.startup
        script = (folder / f"{board.memory.name}.ld").read_text()
        assert f"ORIGIN = 0x{board.memory.flash_origin:08x}, LENGTH = {board.memory.flash_bytes // 1024}K" in script
        assert f"ORIGIN = 0x{board.memory.ram_origin:08x}, LENGTH = {board.memory.ram_bytes // 1024}K" in script
        makefile = (folder / "Makefile").read_text()
        assert f"QEMU = {board.emulator.program}" in makefile
        run = board.emulator.command(firmware="bundle_main.elf", input="$(IN)", output="$(OUT)")
        assert f"run-qemu: bundle_main.elf\n\t$(QEMU) {' '.join(run[1:])}\n" in makefile
        assert f"-M {board.emulator.machine}" in makefile
        startup_object = board.startup_name.removesuffix(".c") + ".o"
        rule = rf"^bundle_main.elf: bundle_main.o {startup_object} .* {board.memory.name}.ld$"
        assert re.search(rule, makefile, re.M)
        assert f"-T {board.memory.name}.ld {' '.join(board.link_flags)} " in makefile
    assert TARGETS["cortex-m4"].board.emulator.machine == "mps2-an386"
    assert TARGETS["cortex-m7"].board.emulator.machine == "mps2-an500"


def test_prefix_is_sanitized_and_targets_checked(tmp_path):
    assert sanitize_prefix("My-Net!") == "my_net"
    assert sanitize_prefix("3d") == "m3d"
    with pytest.raises(EmberError, match="prefix"):
        sanitize_prefix("!!")
    # It names files and symbols: an over-long one is refused, not a raw OSError.
    with pytest.raises(EmberError, match=r"has 300 characters; at most 64"):
        ember.bundle(tiny_model(), target="host", output_dir=tmp_path / "long", prefix="p" * 300)
    with pytest.raises(EmberError, match="unknown bundle target 'z80'"):
        ember.bundle(tiny_model(), target="z80", output_dir=tmp_path)


def test_unusable_output_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(EmberError, match=r"cannot create the bundle folder '.*file/out'"):
        ember.bundle(tiny_model(), target="host", output_dir=blocker / "out")
    ember.bundle(tiny_model(), target="host", output_dir=tmp_path / "taken")
    (tmp_path / "taken" / "model.h").unlink()
    (tmp_path / "taken" / "model.h").mkdir()  # a folder where a bundle file goes
    with pytest.raises(EmberError, match=r"cannot write bundle file '.*model.h'"):
        ember.bundle(tiny_model(), target="host", output_dir=tmp_path / "taken")


def test_cli_writes_a_bundle(tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model().SerializeToString())
    assert cli_main(["bundle", str(model), "--target", "cortex-m4", "-o", str(tmp_path / "out"),
                     "--prefix", "kws"]) == 0
    assert "bundle 'kws' for cortex-m4" in capsys.readouterr().out
    assert (tmp_path / "out" / "kws.h").exists() and (tmp_path / "out" / "kws_weights.c").exists()
    assert cli_main(["bundle", str(model), "--target", "z80", "-o", str(tmp_path / "z")]) == 1


# running bundles -------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["ember"])
def test_bundle_named_like_the_library_builds_and_runs(build, prefix):
    """Prefix 'ember' makes the library's renamed symbols 'ember_ember_*' and its files share
    the library's 'ember_' stem: still one consistent bundle."""
    bundle = build("tiny", "host", prefix, FAST_LIBRARY)
    feeds = tiny_inputs()
    outputs = ember.compile(tiny_model(SEEDS[prefix]), backend="interpreter").run(feeds)
    check_outputs(run_bundle(bundle, list(feeds.values())), list(outputs.values()))


def test_tiny_bundle_runs_natively(build):
    bundle = build("tiny", "host", "model", FAST_LIBRARY)
    inputs, expected = reference("tiny")
    check_outputs(run_bundle(bundle, inputs), expected)
    # A run-time check that fails returns its status, and the example says which node.
    np.array([0, 7, 1], np.int64).tofile(bundle.directory / "in" / "input_1.bin")
    result = subprocess.run([str(bundle.directory / "bundle_main"), str(bundle.directory / "in"),
                             str(bundle.directory / "out")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert "node 'lookup' (Gather): index out of range" in result.stderr


def test_two_bundles_link_into_one_program(build, tmp_path):
    require("nm", package="binutils")
    alpha = build("tiny", "host", "alpha", FAST_LIBRARY)
    beta = build("tiny", "host", "beta", FAST_LIBRARY)
    for bundle in (alpha, beta):
        symbols = subprocess.run(["nm", "-g", "--defined-only", str(bundle.directory / f"lib{bundle.prefix}.a")],
                                 capture_output=True, text=True, check=True).stdout
        names = re.findall(r"^[0-9a-fA-F]+ [A-Z] (\S+)$", symbols, re.M)
        assert names and all(n.startswith(f"{bundle.prefix}_") for n in names), names
    program = tmp_path / "both.c"
    program.write_text("""
#include <stdio.h>
#include <string.h>
#include "alpha.h"
#include "beta.h"
static uint8_t wa[ALPHA_CONSTANT_MEM_SIZE], ioa[ALPHA_MUTABLE_MEM_SIZE], aa[ALPHA_ACTIVATIONS_MEM_SIZE];
static uint8_t wb[BETA_CONSTANT_MEM_SIZE], iob[BETA_MUTABLE_MEM_SIZE], ab[BETA_ACTIVATIONS_MEM_SIZE];
static void load(const char *path, uint8_t *dst, size_t n)
{ FILE *f = fopen(path, "rb"); fread(dst, 1, n, f); fclose(f); }
int main(int argc, char **argv) {
    (void)argc;
    load(argv[1], wa, sizeof wa);
    load(argv[2], wb, sizeof wb);
    for (int i = 0; i < 8; i++) { ALPHA_INPUT_0(ioa)[i] = (float)i; BETA_INPUT_0(iob)[i] = (float)i; }
    memset(ALPHA_INPUT_1(ioa), 0, ALPHA_INPUT_1_SIZE);
    memset(BETA_INPUT_1(iob), 0, BETA_INPUT_1_SIZE);
    if (alpha_run(wa, ioa, aa) || beta_run(wb, iob, ab)) return 1;
    for (int i = 0; i < ALPHA_OUTPUT_0_COUNT; i++)
        printf("%.6f %.6f\\n", ALPHA_OUTPUT_0(ioa)[i], BETA_OUTPUT_0(iob)[i]);
    return 0;
}
""")
    exe = tmp_path / "both"
    subprocess.run(["cc", "-O1", f"-I{alpha.directory}", f"-I{beta.directory}", str(program),
                    str(alpha.directory / "libalpha.a"), str(beta.directory / "libbeta.a"), "-lm", "-o", str(exe)],
                   check=True)
    result = subprocess.run([str(exe), str(alpha.directory / "alpha.weights.bin"),
                             str(beta.directory / "beta.weights.bin")], capture_output=True, text=True, check=True)
    values = np.array([[float(v) for v in line.split()] for line in result.stdout.split("\n") if line])
    feeds = {"x.in": np.arange(8, dtype=np.float32).reshape(2, 4), "ids": np.zeros(3, np.int64)}
    for column, prefix in enumerate(("alpha", "beta")):
        expected = ember.compile(tiny_model(SEEDS[prefix]), backend="interpreter").run(feeds)["y"].reshape(-1)
        np.testing.assert_allclose(values[:, column], expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(values[:, 0], values[:, 1])  # two different models ran


@pytest.mark.parametrize("name", ["mlp", "mobilenetv2"])
def test_model_bundle_runs_natively(build, name):
    require_shared_models()
    bundle = build(name, "host")
    inputs, expected = reference(name)
    check_outputs(run_bundle(bundle, inputs), expected)


@pytest.mark.parametrize("name", ["tiny", "mlp", "mobilenetv2"])
def test_aarch64_bundle_runs_under_qemu(build, name):
    require("aarch64-linux-gnu-gcc", package="gcc-aarch64-linux-gnu")
    require("qemu-aarch64", package="qemu-user")
    if not AARCH64_SYSROOT.is_dir():
        pytest.skip(f"{AARCH64_SYSROOT} not found: install libc6-dev-arm64-cross")
    if name != "tiny":
        require_shared_models()
    bundle = build(name, "aarch64-linux")
    inputs, expected = reference(name)
    check_outputs(run_bundle(bundle, inputs, runner=["qemu-aarch64", "-L", str(AARCH64_SYSROOT)]), expected)


def test_cortex_m4_mlp_fits_its_budget(build):
    require("arm-none-eabi-gcc", "arm-none-eabi-size", package="gcc-arm-none-eabi")
    require_shared_models()
    bundle = build("mlp", "cortex-m4")
    report = make(bundle.directory, "size")
    flash = int(re.search(r"^flash: (\d+) bytes", report, re.M)[1])
    ram = int(re.search(r"^ram: \d+ bytes static \+ \d+ bytes io and activations = (\d+) bytes", report, re.M)[1])
    macros = header_macros(bundle)
    stats = ember.compile(str(require_shared_models() / "mlp.onnx"), backend="interpreter").stats
    assert flash >= macros["MODEL_CONSTANT_MEM_SIZE"] >= stats["weight_bytes"]
    assert ram >= macros["MODEL_MUTABLE_MEM_SIZE"] + macros["MODEL_ACTIVATIONS_MEM_SIZE"]
    assert macros["MODEL_ACTIVATIONS_MEM_SIZE"] >= stats["arena_bytes"]
    assert macros["MODEL_MUTABLE_MEM_SIZE"] >= stats["io_bytes"]
    # The kernel code itself stays small: the portable tile, not the 512-bit one.
    assert flash - macros["MODEL_CONSTANT_MEM_SIZE"] < 64 * 1024
    print(f"cortex-m4 mlp: flash {flash} bytes, ram {ram} bytes")


def test_cortex_m4_mlp_runs_on_qemu_mps2(build):
    require_newlib()
    require("qemu-system-arm", package="qemu-system-arm")
    require_shared_models()
    bundle = build("mlp", "cortex-m4")
    report = make(bundle.directory, "firmware")
    text, data, bss = (int(v) for v in re.search(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+\w+\s+bundle_main.elf",
                                                  report, re.M).groups())
    macros = header_macros(bundle)
    assert text + data >= macros["MODEL_CONSTANT_MEM_SIZE"]
    assert bss >= macros["MODEL_MUTABLE_MEM_SIZE"] + macros["MODEL_ACTIVATIONS_MEM_SIZE"]
    inputs, expected = reference("mlp")
    check_outputs(run_bundle(bundle, inputs, firmware=True), expected)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86_64-linux runs natively only on x86-64")
def test_x86_64_linux_bundle_runs(build):
    if "avx2" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU lacks AVX2 (x86-64-v3)")
    bundle = build("tiny", "x86_64-linux")
    inputs, expected = reference("tiny")
    check_outputs(run_bundle(bundle, inputs), expected)


def test_riscv64_bundle_runs_under_qemu(build):
    require("riscv64-linux-gnu-gcc", package="gcc-riscv64-linux-gnu")
    require("qemu-riscv64", package="qemu-user")
    bundle = build("tiny", "riscv64-linux")
    inputs, expected = reference("tiny")
    check_outputs(run_bundle(bundle, inputs, runner=["qemu-riscv64", "-L", "/usr/riscv64-linux-gnu"]), expected)
