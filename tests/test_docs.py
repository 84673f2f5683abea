"""The user-facing docs stay true: docs/supported-ops.md is what its generator writes from
the registries today, docs/api.md documents every public name, and the README's and the
user guide's command synopses name every `ember` subcommand."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import ember
from ember.tools import api_docs, supported_ops

ROOT = Path(__file__).resolve().parents[1]


def test_supported_ops_table_is_up_to_date():
    committed = (ROOT / "docs" / "supported-ops.md").read_text()
    assert committed == supported_ops.render(), "docs/supported-ops.md is stale: python -m ember.tools.supported_ops"


def test_supported_ops_table_covers_every_converter_and_op():
    import ember.frontends.onnx.converters  # noqa: F401
    from ember.frontends.onnx.registry import CONVERTERS
    from ember.ops import OPS

    text = supported_ops.render()
    for name in CONVERTERS:
        assert f"\n| {name} | " in text
    for name in OPS:
        assert re.search(rf"^\| {re.escape(name)} \| (native|lowered|-) \| (native|lowered|-) \|$", text, re.MULTILINE)


def _headings(text: str) -> set[str]:
    return set(re.findall(r"^#{2,3} (.+)$", text, re.MULTILINE))


def test_api_reference_documents_every_public_name():
    generated = api_docs.render()
    for name in ember.__all__:
        assert re.search(rf"^#{{2,3}} ember\.{name}\b", generated, re.MULTILINE), name
    # Docstrings may change between regenerations; the set of documented names may not.
    committed = (ROOT / "docs" / "api.md").read_text()
    assert _headings(committed) == _headings(generated), "docs/api.md is stale: python -m ember.tools.api_docs"


def _subcommands() -> list[str]:
    from ember.cli import main

    captured: list[str] = []
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                captured.extend(action.choices)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    try:
        try:
            main(["--help"])
        except SystemExit:
            pass
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    return captured


def test_readme_and_user_guide_name_every_command():
    commands = _subcommands()
    assert {"run", "dump", "bench", "bundle", "profile", "debug", "report"} <= set(commands)
    readme = (ROOT / "README.md").read_text()
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    for command in commands:
        assert f"\nember {command} " in readme, f"README's CLI synopsis lacks `ember {command}`"
        assert f"\nember {command} " in guide, f"docs/user-guide.md lacks `ember {command}`"
    # --format dot is for the graph stages and the partition only (cli.py refuses it elsewhere).
    assert "--format text|dot (graph stages and partition)" in readme
