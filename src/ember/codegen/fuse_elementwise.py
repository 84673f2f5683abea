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
from ember.lir.chain import ELEMENTWISE_CHAIN, ChainAttrs, Step, chain_steps
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


class _Sources:
    """A growing chain's sources that no member but the last computes (by id), kept as the
    chain grows so that checking a candidate costs its own operands, not the chain's."""

    def __init__(self, first: Instr) -> None:
        self.results: set[int] = set()
        self.last = first.operand(0)
        self.outside = {id(b): b for b in first.required()[1:]}

    def extended(self, member: Instr) -> dict[int, Buffer]:
        """The sources outside the chain once `member` joins (the current last becomes a member
        whose result the chain computes)."""
        outside = dict(self.outside)
        outside.pop(id(self.last), None)
        results = self.results | {id(self.last)}
        outside.update((id(b), b) for b in member.required()[1:] if id(b) not in results)
        return outside

    def add(self, member: Instr, outside: dict[int, Buffer]) -> None:
        self.results.add(id(self.last))
        self.last = member.operand(0)
        self.outside = outside


def _safe_output(out: Buffer, sources: dict[int, Buffer]) -> bool:
    """The chain writes `out` while reading `sources`: none may share memory with it unless
    it is `out` itself or the same buffer read element for element."""
    region, start, end = footprint(out)
    for source in sources.values():
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
    sources: _Sources | None = None
    for pos, index in enumerate(compute):
        instr = instrs[index]
        if current:
            assert sources is not None
            prev = current[-1]
            after = compute[pos + 1] if pos + 1 < len(compute) else len(instrs)
            between = [m for m in instrs[prev + 1:index] + instrs[index + 1:after] if m.name == DEALLOC]
            if len(current) < MAX_CHAIN_STEPS and _joinable(instrs[prev], instr, between):
                outside = sources.extended(instr)
                if _safe_output(instr.operand(0), outside):
                    current.append(index)
                    sources.add(instr, outside)
                    continue
            if len(current) > 1:
                chains.append(current)
        current = [index] if _fusable(instr) else []
        sources = _Sources(instr) if current else None
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


def _as_chain(instr: Instr) -> tuple[list[Buffer], list[Step]]:
    """An elementwise instruction or chain as (sources, steps)."""
    chain = instr if instr.name == ELEMENTWISE_CHAIN else build_chain([instr])
    return chain.required()[1:], chain_steps(chain.attrs)


def _overlaps(a: Buffer, b: Buffer) -> bool:
    ra, s0, e0 = footprint(a)
    rb, s1, e1 = footprint(b)
    return ra is rb and s0 < e1 and s1 < e0


def _inlinable(instrs: list[Instr | None], p: int, c: int, touching: dict[int, list[int]]) -> bool:
    """Whether producer instrs[p] (elementwise) can be computed inside reader instrs[c] (a
    chain or elementwise instruction): its result has the reader's shape, is read by nothing
    else and by no view, is wider than the producer's activation sources together (so that
    extending their lifetimes to the reader adds no memory) and is not the reader's output;
    nothing between them writes a source; the reader's output overlaps no source unless it is
    that source element for element. `touching`: per memory root, the instructions naming it."""
    producer, reader = instrs[p], instrs[c]
    assert producer is not None and reader is not None
    result, out = producer.operand(0), reader.operand(0)
    sources, steps = _as_chain(producer)
    if result.kind is not BufferKind.ACTIVATION or result.is_view or result.type.shape != out.type.shape \
            or _overlaps(out, result) or len(steps) + len(_as_chain(reader)[1]) > MAX_CHAIN_STEPS:
        return False
    if sum(b.type.nbytes for b in sources if b.kind is BufferKind.ACTIVATION) >= result.type.nbytes:
        return False
    for k in touching.get(id(footprint(result)[0]), ()):
        other = instrs[k]
        if k in (p, c) or other is None or (other.name in (ALLOC, DEALLOC) and other.operand(0) is result):
            continue
        return False  # another reader, or a view
    for source in sources:
        for k in touching.get(id(footprint(source)[0]), ()):
            other = instrs[k]
            if not p < k < c or other is None or other.name in MARKERS:
                continue
            if any(kind.writes and b is not None and _overlaps(b, source)
                   for b, kind in zip(other.operands, other.kinds(), strict=True)):
                return False
    return all(not _overlaps(out, b) or (b is out) for b in sources)


