"""Each ATen converter of the torch frontend against eager PyTorch, on random shapes: the cases
of tests/torch_op_cases.py, one export per op family (a module returning every case's
result), compiled on the interpreter and the cpu backend. A case must really produce its ATen
op after decomposition, and every converter has a case or a reason in EXEMPT."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch frontend's tests need torch (pip install -e '.[torch]')")

from ember.driver import compile_graph  # noqa: E402
from ember.frontends.torch.context import aten_name  # noqa: E402
from ember.frontends.torch.exporter import export_module  # noqa: E402
from ember.frontends.torch.importer import convert_program  # noqa: E402
from ember.frontends.torch.registry import ATEN_CONVERTERS  # noqa: E402
from tests.torch_op_cases import EXEMPT, GROUPS, OpCase  # noqa: E402


class _Family(torch.nn.Module):
    def __init__(self, cases: list[OpCase], counts: list[int]) -> None:
        super().__init__()
        self.cases, self.counts = cases, counts

    def forward(self, *inputs):
        results, start = [], 0
        for case, count in zip(self.cases, self.counts, strict=True):
            results.append(case.fn(*inputs[start:start + count]))
            start += count
        return tuple(results)


def _family(name: str, seed: int):
    gen = torch.Generator().manual_seed(seed)
    cases = GROUPS[name]
    inputs = [case.inputs(gen) for case in cases]
    module = _Family(cases, [len(i) for i in inputs]).eval()
    flat = tuple(t for group in inputs for t in group)
    return module, flat


@pytest.fixture(scope="module", params=sorted(GROUPS))
def family(request):
    module, inputs = _family(request.param, seed=sum(map(ord, request.param)))
    program = export_module(module, inputs)
    with torch.no_grad():
        expected = module(*inputs)
    return request.param, module, inputs, program, expected


def test_each_case_produces_its_op(family):
    name, _, _, program, _ = family
    produced = {aten_name(n) for n in program.graph.nodes if n.op == "call_function"}
    missing = sorted({case.op for case in GROUPS[name]} - produced)
    assert not missing, f"cases that no longer produce their ATen op after decomposition: {missing}"


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_ops_match_eager(family, backend):
    name, _, inputs, program, expected = family
    model = compile_graph(convert_program(program), backend)
    names = program.graph_signature.user_inputs
    feeds = {n: t.numpy() for n, t in zip(names, inputs, strict=True) if n in model.input_names}
    outputs = list(model.run(feeds).values())
    failures = []
    for case, want, got in zip(GROUPS[name], expected, outputs, strict=True):
        want = want.numpy()
        if got.dtype != want.dtype or got.shape != want.shape:
            failures.append(f"{case.op}: got {got.dtype}{list(got.shape)}, eager {want.dtype}{list(want.shape)}")
        elif want.dtype.kind == "f" and not np.allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True):
            failures.append(f"{case.op}: max error {np.nanmax(np.abs(got - want))}")
        elif want.dtype.kind != "f" and not np.array_equal(got, want):
            failures.append(f"{case.op}: {np.count_nonzero(got != want)} elements differ")
    assert not failures, "\n".join(failures)


def test_every_converter_has_a_case():
    covered = {case.op for cases in GROUPS.values() for case in cases}
    missing = sorted(set(ATEN_CONVERTERS) - covered - set(EXEMPT))
    assert not missing, f"ATen converters without a case in tests/torch_op_cases.py: {missing}"
    stale = sorted(set(EXEMPT) - set(ATEN_CONVERTERS))
    assert not stale, f"EXEMPT names ops that have no converter: {stale}"
