"""A run's watchdog (harness/watchdog.py), with real processes and no cluster: a harness frozen in a C call that
holds the GIL (ctypes.PyDLL keeps it, as librdkafka did in issue 4041) is found silent, noted, SIGKILLed and its
run's leftovers removed; a harness that says "done" is left alone; one that dies without it is healed at once;
and a pid is only ever the harness while its start time is the one it had. Then what the watchdog's note means
to `kafkaesque analyze` and to a campaign.

Every test keeps its registrations in its own state dir (KAFKAESQUE_STATE_DIR), and its "node processes" are
`sleep`s carrying a run id of the test's own, so the cleanup the watchdog runs touches nothing else here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kafkaesque_harness.clusters.ownership import (
    process_start_time,
    register_run,
    registered_runs,
    unregister_run,
)
from kafkaesque_harness.clusters.reference import OWNER_ENV
from kafkaesque_harness.harness.campaign import run_campaign
from kafkaesque_harness.harness.campaign_file import load_campaign
from kafkaesque_harness.harness.cli import app
from kafkaesque_harness.harness.watchdog import (
    DIED_FILE,
    FROZEN_FILE,
    STACKS_FILE,
    Watched,
    kill_if_same,
    listen,
    watchdog_note,
)
from kafkaesque_harness.results.store import create_run_dir

PROJECT = Path(__file__).resolve().parents[2]
SILENCE_S = 3.0  # beats come every second: a loaded test machine must not miss three in a row

HARNESS = r"""
import ctypes, os, sys, time
from pathlib import Path
from kafkaesque_harness.clusters.ownership import register_run
from kafkaesque_harness.harness.watchdog import RunWatchdog

run_dir, how, owner, silence = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
register_run(owner, "local", str(run_dir))
watchdog = RunWatchdog.start(run_dir, silence_s=silence)
print(watchdog.pid, flush=True)
time.sleep(2.0)  # a few heartbeats first


def frozen_in_a_client_library():
    while True:  # the watchdog's SIGUSR2 (the stack dump) cuts a sleep short; the next one holds the GIL again
        ctypes.PyDLL("libc.so.6").sleep(600)  # holds the GIL: no other thread of this process runs


if how == "freeze":
    frozen_in_a_client_library()
elif how == "done":
    watchdog.done()
elif how == "die":
    os.kill(os.getpid(), 9)
"""


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def nodes():
    """`sleep` processes standing in for a run's nodes (KAFKAESQUE_OWNER names the run); killed at the end."""
    started: list[subprocess.Popen] = []

    def node(owner: str) -> subprocess.Popen:
        p = subprocess.Popen(["sleep", "600"], env={**os.environ, OWNER_ENV: owner})
        started.append(p)
        return p

    yield node
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(5)


