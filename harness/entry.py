"""The `kafkaesque` console script's entry point (pyproject.toml [project.scripts]).

It imports nothing at its top but `sys` and harness/exits.py, so that a Ctrl-C while the CLI's own modules are still being
imported (typer, rich and every room: a second or more on a loaded machine) ends as one during a command
does: one sentence and exit 130, not Python's KeyboardInterrupt traceback and death by SIGINT.
"""

from __future__ import annotations

import sys

from kafkaesque_harness.harness.exits import EXIT_INTERRUPTED, INTERRUPTED


def main() -> None:
    """Import the CLI, then run it (harness/cli.py main); a Ctrl-C before its guard stands ends here."""
    try:
        from kafkaesque_harness.harness.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        print(f"error: {INTERRUPTED}", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
