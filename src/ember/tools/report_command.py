"""`ember report MODEL -o report.html`: compile (traced) and profile a model, then write one
self-contained HTML file: the graph the backend runs, op counts per stage, the memory plan as
a timeline, per-op and per-node times, the compile's passes (tools/report.py)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ember.support.errors import EmberError
from ember.tools.common import add_compile_options, positive_int

EXAMPLES = """examples:
  ember report model.onnx -o report.html             cpu backend, 10 profiled runs
  ember report model.onnx --backend interpreter --runs 1 -o report.html
"""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "report", help="write a self-contained HTML report: graph, op counts, memory plan, profile, passes",
        description=__doc__.split("\n\n")[0], epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_compile_options(parser)
    parser.add_argument("--runs", type=positive_int, default=10, help="profiled runs, averaged (default 10)")
    parser.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="the HTML file to write")
    parser.set_defaults(handler=run_command)


def build_report(args: argparse.Namespace) -> str:
    """The report's HTML text for the command's options."""
    from ember.tools.profile_command import profile_model
    from ember.tools.report import GraphPicture, ReportData, render_report

    captured: dict[str, Any] = {}

    def observe(stage: str, artifact: Any) -> None:
        if stage == "lowered" and "partition" not in captured:
            captured["picture"] = GraphPicture.of(artifact)
        elif stage == "partition":  # a partitioned compile: the whole graph, by segment backend
            captured["partition"] = True
            captured["picture"] = GraphPicture.of_partition(artifact)
        elif stage == "memory":
            captured["placements"] = list(artifact.placements)
            captured["instructions"] = artifact.instructions

    result = profile_model(args, observe)
    model = result["model"]
    data = ReportData(str(args.model), result["backend"], captured["picture"], op_counts(model), model.stats,
                      captured.get("placements", []), captured.get("instructions", 0), result["profile"],
                      result["trace"], [t * 1e3 for t in result["plain"]])
    return render_report(data)


def op_counts(model: Any) -> dict[str, dict[str, int]]:
    """Op counts per stage; a partitioned model's summed over its segments."""
    if "ops" in model.stats:
        return dict(model.stats["ops"])
    total: dict[str, dict[str, int]] = {}
    for step in getattr(model.executable, "steps", []):
        for stage, counts in step.model.stats.get("ops", {}).items():
            merged = total.setdefault(stage, {})
            for op, count in counts.items():
                merged[op] = merged.get(op, 0) + count
    return total


def run_command(args: argparse.Namespace) -> int:
    text = build_report(args)
    try:
        Path(args.output).write_text(text)
    except OSError as err:
        raise EmberError(f"cannot write {args.output}: {err}") from None
    print(f"report: {args.output} ({len(text) // 1024} KiB, self-contained: open it in a browser)")
    return 0