def start_harness(tmp_path: Path, how: str, owner: str) -> tuple[subprocess.Popen, int, Path]:
    """A stand-in harness: it registers `owner` for its run dir, starts its watchdog, beats, then does `how`.
    Returns the process, its watchdog's pid and the run dir."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    proc = subprocess.Popen([sys.executable, "-c", HARNESS, str(run_dir), how, owner, str(SILENCE_S)],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=PROJECT)
    watchdog_pid = int(proc.stdout.readline())
    return proc, watchdog_pid, run_dir


def wait_gone(pid: int, start: int | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while process_start_time(pid) == start and start is not None:
        assert time.monotonic() < deadline, f"pid {pid} still there after {timeout:.0f} s"
        time.sleep(0.1)


def owner_id() -> str:
    return f"watchdog-test-{uuid.uuid4().hex[:8]}"


# --- frozen, done, died ----------------------------------------------------------------------------------------
def test_a_harness_frozen_holding_the_gil_is_noted_killed_and_its_run_healed(tmp_path, state, nodes):
    owner, other = owner_id(), owner_id()
    proc, watchdog_pid, run_dir = start_harness(tmp_path, "freeze", owner)
    watchdog_start = process_start_time(watchdog_pid)
    node = nodes(owner)
    register_run(other, "local", str(run_dir))  # a live harness's run (this test's), even in the same run dir
    others_node = nodes(other)

    assert proc.wait(60) == -signal.SIGKILL
    wait_gone(watchdog_pid, watchdog_start, 60)

    note = (run_dir / FROZEN_FILE).read_text()
    first = note.splitlines()[0]
    assert first.startswith("the harness was frozen and killed by its watchdog: no heartbeat for ")
    assert f"(bound {SILENCE_S:g} s)" in first
    assert f"harness: pid {proc.pid}" in note and f"SIGKILL sent to pid {proc.pid}" in note
    assert "frozen_in_a_client_library" in note  # faulthandler's dump, taken while it held the GIL
    assert f"removed process {node.pid} (sleep, run {owner})" in note
    assert f"removed registration of run {owner}" in note
    assert node.wait(10) == -signal.SIGKILL
    assert others_node.poll() is None and [r.owner for r in registered_runs()] == [other]
    assert not (run_dir / STACKS_FILE).exists()
    assert watchdog_note(run_dir) == first


def test_a_harness_that_says_done_is_left_alone(tmp_path, state, nodes):
    owner = owner_id()
    proc, watchdog_pid, run_dir = start_harness(tmp_path, "done", owner)
    node = nodes(owner)

    assert proc.wait(30) == 0
    assert process_start_time(watchdog_pid) is None  # done() waited for it to exit

    assert watchdog_note(run_dir) is None and sorted(p.name for p in run_dir.iterdir()) == []
    assert node.poll() is None and [r.owner for r in registered_runs()] == [owner]  # its own teardown's business
    unregister_run(registered_runs()[0])


def test_a_harness_that_died_without_done_is_healed_at_once(tmp_path, state, nodes):
    owner = owner_id()
    proc, watchdog_pid, run_dir = start_harness(tmp_path, "die", owner)
    watchdog_start = process_start_time(watchdog_pid)
    node = nodes(owner)

    assert proc.wait(30) == -signal.SIGKILL
    wait_gone(watchdog_pid, watchdog_start, 30)  # no silence to wait out: the pipe's end said it

    note = (run_dir / DIED_FILE).read_text()
    assert note.startswith(f"the harness died before the end of its run (pid {proc.pid}")
    assert f"removed process {node.pid} (sleep, run {owner})" in note
    assert node.wait(10) == -signal.SIGKILL and registered_runs() == []
    assert not (run_dir / FROZEN_FILE).exists()


# --- the parts ---------------------------------------------------------------------------------------------------
def test_a_pid_is_the_harness_only_while_its_start_time_is_the_same():
    p = subprocess.Popen(["sleep", "60"])
    try:
        start = process_start_time(p.pid)
        assert Watched(p.pid, start).alive()
        reused = Watched(p.pid, start + 1)  # what a pid given to another program looks like
        assert not reused.alive() and not kill_if_same(reused)
        time.sleep(0.2)
        assert p.poll() is None
        assert kill_if_same(Watched(p.pid, start)) and p.wait(5) == -signal.SIGKILL
        assert not Watched(p.pid, start).alive()
    finally:
        if p.poll() is None:
            p.kill()


class SteppedClock:
    """The watchdog's clock, moved by the test: each read returns the next value."""

    def __init__(self, values):
        self.values = iter(values)

    def __call__(self) -> float:
        return next(self.values)


