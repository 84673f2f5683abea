"""What every `ember` command that compiles shares: the same options (--backend, --threads,
--shape, --input, --precision) with their checks, the default backend, inputs from files, a
reference file or seeded random data (said so), the reference check, and exit codes.

Exit codes (documented in docs/user-guide.md): 0 success; 1 any other error (an unreadable
file, a failing run); 2 a usage error (argparse's own code: a bad option or value); 3 the
model could not be compiled (import refused, an op no backend runs, a failed build); 4 an
accuracy check failed (`run --reference`, `debug` found a divergence)."""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember.runtime.feeds import seeded_inputs
from ember.support.errors import EmberError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_COMPILE, EXIT_ACCURACY = 0, 1, 2, 3, 4

BACKEND_HELP = ("cpu (generated C, the default where a C compiler exists), interpreter (NumPy, the reference), "
                "a plugin's name, several in priority order (cpu,interpreter: the model is partitioned) or auto "
                "(partitioned by estimated cost)")
MODEL_HELP = "an ONNX model file (.onnx)"
REFERENCE_HELP = ("an .npz holding in_<input name> arrays (used as inputs) and out_<i> arrays (the expected "
                  "outputs, in model output order); other names are refused")
PRECISION_HELP = ("bf16: convolutions and GEMMs with weights on bf16 kernels (cpu, AVX512-BF16), float32 "
                  "elsewhere; int8 is `ember quantize` then compile(quantize=...)")


