"""Target descriptions of the ISA mapper (ember.isa.describe, src/ember/isa/targets/*.toml):
every shipped file loads and says what the issue asks of it, and malformed or self-
contradicting files are refused naming the field."""
from __future__ import annotations

import re

import pytest

from ember.isa.describe import TARGETS_DIR, DescriptionError, available_targets, load_target, parse_target
from ember.types import DType

SHIPPED = ["aarch64-neon", "npu-systolic16", "npu-systolic32", "riscv-rvv", "x86-avx512"]


def test_shipped_targets_load_and_stay_short():
    assert available_targets() == SHIPPED
    for name in SHIPPED:
        target = load_target(name)
        assert target.name == name
        assert len((TARGETS_DIR / f"{name}.toml").read_text().splitlines()) < 200
        assert target.memory[-1].size is None  # main memory last


def test_x86_instructions():
    target = load_target("x86-avx512")
    assert target.register_file("zmm").count == 32
    vnni = target.instruction("vpdpbusd")
    assert str(vnni.semantics) == "C[j]:i32 += A[k]:u8 * B[j, k]:i8 over j:16, k:4"
    assert vnni.semantics.reduction_dims == ("k",)
    assert [(f.operand, f.source, f.lossy) for f in vnni.fixups] == [("A", DType.INT8, False)]
    bf16 = target.instruction("vdpbf16ps")
    assert bf16.semantics.b.dtype is DType.BFLOAT16 and all(f.lossy for f in bf16.fixups)
    fma = target.instruction("vfmadd231ps.bcst")
    assert fma.semantics.a.indices == () and fma.issue_cycles({"j": 16}) == 0.5
    assert [m.name for m in target.memory] == ["L1D", "L2", "L3", "DRAM"]


def test_other_targets():
    neon = load_target("aarch64-neon")
    assert neon.instruction("sdot.4s.lane").semantics.dim("k").extent == 4
    rvv = load_target("riscv-rvv").instruction("vfmacc.vf").semantics.dim("j")
    assert rvv.upto and rvv.extent == 8  # length-agnostic: vl <= VLMAX, no padding
    npu = load_target("npu-systolic16")
    array = npu.instruction("systolic.ws")
    assert array.semantics.dim("t").extent is None
    assert array.issue_cycles({"t": 100, "r": 16, "c": 16}) == 146  # SCALE-Sim ws: 2R + C + T - 2
    assert all(m.scratchpad and m.dma == "dma0" for m in npu.memory[:3])
    assert npu.dma[0].bandwidth == 16.0


def test_unknown_target_names_the_described_ones():
    with pytest.raises(DescriptionError, match="unknown target 'z80'.*x86-avx512"):
        load_target("z80")