def test_silence_while_the_watchdog_itself_was_not_running_is_not_counted():
    read_end, write_end = os.pipe()
    me = Watched(os.getpid(), process_start_time(os.getpid()))
    try:
        # 0: start; 100: the watchdog overslept (a suspended machine), 100.5 ... 103.5: really silent
        clock = SteppedClock([0.0, 100.0, 100.5, 101.5, 102.5, 103.5, 104.5])
        ending, silent = listen(read_end, me, 3.0, clock, poll_s=0.01)
        assert (ending, silent) == ("frozen", 3.5)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_stopped_harness_is_not_frozen_until_it_runs_again():
    p = subprocess.Popen(["sleep", "60"])
    read_end, write_end = os.pipe()
    ended: list[tuple[str, float]] = []
    try:
        p.send_signal(signal.SIGSTOP)
        watched = Watched(p.pid, process_start_time(p.pid))
        t = threading.Thread(target=lambda: ended.append(listen(read_end, watched, 0.5, poll_s=0.05)), daemon=True)
        t.start()
        time.sleep(1.5)
        assert ended == []  # stopped (Ctrl-Z, a debugger): three times the bound passed, and still not frozen
        p.send_signal(signal.SIGCONT)
        t.join(5)
        assert ended and ended[0][0] == "frozen"
    finally:
        p.kill()
        p.wait(5)
        os.close(read_end)
        os.close(write_end)


def test_beats_keep_it_listening_and_done_ends_it():
    read_end, write_end = os.pipe()
    me = Watched(os.getpid(), process_start_time(os.getpid()))
    ended: list[tuple[str, float]] = []
    t = threading.Thread(target=lambda: ended.append(listen(read_end, me, 0.5, poll_s=0.05)), daemon=True)
    t.start()
    for _ in range(10):
        os.write(write_end, b".")
        time.sleep(0.1)
    assert ended == []
    os.write(write_end, b"D")
    t.join(5)
    os.close(read_end)
    os.close(write_end)
    assert ended == [("done", 0.0)]


# --- what the note means: analyze, campaigns ------------------------------------------------------------------
def frozen_run(store: Path, name: str = "queue") -> Path:
    """A run dir as a frozen harness leaves it once its watchdog acted: test.json, a history, the note, no
    results.json."""
    run_dir = create_run_dir(store, name)
    (run_dir / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": ["partition"]}))
    (run_dir / "history.jsonl").write_text(json.dumps({"index": 0, "time": 1, "process": 0, "type": "invoke",
                                                       "f": "send", "value": [0, 1]}) + "\n")
    (run_dir / FROZEN_FILE).write_text("the harness was frozen and killed by its watchdog: no heartbeat for 61 s "
                                       "(bound 60 s)\nwhen: 2026-01-01T00:00:00Z\n")
    return run_dir


def test_analyze_checks_a_frozen_run_and_says_it_was_frozen_and_killed(tmp_path):
    run_dir = frozen_run(tmp_path)

    r = CliRunner().invoke(app, ["analyze", str(run_dir), "--json"])

    assert r.exit_code == 2, r.output
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] == "unknown"
    assert any("the harness was frozen and killed by its watchdog" in reason for reason in results["unknown_reasons"])
    assert results["error"].startswith("the harness was frozen and killed by its watchdog")
    assert "checkers" in results  # its history was checked all the same


def test_a_run_killed_by_its_watchdog_is_a_harness_error_and_the_campaign_goes_on(tmp_path):
    (tmp_path / "c.toml").write_text('[campaign]\nname = "ci"\ncluster = "local"\ntime_limit = 5\n'
                                     'repetitions = 2\n')
    plan = load_campaign(tmp_path / "c.toml", store=str(tmp_path / "store"))
    seen = []

    def frozen_then_fine(spec, log=print, panel=False):
        seen.append(spec.seed)
        if len(seen) == 1:
            return 3, frozen_run(Path(spec.store), spec.name)
        run_dir = create_run_dir(spec.store, spec.name)
        (run_dir / "results.json").write_text(json.dumps({"valid": True, "checkers": {}}))
        return 0, run_dir

    code, cdir = run_campaign(plan, run=frozen_then_fine, log=lambda m: None)

    runs = json.loads((cdir / "campaign.json").read_text())["runs"]
    assert len(seen) == 2 and [r["status"] for r in runs] == ["unknown", "valid"] and code == 2
    assert runs[0]["error"].startswith("the harness was frozen and killed by its watchdog: no heartbeat for 61 s")
    assert runs[0]["exit_code"] == 3 and runs[1]["exit_code"] == 0
    junit = (cdir / "junit.xml").read_text()
    assert 'type="unknown" message="the harness was frozen and killed by its watchdog' in junit
