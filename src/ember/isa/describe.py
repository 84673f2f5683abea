"""Target descriptions: one TOML file per target (src/ember/isa/targets/NAME.toml), loaded
into frozen dataclasses and validated. A file that is malformed or contradicts itself (an
instruction operand wider than its register, a scratchpad smaller than one instruction tile,
an unknown element type, a name that refers to nothing) is refused with a DescriptionError that
names the file and the field.

The schema (every size in bytes, every bandwidth in bytes per cycle, latencies in cycles):

    target, summary, frequency_ghz
    [[registers]]    name, count, bits, c.<type> (C templates: type, zero, load, store, and
                     optionally hold: a statement that keeps a loaded vector {v} in a register,
                     so the compiler does not fold its load into every use), asm.<type>
                     (assembly templates of a length-agnostic file, emitted inside one asm
                     statement per tile: zero, load, store, setvl, scalar)
    [[memory]]       innermost first: name, size (omitted: unbounded), line, bandwidth,
                     latency, usable (fraction a schedule may fill), scratchpad (software
                     managed), dma (the engine that fills it), holds (a scratchpad's
                     instruction operands, e.g. ["A"]; a cache holds every operand)
    [[dma]]          name, bandwidth, latency, channels
    [[instructions]] name, semantics (a tensor expression, ember.isa.expr), operands (operand
                     -> register file or memory level holding it), throughput (per cycle) and
                     latency, or cycles (an affine formula of the instruction's dimensions, per
                     issue), fixups ([{operand, from, how, lossy}]: kernel element types the
                     instruction takes after a rewrite), emit (C template, optional: {C} the
                     accumulator, {B} a vector, {A} an lvalue of A's first element; an
                     assembly one, {A} a scalar register, where B's register file has asm
                     templates)

Imports isa.expr, types and support/ only."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.isa.expr import ELEMENT_TYPES, Affine, ExprError, TensorExpr, parse_affine, parse_expr
from ember.support.errors import EmberError
from ember.types import DType

TARGETS_DIR = Path(__file__).resolve().parent / "targets"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
ASM_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9_ ,.(){}-]*")  # placed inside a C string: no quotes, %, \ or newlines


class DescriptionError(EmberError):
    """A target description that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class RegisterFile:
    """c: per element type of a vector's lanes (f32, i32...), the C templates of code
    generation (type, zero, load and store, optionally hold; {p} a pointer, {v} a value); empty where the
    target has no emitter."""

    name: str
    count: int
    bits: int
    c: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    asm: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def c_templates(self, dtype: DType) -> dict[str, str] | None:
        return next((dict(t) for name, t in self.c if name == dtype.value), None)

    def asm_templates(self, dtype: DType) -> dict[str, str] | None:
        """Assembly templates of vectors of `dtype` lanes ({v} a vector register, {p} an
        address register, {vl} and {n} the granted and requested lengths, {s} a scalar
        register), for a length-agnostic file whose code the compiler cannot express."""
        return next((dict(t) for name, t in self.asm if name == dtype.value), None)


@dataclass(frozen=True)
class MemoryLevel:
    name: str
    size: int | None
    bandwidth: float
    latency: int
    line: int = 64
    usable: float = 1.0
    scratchpad: bool = False
    dma: str | None = None
    holds: tuple[str, ...] = ()

    @property
    def usable_bytes(self) -> float:
        return float("inf") if self.size is None else self.size * self.usable


@dataclass(frozen=True)
class DmaEngine:
    name: str
    bandwidth: float
    latency: int
    channels: int = 1


@dataclass(frozen=True)
class Fixup:
    """The kernel's operand of element type `source` is rewritten (`how`) to the instruction's
    type; lossy ones change results and are only used when asked for."""

    operand: str
    source: DType
    how: str
    lossy: bool = False
    c: str = ""  # C expression of the rewrite of one element {x}, for emitted code ("" none)


@dataclass(frozen=True)
class Instruction:
    name: str
    semantics: TensorExpr
    operands: tuple[tuple[str, str], ...]
    throughput: float | None = None
    latency: int = 1
    cycles: Affine | None = None
    fixups: tuple[Fixup, ...] = ()
    emit: str = ""

    def home(self, operand: str) -> str:
        """The register file or memory level that holds `operand` (its tensor name)."""
        return dict(self.operands)[operand]

    def issue_cycles(self, extents: dict[str, int]) -> float:
        """Cycles one issue occupies the unit: 1/throughput, or the cycles formula."""
        if self.cycles is not None:
            return float(self.cycles.evaluate(extents))
        assert self.throughput is not None
        return 1.0 / self.throughput


