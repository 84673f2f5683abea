"""Before a bundle is written: does it fit its target's memory, and is its folder one Ember
may write into.

Fit: a microcontroller keeps the weights in flash and the io and activations in RAM; a
hosted program reads the weights into RAM too. The budget is the user's (`flash_bytes`,
`ram_bytes`: the actual part's), else the example board's memory map for a bare-metal
target; hosted targets are checked only against what the user gives. The check counts
weights and buffers, not code or stack, so passing it is necessary, not sufficient; failing
it refuses with the numbers before any C is generated (a ResNet-18 for a Cortex-M4 used to
write a 228 MB C file).

Folder: each bundle writes a manifest (`.ember-bundle`, the files it wrote). Writing again
into the folder removes the earlier bundle's files and the build's products first, so no
stale file survives; a folder that is not empty and holds no manifest is refused (Ember
deletes only what it wrote). Imports bundle.layout, targets."""
from __future__ import annotations

import json
from pathlib import Path

from ember.codegen.bundle.layout import Layout
from ember.codegen.bundle.targets import Target
from ember.support.errors import EmberError, UnsupportedError

MANIFEST = ".ember-bundle"
# What the bundle's Makefile builds (make clean's list), removed with the earlier bundle.
BUILD_PRODUCTS = ("*.o", "lib*.a", "bundle_main", "bundle_main.elf")


def size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def check_fit(target: Target, layout: Layout, flash_bytes: int | None = None, ram_bytes: int | None = None) -> None:
    """Raises UnsupportedError, with the numbers, when the weights exceed the flash or the io,
    activations (and, hosted, weights) exceed the RAM."""
    source = "the memory given"
    if target.bare_metal and target.board is not None:
        memory = target.board.memory
        if flash_bytes is None or ram_bytes is None:
            source = f"memory of the {memory.name} example board; give your part's with --flash/--ram"
        flash_bytes = memory.flash_bytes if flash_bytes is None else flash_bytes
        ram_bytes = memory.ram_bytes if ram_bytes is None else ram_bytes
    needs_ram = layout.mutable_bytes + layout.activation_bytes + (0 if target.bare_metal else layout.constant_bytes)
    problems = []
    if flash_bytes is not None and layout.constant_bytes > flash_bytes:
        problems.append(f"weights need {size_text(layout.constant_bytes)} ({layout.constant_bytes} B) of flash, "
                        f"which holds {size_text(flash_bytes)} ({flash_bytes} B)")
    if ram_bytes is not None and needs_ram > ram_bytes:
        what = "io and activations" if target.bare_metal else "weights, io and activations"
        problems.append(f"{what} need {size_text(needs_ram)} ({needs_ram} B) of RAM, which holds "
                        f"{size_text(ram_bytes)} ({ram_bytes} B)")
    if problems:
        raise UnsupportedError(f"the bundle does not fit {target.name} ({source}): {'; '.join(problems)}. "
                               "Quantize it (--quantize: int8 weights are a quarter of float32), or choose a "
                               "smaller model or a larger part")


def prepare_folder(directory: Path, files: list[str]) -> None:
    """Creates the folder, or empties it of an earlier bundle; refuses a folder with other
    content. Then records `files` in the manifest."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        entries = sorted(p.name for p in directory.iterdir())
    except OSError as err:
        raise EmberError(f"cannot create the bundle folder '{directory}': {err.strerror or err}") from None
    manifest = directory / MANIFEST
    if entries and not manifest.is_file():
        raise EmberError(f"the bundle folder '{directory}' is not empty and holds no Ember bundle (no {MANIFEST}): "
                         "choose a new or empty folder (Ember replaces only a bundle it wrote)")
    if entries:
        try:
            previous = json.loads(manifest.read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise EmberError(f"cannot read the bundle manifest {manifest}: {err}; remove the folder") from None
        stale = {directory / name for name in previous if isinstance(name, str) and "/" not in name}
        for pattern in BUILD_PRODUCTS:
            stale.update(directory.glob(pattern))
        for path in sorted(stale):
            if path.is_file() or path.is_symlink():
                try:
                    path.unlink()
                except OSError as err:
                    raise EmberError(f"cannot remove the earlier bundle's file '{path}': "
                                     f"{err.strerror or err}") from None
    try:
        manifest.write_text(json.dumps({"files": sorted(files)}, indent=1) + "\n")
    except OSError as err:
        raise EmberError(f"cannot write bundle file '{manifest}': {err.strerror or err}") from None
