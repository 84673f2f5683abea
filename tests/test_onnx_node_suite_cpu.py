"""ONNX's node test suite on the cpu backend: every case the interpreter passes must pass on
cpu too, unless the cpu backend refuses it up front (UnsupportedError naming the op, with the
reason its kernel registry gives: no kernel for the op, an element type without C kernels, a
form its kernels do not cover). Cases the interpreter is expected to fail are skipped here.
The cases run once per session in two time-limited worker processes (bench/onnx_node_runner.py)."""
from __future__ import annotations

import re

import pytest

from bench.onnx_node_runner import Result, run_cases
from tests.onnx_node_expected import EXPECTED_FAILURES
from tests.test_onnx_node_suite import CASES, NAMES

TIMEOUT_S = 300.0
# The refusal reasons the C kernel registry gives (registry.py, table.py, the kernels' accepts).
EXEMPT_REASONS = ("no C kernel for ", "quantized tensor types have no C kernels", "only 2-D (NCHW) ",
                  "the GEMM kernels run float32", "the normalization kernels run float32",
                  "LayerNormalization with broadcast")
_TYPE_REASON = re.compile(r"\w+: no C kernels for this element type|the \w+ kernel runs float32 and float64, not ")
# One refusal entry: "Op (nodes: a, b): reason"; entries are joined by "; ".
_ENTRY = re.compile(r"(\w+) \(nodes: [^)]*\): ")


# Cases whose expected data the cpu backend misses by design, with the reason; a case listed
# here that passes fails the test, so the table stays exact.
CPU_DEVIATIONS = {
    "test_attention_4d_causal_fp16_expanded":
        "float16: the expanded softmax is recognized as one Softmax computed in float32 and rounded once; the "
        "expected data rounds every step to float16 (2 ulp apart, above rtol 1e-3)",
}


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
    return [text[s:e].rstrip("; ").strip() for s, e in zip(starts, ends, strict=True)]


@pytest.mark.parametrize("name", NAMES)
def test_node_case_on_cpu(name, results):
    if name in EXPECTED_FAILURES:
        pytest.skip(f"fails on the interpreter too: {EXPECTED_FAILURES[name]}")
    result = results[name]
    if name in CPU_DEVIATIONS:
        assert result.status == "fail", f"listed in CPU_DEVIATIONS but {result.status}: remove the entry"
        pytest.skip(f"deviates on cpu by design: {CPU_DEVIATIONS[name]}")
    if result.status == "pass":
        return
    reasons = refusal_reasons(result.detail)
    assert reasons, f"{result.status}: {result.detail}"
    unexplained = [r for r in reasons if not (r.startswith(EXEMPT_REASONS) or _TYPE_REASON.match(r))]
    assert not unexplained, f"cpu refused for reasons its kernel registry does not give: {unexplained}"
    pytest.skip(f"cpu refuses: {'; '.join(sorted(set(reasons)))}")
