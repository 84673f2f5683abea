"""The backend protocol: the narrow interface every target implements, built in or a plugin
(docs/adding-a-backend.md is the guide).

A backend names itself, says which ops it executes natively (`supports`/`refusal`), which
high-level ops it wants lowered (`should_lower`) and which composite patterns it wants whole
(`patterns`), picks its graph and LIR pipelines (lists of pass names), compiles a verified
low-level program into an Executable, and may estimate a segment's run time (`cost`) and
state its device's memory (`memory_capacity`). The partitioner asks nothing else."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ember.graph import Graph, Node
from ember.lir.ir import Program
from ember.partition import Pattern
from ember.support.errors import UnsupportedError


class Executable(Protocol):
    """A compiled program. `run` takes arrays in program input order, already validated by
    the runtime, and returns arrays in program output order."""

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...


class Backend:
    """Defaults suit a backend that executes exactly the primitive ops."""

    name: str = ""
    # Compute precisions it has kernels for (ember.compile(precision=...)), and the one it
    # compiles for: "fp32", or "bf16" where a backend offers it (the cpu backend does).
    precisions: tuple[str, ...] = ("fp32",)
    precision: str = "fp32"
    # Bytes its device holds for one segment's weights and activations (None: host memory,
    # unbounded). The partitioner cuts segments that would not fit.
    memory_capacity: int | None = None
    # How errors name what compiles: "backend 'cpu'", or what it stands for (a bundle for a target).
    subject: str | None = None

    def describe(self) -> str:
        return self.subject or f"backend '{self.name}'"

    def supports(self, node: Node) -> bool:
        return node.opdef.primitive

    def refusal(self, node: Node) -> str | None:
        """Why this backend cannot run `node`, for error messages (None when it can)."""
        return None if self.supports(node) else "not supported by this backend"

    def should_lower(self, node: Node) -> bool:
        return not self.supports(node)

    def prefers_channels_last(self, node: Node) -> bool:
        """Whether `node` (an op with a channels-last form) runs faster here with its
        activations NHWC when its neighbours' are too (the assign-layouts pass asks)."""
        return False

    def patterns(self) -> list[Pattern]:
        """Composite patterns (chains such as Conv -> Add -> Relu) this backend wants to receive
        whole: the partitioner keeps each match in one segment, on this backend."""
        return []

    def cost(self, graph: Graph) -> float | None:
        """Estimated seconds for one run of `graph` (a unit or segment of a canonicalized model)
        on this backend, or None for Ember's generic estimate (partition/cost.py). Cost-based
        partitioning (backend="auto") compares these across backends."""
        return None

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

    def begin_compile(self, graph: Graph) -> None:
        """Called with the imported graph before any pass runs on it (ember.driver.compile_graph):
        a backend may start work that does not depend on the passes' results, to run beside
        them (the cpu backend starts building the kernel library on a fresh machine)."""

    def compile(self, program: Program) -> Executable:
        raise NotImplementedError(f"backend {self.name} does not compile programs")

    def load_executable(self, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> Executable:
        """Rebuilds an executable from what its `artifact()` method returned (files by name,
        JSON metadata), already verified against the artifact's hashes. A backend whose
        executables have no `artifact()` cannot be saved (CompiledModel.save says so)."""
        raise UnsupportedError(f"backend '{self.name}' cannot load saved executables")
