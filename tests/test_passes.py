"""The pass infrastructure: the pass manager (once / fixed point, verification, printing and
timing after every pass), instrumentation, the rewrite engine, the default pipeline as data,
`ember dump --print-after-all`, and the FileCheck helper itself."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import ember  # noqa: F401  (registers passes and lowerings)
from ember.cli import main as cli_main
from ember.graph import Graph, Node, parse_graph, print_graph
from ember.passes import (
    PASSES,
    GraphPass,
    PassManager,
    PassTimer,
    PrintAfterAll,
    RewritePass,
    Rewriter,
    apply_patterns,
    instrumented,
    pattern,
    register_pass,
)
from ember.passes.manager import debug_mode
from ember.support.errors import EmberError, VerificationError
from ember.transforms import DEFAULT_PIPELINE
from tests.filecheck import FileCheckError, filecheck

REPO = Path(__file__).resolve().parents[1]

CHAIN = """graph "chain" {
  input %x: f32[2,3]
  %a: f32[2,3] = Relu(%x) name="a"
  %b: f32[2,3] = Neg(%a) name="b"
  %c: f32[2,3] = Neg(%b) name="c"
  output "y" = %c
}
"""


# -- filecheck ------------------------------------------------------------------------------

def test_filecheck_directives():
    text = "alpha beta\ngamma\ndelta epsilon\n"
    filecheck(text, "CHECK: alpha\nCHECK-SAME: beta\nCHECK-NEXT: gamma\nCHECK-NOT: zeta\nCHECK: epsilon")
    filecheck(text, "CHECK: {{g.m+a}}")
    with pytest.raises(FileCheckError, match="CHECK-NEXT"):
        filecheck(text, "CHECK: alpha\nCHECK-NEXT: delta")
    with pytest.raises(FileCheckError, match="CHECK-NOT"):
        filecheck(text, "CHECK: alpha\nCHECK-NOT: gamma\nCHECK: delta")
    with pytest.raises(FileCheckError, match="CHECK-SAME"):
        filecheck(text, "CHECK: gamma\nCHECK-SAME: delta")
    with pytest.raises(FileCheckError):
        filecheck(text, "CHECK: delta\nCHECK: alpha")  # order matters
    with pytest.raises(FileCheckError, match="CHECK-NOT"):
        filecheck(text, "CHECK: gamma\nCHECK-NOT: epsilon")  # trailing NOT runs to the end


# -- pass manager ---------------------------------------------------------------------------

@pattern("Neg")
def _double_negation(rw: Rewriter, node: Node):
    inner = node.inputs[0].producer
    if inner is None or inner.op != "Neg":
        return None
    return inner.inputs[0]


@register_pass
class _TestDoubleNegation(RewritePass):
    """Test-only pass. Rules: 1. Neg(Neg(x)) -> x."""

    name = "test-double-negation"
    patterns = (_double_negation,)


@register_pass
class _TestBreakTypes(GraphPass):
    """Test-only pass that corrupts a result type, to test verification after passes."""

    name = "test-break-types"

    def run(self, graph: Graph) -> bool:
        out = graph.nodes[0].outputs[0]
        out.type = out.type.with_shape((7,))
        return True


def test_manager_runs_once_records_timings_and_prints_after_each_pass():
    graph = parse_graph(CHAIN)
    printed: list[tuple[str, str]] = []
    manager = PassManager(["test-double-negation", "dce"], print_after=lambda n, t: printed.append((n, t)))
    assert manager.run(graph)
    assert [n for n, _ in printed] == ["test-double-negation", "dce"]
    filecheck(printed[0][1], "CHECK: Relu(%x)\nCHECK-NOT: Neg\nCHECK: output \"y\" = %a")
    assert [(t.name, t.changed) for t in manager.timings] == [("test-double-negation", True), ("dce", False)]
    report = manager.timing_report()
    assert re.search(r"^test-double-negation\s+\d+\.\d+\s+1\s+1$", report, re.MULTILINE), report
    assert report.splitlines()[-1].startswith("total")


def test_manager_fixed_point_repeats_until_nothing_changes():
    manager = PassManager(["test-double-negation", "dce"], fixed_point=True)
    manager.run(parse_graph(CHAIN))
    # Round one changes something, round two confirms the fixed point.
    assert [t.name for t in manager.timings] == ["test-double-negation", "dce"] * 2


def test_manager_verifies_after_every_pass_and_names_the_culprit():
    with pytest.raises(VerificationError, match="after pass 'test-break-types'"):
        PassManager(["test-break-types"]).run(parse_graph(CHAIN))
    PassManager(["test-break-types"], verify=False).run(parse_graph(CHAIN))


def test_debug_mode_decides_verification_when_unspecified(monkeypatch):
    monkeypatch.setenv("EMBER_DEBUG", "1")
    assert debug_mode() and PassManager(["dce"], verify=None).verify
    monkeypatch.setenv("EMBER_DEBUG", "0")
    assert not PassManager(["dce"], verify=None).verify


def test_unknown_pass_lists_the_known_ones():
    with pytest.raises(EmberError, match="unknown pass 'nope'.*cse"):
        PassManager(["nope"])


def test_instrumentation_sees_every_manager_in_its_extent():
    chunks: list[str] = []
    timer = PassTimer()
    with instrumented(PrintAfterAll(chunks.append), timer):
        PassManager(["test-double-negation"]).run(parse_graph(CHAIN))
        PassManager(["dce"]).run(parse_graph(CHAIN))
    PassManager(["dce"]).run(parse_graph(CHAIN))  # outside: not recorded
    assert [c.splitlines()[0] for c in chunks] == ["// after test-double-negation", "// after dce"]
    assert [r.name for r in timer.records] == ["test-double-negation", "dce"]
    assert "test-double-negation" in timer.report()


# -- rewrite engine -------------------------------------------------------------------------

def test_rewrites_reach_a_fixed_point_and_keep_names():
    graph = parse_graph(CHAIN.replace('%c: f32[2,3] = Neg(%b) name="c"',
                                      '%c: f32[2,3] = Neg(%b) name="c"\n  %d: f32[2,3] = Neg(%c) name="d"\n'
                                      '  %e: f32[2,3] = Neg(%d) name="e"').replace('"y" = %c', '"y" = %e'))
    fired = apply_patterns(graph, [_double_negation])
    assert fired == {"double-negation": 2}
    filecheck(print_graph(graph), 'CHECK: %a: f32[2,3] = Relu(%x)\nCHECK-NOT: Neg\nCHECK: output "y" = %a')


@pattern("Relu")
def _relu_to_clip(rw: Rewriter, node: Node):
    from ember.ops.elementwise import ClipAttrs

    return rw.add("Clip", node.inputs[0], attrs=ClipAttrs(0.0, None))


def test_replacement_nodes_take_the_root_names_and_sit_before_it():
    graph = parse_graph(CHAIN)
    apply_patterns(graph, [_relu_to_clip])
    filecheck(print_graph(graph), '''
        CHECK: %a: f32[2,3] = Clip(%x) {min=0.0} name="a"
        CHECK-NEXT: %b: f32[2,3] = Neg(%a) name="b"''')


@pattern("Relu")
def _builds_then_declines(rw: Rewriter, node: Node):
    rw.add("Neg", node.inputs[0])
    rw.constant(__import__("numpy").zeros(3, "float32"), "scratch")
    return None


def test_a_declining_pattern_leaves_no_trace():
    graph = parse_graph(CHAIN)
    before = print_graph(graph)
    assert not apply_patterns(graph, [_builds_then_declines])
    assert print_graph(graph) == before


@pattern("Neg")
def _flip(rw: Rewriter, node: Node):
    return rw.add("Neg", node.inputs[0])


def test_patterns_that_never_settle_are_reported():
    with pytest.raises(EmberError, match="fixed point"):
        apply_patterns(parse_graph(CHAIN), [_flip])


@pattern("Relu")
def _wrong_type(rw: Rewriter, node: Node):
    from ember.ops.tensor import ReshapeAttrs

    return rw.add("Reshape", node.inputs[0], attrs=ReshapeAttrs((6,)))


def test_a_replacement_of_another_type_is_refused_with_the_pattern_name():
    with pytest.raises(VerificationError, match="pattern 'wrong-type'"):
        apply_patterns(parse_graph(CHAIN), [_wrong_type])


# -- pipeline as data and the CLI ----------------------------------------------------------------

def test_default_pipeline_names_registered_passes_with_one_comment_each():
    assert all(name in PASSES for name in DEFAULT_PIPELINE)
    source = (REPO / "src" / "ember" / "transforms" / "pipeline.py").read_text()
    entries = re.findall(r'^\s+"([\w-]+)",\s+# \S', source, re.MULTILINE)
    assert entries == DEFAULT_PIPELINE


def test_every_pass_documents_numbered_rules_and_has_a_test():
    tests = "\n".join(p.read_text() for p in (REPO / "tests").glob("test_transforms_*.py"))
    for name, cls in PASSES.items():
        if name.startswith("test-") or name == "lower":
            continue
        doc = cls.__doc__ or ""
        assert re.search(r"^\s*1\.", doc, re.MULTILINE), f"pass {name} lists no numbered rules"
        assert f'"{name}"' in tests, f"pass {name} has no test in tests/test_transforms_*.py"


def test_dump_print_after_all_shows_every_pass(capsys):
    assert cli_main(["dump", str(REPO / "examples" / "lenet.onnx"), "--stage", "optimized",
                     "--print-after-all", "--time-passes"]) == 0
    captured = capsys.readouterr()
    headers = re.findall(r"^// after ([\w-]+)$", captured.out, re.MULTILINE)
    assert headers[: len(DEFAULT_PIPELINE)] == DEFAULT_PIPELINE
    assert "fuse-activations" in captured.err and "total" in captured.err
    # The optimized stage itself comes last: the fused graph.
    filecheck(captured.out.rsplit("// after", 1)[1], 'CHECK: graph "lenet"\nCHECK: FusedConv')
