"""Layer 12: the `ember` command's tools beyond compile and run: the profiler, the network
debugger and the HTML report, each a subcommand module registered by cli.py through
`add_commands`, and the options and checks every command shares (tools/common.py)."""
from __future__ import annotations

from typing import Any


def add_commands(commands: Any) -> None:
    """Adds the tools' subcommands to the `ember` parser's subparsers; each sets `handler`."""
    from ember.tools import debug_command, profile_command, report_command, serve_cli

    profile_command.add_parser(commands)
    debug_command.add_parser(commands)
    report_command.add_parser(commands)
    serve_cli.add_parser(commands)
