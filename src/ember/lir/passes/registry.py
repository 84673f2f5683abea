"""The LIR's instance of the shared pass infrastructure (passes/manager.py): its IR kind
(printed by print_program, verified by verify_program, parsed by parse_program), its pass
base LirPass and its registry LIR_PASSES. A pass is a small named object with one entry
point, `run(program) -> bool` (whether it changed anything), registered by name. Pipelines
are lists of names (see pipeline.py); run_lir_pipeline runs one through the PassManager,
verifying after every pass so a broken rewrite is caught at the pass that made it, with the
instrumentation (`--print-after-all`, `--time-passes`) and the pass context graph pipelines
have. Imports lir/ir, lir/verify, lir/text and passes/."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ember.lir.ir import Program
from ember.lir.text import parse_program, print_program
from ember.lir.verify import verify_program
from ember.passes.context import IRKind, PassContext
from ember.passes.manager import Pass, PassManager, PassRegistry


def program_properties(program: Program) -> frozenset[str]:
    """The properties a program shows by itself: "scheduled" (always: an instruction list is
    an order), "kernels-selected" once every computing instruction names its kernel,
    "memory-planned" once every activation with storage of its own has an arena offset."""
    properties = {"scheduled"}
    computing = program.compute_instrs()
    if computing and all(instr.kernel is not None for instr in computing):
        properties.add("kernels-selected")
    if all(buffer.offset is not None for buffer in program.activations()):
        properties.add("memory-planned")
    return frozenset(properties)


LIR = IRKind("lir", print=print_program, verify=verify_program, size=lambda program: len(program.instrs),
             keyword="program", parse=parse_program, properties=program_properties)


class LirPass(Pass):
    """Base class of LIR passes: subclasses set `name` and implement `run(program)`; the
    docstring of each pass states its rewrite rules and preconditions. `requires`,
    `ensures` and `context` are as for every pass (passes/manager.py)."""

    def run(self, program: Program) -> bool:
        raise NotImplementedError


LIR_PASSES = PassRegistry(LIR, LirPass, "LIR pass")


def register_lir_pass(cls: type[LirPass]) -> type[LirPass]:
    """Class decorator: registers an LIR pass under its `name`."""
    LIR_PASSES.register(cls)
    return cls


def get_lir_pass(name: str) -> LirPass:
    """A new instance of the LIR pass registered as `name`."""
    return LIR_PASSES.create(name)  # type: ignore[return-value]


def lir_pass_manager(pipeline: Sequence[str | LirPass], *, verify: bool | None = True,
                     print_after: Callable[[str, str], None] | None = None, context: PassContext | None = None,
                     properties: Iterable[str] = ()) -> PassManager:
    """A PassManager over LIR_PASSES (for its timings or properties after the run)."""
    return PassManager(pipeline, verify=verify, print_after=print_after, context=context, properties=properties,
                       registry=LIR_PASSES)


def run_lir_pipeline(program: Program, pipeline: Sequence[str | LirPass], *, verify: bool | None = True,
                     print_after: Callable[[str, str], None] | None = None, context: PassContext | None = None,
                     properties: Iterable[str] = ()) -> bool:
    """Runs the passes (names or LirPass objects) once, in order; returns whether any changed
    the program. Each pass sees `context` (a PassContext: the target backend) as its
    `context` attribute; `properties` are IR properties known to hold before the first."""
    manager = lir_pass_manager(pipeline, verify=verify, print_after=print_after, context=context,
                               properties=properties)
    return manager.run(program)
