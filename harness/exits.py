"""Every command's exit status, and the sentence of an interrupted one, in a module that imports nothing: the
console script's entry (harness/entry.py) says them before the CLI's own modules (rich, typer) have loaded.

A verdict's status, the harness's own failure or bad input, or a run a signal cut short (Ctrl-C, SIGTERM,
SIGHUP: healed, stored, its verdict unknown), 128 + SIGINT as a shell, docker and kubectl end on Ctrl-C,
whichever signal it was and whenever it came (README, --help's epilog).
"""

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
INTERRUPTED = "interrupted before the command finished; nothing more was done."
