"""docs/api.md: the Python API's reference, generated from signatures and docstrings.
`python -m ember.tools.api_docs` rewrites it; tests/test_docs.py checks it documents every
public name (ember.__all__ and the public methods of the classes listed here)."""
from __future__ import annotations

import inspect
import sys
from typing import Any

from ember.tools.common import write_generated_doc

HEADER = """# Python API

Generated from the docstrings by `python -m ember.tools.api_docs`. The user guide
(`docs/user-guide.md`) shows how the pieces fit together.
"""


def _classes() -> list[tuple[str, Any]]:
    import ember
    from ember.codegen.bundle import Bundle
    from ember.runtime.profile import RunProfile
    from ember.specialize import DynamicModel

    return [("ember.CompiledModel", ember.CompiledModel), ("ember.DynamicModel", DynamicModel),
            ("ember.runtime.profile.RunProfile", RunProfile), ("ember.codegen.bundle.Bundle", Bundle)]


def _signature(obj: Any) -> str:
    """The signature with its annotations unquoted (they are strings under `from __future__
    import annotations`); default values keep their quotes."""
    import re

    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r"(: |-> )'([^']*)'", r"\1\2", text)


def _doc(obj: Any) -> str:
    text = inspect.getdoc(obj) or "(no docstring)"
    return "\n".join(line.rstrip() for line in text.splitlines())


def public_members(cls: type) -> list[str]:
    names = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if callable(member) or isinstance(member, property | staticmethod | classmethod):
            names.append(name)
    return sorted(names)


def render() -> str:
    import ember

    lines = [HEADER, "## Functions", ""]
    errors = []
    for name in sorted(ember.__all__):
        obj = getattr(ember, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            errors.append((name, obj))
        elif inspect.isfunction(obj):
            lines += [f"### ember.{name}", "", "```python", f"ember.{name}{_signature(obj)}", "```", "", "```text",
                      _doc(obj), "```", ""]
    for title, cls in _classes():
        lines += [f"## {title}", "", "```text", _doc(cls), "```", ""]
        for member_name in public_members(cls):
            member = vars(cls)[member_name]
            target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            short = f"{title.rsplit('.', 1)[-1]}.{member_name}"
            usage = f"{short}  # property" if isinstance(member, property) else f"{short}{_signature(target)}"
            lines += [f"### {short}", "", "```python", usage, "```", "", "```text", _doc(target), "```", ""]
    lines += ["## Errors", ""]
    for name, cls in errors:
        base = cls.__mro__[1].__name__
        lines += [f"### ember.{name} ({base})", "", "```text", _doc(cls), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return write_generated_doc(render, "api.md", sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
