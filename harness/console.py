"""The CLI's one error channel: every command, in any of the CLI's files, refuses the same way.

One message, one line on stderr (easy to grep in CI logs), and exit status 3 unless the
caller says otherwise (docs/VERDICTS.md: 3 is the harness's own failure or bad input).
"""

from __future__ import annotations

import os
import sys

import rich.console
import typer
from rich.console import Console
from rich.markup import escape

# Every command's exit status (harness/exits.py says which is which), re-exported for the commands.
from kafkaesque_harness.harness.exits import (  # noqa: F401
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
)


class OutputClosed(Exception):
    """The reader of our standard output went away (`kafkaesque ls | head`) before all was written."""


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush cannot fail on a closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _on_broken_pipe(console: Console) -> None:
    """Rich's hook for a closed stdout. Rich's own answer, SystemExit(1), would read as "invalid"; this
    raises OutputClosed, which the CLI's guard ends in exit 3 (a broken pipe is not a verdict)."""
    console.quiet = True
    silence_stdout()
    raise OutputClosed


# Rich documents on_broken_pipe as the hook to override; every console of the CLI, typer's help
# included, is a rich Console, so the hook is set once here, where the CLI's output is defined.
rich.console.Console.on_broken_pipe = _on_broken_pipe  # type: ignore[method-assign]

err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 3) -> None:
    err.print(f"[red]error:[/] {escape(message)}")  # messages name TOML tables: [paths], [[nodes]]
    raise typer.Exit(code)


def fail_all(messages: list[str]) -> None:
    """Refuse with every problem found, one sentence a line."""
    for message in messages[:-1]:
        err.print(f"[red]error:[/] {escape(message)}")
    fail(messages[-1])
