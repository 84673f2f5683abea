"""The scheduler and its analytic cost model: for one mapping on one target, a register tile,
a tile per memory level with its loop order, and predicted cycles (roofline style).

The loop dimensions of a mapped kernel are its outer dimensions (step 1) and the instruction's
dimensions (each over its fused kernel dimensions, padded, stepping by the instruction's
width). Tiles are chosen inside out:

- registers: unroll the output's dimensions until the accumulators, the register-held input
  blocks and one register per broadcast operand fill the register file, taking the tile with
  the fewest loaded bytes per issue (ties: more accumulators, to hide the latency);
- each memory level (caches shared by all operands; scratchpads by the operands they hold):
  starting from the tile inside it, double the dimension (or take it whole) that saves the
  most traffic from the level outside per byte of footprint, while the tiles fit the level's
  usable capacity.

An operand's traffic into a level is its tile footprint times its fetches, the product of the
trip counts of the tile loops outside and at the innermost loop that indexes it (so loops that
do not index it reuse it); of six loop orders (which operand stays longest, which next) the
cheapest is kept. Predicted cycles = max(compute, traffic / bandwidth at every level) plus
run-time packing, times the kernel's repeat count. Compute is issues / throughput, slowed when
fewer accumulator chains than latency x throughput are in flight, or the instruction's cycles
formula per issue (a systolic fold), with a streamed ('*') dimension issued in tiles.

Imports isa.mapper, isa.describe, isa.kernels, isa.expr and support/."""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping as Mapping_
from dataclasses import dataclass

from ember.isa.describe import Target
from ember.isa.mapper import Mapping

REPEAT_LIMIT = 64  # greedy growth steps per level: a visible bound on the search
STREAM_CANDIDATES = 8  # streamed lengths tried at the first level (halving from the longest that fits)


@dataclass(frozen=True)
class LevelPlan:
    name: str
    tile: tuple[tuple[str, int], ...]
    order: tuple[str, ...]            # tile loops, outermost first (loops of one trip left out)
    footprints: tuple[tuple[str, int], ...]           # bytes of each operand's tile held here
    capacity: tuple[tuple[str | None, float], ...]    # usable bytes: shared (None) or per operand
    traffic: int                      # bytes moved into this level over the run
    cycles: float                     # traffic / bandwidth

    def fits(self) -> bool:
        return _fits(dict(self.footprints), dict(self.capacity))

    def __str__(self) -> str:
        tile = " ".join(f"{d}={t}" for d, t in self.tile)
        capacity = dict(self.capacity)
        if None in capacity:
            occupancy = f"{_kib(sum(size for _, size in self.footprints))} of {_kib(capacity[None])}"
        else:
            occupancy = ", ".join(f"{op} {_kib(size)} of {_kib(capacity.get(op, math.inf))}"
                                  for op, size in self.footprints)
        return (f"{self.name}: tile {tile}; order {','.join(self.order) or '-'}; {occupancy}; "
                f"traffic {_kib(self.traffic)} = {self.cycles:,.0f} cycles")


@dataclass(frozen=True)
class Schedule:
    mapping: Mapping
    target: Target
    levels: tuple[LevelPlan, ...]
    compute_cycles: float
    packing_cycles: float
    cycles: float
    bound: str

    @property
    def seconds(self) -> float:
        return self.cycles / (self.target.frequency_ghz * 1e9)

    @property
    def gflops(self) -> float:
        flops = 2 * self.mapping.kernel.expr.iterations * self.mapping.kernel.repeat
        return flops / self.seconds / 1e9 if self.seconds else 0.0

    def __str__(self) -> str:
        lines = [f"predicted {self.cycles:,.0f} cycles ({self.seconds * 1e6:,.1f} us at "
                 f"{self.target.frequency_ghz:g} GHz, {self.gflops:,.1f} GFLOP/s), {self.bound}-bound; "
                 f"compute {self.compute_cycles:,.0f}, run-time packing {self.packing_cycles:,.0f}"]
        lines += [f"  {level}" for level in self.levels]
        return "\n".join(lines)


def _kib(size: float) -> str:
    if size == float("inf"):
        return "unbounded"
    return f"{size / 1024:,.1f} KiB" if size >= 1024 else f"{int(size)} B"


@dataclass(frozen=True)
class _Space:
    """The mapped kernel as loops: extent and step per loop dimension, the kernel dimensions
    each stands for (inner first), and per operand the loop dims that index it."""

    extents: dict[str, int]
    steps: dict[str, int]
    fused: dict[str, tuple[str, ...]]
    operands: dict[str, tuple[str, ...]]      # instruction operand -> loop dims indexing it
    itemsize: dict[str, int]
    reductions: frozenset[str]


