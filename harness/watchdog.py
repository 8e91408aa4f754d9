"""A run's watchdog: a process of its own that heals the run when its harness froze or died.

DESIGN.md: a fault is always healed, and a crashed run keeps its history. A client library's C
call that waits forever while holding the GIL (librdkafka's rebalance callback inside
Consumer.close(), librdkafka issue 4041) stops every Python thread of the harness: no heal, no
teardown, no results, and the run's faults (cut links, paused or killed brokers, clock offsets,
lossy file systems) stay. Nothing inside that process can help, so the runner starts this one
(`python -m kafkaesque_harness.harness.watchdog`, a fresh interpreter, in a session of its own so a Ctrl-C or a
closed terminal reaches only the harness) as soon as the run dir exists.

The harness writes one byte to the watchdog's stdin every second from a daemon thread. That
thread needs the GIL for each beat, so a GIL held forever silences it, as does a deadlock of
the whole interpreter. At its normal end the harness writes "done" and closes the pipe. The
watchdog then:

- reads "done": the run ended (its heal and teardown ran); it exits;
- reads end of file without "done": the harness died (SIGKILL, the OOM killer, a crash of the
  interpreter); the watchdog removes the run's leftovers at once and notes it in
  harness-died.txt;
- hears nothing for longer than the bound (60 s, $KAFKAESQUE_WATCHDOG_SILENCE_S): the harness
  is frozen. The watchdog writes harness-frozen.txt (when, how long silent, the harness's pid,
  every Python thread's stack from faulthandler, the native stacks when py-spy is found),
  SIGKILLs the harness (that pid only, and only while its start time in /proc is the one it was
  started with, so a reused pid is never hit), removes the run's leftovers and notes them.

No pure Python code holds the GIL for more than the interpreter's switch interval (5 ms); a C call
that does without releasing it (a sort of millions of items, a full garbage collection of a large
heap) takes seconds at most, even on a loaded 2-core machine, so 60 s leaves a wide margin. A
silence the watchdog cannot blame on the harness is not counted: while the harness is stopped
(Ctrl-Z, a debugger) and while the watchdog itself was not running (the machine suspended, a
paused VM, a starved scheduler: its own poll loop overslept).

The leftovers are removed with `kafkaesque cleanup`'s own code (clusters/cleanup.py), restricted
to the registrations of this harness process (its host, boot, pid and start time) for this run
dir, which are provably dead once it is killed: never anything of another harness, live or not.

`KAFKAESQUE_TEST_FREEZE` is a hook for tests only (tests/integration/test_watchdog_run.py): set
to "fault", the harness freezes holding the GIL as soon as a fault of the run is active.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import faulthandler
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kafkaesque_harness.clusters.cleanup import RunIsLive, carry_out, plan_cleanup
from kafkaesque_harness.clusters.ownership import Harness, boot_id, process_start_time, registered_runs

SILENCE_ENV = "KAFKAESQUE_WATCHDOG_SILENCE_S"
DEFAULT_SILENCE_S = 60.0
BEAT_S = 1.0  # the harness's heartbeat
POLL_S = 1.0  # the watchdog's own loop
OVERSLEPT_S = 5.0  # a poll of the watchdog's that took this long: it was not running, the silence proves nothing
GONE_WAIT_S = 15.0  # after SIGKILL or end of file, how long the harness may take to be gone
PY_SPY_TIMEOUT_S = 15.0
FROZEN_FILE = "harness-frozen.txt"
DIED_FILE = "harness-died.txt"
STACKS_FILE = ".harness-stacks.txt"  # faulthandler's dump on SIGUSR2, folded into FROZEN_FILE
STACKS_SIGNAL = signal.SIGUSR2
BEAT, DONE = b".", b"D"
TEST_FREEZE_ENV = "KAFKAESQUE_TEST_FREEZE"  # test-only: see the module docstring

Ending = Literal["done", "died", "frozen"]


def silence_bound() -> float:
    """The bound of a heartbeat's silence, from $KAFKAESQUE_WATCHDOG_SILENCE_S (seconds, > 0)."""
    raw = os.environ.get(SILENCE_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_SILENCE_S
    except ValueError:
        value = DEFAULT_SILENCE_S
    return value if value > 0 else DEFAULT_SILENCE_S


def watchdog_note(run_dir: Path) -> str | None:
    """What the watchdog said of a run whose harness it found frozen or dead (the first line of its note),
    or None when it did not act."""
    for name in (FROZEN_FILE, DIED_FILE):
        try:
            first = (Path(run_dir) / name).read_text(errors="replace").splitlines()[0].strip()
        except (OSError, IndexError):
            continue
        if first:
            return first
    return None


# --- the harness's end -------------------------------------------------------------------------------------
class RunWatchdog:
    """The harness's handle on its run's watchdog: the heartbeat thread and the pipe. `done()` at the run's
    end, after its heal and teardown."""

    def __init__(self, proc: subprocess.Popen, stacks) -> None:
        self._proc = proc
        self._stacks = stacks
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self.lost: str | None = None  # why the heartbeat stopped early (the watchdog went away)
        threading.Thread(target=self._beat, name="watchdog heartbeat", daemon=True).start()

    @classmethod
    def start(cls, run_dir: Path, silence_s: float | None = None, ledger=None) -> RunWatchdog:
        """Start the watchdog of the run in `run_dir`, watching this process. `ledger`: the run's FaultLedger,
        which only the test-only freeze hook reads. Raises OSError when the process cannot be started."""
        me = os.getpid()
        stacks = open(Path(run_dir) / STACKS_FILE, "w")  # noqa: SIM115 - faulthandler writes to it until done()
        faulthandler.register(STACKS_SIGNAL, file=stacks, all_threads=True)
        project = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (project, os.environ.get("PYTHONPATH")) if p)}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kafkaesque_harness.harness.watchdog", "--pid", str(me),
                 "--start", str(process_start_time(me) or 0), "--run-dir", str(run_dir),
                 "--silence", str(silence_s or silence_bound())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, cwd=project,
                start_new_session=True)  # a Ctrl-C or a closed terminal reaches the harness, never its watchdog
        except OSError:
            _unregister_stacks(stacks)
            raise
        watchdog = cls(proc, stacks)
        if os.environ.get(TEST_FREEZE_ENV) == "fault" and ledger is not None:
            threading.Thread(target=_freeze_once_faulted, args=(ledger,), name="test-only freeze",
                             daemon=True).start()
        return watchdog

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _write(self, data: bytes) -> bool:
        with self._lock:
            if self._proc.stdin is None or self._proc.stdin.closed:
                return False
            try:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()
                return True
            except OSError as e:  # the watchdog went away: the run goes on unwatched
                self.lost = f"the run's watchdog went away ({type(e).__name__}: {e})"
                return False

    def _beat(self) -> None:
        while not self._ended.wait(BEAT_S):
            if not self._write(BEAT):
                return

    def done(self) -> None:
        """The run ended normally: say "done", close the pipe, and let the watchdog exit."""
        self._ended.set()
        self._write(DONE)
        with self._lock, contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self.lost = f"the run's watchdog (pid {self._proc.pid}) did not exit after the run"
        _unregister_stacks(self._stacks)


