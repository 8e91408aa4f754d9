"""Ownership (clusters/ownership.py, clusters/cleanup.py, `kafkaesque cleanup`): a run is live while the
process that registered it is the same process (pid and start time), and cleanup removes only what
belongs to a run it can prove dead; a live run is skipped and named, a run nothing registered here is
left alone unless named, and --run refuses a live run.

Every test keeps its registrations in its own state dir (KAFKAESQUE_STATE_DIR), so the default mode
sees only this test's runs, never another one on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kafkaesque_harness.clusters import cleanup as cleanup_module
from kafkaesque_harness.clusters.base import ClusterError
from kafkaesque_harness.clusters.cleanup import RunIsLive, plan_cleanup
from kafkaesque_harness.clusters.local import cleanup_leftovers, find_processes
from kafkaesque_harness.clusters.ownership import (
    Harness,
    Leftover,
    is_live,
    live_runs,
    pick,
    process_start_time,
    register_run,
    registered_runs,
    run_state,
    runs_dir,
    this_harness,
    unregister_run,
)
from kafkaesque_harness.clusters.reference import OWNER_ENV
from kafkaesque_harness.harness.cli import app


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def register_as(owner: str, harness: Harness) -> Path:
    """A registration written as another harness would have written it."""
    record = register_run(owner)
    data = json.loads(record.path.read_text())
    data["harness"] = dataclasses.asdict(harness)
    record.path.write_text(json.dumps(data))
    return record.path


def dead_harness() -> Harness:
    """This host and boot, a pid that is gone: a harness that was killed."""
    p = subprocess.Popen(["true"])
    p.wait()
    me = this_harness()
    return Harness(me.host, me.boot, p.pid, 1)


@pytest.fixture
def sleeper():
    """A process that lives until the test ends, to stand for a harness or a node."""
    started = []

    def start(env: dict[str, str] | None = None) -> subprocess.Popen:
        p = subprocess.Popen(["sleep", "300"], env={**os.environ, **(env or {})})
        started.append(p)
        deadline = time.monotonic() + 5
        while not _execed(p.pid) and time.monotonic() < deadline:  # Popen can return before the exec shows
            time.sleep(0.01)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait(5)


def _execed(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep")
    except OSError:
        return False


# --- the registry -------------------------------------------------------------------------------------------
def test_a_registered_run_is_live_until_it_unregisters():
    handle = register_run("run-a", cluster="local", run_dir="/store/q/1")
    assert handle.harness == this_harness() and handle.harness.start > 0
    assert is_live("run-a") and [r.owner for r in live_runs()] == ["run-a"]
    unregister_run(handle)
    assert run_state("run-a") == "unregistered" and not list(runs_dir().glob("*.json"))


def test_a_pid_reused_by_another_program_is_not_the_live_run(sleeper):
    other = sleeper()
    me = this_harness()
    # the registered pid exists, but its process started at another time: the harness died and the
    # kernel gave its pid to this sleeper
    register_as("run-reused", Harness(me.host, me.boot, other.pid, process_start_time(other.pid) + 1))
    assert run_state("run-reused") == "dead"
    register_as("run-alive", Harness(me.host, me.boot, other.pid, process_start_time(other.pid)))
    assert run_state("run-alive") == "live"


def test_a_run_from_an_earlier_boot_is_dead_and_one_from_another_host_cannot_be_checked():
    me = this_harness()
    register_as("before-reboot", Harness(me.host, "another-boot", me.pid, me.start))
    register_as("elsewhere", Harness("another-host", me.boot, me.pid, me.start))
    assert run_state("before-reboot") == "dead"
    assert run_state("elsewhere") == "elsewhere"


def test_an_owner_with_slashes_stays_in_the_registry_dir():
    handle = register_run("../../etc/x")
    assert handle.path.parent == runs_dir() and is_live("../../etc/x")


def test_a_second_live_harness_cannot_register_the_same_run(sleeper):
    other = sleeper()
    me = this_harness()
    register_as("shared", Harness(me.host, me.boot, other.pid, process_start_time(other.pid)))
    with pytest.raises(ClusterError, match=r"Run shared is already live \(pid \d+ on .*\); give this cluster"):
        register_run("shared")
    other.kill()
    other.wait(5)
    assert register_run("shared").harness == me  # its harness is gone: the run id is free again


# --- what cleanup picks --------------------------------------------------------------------------------------
def leftover(owner: str, what: str, removed: list[str], rank: int = 0, tag: str = "") -> Leftover:
    return Leftover(owner, what, lambda: removed.append(what), rank=rank, tag=tag)


def test_by_default_only_the_leftovers_of_a_dead_run_are_picked():
    register_run("live-run")
    register_as("dead-run", dead_harness())
    removed: list[str] = []
    items = [leftover("live-run", "process 1", removed), leftover("dead-run", "process 2", removed),
             leftover("never-registered", "process 3", removed), leftover("", "namespace kqabcdef-0", removed)]
    assert [i.what for i in pick(items)] == ["process 2"]
    assert [i.what for i in pick(items, owner="live-run")] == ["process 1"]  # a test cleaning up after itself


def test_cleanup_leftovers_kills_a_dead_runs_node_and_spares_a_live_and_an_unregistered_one(sleeper):
    register_run("live-run")
    register_as("dead-run", dead_harness())
    live, dead, unknown = (sleeper({OWNER_ENV: o}) for o in ("live-run", "dead-run", "never-registered"))
    live.send_signal(signal.SIGSTOP)  # a paused node of the live run: left paused, it is that run's business
    assert {"live-run", "dead-run", "never-registered"} <= {p.owner for p in find_processes()}
    killed = cleanup_leftovers()
    assert killed == [f"process {dead.pid} (sleep, run dead-run)"]
    assert dead.wait(5) == -signal.SIGKILL
    assert live.poll() is None and unknown.poll() is None
    live.send_signal(signal.SIGCONT)


def test_the_plan_removes_a_dead_runs_things_then_its_registration_and_names_the_others():
    register_run("live-run")
    register_as("dead-run", dead_harness())
    removed: list[str] = []
    found = [leftover("dead-run", "bridge kqbr000001", removed, rank=3),
             leftover("dead-run", "process 2", removed, rank=0),
             leftover("live-run", "process 1", removed),
             leftover("", "network namespace kqabcdef-0", removed, tag="abcdef")]
    plan = plan_cleanup(found=found)
    assert [i.what for i in plan.remove] == ["process 2", "bridge kqbr000001", "registration of run dead-run"]
    assert [r.owner for r in plan.live] == ["live-run"]
    assert [i.what for i in plan.skipped_live["live-run"]] == ["process 1"]
    assert [i.what for i in plan.unverified["the run tagged abcdef"]] == ["network namespace kqabcdef-0"]
    cleanup_module.carry_out(plan, lambda m: None)
    assert removed == ["process 2", "bridge kqbr000001"]
    assert [r.owner for r in registered_runs()] == ["live-run"]


def test_a_dead_runs_registration_stays_while_one_of_its_leftovers_cannot_be_removed():
    register_as("dead-run", dead_harness())

    def stuck() -> None:
        raise OSError("device or resource busy")

    plan = plan_cleanup(found=[Leftover("dead-run", "lossyfs mount /x/data", stuck, rank=1)])
    said: list[str] = []
    assert cleanup_module.carry_out(plan, said.append) == (0, 1)
    assert said == ["could not remove lossyfs mount /x/data (OSError: device or resource busy)",
                    "kept registration of run dead-run: some of its leftovers are still there"]
    assert run_state("dead-run") == "dead"


def test_run_option_refuses_a_live_run_and_takes_an_unregistered_one():
    register_run("live-run", cluster="local")
    with pytest.raises(RunIsLive, match=r"^Run live-run is live \(cluster local, .*\), so nothing of it is a leftover"):
        plan_cleanup("live-run", found=[])
    removed: list[str] = []
    plan = plan_cleanup("old-run", found=[leftover("old-run", "process 5", removed),
                                          leftover("", "bridge kqbr" + "0" * 6, removed),
                                          leftover("other", "process 6", removed)])
    assert [i.what for i in plan.remove] == ["process 5"]


def test_run_option_finds_a_namespace_by_the_runs_tag():
    from kafkaesque_harness.clusters.ownership import owner_tag

    tag = owner_tag("old-run")
    plan = plan_cleanup("old-run", found=[Leftover("", f"network namespace kq{tag}-0", lambda: None, tag=tag)])
    assert [i.what for i in plan.remove] == [f"network namespace kq{tag}-0"]


# --- the command ---------------------------------------------------------------------------------------------
@pytest.fixture
def found_by_backends(monkeypatch):
    """What the backends would find, instead of this machine's real leftovers."""
    items: list[Leftover] = []
    monkeypatch.setattr(cleanup_module, "find_leftovers", lambda owners=(): items)
    return items


