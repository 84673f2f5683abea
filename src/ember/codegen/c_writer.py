"""A small structured writer for generated C: statements, scoped blocks that indent and close
themselves, calls with named arguments, and designated initializers. Kernels build their C
with it instead of assembling braces and indentation by hand.

    w = CWriter()
    with w.block("for (long nb = 0; nb < 2; nb++)"):
        w.line(init("ember_conv_geom", "g", x="x + nb * 100", C=3, H=10))
        w.call("ember_depthwise", "&g", "w", nthreads=2)
    w.text()

Imports nothing from Ember."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

INDENT = "    "


class CWriter:
    def __init__(self) -> None:
        self._lines: list[str] = []
        self._depth = 0

    def line(self, *statements: str) -> CWriter:
        """Appends each statement (a multi-line string keeps its own relative indentation)."""
        for statement in statements:
            for text in statement.splitlines() or [""]:
                self._lines.append(INDENT * self._depth + text if text else "")
        return self

    @contextmanager
    def block(self, header: str = "") -> Iterator[CWriter]:
        """`header {` ... `}` with the body indented; an empty header opens a bare scope."""
        self._lines.append(INDENT * self._depth + (f"{header} {{" if header else "{"))
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            self._lines.append(INDENT * self._depth + "}")

    def call(self, function: str, *args: object, **named: object) -> CWriter:
        """A call statement; named arguments print as `/*name*/ value`, in order, after the
        positional ones (C has no keyword arguments: the comment keeps long calls readable)."""
        self._lines.append(INDENT * self._depth + call(function, *args, **named) + ";")
        return self

    def text(self) -> str:
        return "\n".join(self._lines)


def call(function: str, *args: object, **named: object) -> str:
    parts = [str(a) for a in args] + [f"/*{name}*/ {value}" for name, value in named.items()]
    return f"{function}({', '.join(parts)})"


def designated(**fields: object) -> str:
    """`{ .a = 1, .b = x }`: a struct initializer naming every field it sets."""
    return "{ " + ", ".join(f".{name} = {value}" for name, value in fields.items()) + " }"


def init(ctype: str, name: str, **fields: object) -> str:
    """`ctype name = { .field = value, ... };`."""
    return f"{ctype} {name} = {designated(**fields)};"
