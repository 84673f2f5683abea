"""Compiling generated C into a shared library, cached by content.

The cache key hashes the source, the compiler's identity and the flags, so a changed
compiler or flag never reuses a stale library. Writes go to a temporary file in the cache
folder, then an atomic rename: two processes compiling the same model at once both succeed
and one library wins. Entries are verified before use and rebuilt when anything is off
(backends/cpu/cache.py).

The kernel library (codegen/runtime/) is compiled into objects of its own, one per piece of
each .c file (runtime_files.PIECES), each keyed by its file, every header of the library, its
-D flags, the compiler and the flags; missing pieces are compiled in parallel. A model's
library links one object combining the pieces of the files its C names (of a file's optional
pieces, those whose functions it names: runtime_files.pieces_named_by), keyed by theirs. On a
fresh machine a compile may start building pieces before its C exists (prebuild_library: the
cpu backend does for the GEMM core while the graph is optimized), and a build waits for those
rather than compiling them twice."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from importlib import resources
from pathlib import Path

from ember.backends.cpu.cache import build_folder, cache_folder, commit, intact
from ember.codegen import RUNTIME_SOURCES, runtime_source
from ember.codegen.runtime_files import pieces, pieces_named_by
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


Piece = tuple[str, tuple[str, ...], Path]  # a library file, its -D flags, its cached object


def _every_piece(names: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Every piece of the library files `names` (pieces_named_by gives a model's)."""
    return [(name, defines) for name in names for defines in pieces(name)]


def _pieces_of(compiler: str, flags: list[str], wanted: list[tuple[str, tuple[str, ...]]]) -> list[Piece]:
    return [(name, defines, _piece_path(compiler, flags, name, defines)) for name, defines in wanted]


def library_is_built(march: str | None = None) -> bool:
    """Whether the whole kernel library for the host (or `march`) is in the cache already: when
    it is not, a compile first builds the pieces its model needs (seconds; tools say so)."""
    compiler = find_compiler()
    names = [name for name in RUNTIME_SOURCES if name.endswith(".c")]
    return all(intact(obj) for _, _, obj in _pieces_of(compiler, BASE_FLAGS + target_flags(march),
                                                       _every_piece(names)))


