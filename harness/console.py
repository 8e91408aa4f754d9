"""The CLI's one error channel: every command, in any of the CLI's files, refuses the same way.

One message, one line on stderr (easy to grep in CI logs), and the exit status EXIT 3 unless the
caller says otherwise (docs/VERDICTS.md: 3 is the harness's own failure or bad input).
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 3) -> None:
    err.print(f"[red]error:[/] {escape(message)}")  # messages name TOML tables: [paths], [[nodes]]
    raise typer.Exit(code)


def fail_all(messages: list[str]) -> None:
    """Refuse with every problem found, one sentence a line."""
    for message in messages[:-1]:
        err.print(f"[red]error:[/] {escape(message)}")
    fail(messages[-1])