def _space(mapping: Mapping) -> _Space:
    expr = mapping.kernel.expr
    kernel_extents = expr.extents
    extents: dict[str, int] = {}
    steps: dict[str, int] = {}
    fused: dict[str, tuple[str, ...]] = {}
    for axis in mapping.axes:
        name = f"{axis.dim}'"
        extents[name] = max(axis.padded, 1)
        steps[name] = 1 if axis.width is None else min(axis.width, max(axis.padded, 1))
        fused[name] = tuple(reversed(axis.fused))
    for dim in mapping.outer:
        extents[dim], steps[dim], fused[dim] = kernel_extents[dim], 1, (dim,)
    operands: dict[str, tuple[str, ...]] = {}
    itemsize: dict[str, int] = {}
    for instruction_access in mapping.instruction.semantics.operands:
        access = expr.access(mapping.role(instruction_access.tensor))
        used = set(access.dims)
        operands[instruction_access.tensor] = tuple(d for d, f in fused.items() if used & set(f))
        itemsize[instruction_access.tensor] = instruction_access.dtype.itemsize
    reductions = frozenset(d for d, f in fused.items() if set(f) <= set(expr.reduction_dims))
    return _Space(extents, steps, fused, operands, itemsize, reductions)


def _kernel_tile(space: _Space, tile: Mapping_[str, float], kernel_extents: dict[str, int]) -> dict[str, float]:
    """Spread each loop dim's tile over the kernel dims it fuses, innermost first (a tile of
    1.5 rows is counted as such: footprints are averages over the tiles of a level)."""
    out: dict[str, float] = {}
    for dim, kernel_dims in space.fused.items():
        remaining = float(tile[dim])
        for kernel_dim in kernel_dims:
            out[kernel_dim] = max(1.0, min(remaining, kernel_extents[kernel_dim]))
            remaining = remaining / kernel_extents[kernel_dim]
    for dim in kernel_extents:
        out.setdefault(dim, 1.0)
    return out


def _footprints(mapping: Mapping, space: _Space, tile: Mapping_[str, float]) -> dict[str, int]:
    """Bytes of each operand's tile: window indices count their span, and an operand that is
    packed (or expanded by im2col) counts its dense blocks."""
    expr = mapping.kernel.expr
    kernel_tile = _kernel_tile(space, tile, expr.extents)
    relaid = {c.tensor for c in mapping.layout if c.kind in ("pack", "im2col")}
    sizes = {}
    for operand, dims in space.operands.items():
        tensor = mapping.role(operand)
        if tensor in relaid:
            elements = math.prod(tile[d] for d in dims)
        else:
            elements = math.prod(sum(abs(c) * (kernel_tile[d] - 1) for d, c in i.terms) + 1
                                 for i in expr.access(tensor).indices)
        sizes[operand] = math.ceil(elements * space.itemsize[operand])
    return sizes


def _average(space: _Space, tile: dict[str, int]) -> dict[str, float]:
    """The mean tile over a level's loops (the last tile of a dimension may be partial)."""
    return {d: space.extents[d] / math.ceil(space.extents[d] / tile[d]) for d in tile}


def _orders(space: _Space, trips: dict[str, int]) -> list[tuple[str, ...]]:
    """Six loop orders: for each ranking of the operands, the dims indexing none of the first
    innermost-last... i.e. the first operand's dims outermost, then the second's."""
    names = list(space.operands)
    loops = [d for d in space.extents if trips[d] > 1]
    orders = []
    for ranking in itertools.permutations(names):
        def key(dim: str, ranking: tuple[str, ...] = ranking) -> tuple:
            return tuple(0 if dim in space.operands[op] else 1 for op in ranking) + (loops.index(dim),)
        orders.append(tuple(sorted(loops, key=key)))
    return orders


def _traffic(space: _Space, footprints: dict[str, int], trips: dict[str, int], order: tuple[str, ...]) -> int:
    total = 0
    for operand, dims in space.operands.items():
        if operand not in footprints:
            continue
        innermost = max((order.index(d) for d in dims if d in order), default=-1)
        fetches = math.prod(trips[d] for d in order[:innermost + 1])
        factor = 2 if operand == "C" and any(d in space.reductions for d in order[:innermost + 1]) else 1
        total += fetches * footprints[operand] * factor
    return total


def _best_order(space: _Space, footprints, trips) -> tuple[tuple[str, ...], int]:
    best: tuple[tuple[str, ...], int] | None = None
    for order in _orders(space, trips):
        traffic = _traffic(space, footprints, trips, order)
        if best is None or traffic < best[1]:
            best = (order, traffic)
    assert best is not None
    return best