@dataclass(frozen=True)
class Target:
    name: str
    summary: str
    frequency_ghz: float
    registers: tuple[RegisterFile, ...]
    memory: tuple[MemoryLevel, ...]
    dma: tuple[DmaEngine, ...]
    instructions: tuple[Instruction, ...]
    source: str = ""
    c_header: str = ""
    c_flags: str = ""
    c_prelude: str = ""  # C helpers the templates use, emitted before the kernel

    def register_file(self, name: str) -> RegisterFile | None:
        return next((r for r in self.registers if r.name == name), None)

    def memory_level(self, name: str) -> MemoryLevel | None:
        return next((m for m in self.memory if m.name == name), None)

    def instruction(self, name: str) -> Instruction:
        for instruction in self.instructions:
            if instruction.name == name:
                return instruction
        raise DescriptionError(f"target {self.name} has no instruction '{name}' "
                               f"(it has {', '.join(i.name for i in self.instructions)})")


def available_targets() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.toml"))


def load_target(name_or_path: str | Path) -> Target:
    """A described target by name (a file of targets/) or by the path of a .toml file."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        if str(name_or_path) not in available_targets():
            raise DescriptionError(f"unknown target '{name_or_path}' (described: {', '.join(available_targets())})")
        path = TARGETS_DIR / f"{name_or_path}.toml"
    try:
        text = path.read_text()
    except OSError as err:
        raise DescriptionError(f"cannot read target description {path}: {err.strerror}") from None
    return parse_target(text, path.name)


def parse_target(text: str, source: str = "<description>") -> Target:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DescriptionError(f"{source}: not valid TOML: {err}") from None
    return _Loader(source).target(data)


class _Loader:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, field: str, message: str) -> DescriptionError:
        return DescriptionError(f"{self.source}: {field}: {message}")

    def fields(self, table: Any, field: str, required: set[str], optional: set[str]) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise self.error(field, f"expected a table, got {type(table).__name__}")
        missing = sorted(required - set(table))
        if missing:
            raise self.error(field, f"missing {', '.join(missing)}")
        unknown = sorted(set(table) - required - optional)
        if unknown:
            known = ", ".join(sorted(required | optional))
            raise self.error(f"{field}.{unknown[0]}", f"unknown field (known: {known})")
        return table

    def number(self, value: Any, field: str, *, integer: bool = False, positive: bool = True) -> Any:
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise self.error(field, f"expected {'an integer' if integer else 'a number'}, got {value!r}")
        if positive and value <= 0:
            raise self.error(field, f"must be positive, got {value}")
        return value

    def name(self, value: Any, field: str) -> str:
        """A name: it is printed in dumps and in generated C comments, so letters, digits and
        . _ - only."""
        text = self.text(value, field)
        if not _NAME.fullmatch(text):
            raise self.error(field, f"{text!r} is not a name (a letter, then letters, digits, '.', '_' or '-')")
        return text

    def text(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(field, f"expected a non-empty string, got {value!r}")
        return value

    def items(self, data: dict[str, Any], key: str) -> list[tuple[str, Any]]:
        value = data.get(key, [])
        if not isinstance(value, list):
            raise self.error(key, "expected an array of tables ([[" + key + "]])")
        return [(f"{key}[{i}]", item) for i, item in enumerate(value)]

    def target(self, data: dict[str, Any]) -> Target:
        self.fields(data, "target", {"target", "frequency_ghz", "registers", "memory", "instructions"},
                    {"summary", "dma", "c_header", "c_flags", "c_prelude"})
        registers = tuple(self.register(f, t) for f, t in self.items(data, "registers"))
        dma = tuple(self.dma(f, t) for f, t in self.items(data, "dma"))
        memory = tuple(self.memory(f, t, {d.name for d in dma}) for f, t in self.items(data, "memory"))
        self.unique("registers", [r.name for r in registers] + [m.name for m in memory])
        self.check_hierarchy(memory)
        partial = Target(self.name(data["target"], "target"), str(data.get("summary", "")),
                         self.number(data["frequency_ghz"], "frequency_ghz"), registers, memory, dma, ())
        instructions = tuple(self.instruction(f, t, partial) for f, t in self.items(data, "instructions"))
        if not instructions:
            raise self.error("instructions", "a target describes at least one instruction")
        self.unique("instructions", [i.name for i in instructions])
        operand_names = {a.tensor for i in instructions for a in i.semantics.operands}
        for index, level in enumerate(memory):
            stray = [h for h in level.holds if h not in operand_names]
            if stray:
                raise self.error(f"memory[{index}].holds", f"{stray[0]!r} is no instruction's operand")
        return Target(partial.name, partial.summary, partial.frequency_ghz, registers, memory, dma, instructions,
                      self.source, str(data.get("c_header", "")), str(data.get("c_flags", "")),
                      str(data.get("c_prelude", "")))

    def unique(self, field: str, names: list[str]) -> None:
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise self.error(field, f"the name '{name}' is used twice")
            seen.add(name)

    def register(self, field: str, table: Any) -> RegisterFile:
        t = self.fields(table, field, {"name", "count", "bits"}, {"c", "asm"})
        templates = self.templates(t.get("c", {}), f"{field}.c", {"type", "zero", "load", "store"}, {"hold"})
        assembly = self.templates(t.get("asm", {}), f"{field}.asm", {"zero", "load", "store", "setvl", "scalar"})
        for dtype, table_ in assembly:
            for key, text in table_:
                if not ASM_TEXT.fullmatch(text):
                    raise self.error(f"{field}.asm.{dtype}.{key}", f"{text!r} is not one assembly instruction "
                                                                   "(letters, digits, spaces and , . ( ) { } - only)")
        return RegisterFile(self.name(t["name"], f"{field}.name"),
                            self.number(t["count"], f"{field}.count", integer=True),
                            self.number(t["bits"], f"{field}.bits", integer=True), templates, assembly)

    def templates(self, table: Any, field: str, keys: set[str], optional: frozenset[str] | set[str] = frozenset()
                  ) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        by_type = self.fields(table, field, set(), set(ELEMENT_TYPES))
        templates = []
        for dtype, table_ in sorted(by_type.items()):
            c = self.fields(table_, f"{field}.{dtype}", keys, set(optional))
            templates.append((dtype, tuple((k, self.text(v, f"{field}.{dtype}.{k}")) for k, v in sorted(c.items()))))
        return tuple(templates)

    def dma(self, field: str, table: Any) -> DmaEngine:
        t = self.fields(table, field, {"name", "bandwidth", "latency"}, {"channels"})
        return DmaEngine(self.name(t["name"], f"{field}.name"), self.number(t["bandwidth"], f"{field}.bandwidth"),
                         self.number(t["latency"], f"{field}.latency", integer=True, positive=False),
                         self.number(t.get("channels", 1), f"{field}.channels", integer=True))

    def memory(self, field: str, table: Any, engines: set[str]) -> MemoryLevel:
        t = self.fields(table, field, {"name", "bandwidth", "latency"},
                        {"size", "line", "usable", "scratchpad", "dma", "holds"})
        usable = self.number(t.get("usable", 1.0), f"{field}.usable")
        if usable > 1:
            raise self.error(f"{field}.usable", f"is a fraction of the size, at most 1, got {usable}")
        dma = t.get("dma")
        if dma is not None and dma not in engines:
            raise self.error(f"{field}.dma", f"names no [[dma]] engine: '{dma}'")
        scratchpad = t.get("scratchpad", False)
        if not isinstance(scratchpad, bool):
            raise self.error(f"{field}.scratchpad", f"expected true or false, got {scratchpad!r}")
        size = t.get("size")
        holds = t.get("holds", [])
        if not isinstance(holds, list) or not all(isinstance(h, str) and h for h in holds):
            raise self.error(f"{field}.holds", f"expected a list of operand names, got {holds!r}")
        if holds and not scratchpad:
            raise self.error(f"{field}.holds", "only a scratchpad holds chosen operands; a cache holds every operand")
        return MemoryLevel(self.name(t["name"], f"{field}.name"),
                           None if size is None else self.number(size, f"{field}.size", integer=True),
                           self.number(t["bandwidth"], f"{field}.bandwidth"),
                           self.number(t["latency"], f"{field}.latency", integer=True, positive=False),
                           self.number(t.get("line", 64), f"{field}.line", integer=True), usable, scratchpad, dma,
                           tuple(holds))

    def check_hierarchy(self, memory: tuple[MemoryLevel, ...]) -> None:
        if not memory:
            raise self.error("memory", "a target describes at least one memory level")
        if memory[-1].size is not None:
            raise self.error(f"memory[{len(memory) - 1}].size",
                             "the outermost level (main memory) is unbounded: leave size out")
        caches = [(i, m) for i, m in enumerate(memory) if not m.scratchpad]
        for (_, inner), (j, outer) in zip(caches, caches[1:], strict=False):
            if outer.size is not None and inner.size is not None and outer.size < inner.size:
                raise self.error(f"memory[{j}].size", f"{outer.name} ({outer.size} B) is smaller than the level "
                                                      f"inside it, {inner.name} ({inner.size} B)")
        for i, level in enumerate(memory[:-1]):
            if level.size is None:
                raise self.error(f"memory[{i}].size", f"only the outermost level is unbounded, not {level.name}")

    def instruction(self, field: str, table: Any, target: Target) -> Instruction:
        t = self.fields(table, field, {"name", "semantics", "operands"},
                        {"throughput", "latency", "cycles", "fixups", "emit"})
        name = self.name(t["name"], f"{field}.name")
        field = f"{field} ({name})"
        try:
            semantics = parse_expr(self.text(t["semantics"], f"{field}.semantics"))
        except ExprError as err:
            raise self.error(f"{field}.semantics", str(err)) from None
        if ("throughput" in t) == ("cycles" in t):
            raise self.error(field, "give either throughput (issues per cycle) or cycles (per issue), not both")
        operands = self.operands(t["operands"], f"{field}.operands", semantics, target)
        cycles = None
        if "cycles" in t:
            try:
                cycles = parse_affine(self.text(t["cycles"], f"{field}.cycles"))
            except ExprError as err:
                raise self.error(f"{field}.cycles", str(err)) from None
            dims = {d.name for d in semantics.domain}
            stray = [d for d in cycles.dims if d not in dims]
            if stray:
                raise self.error(f"{field}.cycles", f"uses {', '.join(stray)}, not a dimension of the semantics")
        fixups = self.fixups(t.get("fixups", []), f"{field}.fixups", semantics)
        return Instruction(name, semantics, operands,
                           None if "throughput" not in t else self.number(t["throughput"], f"{field}.throughput"),
                           self.number(t.get("latency", 1), f"{field}.latency", integer=True), cycles, fixups,
                           str(t.get("emit", "")))

    def operands(self, table: Any, field: str, semantics: TensorExpr, target: Target) -> tuple[tuple[str, str], ...]:
        if not isinstance(table, dict):
            raise self.error(field, "expected a table: operand = register file or memory level")
        tensors = [a.tensor for a in semantics.operands]
        for tensor in table:
            if tensor not in tensors:
                raise self.error(f"{field}.{tensor}", f"not an operand of the semantics ({', '.join(tensors)})")
        homes = []
        for access in semantics.operands:
            where = table.get(access.tensor)
            if where is None:
                raise self.error(f"{field}.{access.tensor}",
                                 "missing: say which register file or memory level holds it")
            homes.append((access.tensor, self.place(access, where, f"{field}.{access.tensor}", semantics, target)))
        return tuple(homes)

    def place(self, access: Any, where: Any, field: str, semantics: TensorExpr, target: Target) -> str:
        elements = 1
        extents = semantics.extents
        for index in access.indices:
            elements *= index.span(extents)
        bits = elements * access.dtype.itemsize * 8
        registers = target.register_file(where) if isinstance(where, str) else None
        level = target.memory_level(where) if isinstance(where, str) else None
        if registers is not None:
            if any(semantics.dim(d).extent is None for d in access.dims):
                raise self.error(field, f"an operand of unbounded length ('*') cannot live in registers {where}")
            if bits > registers.bits:
                raise self.error(field, f"{access} is {bits} bits, "
                                        f"wider than a {where} register ({registers.bits} bits)")
        elif level is not None:
            if level.size is not None and bits // 8 > level.size:
                raise self.error(field, f"one tile of {access} is {bits // 8} B, more than {where} holds "
                                        f"({level.size} B)")
        else:
            raise self.error(field, f"names no register file or memory level: {where!r}")
        return where

    def fixups(self, items: Any, field: str, semantics: TensorExpr) -> tuple[Fixup, ...]:
        if not isinstance(items, list):
            raise self.error(field, "expected an array of tables")
        fixups = []
        for i, item in enumerate(items):
            f = f"{field}[{i}]"
            t = self.fields(item, f, {"operand", "from", "how"}, {"lossy", "c"})
            if t["operand"] not in [a.tensor for a in semantics.operands]:
                raise self.error(f"{f}.operand", f"not an operand of the semantics: {t['operand']!r}")
            if t["from"] not in ELEMENT_TYPES:
                raise self.error(f"{f}.from", f"unknown element type {t['from']!r}")
            fixups.append(Fixup(t["operand"], ELEMENT_TYPES[t["from"]], self.text(t["how"], f"{f}.how"),
                                bool(t.get("lossy", False)), str(t.get("c", ""))))
        return tuple(fixups)
