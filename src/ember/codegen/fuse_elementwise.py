"""`fuse-elementwise`: chains of elementwise instructions become one ElementwiseChain, which
the C backend computes in one loop with the intermediate values in registers.

Instruction B joins A's chain when B is the next computing instruction after A, both are
elementwise ops the C chain kernel computes, over the same output shape, B reads A's result,
and A's result is a plain activation that nothing after B reads (its `dealloc` sits between
A and the next computing instruction after B, or B writes it in place). Integer division
and remainder stay alone: their divide-by-zero check needs a loop of their own. The chain
writes only its last result while it reads its sources, so no source may share memory with
that result unless it is the same buffer read element for element (views of one buffer
could otherwise overlap it). Runs after buffer sharing and before kernel selection and
memory planning, so the planner sees the chain's real operands. A chain holds at most
MAX_CHAIN_STEPS instructions. Imports lir/ and the elementwise kernels' vocabulary."""
from __future__ import annotations

from ember.codegen.kernels.elementwise import EXPRESSIONS, traps
from ember.lir.chain import ELEMENTWISE_CHAIN, ChainAttrs, Step
from ember.lir.ir import ALLOC, DEALLOC, MARKERS, VIEW, Buffer, BufferKind, Instr, Program, footprint
from ember.lir.passes.registry import LirPass, get_lir_pass, register_lir_pass

# A chain ends after this many steps and the next one starts: past a few dozen operations a
# loop is compute-bound anyway, and one expression of thousands of steps made the C
# compiler (and the chain's own legality checks) take time quadratic in its length.
MAX_CHAIN_STEPS = 32


def _fusable(instr: Instr) -> bool:
    if instr.name not in EXPRESSIONS or instr.kernel is not None:
        return False
    return not traps(instr.name, [b.type.dtype for b in instr.base_operands[1:] if b is not None])


def _joinable(a: Instr, b: Instr, deallocs: list[Instr]) -> bool:
    if not (_fusable(a) and _fusable(b)):
        return False
    result, out = a.operand(0), b.operand(0)
    if result.kind is not BufferKind.ACTIVATION or result.is_view or result.type.shape != out.type.shape:
        return False
    if not any(op is result for op in b.operands[1:]):
        return False
    dies = any(m.operands[0] is result for m in deallocs)
    return dies or out is result


def _safe_output(members: list[Instr]) -> bool:
    out = members[-1].operand(0)
    results = {id(m.operand(0)) for m in members[:-1]}
    region, start, end = footprint(out)
    for member in members:
        for source in member.required()[1:]:
            if id(source) in results:
                continue
            other, s0, s1 = footprint(source)
            if other is not region or s1 <= start or end <= s0:
                continue
            if not (source is out or (s0 == start and source.type == out.type)):
                return False
    return True


def fusable_chains(instrs: list[Instr]) -> list[list[int]]:
    """Chains (lists of instruction indices, two or more) to fuse."""
    compute = [i for i, instr in enumerate(instrs) if instr.name not in MARKERS]
    chains: list[list[int]] = []
    current: list[int] = []
    for pos, index in enumerate(compute):
        if current:
            prev = current[-1]
            after = compute[pos + 1] if pos + 1 < len(compute) else len(instrs)
            between = [m for m in instrs[prev + 1:index] + instrs[index + 1:after] if m.name == DEALLOC]
            if (len(current) < MAX_CHAIN_STEPS and _joinable(instrs[prev], instrs[index], between)
                    and _safe_output([instrs[i] for i in current + [index]])):
                current.append(index)
                continue
            if len(current) > 1:
                chains.append(current)
        current = [index] if _fusable(instrs[index]) else []
    if len(current) > 1:
        chains.append(current)
    return chains


def build_chain(members: list[Instr]) -> Instr:
    """The ElementwiseChain computing `members` (each reading the previous ones' results)."""
    sources: list[Buffer] = []
    written: dict[int, int] = {}
    steps = []
    for k, member in enumerate(members):
        args = []
        for buffer in member.required()[1:]:
            if id(buffer) in written:
                args.append(f"v{written[id(buffer)]}")
                continue
            if buffer not in sources:
                sources.append(buffer)
            args.append(f"x{sources.index(buffer)}")
        steps.append(Step(member.name, tuple(args), member.attrs).text())
        written[id(member.operand(0))] = k
    source = "+".join(m.source for m in members if m.source)
    return Instr(ELEMENTWISE_CHAIN, [members[-1].operand(0), *sources], ChainAttrs(tuple(steps)), source=source)


@register_lir_pass
class FuseElementwise(LirPass):
    """Rules:
    1. chains are found as the module docstring says (fusable_chains);
    2. each becomes one ElementwiseChain at its last member's place, reading every source
       once (x0, x1, ... in first-use order) and each earlier member's result as a value
       (v0, v1, ...);
    3. the markers between its members keep their order: allocs and views before the
       chain, deallocs after it;
    4. the intermediate results' markers then go (delete-dead-allocs)."""

    name = "fuse-elementwise"

    def run(self, program: Program) -> bool:
        chains = fusable_chains(program.instrs)
        if not chains:
            return False
        instrs = program.instrs
        output: list[Instr] = []
        cursor = 0
        for chain in chains:
            first, last = chain[0], chain[-1]
            output.extend(instrs[cursor:first])
            span = instrs[first:last + 1]
            output.extend(m for m in span if m.name in (ALLOC, VIEW))
            output.append(build_chain([instrs[i] for i in chain]))
            output.extend(m for m in span if m.name == DEALLOC)
            cursor = last + 1
        output.extend(instrs[cursor:])
        program.instrs = output
        get_lir_pass("delete-dead-allocs").run(program)
        return True
