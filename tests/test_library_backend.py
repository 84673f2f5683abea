"""A native library backend written against Ember's API alone, the way a vendor would: it
derives a kernel registry from C_KERNELS, puts its own MatMul kernel first, and links the C
function that kernel calls from a static library of its own (built here with the system
compiler). No file under src/ember changes for it."""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from ember.backends.cpu import CpuBackend
from ember.backends.cpu.build import find_compiler
from ember.codegen.kernels import C_KERNELS, Kernel, OpView
from ember.driver import compile_graph
from ember.graph import Graph
from ember.lir.text import print_program
from ember.types import DType, TensorType
from tests.helpers import relative_error

MYLIB_C = r"""
/* A stand-in vendor library: a naive row-major SGEMM that counts its calls. */
long mylib_calls = 0;

void mylib_sgemm(long m, long n, long k, const float *a, const float *b, float *c)
{
    mylib_calls++;
    for (long i = 0; i < m; i++)
        for (long j = 0; j < n; j++) {
            float s = 0.0f;
            for (long q = 0; q < k; q++) s += a[i * k + q] * b[q * n + j];
            c[i * n + j] = s;
        }
}
"""


def _accepts(view: OpView) -> str | None:
    a, b = view.operands
    if view.results[0].dtype is not DType.FLOAT32 or a.rank != 2 or b.rank != 2:
        return "mylib_sgemm takes 2-D float32 matrices"
    return None


def _emit(em, instr) -> str:
    out, a, b = instr.base_operands
    (m, k), n = a.type.shape, b.type.shape[1]
    return (f"mylib_sgemm({m}, {n}, {k}, {em.pointer(a, const=True)}, {em.pointer(b, const=True)}, "
            f"{em.pointer(out)});")


def make_backend(library_dir) -> type[CpuBackend]:
    kernels = C_KERNELS.derive("mylib")
    kernels.add(Kernel("mylib_sgemm", ("MatMul",), _emit, accepts=_accepts,
                       preamble="void mylib_sgemm(long m, long n, long k, const float *a, const float *b, float *c);"),
                first=True)

    class MyLibBackend(CpuBackend):
        name = "mylib"

    MyLibBackend.kernels = kernels
    MyLibBackend.link_flags = (f"-L{library_dir}", "-lmylib")
    return MyLibBackend


@pytest.fixture(scope="module")
def mylib(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mylib")
    (folder / "mylib.c").write_text(MYLIB_C)
    cc = find_compiler().split()
    subprocess.run([*cc, "-O2", "-fPIC", "-c", str(folder / "mylib.c"), "-o", str(folder / "mylib.o")], check=True)
    subprocess.run(["ar", "rcs", str(folder / "libmylib.a"), str(folder / "mylib.o")], check=True)
    return folder


def _graph() -> Graph:
    g = Graph("two_matmuls")
    x = g.add_input("x", TensorType(DType.FLOAT32, (5, 7)))
    y = g.add_input("y", TensorType(DType.FLOAT32, (7, 3)))
    w = g.add_input("w", TensorType(DType.FLOAT32, (3, 4)))
    z = g.add_input("z", TensorType(DType.FLOAT32, (2, 3, 4)))
    h = g.add("MatMul", x, y, name="first")
    second = g.add("MatMul", g.add("Relu", h, name="act"), w, name="second")
    g.set_outputs([("out", second), ("z_out", g.add("Relu", z, name="pass"))])
    return g


def test_library_kernel_replaces_matmul_and_links(mylib):
    backend = make_backend(mylib)(num_threads=1)
    captured = {}
    compiled = compile_graph(_graph(), backend, observer=lambda stage, art: captured.setdefault(stage, art))
    lir = print_program(captured["lir"])
    assert lir.count("kernel mylib_sgemm(") == 2
    assert "matmul_gemm" not in lir
    source = compiled.executable.source
    assert source.count("mylib_sgemm(") == 3  # the declaration and two calls
    rng = np.random.default_rng(0)
    shapes = {"x": (5, 7), "y": (7, 3), "z": (2, 3, 4), "w": (3, 4)}
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    expected = compile_graph(_graph(), "interpreter").run(feeds)
    actual = compiled.run(feeds)
    for name in expected:
        assert relative_error(actual[name], expected[name]) < 1e-5
    calls = ctypes.c_long.in_dll(ctypes.CDLL(str(compiled.executable.library)), "mylib_calls")
    assert calls.value == 2


def test_library_backend_leaves_the_cpu_registry_alone(mylib):
    make_backend(mylib)
    assert [k.name for k in C_KERNELS.variants("MatMul")] == ["matmul_bf16", "matmul_gemm", "matmul_loops"]
    assert "mylib_sgemm" not in C_KERNELS


def test_library_kernel_refuses_what_it_cannot_run_and_the_next_variant_runs_it(mylib):
    backend = make_backend(mylib)(num_threads=1)
    g = Graph("batched")
    a = g.add_input("a", TensorType(DType.FLOAT32, (2, 3, 4)))
    b = g.add_input("b", TensorType(DType.FLOAT32, (2, 4, 5)))
    g.set_outputs([("c", g.add("MatMul", a, b, name="bmm"))])
    captured = {}
    compiled = compile_graph(g, backend, observer=lambda stage, art: captured.setdefault(stage, art))
    assert "kernel matmul_gemm(" in print_program(captured["lir"])
    rng = np.random.default_rng(1)
    shapes = {"a": (2, 3, 4), "b": (2, 4, 5)}
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    np.testing.assert_allclose(compiled.run(feeds)["c"], feeds["a"] @ feeds["b"], rtol=1e-5, atol=1e-5)
