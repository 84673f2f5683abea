"""Compiling generated C into a shared library, cached by content.

The cache key hashes the source, the compiler's identity and the flags, so a changed
compiler or flag never reuses a stale library. Writes go to a temporary file in the cache
folder, then an atomic rename: two processes compiling the same model at once both succeed
and one library wins. Entries are verified before use and rebuilt when anything is off
(backends/cpu/cache.py)."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
from functools import cache
from importlib import resources
from pathlib import Path

from ember.backends.cpu.cache import build_folder, cache_folder, commit, intact
from ember.codegen import RUNTIME_SOURCES, runtime_source
from ember.support.errors import EmberError
from ember.support.progress import step

POOL_SOURCE = "ember_pool.c"
_SOURCE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.c")
BASE_FLAGS = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=fast", "-fno-math-errno",
              "-Wno-unused-variable", "-Wno-unused-but-set-variable"]


def find_compiler() -> str:
    candidates = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    for name in candidates:
        path = shutil.which(name.split()[0])
        if path:
            return name
    raise EmberError("no C compiler found for the cpu backend: install gcc or clang, or set CC "
                     f"(tried {', '.join(candidates)})")


def missing_compiler() -> str | None:
    """Why the cpu backend cannot build here (no C compiler found), or None when it can: what
    picks the default backend (ember.compile, the CLI)."""
    try:
        find_compiler()
    except EmberError as err:
        return str(err)
    return None


@cache
def compiler_identity(compiler: str) -> str:
    result = subprocess.run([*compiler.split(), "--version"], capture_output=True, text=True, check=False)
    return result.stdout.splitlines()[0] if result.stdout else compiler


def target_flags(march: str | None = None) -> list[str]:
    """ISA flags: the host's (-march=native) unless a target names another."""
    machine = platform.machine().lower()
    if march:
        flags = [f"-march={march}"]
    elif machine in ("x86_64", "amd64"):
        flags = ["-march=native"]
    elif machine in ("aarch64", "arm64"):
        flags = ["-mcpu=native"]
    else:
        flags = []
    if machine in ("x86_64", "amd64"):
        # gcc defaults some AVX-512 tunings to 256-bit vectors; our kernels are written for 512.
        flags.append("-mprefer-vector-width=512")
    return flags


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _run_compiler(command: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd)
    if result.returncode != 0:
        raise EmberError(f"the C compiler failed on generated code (an Ember bug):\n{result.stderr[-4000:]}")


def _write_runtime(folder: Path) -> None:
    for name in RUNTIME_SOURCES:
        (folder / name).write_text(runtime_source(name))


def _runtime_path(compiler: str, flags: list[str]) -> Path:
    sources = "\0".join(runtime_source(name) for name in RUNTIME_SOURCES)
    return cache_folder("cpu") / f"runtime-{_key(sources, compiler_identity(compiler), *flags)}.o"


def library_is_built(march: str | None = None) -> bool:
    """Whether the kernel library for the host (or `march`) is in the cache already: when it
    is not, the next compile builds it first (seconds; tools say so)."""
    compiler = find_compiler()
    return intact(_runtime_path(compiler, BASE_FLAGS + target_flags(march)))


def _runtime_object(compiler: str, flags: list[str]) -> Path:
    """The kernel library compiled once per (sources, compiler, flags) into one relocatable
    object reused by every model library."""
    obj = _runtime_path(compiler, flags)
    folder = obj.parent
    if intact(obj):
        return obj
    step(f"building the kernel library (once per machine, about 10 s; cache {folder.parent})")
    with build_folder(folder) as work:
        _write_runtime(Path(work))
        # One translation unit including every library source keeps this a single object.
        unit = Path(work) / "ember_runtime.c"
        unit.write_text("".join(f'#include "{name}"\n' for name in RUNTIME_SOURCES if name.endswith(".c")))
        tmp = Path(work) / "runtime.o"
        compile_flags = [f for f in flags if f != "-shared"]
        _run_compiler([*compiler.split(), *compile_flags, f"-I{work}", "-c", str(unit), "-o", str(tmp)])
        commit(tmp, obj)
    return obj


def _pool_object(compiler: str, flags: list[str]) -> Path:
    """Ember's thread pool (ember_pool.c: the OpenMP entry points the generated code calls),
    compiled once per (source, compiler, flags) and linked into every model library."""
    source = resources.files("ember.backends.cpu").joinpath(POOL_SOURCE).read_text()
    pool_flags = ["-O2", "-std=gnu11", "-fPIC", *(f for f in flags if f.startswith(("-m", "-fsanitize")))]
    obj = cache_folder("cpu") / f"pool-{_key(source, compiler_identity(compiler), *pool_flags)}.o"
    if intact(obj):
        return obj
    with build_folder(obj.parent) as work:
        (Path(work) / POOL_SOURCE).write_text(source)
        tmp = Path(work) / "pool.o"
        _run_compiler([*compiler.split(), *pool_flags, "-c", str(Path(work) / POOL_SOURCE), "-o", str(tmp)])
        commit(tmp, obj)
    return obj


def build_library(source: str, extra_flags: list[str] | None = None, sanitize: bool = False,
                  march: str | None = None, extra_sources: dict[str, str] | None = None,
                  link_flags: list[str] | None = None) -> Path:
    """Compiles a model's C source (plus the cached kernel library) into a shared library,
    for the host's ISA or the -march level named (which the host must be able to run).
    extra_sources (name -> C text) are compiled along (a library backend's own kernels);
    link_flags come last on the link line (-L, -l of a vendor library).

    The code compiles with -fopenmp but links Ember's pool instead of an OpenMP runtime
    (ember_pool.c, backends/cpu/pool.py says why); -z defs makes an entry point the pool
    lacks a link error rather than a silent second runtime. A vendor library that uses
    OpenMP itself names its runtime in link_flags (-fopenmp or -lgomp)."""
    compiler = find_compiler()
    flags = BASE_FLAGS + target_flags(march) + list(extra_flags or [])
    if sanitize:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-O1"]
    runtime = _runtime_object(compiler, flags)
    pool = _pool_object(compiler, flags)
    extras = dict(sorted((extra_sources or {}).items()))
    links = list(link_flags or [])
    folder = cache_folder("cpu")
    key_parts = [source, runtime.name, pool.name, compiler_identity(compiler), *flags, *links]
    for name, text in extras.items():
        key_parts += [name, text]
    library = folder / f"{_key(*key_parts)}.so"
    if intact(library):
        return library
    step(f"compiling the generated C ({len(source) // 1024 + 1} KB) with {compiler}")
    with build_folder(folder) as work:
        _write_runtime(Path(work))
        src = Path(work) / "model.c"
        src.write_text(source)
        sources = [src]
        for name, text in extras.items():
            if not _SOURCE_NAME.fullmatch(name) or name == "model.c":
                raise EmberError(f"extra C source name {name!r} is not a plain file name ending in .c")
            (Path(work) / name).write_text(text)
            sources.append(Path(work) / name)
        compile_flags = [f for f in flags if f != "-shared"]
        _run_compiler([*compiler.split(), *compile_flags, f"-I{work}", "-c", *map(str, sources)], cwd=Path(work))
        objects = [str(path.with_suffix(".o")) for path in sources]
        link = [f for f in flags if f != "-fopenmp"]
        tmp_lib = Path(work) / "model.so"
        _run_compiler([*compiler.split(), *link, *objects, str(runtime), str(pool), "-o", str(tmp_lib),
                       "-Wl,-z,defs", "-pthread", *links, "-lm"])
        commit(tmp_lib, library)
    return library
