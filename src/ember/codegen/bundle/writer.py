"""write_bundle: a planned low-level program -> a folder of portable C plus weights.

    <prefix>.h               the API: memory regions, tensor layout, entry function
    <prefix>.c               the generated kernels and <prefix>_run
    <prefix>_kernels.c       the kernel library sources the model needs, one translation unit
    <prefix>_ember_symbols.h renames the library's functions with the prefix
    ember_*.h, ember_*.c     the kernel library (unchanged copies; compiled via <prefix>_kernels.c)
    <prefix>.weights.bin     the constant weights
    <prefix>_weights.c       the same bytes as a const array (bare-metal targets)
    bundle_main.c, Makefile  an example program and the build for the target
    startup_cortexm.c, <board>.ld   bare metal: the example firmware's startup and memory map

The same program, target and prefix always give the same bytes. Imports codegen, lir,
memory, support."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ember.codegen.bundle import examples, header, library, makefile, sources
from ember.codegen.bundle.fit import check_fit, prepare_folder
from ember.codegen.bundle.layout import Layout, plan_layout
from ember.codegen.bundle.targets import Target, get_target
from ember.codegen.emitter import CProgram
from ember.lir.ir import Program
from ember.memory import MemoryPlan
from ember.support.errors import EmberError
from ember.support.names import sanitize_identifier


@dataclass
class Bundle:
    """What write_bundle wrote: where, for which target, and the memory contract."""

    directory: Path
    target: Target
    prefix: str
    layout: Layout
    files: list[str] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)  # run status -> message

    @property
    def header(self) -> Path:
        return self.directory / f"{self.prefix}.h"

    def summary(self) -> str:
        lay = self.layout
        return (f"bundle '{self.prefix}' for {self.target.name} in {self.directory}: "
                f"weights {lay.constant_bytes} B, io {lay.mutable_bytes} B, activations {lay.activation_bytes} B "
                f"(arena {lay.arena_bytes} B at {100 * lay.efficiency:.1f}% efficiency, kernels' scratch included)")


# The prefix names files ('<prefix>.weights.bin') and symbols: far below file-name limits (255).
MAX_PREFIX = 64


def sanitize_prefix(prefix: str) -> str:
    """A C identifier for the symbol prefix: lower case, runs of unsafe characters as one
    '_', none at either end ('My-Net!' -> 'my_net')."""
    cleaned = re.sub(r"_+", "_", sanitize_identifier(prefix.lower(), prefix="")).strip("_")
    if not cleaned:
        raise EmberError(f"bundle prefix {prefix!r} has no usable character (use letters, digits, '_')")
    if len(cleaned) > MAX_PREFIX:
        raise EmberError(f"bundle prefix {prefix[:20]!r}... has {len(cleaned)} characters; at most {MAX_PREFIX} "
                         "(it names files and C symbols)")
    return f"m{cleaned}" if cleaned[0].isdigit() else cleaned


def write_bundle(program: Program, plan: MemoryPlan | None, cprogram: CProgram, output_dir: str | os.PathLike,
                 target: str | Target = "host", prefix: str = "model", flash_bytes: int | None = None,
                 ram_bytes: int | None = None, openmp: bool = False) -> Bundle:
    """Writes the bundle of a planned program and its C (generated with a static entry, see
    CpuBackend.bundle); `prefix` must be sanitized already (sanitize_prefix). Refuses, before
    writing, a bundle that does not fit the target's flash and RAM (fit.check_fit) or a
    folder holding something other than an earlier bundle; openmp: hosted builds compile and
    link with -fopenmp (kernels planned for several threads)."""
    tgt = get_target(target) if isinstance(target, str) else target
    layout = plan_layout(program, cprogram, plan)
    check_fit(tgt, layout, flash_bytes, ram_bytes)
    if openmp and tgt.bare_metal:
        raise EmberError(f"bundles for {tgt.name} run on one thread: no OpenMP on a microcontroller")
    lib = library.library_files()
    needed = library.needed_sources(cprogram.source)

    files: dict[str, str | bytes] = {
        f"{prefix}.h": header.render_header(prefix, tgt, layout, sanitize_identifier(program.name or "model")),
        f"{prefix}.c": sources.model_source(prefix, cprogram, layout),
        f"{prefix}_ember_symbols.h": library.symbols_header(prefix),
        f"{prefix}.weights.bin": cprogram.weights.tobytes(),
    }
    objects = [f"{prefix}.o"]
    if needed:
        files[f"{prefix}_kernels.c"] = library.kernels_unit(prefix, needed)
        objects.append(f"{prefix}_kernels.o")
    for name, text in lib.items():
        if name.endswith(".h") or name in needed:
            files[name] = text
    if tgt.embeds_weights:
        files[f"{prefix}_weights.c"] = sources.weights_source(prefix, cprogram.weights)
        objects.append(f"{prefix}_weights.o")
        files["bundle_main.c"] = examples.bare_metal_main(prefix, layout)
        files.update(examples.board_files(tgt))
    else:
        files["bundle_main.c"] = examples.hosted_main(prefix, layout)
    files["Makefile"] = makefile.render_makefile(prefix, tgt, layout, objects, openmp=openmp)

    directory = Path(output_dir)
    prepare_folder(directory, sorted(files))
    for name, content in files.items():
        path = directory / name
        try:
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        except OSError as err:
            raise EmberError(f"cannot write bundle file '{path}': {err.strerror or err}") from None
    return Bundle(directory, tgt, prefix, layout, sorted(files), dict(cprogram.errors))