class CommandError(EmberError):
    """An error that ends a command with a given exit code (see the module docstring)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def notice(message: str) -> None:
    """A line for the user on standard error (standard output stays the command's result)."""
    print(f"ember: {message}", file=sys.stderr)


def _argument(text: str, convert: Callable[[str], Any], kind: str, valid: Callable[[Any], bool],
              requirement: str) -> Any:
    """`text` converted, or the argparse error saying it is not `kind` or breaks `requirement`."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
    if not valid(value):
        raise argparse.ArgumentTypeError(f"{requirement}, got {text.strip()}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (thread and run counts)."""
    return int(_argument(text, int, "an integer", lambda v: v >= 1, "must be at least 1"))


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (counts that may be zero)."""
    return int(_argument(text, int, "an integer", lambda v: v >= 0, "must be 0 or more"))


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (durations)."""
    return float(_argument(text, float, "a number", lambda v: 0 < v < float("inf"), "must be a positive number"))


def byte_size(text: str) -> int:
    """argparse type: bytes, with an optional K, M or G suffix (powers of 1024; KiB, MB... too)."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 262144, 256K, 1M)")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def add_compile_options(parser: argparse.ArgumentParser, *, inputs: bool = True, precision: bool = True) -> None:
    """The options every command that compiles a model takes, the same everywhere."""
    parser.add_argument("model", help=MODEL_HELP)
    parser.add_argument("--backend", help=BACKEND_HELP)
    parser.add_argument("--threads", type=positive_int, metavar="N",
                        help="threads for native backends (default: all cores)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="bind an input's symbolic dimensions (repeatable)")
    if inputs:
        parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                            help="an input's value (repeatable; inputs not given are seeded random data)")
    if precision:
        parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help=PRECISION_HELP)


def default_backend(requested: str | None) -> str:
    """The backend asked for, or cpu where a C compiler exists (else the interpreter, said)."""
    if requested:
        return requested
    from ember.backends.cpu.build import missing_compiler

    if missing_compiler():
        notice("no C compiler found (install gcc or clang, or set CC): using the interpreter backend")
        return "interpreter"
    return "cpu"


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]] | None:
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise CommandError(f"--shape {item!r} is not NAME=D0,D1,...", EXIT_USAGE) from None
    return shapes or None


@dataclass
class Compiled:
    model: Any
    backend: str
    seconds: float


def compile_for_command(args: argparse.Namespace, **options: Any) -> Compiled:
    """ember.compile with the command's options; a refusal or failure to compile exits 3.
    (Its long steps, the kernel library's first build included, show through
    tools/progress_display.py.)"""
    import ember
    from ember.heterogeneous import backend_spec

    check_model_file(args.model)
    backend = default_backend(args.backend)
    precision = getattr(args, "precision", "fp32")
    start = time.perf_counter()
    try:
        model = ember.compile(args.model, backend=backend_spec(backend), input_shapes=parse_shapes(args.shape),
                              num_threads=args.threads, precision=precision, **options)
    except CommandError:
        raise
    except EmberError as err:
        raise CommandError(str(err), EXIT_COMPILE) from None
    return Compiled(model, backend, time.perf_counter() - start)


def check_model_file(path: str) -> None:
    """A missing or unreadable model file is an error (1), not a compile refusal (3)."""
    import os

    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise CommandError(f"cannot read the model file {path}: "
                           f"{'no such file' if not os.path.exists(path) else 'not a readable file'}", EXIT_ERROR)


def read_reference(path: str | None) -> dict[str, np.ndarray]:
    if not path:
        return {}
    try:
        return dict(np.load(path, allow_pickle=False))
    except (OSError, ValueError) as err:
        raise CommandError(f"cannot read reference {path}: {err}", EXIT_ERROR) from None


def check_reference_names(reference: Mapping[str, np.ndarray], input_names: list[str], output_names: list[str],
                          path: str) -> None:
    """Refuses a reference whose names are not in_<an input> or out_<an output index>."""
    inputs = {f"in_{name}" for name in input_names}
    outputs = {f"out_{i}" for i in range(len(output_names))}
    unknown = sorted(set(reference) - inputs - outputs)
    if unknown:
        raise CommandError(f"reference {path} holds {unknown}, which match no input or output: it may hold "
                           f"{sorted(inputs)} and {sorted(outputs)} (out_<i> for output i of {output_names})",
                           EXIT_USAGE)


def load_feeds(specs: list[Any], items: list[str], reference: Mapping[str, np.ndarray],
               say: Callable[[str], None] = notice,
               hint: str = "pass --input NAME=FILE.npy or --reference REF.npz for real data") -> dict[str, np.ndarray]:
    """Inputs by name: --input files first, then the reference's in_<name>, then seeded random
    data (standard normal; zeros for integer inputs), which is said."""
    given: dict[str, np.ndarray] = {}
    names = [spec.name for spec in specs]
    for item in items:
        name, _, path = item.partition("=")
        if not path:
            raise CommandError(f"--input {item!r} is not NAME=FILE.npy", EXIT_USAGE)
        if name not in names:
            raise CommandError(f"--input {name}: the model has no input '{name}' (its inputs: {names})", EXIT_USAGE)
        try:
            given[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise CommandError(f"cannot read input '{name}' from {path}: {err}", EXIT_ERROR) from None
    random = []
    for spec in specs:
        if spec.name in given:
            continue
        if f"in_{spec.name}" in reference:
            given[spec.name] = reference[f"in_{spec.name}"]
        elif not hasattr(spec, "type"):  # a DynamicInput: its size is the user's to say
            raise CommandError(f"input '{spec.name}' has symbolic dimensions {list(spec.dims)}: pass --input "
                               f"{spec.name}=FILE.npy or bind them with --shape {spec.name}=D0,D1,...", EXIT_USAGE)
        else:
            random.append(spec)
    if random:
        given.update(seeded_inputs(random))
        say(f"input(s) {', '.join(spec.name for spec in random)} are random (seeded standard normal; zeros for "
            f"integer inputs): {hint}")
    return given


@dataclass(frozen=True)
class Check:
    """One output against its reference, as numpy.testing.assert_allclose judges:
    |actual - expected| <= atol + rtol * |expected| everywhere (NaN matches NaN)."""

    name: str
    ok: bool
    detail: str
    max_abs_error: float | None = None


def check_outputs(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], rtol: float,
                  atol: float) -> list[Check]:
    checks = []
    for index, (name, value) in enumerate(outputs.items()):
        expected = reference.get(f"out_{index}")
        if expected is None:
            checks.append(Check(name, True, "no reference (not checked)"))
            continue
        if expected.shape != value.shape:
            checks.append(Check(name, False, f"shape {list(value.shape)} vs reference {list(expected.shape)}"))
            continue
        actual = value.astype(np.float64)
        wanted = expected.astype(np.float64)
        with np.errstate(invalid="ignore"):
            error = np.abs(actual - wanted)
            both_nan = np.isnan(actual) & np.isnan(wanted)
            bad = ~((error <= atol + rtol * np.abs(wanted)) | both_nan)
        finite = error[~both_nan]
        worst = float(np.max(finite)) if finite.size else 0.0
        count = int(np.count_nonzero(bad))
        detail = (f"max abs error {worst:.3g}, {count} of {value.size} elements outside "
                  f"atol {atol:g} + rtol {rtol:g} x |reference|")
        checks.append(Check(name, count == 0, detail, worst))
    return checks


def write_generated_doc(render: Callable[[], str], name: str, argv: Sequence[str]) -> int:
    """Writes a generated page (docs/<name>, or the path given first in argv), for the doc
    generators' `python -m` entry points."""
    target = Path(argv[0]) if argv else Path(__file__).resolve().parents[3] / "docs" / name
    target.write_text(render())
    print(f"wrote {target}")
    return 0