def _unregister_stacks(stacks) -> None:
    faulthandler.unregister(STACKS_SIGNAL)
    path = Path(stacks.name)
    stacks.close()
    with contextlib.suppress(OSError):
        path.unlink()


def _freeze_once_faulted(ledger) -> None:
    """Test-only (KAFKAESQUE_TEST_FREEZE=fault): once a fault of the run is active, hold the GIL forever in a
    C call, as librdkafka did in issue 4041. ctypes.PyDLL keeps the GIL during the call (CDLL releases it)."""
    while True:
        while not ledger.active():
            time.sleep(0.1)
        time.sleep(0.5)  # the fault's completion reaches the history
        if ledger.active():
            break
    libc = ctypes.PyDLL("libc.so.6")
    while True:
        libc.sleep(3600)  # a signal's handler may cut one sleep short: the next one holds the GIL again


# --- the watchdog's end ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Watched:
    """The harness process, by its pid and its start time (clock ticks after boot, /proc/<pid>/stat)."""

    pid: int
    start: int

    def alive(self) -> bool:
        """The very process the watchdog was started for exists (not a zombie, not a reused pid)."""
        return process_start_time(self.pid) == self.start

    def stopped(self) -> bool:
        """It is stopped (SIGSTOP, Ctrl-Z, a debugger): not frozen by itself."""
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state in ("T", "t") and self.alive()

    def harness(self) -> Harness:
        return Harness(socket.gethostname(), boot_id(), self.pid, self.start)


def listen(fd: int, watched: Watched, silence_s: float, clock: Callable[[], float] = time.monotonic,
           poll_s: float = POLL_S) -> tuple[Ending, float]:
    """Read the harness's heartbeat on `fd` until it says done, its end closes, or it is silent for longer
    than `silence_s`; returns how it ended and, when frozen, how long it was silent."""
    last = previous = clock()
    while True:
        readable, _, _ = select.select([fd], [], [], poll_s)
        now = clock()
        if readable:
            data = os.read(fd, 4096)
            if not data:
                return "died", 0.0
            if DONE in data:
                return "done", 0.0
            last = now
        elif now - previous > OVERSLEPT_S or watched.stopped():
            last = now  # the watchdog itself was not running, or the harness is stopped: this silence proves nothing
        previous = now
        if now - last > silence_s:
            return "frozen", now - last