def test_cleanup_names_the_live_run_it_skips_and_removes_a_dead_ones(found_by_backends):
    register_run("live-run", cluster="local-netns")
    register_as("dead-run", dead_harness())
    removed: list[str] = []
    found_by_backends += [leftover("live-run", "process 1 (run live-run)", removed),
                          leftover("dead-run", "process 2 (run dead-run)", removed)]
    r = CliRunner().invoke(app, ["cleanup"])
    assert r.exit_code == 0, r.output
    assert "skipped live run live-run (cluster local-netns, harness pid" in r.output
    assert "1 thing(s) of it left alone" in r.output
    assert "removed process 2 (run dead-run)" in r.output and "removed registration of run dead-run" in r.output
    assert removed == ["process 2 (run dead-run)"]


def test_dry_run_lists_what_would_go_and_removes_nothing(found_by_backends):
    register_as("dead-run", dead_harness())
    removed: list[str] = []
    found_by_backends += [leftover("dead-run", "network namespace kq123456-0", removed)]
    r = CliRunner().invoke(app, ["cleanup", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "would remove network namespace kq123456-0" in r.output
    assert "2 leftover(s) would be removed; nothing was removed" in r.output
    assert removed == [] and run_state("dead-run") == "dead"


def test_cleanup_leaves_what_no_registered_run_owns_and_says_how_to_remove_it(found_by_backends):
    removed: list[str] = []
    found_by_backends += [leftover("someone-elses", "container kq-someone-elses-broker-1", removed)]
    r = CliRunner().invoke(app, ["cleanup", "--all-dead"])
    assert r.exit_code == 0, r.output
    assert "left alone 1 thing(s) of run someone-elses, which no run registered on this machine owns" in r.output
    assert "`kafkaesque cleanup --run RUN`" in r.output and removed == []


def test_cleanup_run_of_a_live_run_is_one_sentence_and_exit_3(found_by_backends):
    register_run("live-run")
    r = CliRunner().invoke(app, ["cleanup", "--run", "live-run"])
    assert r.exit_code == 3
    assert r.output.count("\n") == 1 and "error: Run live-run is live" in r.output
    assert "wait for it to end or stop its harness, then clean up." in r.output


def test_cleanup_run_and_all_dead_together_are_refused(found_by_backends):
    r = CliRunner().invoke(app, ["cleanup", "--run", "x", "--all-dead"])
    assert r.exit_code == 3 and "--run and --all-dead contradict each other; give one of them." in r.output


def test_the_harness_of_a_real_child_process_is_live_then_dead_after_kill_9(tmp_path):
    """The registration as a separate `kafkaesque` process leaves it: live while it runs, dead after kill -9."""
    code = ("import sys, time; from kafkaesque_harness.clusters.ownership import register_run; register_run('child-run'); "
            "print('registered', flush=True); time.sleep(300)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    try:
        assert p.stdout.readline().strip() == "registered"
        assert run_state("child-run") == "live"
    finally:
        p.kill()
        p.wait(5)
    assert run_state("child-run") == "dead"
