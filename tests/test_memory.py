"""Memory planning: liveness, placement (randomized: no two simultaneously live buffers
overlap), the report and its text, views in the LIR text and verifier, the interpreter on the
planned arena, and every shared model within 10% of the lower bound with matching outputs."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import ember
from ember.backends.interpreter import InterpretedProgram
from ember.cli import main as cli_main
from ember.driver import compile_model
from ember.lir.ir import Buffer, BufferKind, resolve_address
from ember.lir.passes import DEFAULT_LIR_PIPELINE, run_lir_pipeline
from ember.lir.text import parse_program, print_program
from ember.lir.verify import verify_program
from ember.memory import ALIGNMENT, Interval, format_plan, live_intervals, max_live_bytes, place, plan_memory
from ember.memory.placement import STRATEGIES
from ember.support.errors import ParseError
from ember.types import DType, TensorType
from tests.conftest import EXAMPLES, require_shared_models, shared_model_names
from tests.helpers import relative_error


def random_intervals(rng: np.random.Generator, count: int, horizon: int) -> list[Interval]:
    starts = rng.integers(0, horizon, count)
    lengths = rng.geometric(0.05, count)
    sizes = rng.choice([1, 2, 3, 8, 64, 500], count) * ALIGNMENT
    return [Interval(None, int(s), int(s + n), int(z)) for s, n, z in zip(starts, lengths, sizes, strict=True)]


def assert_no_conflicts(intervals: list[Interval], offsets) -> None:
    starts = np.array([i.start for i in intervals])
    ends = np.array([i.end for i in intervals])
    lo = np.array(offsets)
    hi = lo + np.array([i.size for i in intervals])
    in_time = (starts[:, None] <= ends[None, :]) & (starts[None, :] <= ends[:, None])
    in_space = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
    clash = in_time & in_space
    np.fill_diagonal(clash, False)
    assert not clash.any(), f"{int(clash.sum()) // 2} pairs of live buffers overlap"
    assert all(o % ALIGNMENT == 0 for o in offsets)


def test_random_intervals_never_overlap_while_live():
    rng = np.random.default_rng(7)
    intervals = random_intervals(rng, 3000, 4000)
    placement = place(intervals)
    assert_no_conflicts(intervals, placement.offsets)
    bound = max_live_bytes(intervals)
    assert bound <= placement.arena <= 1.10 * bound, placement


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_places_legally(strategy):
    rng = np.random.default_rng(hash(strategy) % 1000)
    for _ in range(3):
        intervals = random_intervals(rng, 400, 300)
        placement = place(intervals, [strategy])
        assert_no_conflicts(intervals, placement.offsets)
        assert placement.arena >= max_live_bytes(intervals)


def test_lower_bound_is_the_most_bytes_live_at_one_instruction():
    rng = np.random.default_rng(3)
    intervals = random_intervals(rng, 200, 100)
    brute = max(sum(i.size for i in intervals if i.start <= t <= i.end) for t in range(200))
    assert max_live_bytes(intervals) == brute
    assert max_live_bytes([]) == 0


def test_search_stops_at_the_lower_bound():
    chain = [Interval(None, t, t + 1, 64 * (t % 2 + 1)) for t in range(10)]
    placement = place(chain)
    assert placement.arena == max_live_bytes(chain) == 192
    assert placement.strategy == "max-live/size, first-fit"  # the first try already hit it


PROGRAM = """\
    program "p" {
      input %x: f32[100] "x"
      output %y: f32[100] "y"
      alloc %a: f32[100]
      Exp @out %a, @in %x
      alloc %b: f32[10,10]
      Reshape @out %b, @in %a {shape=[10, 10]}
      alloc %c: f32[10,10]
      Exp @out %c, @in %b
      alloc %d: f32[10,10]
      Add @out %d, @in %b, @in %c
      dealloc %b
      dealloc %c
      alloc %e: f32[1,100]
      Reshape @out %e, @in %d {shape=[1, 100]}
      dealloc %d
      Reshape @out %y, @in %e {shape=[100]}
      dealloc %e
      dealloc %a
    }
