"""Compiling generated C into a shared library, cached by content.

The cache key hashes the source, the compiler's identity and the flags, so a changed
compiler or flag never reuses a stale library. Writes go to a temporary file in the cache
folder, then an atomic rename: two processes compiling the same model at once both succeed
and one library wins. Entries are verified before use and rebuilt when anything is off
(backends/cpu/cache.py).

The kernel library (codegen/runtime/) is compiled into objects of its own, one per piece of
each .c file (runtime_files.PIECES), each keyed by its file, every header of the library, its
-D flags, the compiler and the flags; missing pieces are compiled in parallel. A model's
library links one object combining the pieces of the files its C names
(runtime_files.sources_named_by), keyed by theirs."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib import resources
from pathlib import Path

from ember.backends.cpu.cache import build_folder, cache_folder, commit, intact
from ember.codegen import RUNTIME_SOURCES, runtime_source
from ember.codegen.runtime_files import pieces, sources_named_by
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


@cache
def speaks_libgomp_abi(compiler: str) -> bool:
    """Whether `compiler` is GCC, whose `#pragma omp parallel` calls the GOMP entry points
    Ember's pool implements. Clang (and compilers built on it) call libomp's __kmpc_* instead:
    their model libraries link their own OpenMP runtime, as before the pool."""
    result = subprocess.run([*compiler.split(), "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True,
                            check=False)
    return "__GNUC__" in result.stdout and "__clang__" not in result.stdout


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


def _piece_path(compiler: str, flags: list[str], name: str, defines: tuple[str, ...]) -> Path:
    headers = [runtime_source(header) for header in RUNTIME_SOURCES if header.endswith(".h")]
    key = _key(*headers, name, runtime_source(name), *defines, compiler_identity(compiler), *flags)
    return cache_folder("cpu") / f"runtime-{Path(name).stem}-{key}.o"


def _pieces_of(compiler: str, flags: list[str], names: list[str]) -> list[tuple[str, tuple[str, ...], Path]]:
    return [(name, defines, _piece_path(compiler, flags, name, defines)) for name in names for defines in pieces(name)]


def library_is_built(march: str | None = None) -> bool:
    """Whether the whole kernel library for the host (or `march`) is in the cache already: when
    it is not, a compile first builds the pieces its model needs (seconds; tools say so)."""
    compiler = find_compiler()
    names = [name for name in RUNTIME_SOURCES if name.endswith(".c")]
    return all(intact(obj) for _, _, obj in _pieces_of(compiler, BASE_FLAGS + target_flags(march), names))


def _workers(count: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover  (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(count, cores))


def _build_pieces(compiler: str, flags: list[str], missing: list[tuple[str, tuple[str, ...], Path]]) -> None:
    """Compiles the pieces in parallel, one compiler per core, each committed to the cache as
    soon as it is built (two processes building one piece at once both succeed, one wins)."""
    folder = missing[0][2].parent
    step(f"building the kernel library (once per machine, {len(missing)} pieces, a few seconds; cache "
         f"{folder.parent})")
    compile_flags = [f for f in flags if f != "-shared"]
    with build_folder(folder) as work:
        _write_runtime(Path(work))

        def build(index: int) -> None:
            name, defines, obj = missing[index]
            tmp = Path(work) / f"piece{index}.o"
            _run_compiler([*compiler.split(), *compile_flags, *defines, f"-I{work}", "-c", str(Path(work) / name),
                           "-o", str(tmp)])
            commit(tmp, obj)

        with ThreadPoolExecutor(max_workers=_workers(len(missing))) as pool:
            for done in [pool.submit(build, index) for index in range(len(missing))]:
                done.result()


def _runtime_object(compiler: str, flags: list[str], names: list[str]) -> Path:
    """One relocatable object holding the kernel library's files `names` (and what they call
    into): the cached pieces of each, built first where missing, combined (`-r`) and cached
    under a name made of theirs. Every model library naming the same files reuses it."""
    wanted = _pieces_of(compiler, flags, names)
    missing = [piece for piece in wanted if not intact(piece[2])]
    if missing:
        _build_pieces(compiler, flags, missing)
    objects = [obj for _, _, obj in wanted]
    key = _key(compiler_identity(compiler), *flags, *(obj.name for obj in objects))
    combined = cache_folder("cpu") / f"runtime-{key}.o"
    if intact(combined):
        return combined
    with build_folder(combined.parent) as work:
        tmp = Path(work) / "runtime.o"
        if objects:
            _run_compiler([*compiler.split(), "-r", "-nostdlib", *map(str, objects), "-o", str(tmp)])
        else:  # a model calling no library function links an empty object
            (Path(work) / "empty.c").write_text("typedef int ember_no_library_files;\n")
            _run_compiler([*compiler.split(), "-c", str(Path(work) / "empty.c"), "-o", str(tmp)])
        commit(tmp, combined)
    return combined


@cache
def _pool_source() -> str:
    return resources.files("ember.backends.cpu").joinpath(POOL_SOURCE).read_text()


def _pool_object(compiler: str, flags: list[str]) -> Path:
    """Ember's thread pool (ember_pool.c: the OpenMP entry points the generated code calls),
    compiled once per (source, compiler, flags) and linked into every model library."""
    source = _pool_source()
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

    The code compiles with -fopenmp but, built by GCC, links Ember's pool instead of an OpenMP
    runtime (ember_pool.c, backends/cpu/threads.py says why); -z defs makes an entry point the
    pool lacks a link error rather than a silent second runtime. Other compilers link their
    own OpenMP runtime (speaks_libgomp_abi). A vendor library that uses
    OpenMP itself names its runtime in link_flags (-fopenmp or -lgomp)."""
    compiler = find_compiler()
    flags = BASE_FLAGS + target_flags(march) + list(extra_flags or [])
    if sanitize:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-O1"]
    runtime = _runtime_object(compiler, flags, sources_named_by("\n".join([source, *(extra_sources or {}).values()])))
    pool = _pool_object(compiler, flags) if speaks_libgomp_abi(compiler) else None
    extras = dict(sorted((extra_sources or {}).items()))
    links = list(link_flags or [])
    folder = cache_folder("cpu")
    key_parts = [source, runtime.name, pool.name if pool else "", compiler_identity(compiler), *flags, *links]
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
        tmp_lib = Path(work) / "model.so"
        if pool is not None:
            link = [*(f for f in flags if f != "-fopenmp"), *objects, str(runtime), str(pool), "-o", str(tmp_lib),
                    "-Wl,-z,defs", "-pthread"]
        else:
            link = [*flags, *objects, str(runtime), "-o", str(tmp_lib)]
        _run_compiler([*compiler.split(), *link, *links, "-lm"])
        commit(tmp_lib, library)
    return library
