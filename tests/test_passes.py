"""The pass infrastructure, shared by both IRs: the pass manager (once / fixed point,
verification, printing and timing after every pass), declared requires/ensures, the pass
context, pass objects as pipeline entries, instrumentation of graph and LIR pipelines, the
rewrite engine, the default pipeline as data, `ember dump --print-after-all`, and the
FileCheck helper itself."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import ember  # noqa: F401  (registers passes and lowerings)
from ember.backends.cpu import CpuBackend
from ember.cli import main as cli_main
from ember.graph import Graph, Node, parse_graph, print_graph
from ember.lir.passes import LIR, LIR_PASSES, LirPass, get_lir_pass, lir_pass_manager, run_lir_pipeline
from ember.lir.text import parse_program, print_program
from ember.passes import (
    GRAPH_IR,
    PASSES,
    GraphPass,
    PassContext,
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


# -- one infrastructure for both IRs ---------------------------------------------------------

PROGRAM = """program "p" {
  input %x: f32[4] "x"
  output %y: f32[4] "y"
  alloc %dead: f32[4]
  Exp @out %dead, @in %x
  dealloc %dead
  Relu @out %y, @in %x
}
"""


class _Declares(GraphPass):
    """Test-only, never registered: records its run and declares what it is told to."""

    def __init__(self, name: str, requires: tuple[str, ...] = (), ensures: tuple[str, ...] = (),
                 log: list[str] | None = None) -> None:
        self.name = name
        self.requires = frozenset(requires)
        self.ensures = frozenset(ensures)
        self.log = [] if log is None else log

    def run(self, graph: Graph) -> bool:
        self.log.append(self.name)
        return False


def test_a_pass_requiring_what_no_earlier_pass_ensures_is_refused_before_anything_runs():
    log: list[str] = []
    manager = PassManager([_Declares("lower-it", log=log), _Declares("schedule-it", requires=("lowered",), log=log)])
    with pytest.raises(EmberError, match="pass 'schedule-it' requires 'lowered', which no earlier pass ensures"):
        manager.run(parse_graph(CHAIN))
    assert log == []  # nothing ran


def test_requirements_are_met_by_earlier_passes_or_the_initial_properties():
    log: list[str] = []
    manager = PassManager([_Declares("lower-it", ensures=("lowered",), log=log),
                           _Declares("schedule-it", requires=("lowered",), ensures=("scheduled",), log=log)])
    manager.run(parse_graph(CHAIN))
    assert log == ["lower-it", "schedule-it"]
    assert manager.properties == {"lowered", "scheduled"}
    # A later pipeline takes over what an earlier one established.
    later = PassManager([_Declares("plan-it", requires=("scheduled",), log=log)], properties=manager.properties)
    later.run(parse_graph(CHAIN))
    assert log[-1] == "plan-it" and later.properties == {"lowered", "scheduled"}
    # A requirement ensured only by a later pass is still refused.
    with pytest.raises(EmberError, match="requires 'lowered'"):
        PassManager([_Declares("b", requires=("lowered",)), _Declares("a", ensures=("lowered",))]).run(
            parse_graph(CHAIN))


def test_the_lir_reads_its_properties_off_the_program():
    program = parse_program(PROGRAM)
    assert LIR.properties(program) == {"scheduled"}  # allocs without offsets, no kernels
    need_plan = _LirDeclares("needs-plan", requires=("memory-planned",))
    with pytest.raises(EmberError, match="LIR pass 'needs-plan' requires 'memory-planned'"):
        run_lir_pipeline(program, [need_plan])
    planned = parse_program(PROGRAM.replace("alloc %dead: f32[4]", "alloc %dead: f32[4] at 0"))
    assert LIR.properties(planned) == {"scheduled", "memory-planned"}
    run_lir_pipeline(planned, [need_plan])
    assert need_plan.ran


class _LirDeclares(LirPass):
    """Test-only, never registered (every registered LIR pass needs a text test)."""

    def __init__(self, name: str, requires: tuple[str, ...] = ()) -> None:
        self.name = name
        self.requires = frozenset(requires)
        self.ran = False
        self.seen_context = None

    def run(self, program) -> bool:
        self.ran = True
        self.seen_context = self.context
        return False


def test_passes_see_the_pipeline_context_and_entries_may_be_pass_objects():
    context = PassContext(backend="a backend", options={"threads": 2})
    lir_pass = _LirDeclares("look")
    run_lir_pipeline(parse_program(PROGRAM), ["dse", lir_pass], context=context)
    assert lir_pass.seen_context is context and context.options == {"threads": 2}
    graph_pass = _Declares("look")
    PassManager([graph_pass, "dce"], context=context).run(parse_graph(CHAIN))
    assert graph_pass.context is context
    # Without a context the pass keeps its own (class default None).
    fresh = _LirDeclares("fresh")
    run_lir_pipeline(parse_program(PROGRAM), [fresh])
    assert fresh.ran and fresh.seen_context is None
    assert PassContext().backend is None and PassContext().options == {}


def test_a_pass_of_the_other_ir_is_refused():
    with pytest.raises(EmberError, match="'dse' .* is not a pass: this pipeline runs on the graph IR"):
        PassManager([get_lir_pass("dse")])
    with pytest.raises(EmberError, match="unknown LIR pass 'dce'"):
        run_lir_pipeline(parse_program(PROGRAM), ["dce"])
    with pytest.raises(TypeError):
        PassManager([42])


def test_registries_are_dicts_of_pass_classes_with_their_ir_kind():
    assert PASSES.kind is GRAPH_IR and LIR_PASSES.kind is LIR
    assert isinstance(PASSES["dce"](), GraphPass) and isinstance(LIR_PASSES["dse"](), LirPass)
    with pytest.raises(ValueError, match="registered twice"):
        @register_pass
        class _Again(GraphPass):
            name = "dce"
    with pytest.raises(ValueError, match="does not derive from GraphPass"):
        PASSES.register(type("Odd", (LirPass,), {"name": "test-odd"}))
    assert "test-odd" not in PASSES


def test_lir_pipelines_verify_time_and_print_after_each_pass():
    program = parse_program(PROGRAM)
    printed: list[tuple[str, str]] = []
    manager = lir_pass_manager(["dse", "delete-dead-allocs"], print_after=lambda n, t: printed.append((n, t)))
    assert manager.run(program)
    assert [(t.name, t.changed) for t in manager.timings] == [("dse", True), ("delete-dead-allocs", True)]
    filecheck(printed[-1][1], 'CHECK: program "p"\nCHECK-NOT: %dead')
    assert printed[-1][1] == print_program(program)

    class _Break(LirPass):
        name = "break"

        def run(self, program) -> bool:
            program.instrs.insert(0, program.instrs.pop(1))  # Exp writes %dead before its alloc
            return True

    with pytest.raises(VerificationError, match="after LIR pass 'break'"):
        run_lir_pipeline(parse_program(PROGRAM), [_Break()])
    run_lir_pipeline(parse_program(PROGRAM), [_Break()], verify=False)


def test_instrumentation_sees_lir_passes_and_prints_them_as_lir():
    chunks: list[str] = []
    timer = PassTimer()
    with instrumented(PrintAfterAll(chunks.append, only_changed=True), timer):
        PassManager(["test-double-negation"]).run(parse_graph(CHAIN))
        run_lir_pipeline(parse_program(PROGRAM), ["dse", "hoist-dealloc"])
    assert chunks[0].startswith("// after test-double-negation\ngraph \"chain\" {")
    assert chunks[1].startswith("// after dse\nprogram \"p\" {")
    assert chunks[2] == "// after hoist-dealloc (unchanged)\n"
    assert [(r.name, r.ir) for r in timer.records] == [("test-double-negation", "graph"), ("dse", "lir"),
                                                      ("hoist-dealloc", "lir")]
    assert timer.records[1].nodes_after == 3  # LIR instructions after dse: alloc, dealloc, Relu
    report = timer.report()
    assert re.search(r"^dse\s+\d+\.\d+\s+1\s+1\s+lir$", report, re.MULTILINE), report


def test_dump_print_after_all_and_time_passes_cover_lir_passes(capsys):
    from ember.backends.cpu import CpuBackend
    from ember.lir.passes import DEFAULT_LIR_PIPELINE

    assert cli_main(["dump", str(REPO / "examples" / "lenet.onnx"), "--stage", "lir",
                     "--print-after-all", "--time-passes"]) == 0
    captured = capsys.readouterr()
    headers = re.findall(r"^// after ([\w-]+)$", captured.out, re.MULTILINE)
    # dump shows the cpu backend's pipeline: the default LIR passes, then its own.
    pipeline = CpuBackend(num_threads=1).lir_pipeline()
    assert pipeline[:len(DEFAULT_LIR_PIPELINE)] == DEFAULT_LIR_PIPELINE
    assert headers[-len(pipeline):] == pipeline
    last = captured.out.rsplit("// after", 1)[1]
    filecheck(last, 'CHECK: select-kernels\nCHECK-NEXT: program "lenet" {\nCHECK: kernel fully_connected_gemm(')
    assert re.search(r"^share-buffers\s.*\slir$", captured.err, re.MULTILINE), captured.err
    assert re.search(r"^fuse-activations\s.*\sgraph$", captured.err, re.MULTILINE), captured.err


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
    # `ember dump` compiles for the cpu backend: the default pipeline plus its own passes.
    expected = CpuBackend().pipeline()
    assert set(DEFAULT_PIPELINE) <= set(expected)
    assert headers[: len(expected)] == expected
    assert "fuse-activations" in captured.err and "total" in captured.err
    # The optimized stage itself comes last: the fused graph.
    filecheck(captured.out.rsplit("// after", 1)[1], 'CHECK: graph "lenet"\nCHECK: FusedConv')
