"""Layer 6: the low-level, address-only instruction IR: buffers, instructions, irgen,
verifier and text form."""
from ember.lir import chain  # noqa: F401  (registers ElementwiseChain)
from ember.lir.ir import INSTRS, Buffer, BufferKind, Instr, InstrDef, OperandKind, Program
from ember.lir.irgen import generate_program
from ember.lir.text import parse_program, print_program
from ember.lir.verify import verify_program

__all__ = [
    "INSTRS", "Buffer", "BufferKind", "Instr", "InstrDef", "OperandKind", "Program",
    "generate_program", "parse_program", "print_program", "verify_program",
]