GOOD = (TARGETS_DIR / "x86-avx512.toml").read_text()
NPU = (TARGETS_DIR / "npu-systolic16.toml").read_text()


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize("text, message", [
    (_edit(GOOD, 'name = "zmm"\ncount = 32\nbits = 512', 'name = "zmm"\ncount = 32\nbits = 256'),
     "instructions[0] (vfmadd231ps.bcst).operands.C: C[j]:f32 is 512 bits, wider than a zmm register (256 bits)"),
    (_edit(GOOD, "B[j, k]:i8 over j:16, k:4", "B[j, k]:i7 over j:16, k:4"),
     "instructions[2] (vpdpbusd).semantics: unknown element type 'i7'"),
    (NPU, None),
    (_edit(NPU, 'holds = ["A"]\nsize = 65536', 'holds = ["A"]\nsize = 8')
     .replace('operands = { C = "ofmap_sram", A = "ifmap_sram", B = "pe" }',
              'operands = { C = "ofmap_sram", A = "ifmap_sram", B = "filter_sram" }'),
     "instructions[0] (systolic.ws).operands.A: one tile of A[t, r]:i8 is 16 B, more than ifmap_sram holds (8 B)"),
    (_edit(GOOD, 'operands = { C = "zmm", A = "zmm", B = "zmm" }', 'operands = { C = "zmm", A = "ymm", B = "zmm" }'),
     "instructions[1] (vfmadd231ps).operands.A: names no register file or memory level: 'ymm'"),
    (_edit(GOOD, 'operands = { C = "zmm", A = "zmm", B = "zmm" }', 'operands = { C = "zmm", B = "zmm" }'),
     "instructions[1] (vfmadd231ps).operands.A: missing"),
    (_edit(GOOD, "size = 1048576", "size = 4096"), "memory[1].size: L2 (4096 B) is smaller than the level inside it"),
    (_edit(GOOD, "bandwidth = 12.0", "bandwidth = 12.0\nsize = 1000000000000"), "memory[3].size: the outermost level"),
    (_edit(GOOD, "bandwidth = 47.0", "bandwidth = -47.0"), "memory[1].bandwidth: must be positive, got -47.0"),
    (_edit(GOOD, "usable = 0.75", "usable = 1.5"), "memory[1].usable: is a fraction of the size"),
    (_edit(GOOD, "throughput = 2.0\nlatency = 5", "throughput = 2.0\nlatncy = 5"),
     "instructions[2].latncy: unknown field"),
    (_edit(GOOD, "throughput = 2.0\nlatency = 5", 'cycles = "t + 1"\nthroughput = 2.0\nlatency = 5'),
     "instructions[2] (vpdpbusd): give either throughput"),
    (_edit(NPU, 'cycles = "t + 46"', 'cycles = "t + q"'),
     "instructions[0] (systolic.ws).cycles: uses q, not a dimension"),
    (_edit(NPU, 'dma = "dma0"', 'dma = "dma9"'), "memory[0].dma: names no [[dma]] engine: 'dma9'"),
    (_edit(NPU, 'operands = { C = "ofmap_sram", A = "ifmap_sram", B = "pe" }',
           'operands = { C = "ofmap_sram", A = "pe", B = "pe" }'),
     "operands.A: an operand of unbounded length ('*') cannot live in registers pe"),
    (_edit(GOOD, '{ operand = "A", from = "i8"', '{ operand = "A", from = "int8"'),
     "instructions[2] (vpdpbusd).fixups[0].from: unknown element type 'int8'"),
    (_edit(GOOD, 'name = "vfmadd231ps"\n', 'name = "vfmadd231ps.bcst"\n'),
     "instructions: the name 'vfmadd231ps.bcst' is used twice"),
    (_edit(GOOD, "frequency_ghz = 4.2", "frequency_ghz = true"), "frequency_ghz: expected a number, got True"),
    (GOOD + "\n[[[", "not valid TOML"),
    (_edit(GOOD, 'target = "x86-avx512"', 'target = "x86 */ evil"'), "target: 'x86 */ evil' is not a name"),
    (_edit(GOOD, 'name = "vpdpbusd"', 'name = "vpdp;busd"'), "instructions[2].name: 'vpdp;busd' is not a name"),
    (_edit(GOOD, 'hold = "__asm__(\\"\\" : \\"+v\\"({v}));" }', 'keep = "x" }'),
     "registers[0].c.f32.keep: unknown field (known: hold, load, store, type, zero)"),
    ('target = "t"\nfrequency_ghz = 1.0\nregisters = []\nmemory = []\ninstructions = []\n',
     "memory: a target describes at least one memory level"),
])
def test_malformed_descriptions_are_refused_naming_the_field(text, message):
    if message is None:
        parse_target(text, "edited.toml")  # the unedited control loads
        return
    with pytest.raises(DescriptionError, match=re.escape(message)) as info:
        parse_target(text, "edited.toml")
    assert str(info.value).startswith("edited.toml: ")


def test_a_variant_is_one_file(tmp_path):
    variant = _edit(_edit(NPU, 'target = "npu-systolic16"', 'target = "npu-systolic32"'),
                    "over r:16, c:16, t:*", "over r:32, c:32, t:*")
    variant = _edit(_edit(variant, "bits = 2048", "bits = 8192"), 'cycles = "t + 46"', 'cycles = "t + 94"')
    path = tmp_path / "npu-systolic32.toml"
    path.write_text(variant)
    target = load_target(path)
    assert target.name == "npu-systolic32" and target.instruction("systolic.ws").semantics.dim("r").extent == 32
