"""The console script's entry (harness/entry.py): a Ctrl-C while the CLI is still importing ends with the CLI's
one sentence and exit 130, as one during a command does; the test holds the import at `typer` (a finder that
says so and waits) and sends SIGINT then, so the signal lands inside the import every time."""

from __future__ import annotations

import signal
import subprocess
import sys

# Python that runs the console script's entry with an import of typer held up: the finder prints a line when
# the import reaches typer and sleeps there, where the test's SIGINT arrives.
HELD_AT_TYPER = """
import sys, time

class HoldTyper:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            print("importing typer", flush=True)
            time.sleep(30)
        return None

sys.meta_path.insert(0, HoldTyper())
sys.argv = ["kafkaesque", "--help"]
from kafkaesque_harness.harness.{module} import main
main()
"""


def interrupted_while_importing(module: str) -> subprocess.CompletedProcess:
    p = subprocess.Popen([sys.executable, "-c", HELD_AT_TYPER.format(module=module)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "importing typer\n"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_a_ctrl_c_while_the_cli_imports_ends_with_one_sentence_and_exit_130():
    from kafkaesque_harness.harness.exits import INTERRUPTED

    done = interrupted_while_importing("entry")
    assert done.returncode == 130, done.stderr
    assert done.stderr == f"error: {INTERRUPTED}\n"


def test_without_the_entry_the_same_ctrl_c_dies_with_a_traceback():
    """The other way: importing harness/cli.py directly (as the console script did) cannot catch it."""
    done = interrupted_while_importing("cli")
    assert done.returncode == -signal.SIGINT and "KeyboardInterrupt" in done.stderr

