"""A real local run (as root: a namespace per node) whose harness freezes holding the GIL while a partition is
active (the test-only hook KAFKAESQUE_TEST_FREEZE=fault, harness/watchdog.py) is killed by its watchdog, which
removes what the run left (processes, DROP rules and namespaces, the bridge and its FORWARD rule, lossy mounts,
the registration); the history stays readable and `kafkaesque analyze` checks it to "unknown", saying why.

The watchdog's bound is lowered to 5 s ($KAFKAESQUE_WATCHDOG_SILENCE_S) to keep the test short. The helpers and
the state dir of the test's own are test_cleanup_live.py's: nothing of another run on this machine is touched.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from kafkaesque_harness.harness.watchdog import FROZEN_FILE
from kafkaesque_harness.history import read_history
from tests.integration.test_cleanup_live import (  # noqa: F401 - env is a fixture
    env,
    kafkaesque,
    leftovers,
    nothing_left,
    start_run,
)

pytestmark = [pytest.mark.integration]


def test_a_run_frozen_mid_partition_is_killed_and_healed_by_its_watchdog(tmp_path, env):  # noqa: F811
    env = {**env, "KAFKAESQUE_TEST_FREEZE": "fault", "KAFKAESQUE_WATCHDOG_SILENCE_S": "5"}
    run = start_run(tmp_path, env, "frozen", "--nemesis", "partition", "--time-limit", "60",
                    "--nemesis-interval", "2", "--recovery-wait", "1", "--concurrency", "2", "--rate", "20")
    cut_while_frozen = False
    try:
        deadline = time.monotonic() + 90
        while run.proc.poll() is None and time.monotonic() < deadline:
            try:
                if not cut_while_frozen and leftovers(run.owner, run.run_dir)["rules in them"]:
                    cut_while_frozen = _frozen_with_a_partition(run)
            except (AssertionError, OSError):
                pass  # the run dir is not there yet
            time.sleep(0.5)
        code = run.proc.wait(5)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(30)

    assert code == -signal.SIGKILL, run.output()[-3000:]
    note = run.run_dir / FROZEN_FILE
    _wait_for(lambda: f"removed registration of run {run.owner}" in note.read_text(), 60, note)
    text = note.read_text()
    assert text.startswith("the harness was frozen and killed by its watchdog: no heartbeat for "), text[:2000]
    assert "_freeze_once_faulted" in text  # the frozen thread, in faulthandler's dump
    assert cut_while_frozen, "no partition rule was seen while the harness was frozen"

    assert nothing_left(run.owner, run.run_dir) == {}, text[-3000:]
    dry = kafkaesque(env, "cleanup", "--dry-run", "--run", run.owner)
    # the watchdog removed the run's registration: cleanup knows the id no more and finds nothing it left
    # (issue 39: an id neither registered nor found behind is exit 3, as a mistyped one)
    assert dry.returncode == 3 and "nothing it left behind was found" in dry.stderr, dry.stderr
    everything = kafkaesque(env, "cleanup", "--dry-run")  # this test's state dir: its runs only
    assert "would remove" not in everything.stderr, everything.stderr

    ops = read_history(run.run_dir / "history.jsonl", [])
    assert any(op.f == "start-partition" for op in ops) and any(op.type == "ok" for op in ops)
    assert not (run.run_dir / "results.json").exists()
    analyzed = kafkaesque(env, "analyze", str(run.run_dir), "--json", timeout=120)
    assert analyzed.returncode == 2, analyzed.stderr[-3000:]
    results = json.loads(analyzed.stdout)
    assert results["valid"] == "unknown"
    assert any("the harness was frozen and killed by its watchdog" in r for r in results["unknown_reasons"])


def _frozen_with_a_partition(run) -> bool:
    """The harness has stopped writing its history (frozen) while a DROP rule of the run is in place."""
    before = (run.run_dir / "history.jsonl").stat().st_size
    time.sleep(2.0)
    return (run.run_dir / "history.jsonl").stat().st_size == before and bool(
        leftovers(run.owner, run.run_dir)["rules in them"])


def _wait_for(predicate, timeout: float, note) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the watchdog did not finish within {timeout:.0f} s: "
                         f"{note.read_text()[-3000:] if note.exists() else '(no note)'}")


FROZEN_THEN_FINE = """
[campaign]
name = "frozen-then-fine"
budget = 600
seed = 3
time_limit = 8
nemesis_interval = 2
recovery_wait = 1
concurrency = 2
rate = 20.0
partitions = 2
nemeses = ["partition", ""]
"""


# nightly: kept out of `make test` (30-minute budget): the run-level watchdog test above proves the watchdog;
# this one adds the campaign going on past a killed run. `make nightly` runs it
@pytest.mark.slow
@pytest.mark.nightly
def test_a_campaign_records_a_run_its_watchdog_killed_and_goes_on_to_the_next(tmp_path, env):  # noqa: F811
    """The first run freezes (the hook waits for a fault; the second run has none) and is killed in its child
    process; the campaign records it as a harness error with the watchdog's reason and runs the second."""
    env = {**env, "KAFKAESQUE_TEST_FREEZE": "fault", "KAFKAESQUE_WATCHDOG_SILENCE_S": "5"}
    f = tmp_path / "campaign.toml"
    f.write_text(FROZEN_THEN_FINE)
    r = kafkaesque(env, "campaign", str(f), "--cluster", "local", "--store", str(tmp_path / "store"), "--no-panel",
                   timeout=240)
    campaign_dir = Path(r.stdout.strip().splitlines()[-1])
    doc = json.loads((campaign_dir / "campaign.json").read_text())
    first, second = doc["runs"]
    assert first["status"] == "unknown" and first["exit_code"] == 3, r.stderr[-3000:]
    assert first["error"].startswith("the harness was frozen and killed by its watchdog"), first["error"]
    assert second["status"] == "valid" and second["exit_code"] == 0, second
    assert r.returncode == 2 and doc["finished"]
    owner = f"{Path(first['run_dir']).name}-"  # the run id starts with its run dir's name
    assert "removed registration of run " + owner in (Path(first["run_dir"]) / FROZEN_FILE).read_text()
