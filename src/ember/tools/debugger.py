"""The network debugger (Glow's, TVM's debug executor): run a compiled program step by step
on its backend, read every instruction's outputs between steps, and compare each with a
reference, naming the first node whose output diverges beyond tolerance.

References:
- "interpreter": the same program (the backend's own instructions, fused ones included),
  each instruction run with the op table's NumPy semantics. Two comparisons per step: the
  *chained* one (the interpreter running the whole program on its own) finds the first
  divergence; the *local* one (this instruction alone, fed the backend's own inputs) tells a
  wrong kernel from inputs that were already off.
- "ort": ONNX Runtime on the original model with every intermediate tensor made an output,
  compared where an instruction's output keeps an ONNX tensor's name (fused groups are
  compared at the tensor that ends them).

A step's result is judged as numpy.testing.assert_allclose judges: |actual - expected| <=
atol + rtol * |expected| everywhere (NaN matches NaN)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.backends.profiling import StepInfo, read_buffer, step_infos
from ember.lir.ir import MARKERS, Buffer, Program
from ember.support.errors import EmberError


@dataclass(frozen=True)
class TensorStats:
    mean: float
    std: float
    min: float
    max: float
    nan: int

    @staticmethod
    def of(array: np.ndarray) -> TensorStats:
        data = np.asarray(array, np.float64)
        finite = data[np.isfinite(data)]
        if not finite.size:
            return TensorStats(float("nan"), float("nan"), float("nan"), float("nan"), int(np.isnan(data).sum()))
        return TensorStats(float(finite.mean()), float(finite.std()), float(finite.min()), float(finite.max()),
                           int(np.isnan(data).sum()))

    def format(self) -> str:
        text = f"mean {self.mean:.4g}, std {self.std:.4g}, min {self.min:.4g}, max {self.max:.4g}"
        return text + (f", {self.nan} NaN" if self.nan else "")


@dataclass(frozen=True)
class Comparison:
    """One output buffer against its reference."""

    ok: bool
    max_abs_error: float
    mismatched: int
    size: int
    worst_index: tuple[int, ...]
    actual: TensorStats
    expected: TensorStats

    def format(self) -> str:
        return (f"max abs error {self.max_abs_error:.4g} ({self.mismatched} of {self.size} elements outside "
                f"tolerance; worst at {list(self.worst_index)})")


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> Comparison:
    if actual.shape != expected.shape:
        raise EmberError(f"shapes differ: {list(actual.shape)} vs reference {list(expected.shape)}")
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    with np.errstate(invalid="ignore"):
        # As numpy.testing.assert_allclose: equal values (an infinity on both sides included:
        # inf - inf is NaN) have no error, NaN matches NaN, an infinity matches only itself.
        error = np.where(a == e, 0.0, np.abs(a - e))
        both_nan = np.isnan(a) & np.isnan(e)
        close = (a == e) | both_nan | (np.isfinite(a) & np.isfinite(e) & (error <= atol + rtol * np.abs(e)))
        bad = ~close
    error = np.where(both_nan, 0.0, np.where(np.isnan(error), np.inf, error))
    worst = np.unravel_index(int(np.argmax(error)), error.shape) if error.size else ()
    return Comparison(not bad.any(), float(error.max()) if error.size else 0.0, int(bad.sum()), int(a.size),
                      tuple(int(i) for i in worst), TensorStats.of(a), TensorStats.of(e))


@dataclass
class StepCheck:
    """A step's outputs checked: per output buffer the chained comparison, and (interpreter
    reference) the local one."""

    step: StepInfo
    buffers: list[str]
    chained: list[Comparison | None]
    local: list[Comparison | None] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c is None or c.ok for c in self.chained)

    @property
    def checked(self) -> bool:
        return any(c is not None for c in self.chained)


@dataclass
class DebugReport:
    backend: str
    reference: str
    rtol: float
    atol: float
    checks: list[StepCheck]

    @property
    def first_divergence(self) -> StepCheck | None:
        return next((c for c in self.checks if not c.ok), None)

    def format(self) -> str:
        checked = sum(c.checked for c in self.checks)
        lines = [f"{checked} of {len(self.checks)} steps compared ({self.backend} against {self.reference}, "
                 f"rtol {self.rtol:g}, atol {self.atol:g})"]
        bad = self.first_divergence
        if bad is None and not checked:
            lines.append(f"no step could be compared: none of the program's steps keeps a tensor that {self.reference} "
                         "computes (names or shapes differ); try --reference interpreter")
            return "\n".join(lines) + "\n"
        if bad is None:
            lines.append("every compared output is within tolerance")
            worst = max((c for check in self.checks for c in check.chained if c is not None),
                        key=lambda c: c.max_abs_error, default=None)
            if worst is not None:
                lines.append(f"largest error anywhere: {worst.max_abs_error:.4g}")
            return "\n".join(lines) + "\n"
        step = bad.step
        lines.append(f"first divergence: node '{step.node}' ({step.op}, kernel {step.kernel}, "
                     f"instruction {step.index})")
        for index, (name, chained) in enumerate(zip(bad.buffers, bad.chained, strict=True)):
            if chained is None or chained.ok:
                continue
            lines.append(f"  output %{name}: {chained.format()}")
            lines.append(f"    {self.backend}: {chained.actual.format()}")
            lines.append(f"    {self.reference}: {chained.expected.format()}")
            local = bad.local[index] if index < len(bad.local) else None
            if local is not None:
                verdict = ("differs too: the kernel itself computes wrong results" if not local.ok else
                           "agrees: the difference comes in with its inputs (an earlier step or the weights read)")
                lines.append(f"  the reference run on {self.backend}'s own inputs {verdict} "
                             f"(max abs error {local.max_abs_error:.4g})")
        later = [c for c in self.checks if not c.ok]
        lines.append(f"{len(later)} step(s) diverge in all; the first is the one to look at")
        return "\n".join(lines) + "\n"


def _step_outputs(program: Program, index: int) -> list[Buffer]:
    """The buffers instruction `index` writes as its results (not its kernel's scratch)."""
    instr = program.instrs[index]
    base = instr.base_operands
    return [b for b, kind in zip(base, instr.kinds()[:len(base)], strict=True) if b is not None and kind.writes]


def snapshot_run(executable: Any, program: Program, inputs: Sequence[np.ndarray],
                 with_inputs: bool = False) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """Runs `executable` step by step (run_stepwise); returns per step its output buffers'
    values after it ran and, with_inputs, its input buffers' values before it ran."""
    stepwise = getattr(executable, "run_stepwise", None)
    if stepwise is None:
        raise EmberError(f"{type(executable).__name__} cannot run step by step (the cpu backend and the interpreter "
                         "can; a saved model cannot)")
    indices = [i for i, instr in enumerate(program.instrs) if instr.name not in MARKERS]
    outputs: list[list[np.ndarray]] = []
    before: list[list[np.ndarray]] = []

    def hook(k: int, arena: np.ndarray, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> bool:
        if k > 0:
            buffers = _step_outputs(program, indices[k - 1])
            outputs.append([read_buffer(program, b, arena, ins, outs) for b in buffers])
        if with_inputs and k < len(indices):
            instr = program.instrs[indices[k]]
            before.append([read_buffer(program, b, arena, ins, outs) for b in _base_inputs(instr)])
        return False

    stepwise(list(inputs), hook)
    return outputs, before


def _base_inputs(instr: Any) -> list[Buffer]:
    base = instr.base_operands
    return [b for b, kind in zip(base, instr.kinds()[:len(base)], strict=True) if b is not None and kind.reads]


def local_reference(program: Program, index: int, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The interpreter's result of instruction `index` alone, fed `inputs` (values of its
    input operands, in order)."""
    from ember.backends.interpreter import reference_step

    instr = program.instrs[index]
    env: dict[int, np.ndarray] = {}
    for buffer, value in zip(_base_inputs(instr), inputs, strict=True):
        env[id(buffer)] = value.copy()
    outs = _step_outputs(program, index)
    for buffer in outs:
        if id(buffer) not in env:
            env[id(buffer)] = np.empty(buffer.type.shape, buffer.type.dtype.numpy)
    with np.errstate(all="ignore"):
        reference_step(instr)(env)
    return [env[id(b)] for b in outs]


def debug_program(program: Program, executable: Any, inputs: Sequence[np.ndarray], backend: str, *,
                  reference: str = "interpreter", rtol: float = 1e-3, atol: float = 1e-4,
                  ort_values: Mapping[str, Sequence[np.ndarray | None]] | None = None) -> DebugReport:
    """Checks every step of `executable` (compiled from `program`) on `inputs` (program
    order) against the reference ("interpreter", or "ort" with ort_values: ONNX node name ->
    its outputs' values, None where unknown) and reports the first divergence. Buffers are
    matched through the steps' graph nodes, not their names: buffer sharing lets one buffer
    hold several values."""
    steps = step_infos(program)
    actual, before = snapshot_run(executable, program, inputs, with_inputs=reference == "interpreter")
    checks = []
    if reference == "interpreter":
        from ember.backends.interpreter import InterpretedProgram

        expected, _ = snapshot_run(InterpretedProgram(program), program, inputs)
        for k, step in enumerate(steps):
            buffers = _step_outputs(program, step.index)
            chained = [compare(a, e, rtol, atol) for a, e in zip(actual[k], expected[k], strict=True)]
            check = StepCheck(step, [b.name for b in buffers], list(chained))
            if not check.ok:
                local = local_reference(program, step.index, before[k])
                check.local = [compare(a, e, rtol, atol) for a, e in zip(actual[k], local, strict=True)]
            checks.append(check)
    elif reference == "ort":
        by_node = ort_values or {}
        for k, step in enumerate(steps):
            buffers = _step_outputs(program, step.index)
            # A fused step is named after its group's nodes joined by '+'; its result is the last one's.
            wanted = by_node.get(step.node.rsplit("+", 1)[-1], [])
            found: list[Comparison | None] = []
            for position, value in enumerate(actual[k]):
                theirs = wanted[position] if len(wanted) == len(buffers) else None
                found.append(compare(value, theirs, rtol, atol) if theirs is not None and
                             np.shape(theirs) == value.shape else None)
            checks.append(StepCheck(step, [b.name for b in buffers], found))
    else:
        raise EmberError(f"reference {reference!r}: use interpreter or ort")
    return DebugReport(backend, reference, rtol, atol, checks)


@dataclass
class DebugSession:
    """A model compiled for debugging: the program kept beside its executable."""

    program: Program
    executable: Any
    backend: str

    def inputs_in_order(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        names = [b.external_name or b.name for b in self.program.inputs]
        missing = [n for n in names if n not in feeds]
        if missing:
            raise EmberError(f"missing inputs {missing} (the model takes {names})")
        return [np.ascontiguousarray(feeds[n]) for n in names]


def compile_for_debug(model: Any, backend: str = "cpu", input_shapes: Mapping[str, Sequence[int]] | None = None,
                      backend_options: Mapping[str, Any] | None = None) -> DebugSession:
    """Compiles as ember.compile does for one backend, keeping the program the debugger reads."""
    from ember.backends import get_backend
    from ember.driver import load_model, prepare_program

    target = get_backend(backend, **(backend_options or {}))
    program, _, _ = prepare_program(load_model(model, input_shapes), target)
    return DebugSession(program, target.compile(program), backend)
