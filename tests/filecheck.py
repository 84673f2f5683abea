"""A small FileCheck for the tests, and the harness every transform test uses.

filecheck(text, checks) follows LLVM FileCheck's core directives, matched as substrings
with optional {{regex}} blocks:
    CHECK:      matches somewhere after the previous match
    CHECK-NEXT: matches on the line right after the previous match's line
    CHECK-SAME: matches on the same line as the previous match, after it
    CHECK-NOT:  does not occur between the previous match and the next one (or the end)
Lines without a directive are ignored, so checks can carry comments.

check_pass(ir, passes, checks) parses graph text (random weights for constants printed
without data), runs the passes, FileChecks the printed result and compares the reference
evaluation before and after on random inputs.

check_file(path) runs one FileCheck test file (tests/filecheck/*.ir, graph IR or LIR): its
`// RUN: ember opt %s --passes a,b [options]` line is the command, run in-process with %s
the file itself; the `// CHECK...` lines of the same file are matched against what it
prints, and the IR's outputs before and after the passes are compared on random inputs
(the graph by the op table's reference, the LIR by the interpreter on its planned arena).
`// RUN: not ember opt ...` expects the command to fail and matches its error output."""
from __future__ import annotations

import argparse
import io
import re
import shlex
from collections.abc import Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

from ember.graph import Graph, parse_graph, print_graph
from ember.passes import PassContext, PassManager
from tests.helpers import evaluate_graph, random_inputs, relative_error

_DIRECTIVE = re.compile(r"\b(CHECK(?:-NEXT|-SAME|-NOT)?):\s?(.*)$")
_CONST_WITHOUT_DATA = re.compile(r"^\s*const @([\w.]+): (\w+)\[([\d,]*)\]\s*$", re.MULTILINE)


class FileCheckError(AssertionError):
    pass


def _compile(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"\{\{(.*?)\}\}", pattern.strip())
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?:{p})" for i, p in enumerate(parts)))


def _fail(message: str, text: str) -> FileCheckError:
    return FileCheckError(f"{message}\n--- input ---\n{text}")


def filecheck(text: str, checks: str) -> None:
    lines = text.splitlines()
    directives = [m.groups() for m in map(_DIRECTIVE.search, checks.splitlines()) if m]
    if not directives:
        raise ValueError("no CHECK directives given")
    line, col = 0, 0  # where the previous match ended
    pending_not: list[str] = []
    for kind, pattern in directives:
        regex = _compile(pattern)
        if kind == "CHECK-NOT":
            pending_not.append(pattern)
            continue
        if kind == "CHECK-SAME":
            match = regex.search(lines[line], col) if line < len(lines) else None
            where = (line, match) if match else None
        elif kind == "CHECK-NEXT":
            nxt = line + 1
            match = regex.search(lines[nxt]) if nxt < len(lines) else None
            where = (nxt, match) if match else None
        else:
            where = _search(lines, regex, line, col)
        if where is None:
            raise _fail(f"{kind}: '{pattern}' not found after line {line + 1}", text)
        found_line, match = where
        _check_absent(lines, pending_not, (line, col), (found_line, match.start()), text)
        pending_not = []
        line, col = found_line, match.end()
    _check_absent(lines, pending_not, (line, col), (len(lines), 0), text)


def _search(lines: list[str], regex: re.Pattern[str], line: int, col: int):
    for index in range(line, len(lines)):
        match = regex.search(lines[index], col if index == line else 0)
        if match:
            return index, match
    return None


def _check_absent(lines: list[str], patterns: list[str], start: tuple[int, int], end: tuple[int, int],
                  text: str) -> None:
    for pattern in patterns:
        regex = _compile(pattern)
        for index in range(start[0], min(end[0] + 1, len(lines))):
            begin = start[1] if index == start[0] else 0
            stop = end[1] if index == end[0] else len(lines[index])
            if regex.search(lines[index][begin:stop]):
                raise _fail(f"CHECK-NOT: '{pattern}' occurs on line {index + 1}", text)