def _level_traffic(mapping: Mapping, space: _Space, tile: dict[str, int], charged: set[str] | None = None
                   ) -> tuple[tuple[str, ...], int]:
    """The cheapest loop order over a level's tiles and the bytes it moves into the level (of
    the `charged` operands; all by default)."""
    prints = _footprints(mapping, space, _average(space, tile))
    if charged is not None:
        prints = {op: size for op, size in prints.items() if op in charged}
    return _best_order(space, prints, _trips(space, tile))


def _trips(space: _Space, tile: dict[str, int]) -> dict[str, int]:
    return {d: math.ceil(space.extents[d] / tile[d]) for d in space.extents}


def _register_tiles(mapping: Mapping, space: _Space, target: Target) -> list[tuple[dict[str, int], int, int]]:
    """Every register tile that fits, best first: (tile, registers used, accumulator chains)
    for the operands held in registers (one tile of one step each when none is)."""
    instruction = mapping.instruction
    in_registers = {op: target.register_file(instruction.home(op)) for op in space.operands}
    files = {f.name: f for f in in_registers.values() if f is not None}
    base = dict(space.steps)
    if not files:
        return [(base, 0, 1)]
    count = min(f.count for f in files.values())
    output_dims = [d for d in space.operands.get("C", ()) if space.extents[d] > space.steps[d]]
    ranked: list[tuple[tuple, dict[str, int], int, int]] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    choices = [[1, 2, 3, 4, 6, 8, 12, 16] for _ in output_dims]
    for factors in itertools.product(*choices):
        tile = dict(base)
        for dim, factor in zip(output_dims, factors, strict=True):
            tile[dim] = min(space.extents[dim], space.steps[dim] * factor)
        if tuple(sorted(tile.items())) in seen:
            continue
        seen.add(tuple(sorted(tile.items())))
        blocks = {op: math.prod(math.ceil(tile[d] / space.steps[d]) for d in dims)
                  for op, dims in space.operands.items()}
        used = sum(blocks[op] if in_registers[op] is not None else 1 for op in blocks)
        if used > count:
            continue
        issues = math.prod(math.ceil(tile[d] / space.steps[d]) for d in space.extents)
        loaded = sum(_footprints(mapping, space, tile)[op] for op in blocks if op != "C")
        chains = blocks.get("C", 1) if in_registers.get("C") is not None else issues
        key = (loaded / issues, -min(chains, instruction.latency * (instruction.throughput or 1)), -issues, factors)
        ranked.append((key, tile, used, chains))
    ranked.sort(key=lambda entry: entry[0])
    return [(tile, used, chains) for _, tile, used, chains in ranked] or [(base, count, 1)]


def _register_tile(mapping: Mapping, space: _Space, target: Target) -> tuple[dict[str, int], int, int]:
    return _register_tiles(mapping, space, target)[0]


def register_tiles(mapping: Mapping, target: Target, count: int) -> list[dict[str, int]]:
    """The `count` best register tiles of the analytic model (loop dim -> extent), for a
    measured search to choose among."""
    return [tile for tile, _, _ in _register_tiles(mapping, _space(mapping), target)[:count]]


def _levels(target: Target) -> list[tuple[str, dict[str | None, float], float]]:
    """(name, capacity per held operand or None for all, fill bandwidth) inner to outer; the
    scratchpads form one level of per-operand capacities, filled through their DMA engine."""
    memory = target.memory
    levels: list[tuple[str, dict[str | None, float], float]] = []
    pads = [m for m in memory if m.scratchpad]
    if pads:
        capacity: dict[str | None, float] = {}
        for pad in pads:
            for operand in pad.holds or ("A", "B", "C"):
                capacity[operand] = capacity.get(operand, 0.0) + pad.usable_bytes
        engines = {d.name: d for d in target.dma}
        fill = min(min((engines[p.dma].bandwidth * engines[p.dma].channels for p in pads if p.dma), default=math.inf),
                   memory[-1].bandwidth)
        levels.append(("+".join(p.name for p in pads), capacity, fill))
    caches = [m for m in memory if not m.scratchpad]
    for inner, outer in zip(caches, caches[1:], strict=False):
        levels.append((inner.name, {None: inner.usable_bytes}, outer.bandwidth))
    return levels


def _fits(footprints: dict[str, int], capacity: dict[str | None, float]) -> bool:
    if None in capacity:
        return sum(footprints.values()) <= capacity[None]
    return all(footprints[op] <= capacity.get(op, math.inf) for op in footprints)


