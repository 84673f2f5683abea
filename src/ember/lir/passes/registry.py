"""The LIR pass protocol and registry: a pass is a small named object with one entry point,
`run(program) -> bool` (whether it changed anything), registered by name. Pipelines are
lists of names (see pipeline.py); run_lir_pipeline runs one, verifying after every pass so a
broken rewrite is caught at the pass that made it. Imports lir/ir, lir/verify, lir/text."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.lir.ir import Program
from ember.lir.text import print_program
from ember.lir.verify import verify_program
from ember.support.errors import EmberError, VerificationError


class LirPass:
    """Base class: subclasses set `name` and implement `run`; the docstring of each pass
    states its rewrite rules and preconditions."""

    name: str = ""

    def run(self, program: Program) -> bool:
        raise NotImplementedError


LIR_PASSES: dict[str, type[LirPass]] = {}


def register_lir_pass(cls: type[LirPass]) -> type[LirPass]:
    if not cls.name:
        raise ValueError(f"LIR pass {cls.__name__} has no name")
    if LIR_PASSES.get(cls.name, cls) is not cls:
        raise ValueError(f"LIR pass name '{cls.name}' is registered twice")
    LIR_PASSES[cls.name] = cls
    return cls


def get_lir_pass(name: str) -> LirPass:
    try:
        return LIR_PASSES[name]()
    except KeyError:
        known = ", ".join(sorted(LIR_PASSES))
        raise EmberError(f"unknown LIR pass '{name}' (known: {known})") from None


def run_lir_pipeline(program: Program, pipeline: Sequence[str], *, verify: bool = True,
                     print_after: Callable[[str, str], None] | None = None) -> bool:
    """Runs the named passes once, in order; returns whether any changed the program."""
    changed = False
    for lir_pass in [get_lir_pass(name) for name in pipeline]:
        changed |= bool(lir_pass.run(program))
        if verify:
            try:
                verify_program(program)
            except VerificationError as err:
                raise VerificationError(f"after LIR pass '{lir_pass.name}': {err}") from None
        if print_after is not None:
            print_after(lir_pass.name, print_program(program))
    return changed