def _workers(count: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover  (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(count, cores))


def _piece_job(compiler: str, compile_flags: list[str], work: Path, index: int, piece: Piece) -> Callable[[], None]:
    """Compiling one missing piece of the kernel library, committed to the cache as soon as it
    is built (two processes building one piece at once both succeed, one wins)."""
    name, defines, obj = piece

    def build() -> None:
        tmp = work / f"piece{index}.o"
        _run_compiler([*compiler.split(), *compile_flags, *defines, f"-I{work}", "-c", str(work / name),
                       "-o", str(tmp)])
        commit(tmp, obj)

    return build


def _compile_job(command: list[str], cwd: Path) -> Callable[[], None]:
    return lambda: _run_compiler(command, cwd=cwd)


def _runtime_plan(compiler: str, flags: list[str], wanted: list[tuple[str, tuple[str, ...]]],
                  ) -> tuple[list[Path], Path, list[Piece]]:
    """For the kernel library's pieces `wanted` (file, -D flags): their objects, the object
    combining them, and the pieces still to build (none where the combined object is cached)."""
    wanted_pieces = _pieces_of(compiler, flags, wanted)
    objects = [obj for _, _, obj in wanted_pieces]
    combined = _combined_path(compiler, flags, objects)
    missing = [] if intact(combined) else [piece for piece in wanted_pieces if not intact(piece[2])]
    return objects, combined, missing


class _Background:
    """Kernel-library pieces being built in the background (prebuild_library), by object path:
    the future of each build. A forked child starts empty (the parent's build threads do not
    exist in it) and builds what it needs itself."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.builds: dict[Path, Future[None]] = {}

    def claim(self, missing: list[Piece]) -> tuple[list[Piece], list[Piece]]:
        """`missing` split into the pieces a caller builds itself and those a background build
        has under way (or has finished)."""
        with self.lock:
            return ([piece for piece in missing if piece[2] not in self.builds],
                    [piece for piece in missing if piece[2] in self.builds])

    def start(self, missing: list[Piece]) -> dict[Path, Future[None]]:
        """Registers a future for each piece of `missing` no build has under way yet."""
        with self.lock:
            fresh = {obj: Future[None]() for _, _, obj in missing if obj not in self.builds}
            self.builds.update(fresh)
            return fresh

    def wait(self, pieces: list[Piece]) -> list[Piece]:
        """Waits for the background builds of `pieces`; those still missing after (a build that
        failed, an object removed since), for the caller to build and report."""
        late = []
        for piece in pieces:
            with self.lock:
                build = self.builds.get(piece[2])
            if build is not None and build.exception() is None and intact(piece[2]):
                continue
            with self.lock:
                if self.builds.get(piece[2]) is build:
                    self.builds.pop(piece[2], None)
            late.append(piece)
        return late


_BACKGROUND = _Background()


def _forget_background_builds() -> None:
    global _BACKGROUND
    _BACKGROUND = _Background()


os.register_at_fork(after_in_child=_forget_background_builds)


def library_flags(extra_flags: list[str] | None = None, sanitize: bool = False, march: str | None = None) -> list[str]:
    """The compiler flags of a model library and of the kernel-library pieces it links."""
    flags = BASE_FLAGS + target_flags(march) + list(extra_flags or [])
    if sanitize:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-O1"]
    return flags


def prebuild_library(names: list[str], flags: list[str]) -> int:
    """Starts building, in the background, the missing pieces of the kernel library's files
    `names` for `flags` (library_flags), and returns how many it started: what a compile
    does on a fresh machine before its C exists, so that the compiler runs beside the Python
    pipeline. build_library waits for them where its model needs them; a piece no model of the
    process needs finishes before the process exits (it is cached for the next)."""
    compiler = find_compiler()
    _, combined, missing = _runtime_plan(compiler, flags, _every_piece(names))
    started = _BACKGROUND.start(missing)
    queued = [piece for piece in missing if piece[2] in started]
    if not queued:
        return 0
    compile_flags = [f for f in flags if f != "-shared"]

    def settle(build: Future[None]) -> Callable[[Future[None]], None]:
        def done(job: Future[None]) -> None:
            error = job.exception()
            build.set_result(None) if error is None else build.set_exception(error)
        return done

    def build_all() -> None:
        try:
            with build_folder(combined.parent) as work:
                _write_runtime(Path(work))
                with ThreadPoolExecutor(max_workers=_workers(len(queued))) as pool:
                    for index, piece in enumerate(queued):
                        job = pool.submit(_piece_job(compiler, compile_flags, Path(work), index, piece))
                        job.add_done_callback(settle(started[piece[2]]))
        except BaseException as error:  # no build folder: each waiter builds its pieces itself
            for build in started.values():
                if not build.done():
                    build.set_exception(error)

    threading.Thread(target=build_all, name="ember-kernel-library", daemon=False).start()
    return len(queued)


def _build_missing(compiler: str, compile_flags: list[str], work: Path, missing: list[Piece],
                   jobs: list[Callable[[], None]]) -> None:
    """The pieces `missing` built into the cache from `work` (the library's sources written
    there) beside `jobs`, in one parallel batch: those a background build has under way are
    waited for instead, and built here only where that build failed (its error reported from
    here)."""
    own, background = _BACKGROUND.claim(missing)
    _run_parallel([*jobs, *(_piece_job(compiler, compile_flags, work, i, piece) for i, piece in enumerate(own))])
    late = _BACKGROUND.wait(background)
    if late:
        _run_parallel([_piece_job(compiler, compile_flags, work, len(own) + i, piece) for i, piece in enumerate(late)])


def _library_step(missing: list[Piece], cache: Path) -> str:
    return f"building the kernel library (once per machine, {len(missing)} pieces, a few seconds; cache {cache})"


def _runtime_object(compiler: str, flags: list[str], names: list[str]) -> Path:
    """The combined object of the kernel library's files `names` on its own (its missing
    pieces built in parallel, then combined): what build_library links, where it needs it."""
    objects, combined, missing = _runtime_plan(compiler, flags, _every_piece(names))
    if intact(combined):
        return combined
    if missing:
        step(_library_step(missing, combined.parent.parent))
        with build_folder(combined.parent) as work:
            _write_runtime(Path(work))
            _build_missing(compiler, [f for f in flags if f != "-shared"], Path(work), missing, [])
    _combine(compiler, objects, combined)
    return combined


def _run_parallel(jobs: list[Callable[[], None]]) -> None:
    """The jobs (compiler runs) at once, one per core: the first error is raised after all end."""
    with ThreadPoolExecutor(max_workers=_workers(len(jobs))) as pool:
        for done in [pool.submit(job) for job in jobs]:
            done.result()


def _combined_path(compiler: str, flags: list[str], objects: list[Path]) -> Path:
    return cache_folder("cpu") / f"runtime-{_key(compiler_identity(compiler), *flags, *(o.name for o in objects))}.o"


def _combine(compiler: str, objects: list[Path], combined: Path) -> None:
    """One relocatable object holding the pieces `objects` (-r), cached under a name made of
    theirs: every model library naming the same files reuses it."""
    with build_folder(combined.parent) as work:
        tmp = Path(work) / "runtime.o"
        if objects:
            _run_compiler([*compiler.split(), "-r", "-nostdlib", *map(str, objects), "-o", str(tmp)])
        else:  # a model calling no library function links an empty object
            (Path(work) / "empty.c").write_text("typedef int ember_no_library_files;\n")
            _run_compiler([*compiler.split(), "-c", str(Path(work) / "empty.c"), "-o", str(tmp)])
        commit(tmp, combined)


@cache
def _pool_source() -> str:
    return resources.files("ember.backends.cpu").joinpath(POOL_SOURCE).read_text()


def _pool_flags(flags: list[str]) -> list[str]:
    return ["-O2", "-std=gnu11", "-fPIC", *(f for f in flags if f.startswith(("-m", "-fsanitize")))]


def _pool_path(compiler: str, flags: list[str]) -> Path:
    """Where Ember's thread pool (ember_pool.c: the OpenMP entry points the generated code
    calls) is cached, compiled once per (source, compiler, flags) for every model library."""
    return cache_folder("cpu") / f"pool-{_key(_pool_source(), compiler_identity(compiler), *_pool_flags(flags))}.o"


def _pool_job(compiler: str, flags: list[str], work: Path, obj: Path) -> Callable[[], None]:
    def build() -> None:
        (work / POOL_SOURCE).write_text(_pool_source())
        tmp = work / "pool.o"
        _run_compiler([*compiler.split(), *_pool_flags(flags), "-c", str(work / POOL_SOURCE), "-o", str(tmp)])
        commit(tmp, obj)

    return build


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
    flags = library_flags(extra_flags, sanitize, march)
    objects, runtime, missing = _runtime_plan(
        compiler, flags, pieces_named_by("\n".join([source, *(extra_sources or {}).values()])))
    pool = _pool_path(compiler, flags) if speaks_libgomp_abi(compiler) else None
    extras = dict(sorted((extra_sources or {}).items()))
    links = list(link_flags or [])
    folder = cache_folder("cpu")
    key_parts = [source, runtime.name, pool.name if pool else "", compiler_identity(compiler), *flags, *links]
    for name, text in extras.items():
        key_parts += [name, text]
    library = folder / f"{_key(*key_parts)}.so"
    if intact(library):
        return library
    compiling = f"compiling the generated C ({len(source) // 1024 + 1} KB) with {compiler}"
    step(f"{_library_step(missing, folder.parent)} and {compiling}" if missing else compiling)
    with build_folder(folder) as work_name:
        work = Path(work_name)
        _write_runtime(work)
        src = work / "model.c"
        src.write_text(source)
        sources = [src]
        for name, text in extras.items():
            if not _SOURCE_NAME.fullmatch(name) or name == "model.c":
                raise EmberError(f"extra C source name {name!r} is not a plain file name ending in .c")
            (work / name).write_text(text)
            sources.append(work / name)
        compile_flags = [f for f in flags if f != "-shared"]
        # One batch, one compiler per core: on a fresh machine the kernel library's pieces,
        # the pool and the model compile side by side, not the model after the library.
        jobs = [_compile_job([*compiler.split(), *compile_flags, f"-I{work}", "-c", str(path), "-o",
                              str(path.with_suffix(".o"))], work) for path in sources]
        if pool is not None and not intact(pool):
            jobs.append(_pool_job(compiler, flags, work, pool))
        _build_missing(compiler, compile_flags, work, missing, jobs)
        if not intact(runtime):
            _combine(compiler, objects, runtime)
        objects_built = [str(path.with_suffix(".o")) for path in sources]
        tmp_lib = work / "model.so"
        if pool is not None:
            link = [*(f for f in flags if f != "-fopenmp"), *objects_built, str(runtime), str(pool), "-o", str(tmp_lib),
                    "-Wl,-z,defs", "-pthread"]
        else:
            link = [*flags, *objects_built, str(runtime), "-o", str(tmp_lib)]
        _run_compiler([*compiler.split(), *link, *links, "-lm"])
        commit(tmp_lib, library)
    return library
