"""Ops the C backend has no kernel for, each with the reason. The cpu backend lowers a
non-primitive op it has no kernel for; a primitive op listed here makes the cpu backend
refuse the model with this reason. tests/test_cpu_ops.py checks that every op in the op table
either has a C kernel, is lowered away for cpu, or is listed here."""
from __future__ import annotations

C_EXEMPT: dict[str, str] = {}