def inline_producers(program: Program) -> bool:
    """Rule 5: a chain's (or elementwise instruction's) source that an earlier elementwise
    instruction or chain computed for it alone is computed inside it instead (a quantized
    residual Add's skip operand, dequantized where it was quantized, two convolutions
    earlier): the producer's steps come first, the reader's take their value, the producer's
    sources' deallocs between the two move after the reader. One pass in program order."""
    instrs: list[Instr | None] = list(program.instrs)
    touching: dict[int, list[int]] = {}
    for k, instr in enumerate(instrs):
        assert instr is not None
        for b in instr.operands:
            if b is not None:
                touching.setdefault(id(footprint(b)[0]), []).append(k)
    producers: dict[int, int] = {}
    moved: dict[int, list[int]] = {}  # reader index -> deallocs to put after it
    dropped: set[int] = set()
    for k, reader in enumerate(instrs):
        if reader is None or reader.name in MARKERS or not _fusable_or_chain(reader):
            continue
        for source in list(reader.required()[1:]):
            p = producers.get(id(source))
            if p is None or not _inlinable(instrs, p, k, touching):
                continue
            producer = instrs[p]
            assert producer is not None and reader is not None
            read = _as_chain(producer)[0]
            # Every dealloc of a source's memory moves: the source's and, where it is a view, its
            # base's (a base must outlive its views).
            roots = {id(footprint(b)[0]) for b in read}
            deallocs = [j for j in range(p + 1, k) if j not in dropped and (m := instrs[j]) is not None
                        and m.name == DEALLOC and id(footprint(m.operand(0))[0]) in roots]
            reader = instrs[k] = _merge(producer, reader)
            instrs[p] = None
            for j in deallocs:
                dropped.add(j)
                for other in moved.values():
                    if j in other:
                        other.remove(j)
            moved.setdefault(k, []).extend(moved.pop(p, []) + deallocs)
            for b in read:
                touching.setdefault(id(footprint(b)[0]), []).append(k)
        producers[id(reader.operand(0))] = k
    if not any(instr is None for instr in instrs):
        return False
    output: list[Instr] = []
    for k, instr in enumerate(instrs):
        if instr is not None and k not in dropped:
            output.append(instr)
        for j in moved.get(k, ()):
            dealloc = instrs[j]
            assert dealloc is not None
            output.append(dealloc)
    program.instrs = output
    return True


def _fusable_or_chain(instr: Instr) -> bool:
    return instr.name == ELEMENTWISE_CHAIN or _fusable(instr)


def _merge(producer: Instr, reader: Instr) -> Instr:
    """One chain: the producer's steps, then the reader's with its result as a value."""
    p_sources, p_steps = _as_chain(producer)
    r_sources, r_steps = _as_chain(reader)
    result = producer.operand(0)
    sources = list(p_sources)
    shift = len(p_steps)

    def source_arg(buffer: Buffer) -> str:
        if buffer not in sources:
            sources.append(buffer)
        return f"x{sources.index(buffer)}"

    texts = [s.text() for s in p_steps]
    for step in r_steps:
        args = []
        for a in step.args:
            if a[0] == "v":
                args.append(f"v{int(a[1:]) + shift}")
            elif r_sources[int(a[1:])] is result:
                args.append(f"v{shift - 1}")
            else:
                args.append(source_arg(r_sources[int(a[1:])]))
        texts.append(Step(step.op, tuple(args), step.attrs).text())
    source = "+".join(m.source for m in (producer, reader) if m.source)
    return Instr(ELEMENTWISE_CHAIN, [reader.operand(0), *sources], ChainAttrs(tuple(texts)), source=source)


@register_lir_pass
class FuseElementwise(LirPass):
    """Rules:
    1. chains are found as the module docstring says (fusable_chains);
    2. each becomes one ElementwiseChain at its last member's place, reading every source
       once (x0, x1, ... in first-use order) and each earlier member's result as a value
       (v0, v1, ...);
    3. the markers between its members keep their order: allocs and views before the
       chain, deallocs after it;
    4. the intermediate results' markers then go (delete-dead-allocs);
    5. a source that an earlier elementwise instruction or chain computed for one reader alone
       is computed in the reader (inline_producers)."""

    name = "fuse-elementwise"

    def run(self, program: Program) -> bool:
        chains = fusable_chains(program.instrs)
        if chains:
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
        inlined = inline_producers(program)
        if not chains and not inlined:
            return False
        get_lir_pass("delete-dead-allocs").run(program)
        return True