def random_weights(ir: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal data for every constant the text declares without data."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, dtype, dims in _CONST_WITHOUT_DATA.findall(ir):
        shape = tuple(int(d) for d in dims.split(",") if d)
        numpy_dtype = {"f32": np.float32, "f64": np.float64, "i64": np.int64}[dtype]
        weights[name] = rng.standard_normal(shape).astype(numpy_dtype)
    return weights


def check_pass(ir: str, passes: str | Sequence[str], checks: str, *,
               weights: Mapping[str, np.ndarray] | None = None, seed: int = 0, rtol: float = 1e-4,
               context: PassContext | None = None) -> Graph:
    """Runs `passes` on the parsed `ir` (in `context`: the target backend, for passes that ask
    it), FileChecks the result and checks the numbers agree (max |error| relative to
    max(1, max |before|) within rtol). Returns the optimized graph."""
    pipeline = [passes] if isinstance(passes, str) else list(passes)
    all_weights = {**random_weights(ir, seed), **(weights or {})}
    before = parse_graph(ir, all_weights)
    inputs = random_inputs(before, seed)
    expected = evaluate_graph(before, inputs)
    after = parse_graph(ir, all_weights)
    PassManager(pipeline, verify=True, context=context).run(after)
    filecheck(print_graph(after), checks)
    actual = evaluate_graph(after, inputs)
    for name, value in expected.items():
        error = relative_error(actual[name], value)
        assert error <= rtol, f"output {name}: relative error {error:.3g} after {pipeline}"
    return after


# -- FileCheck test files -------------------------------------------------------------------------

_RUN = re.compile(r"^\s*//\s*RUN:(.*)$", re.MULTILINE)


def run_line(text: str, path: Path) -> tuple[bool, list[str]]:
    """(whether the command must fail, the `ember` arguments) of a file's one RUN line."""
    runs = _RUN.findall(text)
    if len(runs) != 1:
        raise ValueError(f"{path}: a FileCheck file has exactly one '// RUN:' line, not {len(runs)}")
    words = shlex.split(runs[0])
    must_fail = words[:1] == ["not"]
    words = words[1:] if must_fail else words
    if words[:2] != ["ember", "opt"] or "%s" not in words:
        raise ValueError(f"{path}: the RUN line is `[not] ember opt %s ...`, not {runs[0].strip()!r}")
    return must_fail, ["opt", *(str(path) if word == "%s" else word for word in words[2:])]


def check_file(path: Path, *, seeds: int = 2, rtol: float = 1e-5) -> None:
    from ember.cli import main

    text = path.read_text()
    must_fail, argv = run_line(text, path)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(argv)
    if must_fail:
        assert status != 0, f"{path.name}: `ember {' '.join(argv)}` succeeded; its RUN line says it fails"
        filecheck(err.getvalue(), text)
        return
    assert status == 0, f"{path.name}: `ember {' '.join(argv)}` failed:\n{err.getvalue()}"
    filecheck(out.getvalue(), text)
    _check_numerics(text, argv, path.name, seeds, rtol)


def _check_numerics(text: str, argv: list[str], name: str, seeds: int, rtol: float) -> None:
    """The file's IR computes the same before and after its passes."""
    from ember.cli import load_ir, opt_manager

    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("file")
    parser.add_argument("--passes", default="")
    parser.add_argument("--ir")
    parser.add_argument("--backend")
    parser.add_argument("--random-weights", action="store_true")
    args, _ = parser.parse_known_args(argv)
    registry, before = load_ir(text, ir=args.ir, random_weights=args.random_weights)
    _, after = load_ir(text, ir=args.ir, random_weights=args.random_weights)
    passes = [p.strip() for p in args.passes.split(",") if p.strip()]
    opt_manager(registry, passes, backend=args.backend).run(after)
    for seed in range(seeds):
        expected, actual = _evaluate(registry.kind.name, before, seed), _evaluate(registry.kind.name, after, seed)
        assert expected.keys() == actual.keys()
        for output, value in expected.items():
            error = relative_error(actual[output], value)
            assert error <= rtol, f"{name}: output {output}: relative error {error:.3g} after {passes}"


def _evaluate(kind: str, ir: Any, seed: int) -> dict[str, np.ndarray]:
    if kind == "graph":
        return evaluate_graph(ir, random_inputs(ir, seed))
    from ember.backends.interpreter import InterpretedProgram
    from ember.memory import plan_memory

    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(b.type.shape).astype(b.type.dtype.numpy) if b.type.dtype.is_float
              else np.zeros(b.type.shape, b.type.dtype.numpy) for b in ir.inputs]
    plan_memory(ir)
    results = InterpretedProgram(ir).run(inputs)
    return {buffer.name: value for buffer, value in zip(ir.outputs, results, strict=True)}
