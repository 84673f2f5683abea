"""ONNX's node test suite on the cpu backend: every case the interpreter passes must pass on
cpu too, unless the cpu backend refuses it for a reason listed in
src/ember/codegen/exemptions.py (an op without a C kernel, an element type without C kernels,
a form its kernels do not cover). Cases the interpreter is expected to fail are skipped here.
The cases run once per session in two time-limited worker processes (bench/onnx_node_runner.py)."""
from __future__ import annotations

import re

import pytest

from bench.onnx_node_runner import Result, run_cases
from ember.codegen.exemptions import C_EXEMPT, C_EXEMPT_FORMS, C_EXEMPT_TYPES
from tests.onnx_node_expected import EXPECTED_FAILURES
from tests.test_onnx_node_suite import CASES, NAMES

TIMEOUT_S = 300.0
EXEMPT_REASONS = tuple(set(C_EXEMPT.values()) | set(C_EXEMPT_FORMS.values())
                       | {f"{dtype}: {why}" for dtype, why in C_EXEMPT_TYPES.items()})
# One refusal entry: "Op (nodes: a, b): reason"; entries are joined by "; ".
_ENTRY = re.compile(r"(\w+) \(nodes: [^)]*\): ")


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    runnable = [c for c in CASES if c.name not in EXPECTED_FAILURES]
    return {r.name: r for r in run_cases(runnable, "cpu", jobs=2, timeout=TIMEOUT_S)}


def refusal_reasons(detail: str) -> list[str] | None:
    """The reasons of a cpu refusal message, or None if `detail` is not one."""
    marker = "backend 'cpu' cannot run: "
    if marker not in detail:
        return None
    text = detail.split(marker, 1)[1]
    starts = [m.end() for m in _ENTRY.finditer(text)]
    ends = [m.start() for m in _ENTRY.finditer(text)][1:] + [len(text)]
    return [text[s:e].rstrip("; ").strip() for s, e in zip(starts, ends)]


@pytest.mark.parametrize("name", NAMES)
def test_node_case_on_cpu(name, results):
    if name in EXPECTED_FAILURES:
        pytest.skip(f"fails on the interpreter too: {EXPECTED_FAILURES[name]}")
    result = results[name]
    if result.status == "pass":
        return
    reasons = refusal_reasons(result.detail)
    assert reasons, f"{result.status}: {result.detail}"
    unexplained = [r for r in reasons if not r.startswith(EXEMPT_REASONS)]
    assert not unexplained, f"cpu refused for reasons not in codegen/exemptions.py: {unexplained}"
    pytest.skip(f"cpu refuses: {'; '.join(sorted(set(reasons)))}")