def kill_if_same(watched: Watched) -> bool:
    """SIGKILL the harness, only while it is still the process it was started as; True if it was sent."""
    if not watched.alive():
        return False
    try:
        os.kill(watched.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def wait_gone(watched: Watched, timeout_s: float = GONE_WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while watched.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def heal_run(run_dir: Path, watched: Watched, say: Callable[[str], None]) -> int:
    """Remove the leftovers of the runs this harness process registered for `run_dir` (clusters/cleanup.py, as
    `kafkaesque cleanup --run` does); returns how many could not be removed."""
    me = watched.harness()
    mine = [r for r in registered_runs() if r.harness == me and _same_dir(r.run_dir, run_dir)]
    if not mine:
        say("nothing of the run is registered: its cluster was not up yet, or was already torn down")
        return 0
    failed = 0
    for record in mine:
        try:
            plan = plan_cleanup(record.owner)
        except RunIsLive as e:  # its harness still lives: nothing of it is a leftover
            say(str(e))
            failed += 1
            continue
        failed += carry_out(plan, say)[1]
    return failed


def _same_dir(a: str, b: Path) -> bool:
    try:
        return bool(a) and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _stacks(run_dir: Path, watched: Watched) -> str:
    """Every Python thread's stack (faulthandler in the harness, on SIGUSR2: its C handler needs no GIL) and
    the native stacks when py-spy is there; text for the note."""
    parts = []
    stacks = run_dir / STACKS_FILE
    if watched.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(watched.pid, STACKS_SIGNAL)
        time.sleep(1.0)
    try:
        text = stacks.read_text(errors="replace").strip()
    except OSError:
        text = ""
    parts.append("Python stacks (faulthandler):\n" + (text or "(none were written)"))
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        parts.append("native stacks: py-spy is not installed (pip install py-spy to have them)")
    else:
        try:
            r = subprocess.run([py_spy, "dump", "--native", "--pid", str(watched.pid)], capture_output=True,
                               text=True, timeout=PY_SPY_TIMEOUT_S)
            parts.append("native stacks (py-spy dump --native):\n" + (r.stdout.strip() or r.stderr.strip()))
        except (OSError, subprocess.TimeoutExpired) as e:
            parts.append(f"native stacks: py-spy failed ({type(e).__name__}: {e})")
    return "\n\n".join(parts)


def act(ending: Ending, silent_s: float, silence_s: float, run_dir: Path, watched: Watched) -> int:
    """What the watchdog does once `listen` returned; returns its exit status (0 nothing to do or all healed,
    1 some leftover could not be removed)."""
    if ending == "done":
        return 0
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if ending == "frozen" and watched.alive():
        note = run_dir / FROZEN_FILE
        _append(note, f"the harness was frozen and killed by its watchdog: no heartbeat for {silent_s:.1f} s "
                      f"(bound {silence_s:g} s)\nwhen: {when}\nharness: pid {watched.pid}, run dir {run_dir}\n\n"
                      + _stacks(run_dir, watched) + "\n\n")
        sent = kill_if_same(watched)
        _append(note, f"SIGKILL sent to pid {watched.pid}\n" if sent else
                f"pid {watched.pid} was gone before the SIGKILL\n")
    else:
        note = run_dir / DIED_FILE
        _append(note, f"the harness died before the end of its run (pid {watched.pid}: its heartbeat pipe closed "
                      f"without \"done\")\nwhen: {when}\nrun dir: {run_dir}\n")
    if not wait_gone(watched):
        _append(note, f"pid {watched.pid} is still there after {GONE_WAIT_S:.0f} s; its leftovers are not removed "
                      "(run `kafkaesque cleanup` once it is gone)\n")
        return 1
    _append(note, "the run's leftovers (clusters/cleanup.py):\n")
    failed = heal_run(run_dir, watched, lambda line: _append(note, f"  {line}\n"))
    with contextlib.suppress(OSError):
        (run_dir / STACKS_FILE).unlink()
    print(f"kafkaesque watchdog: {watchdog_note(run_dir)}; the run's leftovers were "
          f"{'removed' if not failed else 'not all removed'}; see {note}", file=sys.stderr)
    return 1 if failed else 0


def _append(path: Path, text: str) -> None:
    with contextlib.suppress(OSError), open(path, "a") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkaesque_harness.harness.watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, required=True, help="the harness's pid")
    parser.add_argument("--start", type=int, required=True, help="its start time (/proc/<pid>/stat field 22)")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--silence", type=float, default=DEFAULT_SILENCE_S, help="seconds of silence that mean frozen")
    args = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # the harness handles these; the watchdog outlives them to heal
    watched = Watched(args.pid, args.start)
    ending, silent_s = listen(sys.stdin.fileno(), watched, args.silence)
    return act(ending, silent_s, args.silence, args.run_dir, watched)


if __name__ == "__main__":
    sys.exit(main())
