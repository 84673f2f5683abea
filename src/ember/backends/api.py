"""The backend protocol: the narrow interface every target implements.

A backend names itself, says which ops it executes natively (`supports`) and which high-level
ops it wants lowered (`should_lower`), picks its graph and LIR pipelines (lists of pass names)
and compiles a verified low-level program into an Executable."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ember.graph import Node
from ember.lir.ir import Program


class Executable(Protocol):
    """A compiled program. `run` takes arrays in program input order, already validated by
    the runtime, and returns arrays in program output order."""

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...


class Backend:
    """Defaults suit a backend that executes exactly the primitive ops."""

    name: str = ""

    def supports(self, node: Node) -> bool:
        return node.opdef.primitive

    def refusal(self, node: Node) -> str | None:
        """Why this backend cannot run `node`, for error messages (None when it can)."""
        return None if self.supports(node) else "not supported by this backend"

    def should_lower(self, node: Node) -> bool:
        return not self.supports(node)

    def pipeline(self) -> list[str]:
        from ember.transforms import DEFAULT_PIPELINE

        return list(DEFAULT_PIPELINE)

    def post_lowering_pipeline(self) -> list[str]:
        """Passes run after lowering: clean-up, and any re-fusion of what lowering exposed."""
        return ["constant-fold", "dce"]

    def lir_pipeline(self) -> list[str]:
        """LIR passes run before memory planning (a native backend ends with its own, e.g.
        kernel selection). They see this backend through the pass context."""
        from ember.lir.passes import DEFAULT_LIR_PIPELINE

        return list(DEFAULT_LIR_PIPELINE)

    def compile(self, program: Program) -> Executable:
        raise NotImplementedError(f"backend {self.name} does not compile programs")