"""


def test_plan_sets_aligned_offsets_and_reports():
    program = parse_program(textwrap.dedent(PROGRAM))
    plan = plan_memory(program)
    assert {p.buffer.name for p in plan.placements} == {"a", "b", "c", "d", "e"}
    assert all(b.offset is not None and b.offset % ALIGNMENT == 0 for b in program.activations())
    assert plan.unshared_bytes == 5 * 400
    assert plan.lower_bound_bytes == 4 * 448  # a, b, c and d live at the Add, each 400 -> 448
    assert plan.arena_bytes == plan.lower_bound_bytes and plan.efficiency == 1.0
    text = format_plan(plan)
    assert "efficiency:       1.000" in text and "lower bound:      1792 bytes" in text
    assert text.count("  %") == 5  # one chart line per buffer


def test_pipeline_then_plan_shrinks_the_arena_and_text_round_trips_with_offsets():
    program = parse_program(textwrap.dedent(PROGRAM))
    run_lir_pipeline(program, DEFAULT_LIR_PIPELINE)
    plan = plan_memory(program)
    # The reshapes became views: %a lives in %b, and %d and %e in the output.
    assert [b.name for b in program.activations()] == ["b", "c"]
    assert plan.arena_bytes == plan.lower_bound_bytes == 2 * 448
    text = print_program(program)
    assert "alloc %b: f32[10,10] at 0\n  view %a: f32[100] of %b at 0\n" in text
    assert "alloc %c: f32[10,10] at 448\n" in text
    assert "view %e: f32[1,100] of %y at 0\n  view %d: f32[10,10] of %e at 0\n" in text
    assert print_program(parse_program(text)) == text


def test_resolve_address_follows_view_chains():
    f32 = DType.FLOAT32
    root = Buffer("r", TensorType(f32, (4, 4)), BufferKind.ACTIVATION, offset=128)
    row = Buffer("row", TensorType(f32, (4,)), BufferKind.ACTIVATION, view_of=root, view_offset=16)
    two = Buffer("two", TensorType(f32, (2,)), BufferKind.ACTIVATION, view_of=row, view_offset=8)
    assert resolve_address(two) == (root, 24)
    assert resolve_address(root) == (root, 0)


@pytest.mark.parametrize("body, message", [
    ("alloc %a: f32[4]\n view %v: f32[8] of %a at 0\n dealloc %v\n dealloc %a",
     "covers bytes \\[0, 32\\) of 'a', which has 16"),
    ("alloc %a: f32[4]\n view %v: f32[2] of %a at 2\n dealloc %v\n dealloc %a", "inside an element"),
    ("alloc %a: f32[4]\n view %v: f32[2] of %a at 0\n dealloc %a\n dealloc %v", "'a' dies while its view 'v'"),
    ("alloc %a: f32[4]\n dealloc %a\n view %v: f32[2] of %a at 0\n dealloc %v", "which is not live"),
    ("view %v: f32[4] of %x at 0\n Relu @out %v, @in %x\n dealloc %v", "writes input 'x' through view 'v'"),
])
def test_verifier_checks_views(body, message):
    text = f'program "p" {{\n input %x: f32[4] "x"\n {body}\n}}\n'
    with pytest.raises(ParseError, match=message):
        parse_program(text)


def test_interpreter_runs_on_the_planned_arena():
    program = parse_program(textwrap.dedent(PROGRAM))
    plan_memory(program)
    x = np.linspace(-1, 1, 100).astype(np.float32)
    expected = (np.exp(x) + np.exp(np.exp(x)))
    np.testing.assert_allclose(InterpretedProgram(program).run([x])[0], expected, rtol=1e-6)
    # Put two buffers that are live together on the same bytes: the numbers go wrong.
    by_name = {b.name: b for b in program.activations()}
    by_name["c"].offset = by_name["b"].offset
    verify_program(program)  # the verifier does not know about offsets; the arena shows it
    assert not np.allclose(InterpretedProgram(program).run([x])[0], expected)


def test_liveness_runs_from_alloc_to_dealloc():
    program = parse_program(textwrap.dedent(PROGRAM))
    spans = {i.buffer.name: (i.start, i.end) for i in live_intervals(program)}
    assert spans["a"] == (0, 15) and spans["b"] == (2, 8)


def test_compile_stats_and_dump_memory_stage(capsys):
    observed = {}
    model = compile_model(str(EXAMPLES / "lenet.onnx"), observer=lambda s, a: observed.setdefault(s, a))
    stats = model.stats
    plan = observed["memory"]
    assert stats["arena_bytes"] == plan.arena_bytes >= stats["arena_lower_bound_bytes"] > 0
    assert stats["activation_bytes_unshared"] >= stats["arena_bytes"]
    assert stats["weight_bytes"] > 0 and stats["instructions"] > 0
    # compile_model defaults to the interpreter, dump to the cpu pipeline: compare the same one.
    assert cli_main(["dump", str(EXAMPLES / "lenet.onnx"), "--stage", "memory", "--backend", "interpreter"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("memory plan for") and f"arena:            {plan.arena_bytes} bytes" in out
    assert cli_main(["dump", str(EXAMPLES / "lenet.onnx"), "--stage", "lir"]) == 0
    assert " at 0" in capsys.readouterr().out


@pytest.mark.parametrize("name", shared_model_names() or ["(none)"])
def test_shared_models_plan_near_the_bound_and_match_references(name):
    models = require_shared_models()
    observed = {}
    model = compile_model(str(models / f"{name}.onnx"), observer=lambda s, a: observed.setdefault(s, a))
    stats = model.stats
    assert stats["arena_bytes"] <= 1.10 * stats["arena_lower_bound_bytes"], stats
    reference = dict(np.load(models / f"{name}.ref.npz"))
    inputs = {k[3:]: v for k, v in reference.items() if k.startswith("in_")}
    for index, value in enumerate(model.run(inputs).values()):
        assert relative_error(value, reference[f"out_{index}"]) <= 1e-4
    program = observed["lir"]
    text = print_program(program)
    weights = {w.name: w.data for w in program.weights}
    assert print_program(parse_program(text, weights)) == text
    for buffer in program.buffers():
        root, offset = resolve_address(buffer)
        assert root.kind is not BufferKind.ACTIVATION or root.offset is not None, buffer.name


def test_public_compile_reports_memory_stats():
    model = ember.compile(str(EXAMPLES / "lenet.onnx"), backend="interpreter")
    assert {"arena_bytes", "arena_lower_bound_bytes", "activation_bytes_unshared", "weight_bytes",
            "instructions"} <= set(model.stats)
