"""`ember dump MODEL --stage mappings [--target T]`: per compute node of a graph, its kernels
as tensor expressions, how each reads as a GEMM, the legal mappings onto each instruction of
the target (or why there are none), and the chosen mapping with its schedule and predicted
cycles; then the depthwise-separable blocks found, with the GEMM inside each.

Imports graph/, isa/ and support/."""
from __future__ import annotations

import functools

from ember.graph import Graph, Node
from ember.isa.describe import Target
from ember.isa.emit_c import emit_gemm
from ember.isa.kernels import Kernel, kernels_of
from ember.isa.mapper import MAX_FUSED, MAX_MAPPINGS, Mapping, Rejection, gemm_view, map_kernel
from ember.isa.schedule import Schedule, schedule
from ember.support.errors import UnsupportedError

SHOWN = 3       # mappings listed per instruction
SCHEDULED = 4   # mappings scheduled per instruction (the mapper's best first)


@functools.lru_cache(maxsize=512)
def _plan(kernel: Kernel, target: Target) -> tuple[dict[str, tuple[list[Mapping], list[Rejection]]],
                                                   list[Schedule]]:
    per_instruction = {}
    schedules: list[Schedule] = []
    for instruction in target.instructions:
        mappings, rejections = map_kernel(kernel, instruction)
        per_instruction[instruction.name] = (mappings, rejections)
        schedules += [schedule(m, target) for m in mappings[:SCHEDULED]]
    schedules.sort(key=lambda s: (s.mapping.lossy, s.cycles, str(s.mapping)))
    return per_instruction, schedules


def choose(kernel: Kernel, target: Target) -> Schedule | None:
    """The fastest predicted schedule, exact mappings before lossy ones; None if none is legal."""
    schedules = _plan(kernel, target)[1]
    return schedules[0] if schedules else None


def _is_depthwise(kernel: Kernel) -> bool:
    return gemm_view(kernel.expr).startswith("batched") and kernel.name == "conv"


def _is_pointwise(kernel: Kernel) -> bool:
    view = gemm_view(kernel.expr)
    return kernel.name == "conv" and view.startswith("GEMM") and "window" not in view


def format_mappings(graph: Graph, target: Target) -> str:
    lines = [f"// target {target.name}: {target.summary}",
             f"// mapper: fused groups of <= {MAX_FUSED} dims, <= {MAX_MAPPINGS} mappings per instruction; "
             f"the best {SCHEDULED} per instruction scheduled (analytic model, cold caches)"]
    total = 0.0
    chosen: dict[str, tuple[Kernel, Schedule | None]] = {}
    for node in graph.nodes:
        for kernel in kernels_of(node):
            lines.append("")
            lines.append(f"{node.location} {kernel}")
            lines.append(f"  reads as: {gemm_view(kernel.expr)}")
            per_instruction, _ = _plan(kernel, target)
            for name, (mappings, rejections) in per_instruction.items():
                if not mappings:
                    reasons = "; ".join(r.reason for r in rejections) or "no legal mapping"
                    lines.append(f"  {name}: none ({reasons})")
                    continue
                lines.append(f"  {name}: {len(mappings)} mapping{'s' if len(mappings) != 1 else ''}")
                for mapping in mappings[:SHOWN]:
                    lines += ["    " + text for text in str(mapping).splitlines()]
            best = choose(kernel, target)
            chosen[f"{node.name}/{kernel.name}"] = (kernel, best)
            if best is None:
                lines.append(f"  chosen: none: no instruction of {target.name} maps this kernel")
                continue
            total += best.cycles
            lines.append(f"  chosen: {str(best.mapping).splitlines()[0]}")
            lines += ["    " + text for text in str(best).splitlines()]
            lines.append(f"    C emitter: {_emitter(best)}")
    lines.append("")
    lines += _separable_blocks(graph, chosen)
    lines.append(f"total predicted: {total:,.0f} cycles ({total / (target.frequency_ghz * 1e9) * 1e3:,.3f} ms at "
                 f"{target.frequency_ghz:g} GHz) over {len(chosen)} kernels")
    return "\n".join(lines) + "\n"


def _emitter(best: Schedule) -> str:
    try:
        return emit_gemm(best).summary()
    except UnsupportedError as err:
        return f"none ({str(err).rsplit(': ', 1)[-1]})"


def _separable_blocks(graph: Graph, chosen: dict[str, tuple[Kernel, Schedule | None]]) -> list[str]:
    """Depthwise convolutions whose result feeds a pointwise (1x1) one: the pointwise half is a
    GEMM over channels x pixels, which the mapper found without being told."""
    users = graph.users()
    lines = []
    for node in graph.nodes:
        depthwise = [k for k in kernels_of(node) if _is_depthwise(k)]
        if not depthwise:
            continue
        for user, _ in users.get(node.outputs[0], []):
            pointwise = [k for k in kernels_of(user) if _is_pointwise(k)]
            if not pointwise:
                continue
            lines.append(f"depthwise-separable block: {node.location} -> {user.location}")
            for role, part, owner in (("depthwise", depthwise[0], node), ("pointwise", pointwise[0], user)):
                _, best = chosen.get(f"{owner.name}/{part.name}", (None, None))
                mapped = f"{str(best.mapping).splitlines()[0]}, {best.cycles:,.0f} cycles" if best else "no mapping"
                lines.append(f"  {role}: {gemm_view(part.expr)}")
                lines.append(f"    mapped {mapped}")
    return lines or ["depthwise-separable blocks: none"]


def mapped_nodes(graph: Graph, target: Target) -> dict[str, Schedule | None]:
    """Per compute node and kernel ('node/kernel'), the chosen schedule (None: no mapping)."""
    result: dict[str, Schedule | None] = {}
    for node in graph.nodes:
        for kernel in kernels_of(node):
            result[f"{node.name}/{kernel.name}"] = choose(kernel, target)
    return result


__all__ = ["Node", "choose", "format_mappings", "mapped_nodes"]