def schedule(mapping: Mapping, target: Target) -> Schedule:
    space = _space(mapping)
    instruction = mapping.instruction
    tile, _, chains = _register_tile(mapping, space, target)
    plans: list[LevelPlan] = []
    first_memory = target.memory[0]
    register_prints = _footprints(mapping, space, tile)
    held = tuple((op, size) for op, size in register_prints.items() if target.register_file(instruction.home(op)))
    # A unit timed by a cycles formula (a systolic fold) streams its memory operands within
    # those cycles: only what its registers hold moves at the register level.
    charged = None if instruction.cycles is None else {op for op in register_prints
                                                       if target.register_file(instruction.home(op))}
    order, traffic = _level_traffic(mapping, space, tile, charged)
    plans.append(LevelPlan("registers", tuple(sorted(tile.items())), order, held,
                           ((None, _register_bytes(target)),), traffic, traffic / first_memory.bandwidth))
    streamed_tile: dict[str, int] = {}
    for name, capacity, bandwidth in _levels(target):
        if not streamed_tile:
            tile = _streamed_level_tile(mapping, space, tile, capacity, bandwidth, chains)
        else:
            tile = _grow(mapping, space, tile, capacity)
        prints = _footprints(mapping, space, tile)
        order, traffic = _level_traffic(mapping, space, tile)
        plans.append(LevelPlan(name, tuple(sorted(tile.items())), order, tuple(prints.items()),
                               tuple(capacity.items()), traffic, traffic / bandwidth))
        if not streamed_tile:
            streamed_tile = dict(tile)
    compute = _compute_cycles(mapping, space, streamed_tile or dict(space.steps), chains)
    packing = _packing_cycles(mapping, target)
    repeat = mapping.kernel.repeat
    memory_cycles = max(p.cycles for p in plans)
    bound = "compute" if compute >= memory_cycles else max(plans, key=lambda p: p.cycles).name
    total = (max(compute, memory_cycles) + packing) * repeat
    return Schedule(mapping, target, tuple(plans), compute * repeat, packing * repeat, total, bound)


