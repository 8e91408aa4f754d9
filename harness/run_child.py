"""One run of a campaign in a child process, so that the campaign outlives a run whose harness froze or died.

A run whose harness froze (a client library's C call holding the GIL forever) is SIGKILLed by its watchdog
(harness/watchdog.py); in the campaign's own process that would end the whole campaign. So each run is
`python -m kafkaesque_harness.harness.run_child`, a harness of its own: its spec arrives on stdin as JSON (TestSpec.to_dict),
and it writes a small JSON "hand-off" file, first with its run dir as soon as that exists, last with its
exit status. The campaign reads the hand-off and the run's results.json, or, when the run wrote none, the
note its watchdog left (harness-frozen.txt, harness-died.txt).

The child runs in a process group of its own: a Ctrl-C on the terminal (SIGINT to the foreground group),
SIGTERM or SIGHUP reaches the campaign, which hands each one to the child exactly once, as if it had been
sent to a `kafkaesque run`: the first stops the run, which heals and writes its results; a second stops it
at once (its watchdog then heals). The child writes its log lines and live panel to the same stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkaesque_harness.harness.console import EXIT_HARNESS, EXIT_INTERRUPTED, err
from kafkaesque_harness.harness.runner import HarnessError, not_ignored, run_test
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.harness.watchdog import DIED_FILE, FROZEN_FILE
from kafkaesque_harness.results.store import StoreError

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class RunChildError(RuntimeError):
    """run_test raised in the child (its sentence), or the child ended before it made a run dir."""


class RunInterrupted(KeyboardInterrupt):
    """The campaign was signalled while the child ran (and handed the signal on); `run_dir` is the run's,
    when it made one, so its results can still be read."""

    def __init__(self, run_dir: Path | None, code: int):
        super().__init__("interrupted")
        self.run_dir, self.code = run_dir, code


# --- the campaign's side --------------------------------------------------------------------------------
def run_in_child(spec, log: Callable[[str], None] = print, panel: bool = False) -> tuple[int, Path]:
    """harness.runner.run_test's shape, in a child process: (exit status, run dir). Raises RunChildError when
    run_test raised there or the child made no run dir, RunInterrupted when a signal reached the campaign
    during the run."""
    project = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (project, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="kafkaesque-run-") as tmp, _signals_handed_on() as hand_on:
        handoff = Path(tmp) / "handoff.json"
        proc = subprocess.Popen([sys.executable, "-m", "kafkaesque_harness.harness.run_child", "--handoff", str(handoff),
                                 *(["--panel"] if panel else [])],
                                stdin=subprocess.PIPE, env=env, cwd=project, process_group=0)
        hand_on.child = proc
        try:
            proc.stdin.write(json.dumps(spec.to_dict(), default=str).encode())
            proc.stdin.close()
        except OSError:
            pass  # it died at once: its exit status and hand-off say why
        status = proc.wait()
        said = _read_handoff(handoff)
    run_dir = Path(said["run_dir"]) if said.get("run_dir") else None
    code = status if status in (0, 1, 2, 3, EXIT_INTERRUPTED) else EXIT_HARNESS  # killed (its watchdog's SIGKILL): the harness failed
    if hand_on.received:
        raise RunInterrupted(run_dir, code)
    if said.get("error"):  # run_test raised: as it did in the campaign's own process, the error is the record
        raise RunChildError(said["error"])
    if run_dir is None:
        raise RunChildError(f"the run's process ended with status {_status(status)} before it made a run dir")
    if status not in (0, 1, 2, 3):
        _note_status(run_dir, status)
    return code, run_dir


def _note_status(run_dir: Path, status: int) -> None:
    """What ended the run's process, beside its watchdog's note (which the watchdog writes as the process
    goes, so give it a moment): a SIGSEGV is a client library's crash (librdkafka's main thread dereferenced
    NULL in a default lossy-crash txn run), a SIGKILL the watchdog's or the OOM killer's."""
    for _ in range(50):
        note = next((run_dir / f for f in (FROZEN_FILE, DIED_FILE) if (run_dir / f).exists()), None)
        if note is not None:
            with contextlib.suppress(OSError), open(note, "a") as f:
                f.write(f"the run's process ended with status {_status(status)}\n")
            return
        time.sleep(0.1)


class _HandOn:
    """The signals the campaign received while a child ran, each handed on to the child (once it exists)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._child: subprocess.Popen | None = None

    @property
    def child(self) -> subprocess.Popen | None:
        return self._child

    @child.setter
    def child(self, proc: subprocess.Popen) -> None:
        self._child = proc
        for signum in self.received:  # one that came while it was being started
            self._send(signum)

    def __call__(self, signum: int, frame) -> None:
        self.received.append(signum)
        if self._child is not None:
            self._send(signum)

    def _send(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._child.pid, signum)


@contextlib.contextmanager
def _signals_handed_on():
    """While a child runs, each SIGINT, SIGTERM or SIGHUP the campaign gets goes on to the child (in its own
    process group, it gets none from the terminal). Signals reach only the main thread: elsewhere nothing
    is handed on."""
    hand_on = _HandOn()
    if threading.current_thread() is not threading.main_thread():
        yield hand_on
        return
    old = {s: signal.signal(s, hand_on) for s in not_ignored(FORWARDED)}  # the child inherits what is ignored
    try:
        yield hand_on
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _read_handoff(path: Path) -> dict[str, Any]:
    try:
        said = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return said if isinstance(said, dict) else {}


def _status(code: int) -> str:
    return f"{code} (killed by {signal.Signals(-code).name})" if code < 0 else str(code)


# --- the child's side -----------------------------------------------------------------------------------------
def _hand_off(path: Path, **said: Any) -> None:
    previous = _read_handoff(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**previous, **said}))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkaesque_harness.harness.run_child", description=__doc__.splitlines()[0])
    parser.add_argument("--handoff", type=Path, required=True, help="the JSON file the run dir goes to")
    parser.add_argument("--panel", action="store_true", help="show the live panel")
    args = parser.parse_args(argv)
    try:
        spec = TestSpec.from_dict(json.loads(sys.stdin.read()))
    except (ValueError, TypeError) as e:
        _hand_off(args.handoff, error=f"the run's spec did not arrive as JSON ({e}); this is a harness bug")
        return EXIT_HARNESS
    try:
        code, _ = run_test(spec, log=lambda m: err.print(m), panel=args.panel,
                           on_run_dir=lambda d: _hand_off(args.handoff, run_dir=str(d)))
    except (HarnessError, StoreError) as e:
        _hand_off(args.handoff, error=f"{type(e).__name__}: {e}")
        return EXIT_HARNESS
    except KeyboardInterrupt:
        return EXIT_HARNESS
    except Exception as e:  # noqa: BLE001 - a harness bug: one sentence for the campaign, exit 3 (never 1)
        _hand_off(args.handoff, error=f"{type(e).__name__}: {e}"[:500])
        return EXIT_HARNESS
    _hand_off(args.handoff, exit=code)
    return code


if __name__ == "__main__":
    from kafkaesque_harness.workloads.base import exit_without_finalizers

    status = main()
    exit_without_finalizers(status)  # parked group members must not be destroyed by the finalizers
    sys.exit(status)
