"""The CLI's one error channel: every command, in any of the CLI's files, refuses the same way.

One message, one line on stderr (easy to grep in CI logs), and the exit status EXIT 3 unless the
caller says otherwise (docs/VERDICTS.md: 3 is the harness's own failure or bad input).
"""

from __future__ import annotations

import os
import sys

import rich.console
import typer
from rich.console import Console
from rich.markup import escape


class OutputClosed(Exception):
    """The reader of our standard output went away (`kafkaesque ls | head`) before all was written."""


def stdout_closed(console: Console | None = None) -> None:
    """Point stdout at /dev/null (so the interpreter's last flush cannot fail again) and raise
    OutputClosed, which the CLI's guard ends in exit 3: a broken pipe is not a verdict, and rich's own
    answer to it, SystemExit(1), would read as "invalid"."""
    if console is not None:
        console.quiet = True
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise OutputClosed


# Rich documents on_broken_pipe as the hook to override; every console of the CLI, typer's help
# included, is a rich Console, so the hook is set once here, where the CLI's output is defined.
rich.console.Console.on_broken_pipe = stdout_closed  # type: ignore[method-assign]

err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 3) -> None:
    err.print(f"[red]error:[/] {escape(message)}")  # messages name TOML tables: [paths], [[nodes]]
    raise typer.Exit(code)


def fail_all(messages: list[str]) -> None:
    """Refuse with every problem found, one sentence a line."""
    for message in messages[:-1]:
        err.print(f"[red]error:[/] {escape(message)}")
    fail(messages[-1])