def _register_bytes(target: Target) -> float:
    return float(sum(r.count * r.bits // 8 for r in target.registers))


def _streamed_level_tile(mapping: Mapping, space: _Space, tile: dict[str, int], capacity: dict[str | None, float],
                         bandwidth: float, chains: int) -> dict[str, int]:
    """The first level's tile. A longer stream amortises each issue's fill and drain, but
    fills the level and leaves less room for reuse: try every streamed length from the
    longest that fits down by halves (at most STREAM_CANDIDATES), grow the rest of the tile
    around each, and keep the one with the fewest cycles, max(compute, traffic)."""
    longest = _stream(mapping, space, tile, capacity)
    streamed = [f"{a.dim}'" for a in mapping.axes if a.width is None]
    if not streamed or mapping.instruction.cycles is None:
        return _grow(mapping, space, longest, capacity)
    best: tuple[float, dict[str, int]] | None = None
    candidate = dict(longest)
    for _ in range(STREAM_CANDIDATES):
        grown = _grow(mapping, space, candidate, capacity)
        traffic = _level_traffic(mapping, space, grown)[1]
        cycles = max(_compute_cycles(mapping, space, grown, chains), traffic / bandwidth)
        if best is None or cycles < best[0]:
            best = (cycles, grown)
        shorter = {d: max(tile[d], candidate[d] // 2) if d in streamed else candidate[d] for d in candidate}
        if shorter == candidate:
            break
        candidate = shorter
    assert best is not None
    return best[1]


def _stream(mapping: Mapping, space: _Space, tile: dict[str, int], capacity: dict[str | None, float]
            ) -> dict[str, int]:
    """Streamed ('*') dimensions first, as long as the tiles fit: every issue pays the unit's
    fill and drain, so longer streams amortise it."""
    tile = dict(tile)
    for axis in mapping.axes:
        if axis.width is not None:
            continue
        dim = f"{axis.dim}'"
        while tile[dim] < space.extents[dim]:
            grown = dict(tile)
            grown[dim] = min(space.extents[dim], tile[dim] * 2)
            if not _fits(_footprints(mapping, space, grown), capacity):
                break
            tile = grown
    return tile


def _grow(mapping: Mapping, space: _Space, tile: dict[str, int], capacity: dict[str | None, float]) -> dict[str, int]:
    tile = dict(tile)
    if not _fits(_footprints(mapping, space, tile), capacity):
        return tile
    for _ in range(REPEAT_LIMIT):
        base_prints = _footprints(mapping, space, tile)
        base_traffic = _level_traffic(mapping, space, tile)[1]
        best: tuple[float, str, dict[str, int]] | None = None
        for dim in space.extents:
            for size in _growth(tile[dim], space.extents[dim]):
                grown = dict(tile)
                grown[dim] = size
                prints = _footprints(mapping, space, grown)
                if not _fits(prints, capacity):
                    continue
                saved = base_traffic - _level_traffic(mapping, space, grown)[1]
                cost = max(sum(prints.values()) - sum(base_prints.values()), 1)
                score = saved / cost
                if best is None or score > best[0]:
                    best = (score, dim, grown)
        if best is None or best[0] <= 0:
            break
        tile = best[2]
    return tile


def _growth(size: int, extent: int) -> list[int]:
    """A dimension's next sizes: doubled, or whole. Whole, because a loop's reuse often appears
    only once it runs once: a reduction split in four re-reads A per column fold at half as
    many splits as well, so no single doubling saves traffic and a greedy step would stop."""
    return sorted({min(extent, size * 2), extent} - {size})


def _compute_cycles(mapping: Mapping, space: _Space, tile: dict[str, int], chains: int) -> float:
    instruction = mapping.instruction
    streamed = [a for a in mapping.axes if a.width is None]
    if instruction.cycles is not None:
        # Each streamed dimension is issued in tiles of the level's length, the last one as
        # long as what is left (a fold's cost depends on its own stream length).
        tiles: list[list[tuple[int, int]]] = []
        for axis in streamed:
            extent = max(axis.padded, 1)
            length = min(tile.get(f"{axis.dim}'", extent), extent)
            tiles.append([(n, c) for n, c in ((length, extent // length), (extent % length, 1)) if n and c])
        fixed = {d.name: d.extent or 1 for d in instruction.semantics.domain}
        per_stream = 0.0
        for combination in itertools.product(*tiles):
            lengths = fixed | {a.dim: n for a, (n, _) in zip(streamed, combination, strict=True)}
            per_stream += math.prod(c for _, c in combination) * instruction.issue_cycles(lengths)
        return mapping.issues * per_stream
    throughput = instruction.throughput or 1.0
    in_flight = min(throughput, chains / instruction.latency) if instruction.latency else throughput
    return mapping.issues / in_flight


def _packing_cycles(mapping: Mapping, target: Target) -> float:
    """Run-time layout changes: read and write the operand once, at the bandwidth of the
    smallest cache that holds it (main memory's if none does)."""
    expr = mapping.kernel.expr
    cycles = 0.0
    for change in mapping.layout:
        if change.at_compile_time:
            continue
        access = expr.access(change.tensor)
        size = math.prod(i.span(expr.extents) for i in access.indices) * access.dtype.itemsize
        if change.tensor == expr.output.tensor and change.kind != "fixup":
            size *= 2  # unpack after, as well as pack before
        level = next((m for m in target.memory if not m.scratchpad and m.usable_bytes >= size), target.memory[-1])
        cycles += 2 * size / level.bandwidth
    return cycles


def exhaustive_first_level(mapping: Mapping, target: Target, doublings: int = 14) -> tuple[float, dict[str, int]]:
    """A check on the greedy search, for benches (it is slow): every tile of the first
    memory level with power-of-two multiples of the instruction's steps that fits, and the
    fewest max(compute, traffic / bandwidth) cycles among them, by the same model."""
    space = _space(mapping)
    _, capacity, bandwidth = _levels(target)[0]
    _, _, chains = _register_tile(mapping, space, target)
    dims = list(space.extents)
    options = [sorted({min(space.extents[d], space.steps[d] * 2 ** e) for e in range(doublings)}) for d in dims]
    best: tuple[float, dict[str, int]] | None = None
    for combination in itertools.product(*options):
        tile = dict(zip(dims, combination, strict=True))
        if not _fits(_footprints(mapping, space, tile), capacity):
            continue
        cycles = max(_compute_cycles(mapping, space, tile, chains), _level_traffic(mapping, space, tile)[1] / bandwidth)
        if best is None or cycles < best[0]:
            best = (cycles, tile)
    if best is None:
        raise ValueError(f"no tile of {mapping} fits {target.name}'s first level")
    return best


def best_schedule(mappings: list[Mapping], target: Target, keep: int = 4) -> tuple[Schedule | None, list[Schedule]]:
    """Schedules of the first `keep` mappings, fastest first, and the chosen one: exact
    mappings before lossy ones."""
    schedules = sorted((schedule(m, target) for m in mappings[:keep]), key=lambda s: (s.mapping.lossy, s.cycles))
    return (schedules[0] if schedules else None), schedules
