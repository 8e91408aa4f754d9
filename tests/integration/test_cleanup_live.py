"""`kafkaesque cleanup` beside real runs of the local cluster (as root: a network namespace per node,
clusters/netns.py), issue 20 item 1:

- run during a live run, it skips that run (and says so) while it removes a dead run's leftover, and the
  live run still ends valid;
- after the harness of a run (and its watchdog, which would heal it) is killed with SIGKILL mid-partition,
  `--dry-run` lists what it left (processes, paused ones too, lossy mounts, namespaces with their DROP
  rules, the bridge, the FORWARD rule) and removes nothing, then cleanup removes all of it;
- a container a user started by hand from the node image (which carries the image's label
  kafkaesque=node) survives cleanup, while a dead run's container goes.

Every command here runs with a state dir of the test's own (KAFKAESQUE_STATE_DIR): cleanup then knows
only this test's runs, and leaves alone everything of other runs on this machine (it cannot prove them
dead), so these tests are safe beside other people's live runs. The helpers are shared with
test_signals.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.netns import netns_available

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    if not netns_available():
        pytest.fail("these tests need root, iproute2 and iptables (the local cluster's namespaces)")
    return {**os.environ, "KAFKAESQUE_STATE_DIR": str(tmp_path / "state"), "PYTHONUNBUFFERED": "1"}


@dataclasses.dataclass
class HarnessRun:
    """A `kafkaesque run` in a subprocess: its process (the harness itself), store and output files."""

    proc: subprocess.Popen
    store: Path
    name: str
    out: Path

    @property
    def run_dir(self) -> Path:
        dirs = [d for d in (self.store / self.name).iterdir() if d.is_dir() and not d.is_symlink()]
        assert len(dirs) == 1, dirs
        return dirs[0]

    @property
    def owner(self) -> str:
        """The run id its cluster carries (clusters/reference.py: the run dir's name and the harness's pid)."""
        return f"{self.run_dir.name}-{self.proc.pid}"

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def ops(self) -> list[dict]:
        lines = (self.run_dir / "history.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip().endswith("}")]

    def applied(self, f: str) -> bool:
        """A nemesis completion of `f` that did not fail."""
        return any(op["f"] == f and op["type"] != "invoke" and not op.get("error") for op in self.ops())

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the run did not end within {timeout:.0f} s:\n{self.output()[-3000:]}") from None


def start_run(tmp_path: Path, env: dict[str, str], name: str, *args: str) -> HarnessRun:
    store = tmp_path / "store"
    out = tmp_path / f"{name}.out"
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "kafkaesque_harness.harness.cli", "run", "--cluster", "local", "--no-panel",
                                 "--store", str(store), "--name", name, *args], stdout=f, stderr=subprocess.STDOUT,
                                env=env, cwd=PROJECT)
    return HarnessRun(proc, store, name, out)


def wait_until(predicate, timeout: float, what: str, run: HarnessRun | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, AssertionError, ValueError):
            pass  # not there yet
        if run is not None and run.proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {run.proc.returncode}) before {what}:\n{run.output()[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                         + (f":\n{run.output()[-3000:]}" if run else ""))


def start_partition_and_pause_run(tmp_path: Path, env: dict[str, str], name: str) -> HarnessRun:
    """A 120 s run that cuts and pauses every 2 s: something is always there to heal or leave behind."""
    return start_run(tmp_path, env, name, "--nemesis", "partition,pause", "--time-limit", "120",
                     "--nemesis-interval", "2", "--recovery-wait", "1")


def wait_for_partition_and_pause(run: HarnessRun) -> None:
    def both_active() -> bool:
        now = leftovers(run.owner, run.run_dir)
        return bool(now["paused processes"] and now["rules in them"])

    wait_until(both_active, 180, "a partition and a pause at the same time", run)


def kill_watchdog(run: HarnessRun) -> None:
    """SIGKILL the run's watchdog (harness/watchdog.py, a child of the harness), as `kill -9` of both would."""
    try:
        children = Path(f"/proc/{run.proc.pid}/task/{run.proc.pid}/children").read_text().split()
    except OSError:
        return
    for pid in map(int, children):
        try:
            if b"kafkaesque_harness.harness.watchdog" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def kafkaesque(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", *args], capture_output=True, text=True, env=env,
                          cwd=PROJECT, timeout=timeout)


def processes_of(owner: str) -> dict[int, str]:
    """pid -> kernel state letter of every process carrying KAFKAESQUE_OWNER=owner."""
    marker = f"KAFKAESQUE_OWNER={owner}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
    return {pid: state for pid, state in found.items() if state not in ("Z", "X")}


def leftovers(owner: str, run_dir: Path) -> dict[str, list[str]]:
    """Everything of the run still on this host, by kind."""
    tag = hashlib.sha1(owner.encode()).hexdigest()[:6]
    procs = processes_of(owner)
    namespaces = [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                             text=True).stdout.splitlines()
                  if line.startswith(f"kq{tag}-")]
    bridges = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
    forward = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True).stdout
    mounts = Path("/proc/mounts").read_text().splitlines()
    drops = [f"{ns}: {rule}" for ns in namespaces
             for rule in subprocess.run(["ip", "netns", "exec", ns, "iptables", "-w", "-S", "KAFKAESQUE"],
                                        capture_output=True, text=True).stdout.splitlines() if "DROP" in rule]
    return {
        "processes": [str(pid) for pid in procs],
        "paused processes": [str(pid) for pid, state in procs.items() if state in ("T", "t")],
        "network namespaces": namespaces,
        "rules in them": drops,
        "bridges": [line.split(":")[1].strip() for line in bridges.splitlines() if f"kqbr{tag}" in line],
        "FORWARD rules": [rule for rule in forward.splitlines() if f"kqbr{tag}" in rule],
        "lossy mounts": [line.split()[1] for line in mounts
                         if line.startswith("lossyfs ") and line.split()[1].startswith(str(run_dir))],
    }


def nothing_left(owner: str, run_dir: Path) -> dict[str, list[str]]:
    return {kind: things for kind, things in leftovers(owner, run_dir).items() if things}


def register_dead_run(env: dict[str, str], owner: str) -> None:
    """A registration as a harness killed earlier would have left it: this host and boot, a pid that is gone."""
    p = subprocess.Popen(["true"])
    p.wait()
    code = (f"import json; from kafkaesque_harness.clusters.ownership import register_run; r = register_run({owner!r}); "
            f"d = json.loads(r.path.read_text()); d['harness'].update(pid={p.pid}, start=1); "
            "r.path.write_text(json.dumps(d))")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT, check=True)


@pytest.fixture
def dead_runs_node(env):
    """A node process of a run whose harness is dead (registered in this test's state dir)."""
    owner = f"dead-run-{random.randrange(10**6)}"
    register_dead_run(env, owner)
    p = subprocess.Popen(["sleep", "600"], env={**os.environ, "KAFKAESQUE_OWNER": owner})
    yield owner, p
    if p.poll() is None:
        p.kill()
    p.wait(5)


def test_cleanup_during_a_live_local_run_skips_it_and_the_run_still_ends_valid(tmp_path, env, dead_runs_node):
    dead_owner, dead_node = dead_runs_node
    run = start_run(tmp_path, env, "live", "--nemesis", "kill", "--time-limit", "30", "--nemesis-interval", "5",
                    "--recovery-wait", "3")
    try:
        # in the middle of the main phase: clients acknowledged writes and a node was killed
        wait_until(lambda: any(op["type"] == "ok" for op in run.ops()) and run.applied("start-kill"), 150,
                   "the main phase with a kill applied", run)
        before = leftovers(run.owner, run.run_dir)
        assert before["network namespaces"] and before["processes"] and before["lossy mounts"]

        r = kafkaesque(env, "cleanup")

        assert r.returncode == 0, r.stderr
        assert f"skipped live run {run.owner} (cluster local-netns, harness pid {run.proc.pid}" in r.stderr, r.stderr
        assert f"removed process {dead_node.pid} (sleep, run {dead_owner})" in r.stderr  # it did clean, beside the live run
        assert dead_node.wait(10) == -signal.SIGKILL
        after = leftovers(run.owner, run.run_dir)
        assert after["network namespaces"] == before["network namespaces"]
        assert after["lossy mounts"] == before["lossy mounts"]
        assert run.proc.poll() is None

        assert run.wait(300) == 0, run.output()[-3000:]
    finally:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGTERM)
            run.proc.wait(120)
    results = json.loads((run.run_dir / "results.json").read_text())
    assert results["valid"] is True, results.get("unknown_reasons")
    assert nothing_left(run.owner, run.run_dir) == {}  # and its own teardown removed all of it


def test_cleanup_removes_what_a_harness_killed_mid_partition_left_and_dry_run_only_lists_it(tmp_path, env):
    run = start_partition_and_pause_run(tmp_path, env, "killed")
    try:
        wait_for_partition_and_pause(run)
    finally:
        kill_watchdog(run)  # or it would heal the run at once (harness/watchdog.py)
        run.proc.send_signal(signal.SIGKILL)  # the harness dies: no heal, no teardown
        run.proc.wait(30)
    left = leftovers(run.owner, run.run_dir)
    for kind in ("processes", "paused processes", "network namespaces", "rules in them", "bridges", "FORWARD rules",
                 "lossy mounts"):
        assert left[kind], f"the killed harness left no {kind}: {left}"
    try:
        dry = kafkaesque(env, "cleanup", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        for ns in left["network namespaces"]:
            assert f"would remove network namespace {ns}" in dry.stderr
        for mount in left["lossy mounts"]:
            assert f"would remove lossyfs mount {mount}" in dry.stderr
        for pid in left["paused processes"]:
            assert f"would remove process {pid} ({Path(sys.executable).name}, paused, run {run.owner})" in dry.stderr
        assert f"would remove bridge {left['bridges'][0]}" in dry.stderr
        assert "nothing was removed" in dry.stderr
        assert leftovers(run.owner, run.run_dir) == left  # the dry run removed nothing

        r = kafkaesque(env, "cleanup", "--all-dead")
        assert r.returncode == 0, r.stderr
        assert f"removed registration of run {run.owner}" in r.stderr
    finally:
        if nothing_left(run.owner, run.run_dir):  # a failed assertion must not leave the mess behind
            kafkaesque(env, "cleanup", "--run", run.owner)
    assert nothing_left(run.owner, run.run_dir) == {}
    again = kafkaesque(env, "cleanup")
    assert again.returncode == 0 and "cleanup: nothing left behind" in again.stderr


def test_a_container_started_by_hand_from_the_node_image_survives_cleanup(tmp_path, env):
    from kafkaesque_harness.clusters.base import ClusterError
    from kafkaesque_harness.clusters.docker import LABEL, RUN_LABEL, docker_client
    from kafkaesque_harness.clusters.image import ensure_image

    try:
        client = docker_client()
    except ClusterError as e:
        pytest.fail(f"this test needs a Docker engine: {e}")
    image = ensure_image(log=lambda m: None)
    suffix = random.randrange(10**6)
    dead_owner = f"dead-docker-run-{suffix}"
    register_dead_run(env, dead_owner)
    mine = client.containers.run(image, ["sleep", "infinity"], name=f"users-own-kq-node-{suffix}", detach=True)
    leftover = client.containers.run(image, ["sleep", "infinity"], name=f"kq-{dead_owner}-broker-1", detach=True,
                                     labels={LABEL: dead_owner, RUN_LABEL: dead_owner})
    try:
        assert mine.labels[LABEL] == "node"  # what every container of the image carries, from the image

        r = kafkaesque(env, "cleanup")

        assert r.returncode == 0, r.stderr
        assert f"removed container {leftover.name}" in r.stderr
        mine.reload()
        assert mine.status == "running"
        assert not client.containers.list(all=True, filters={"name": leftover.name})
    finally:
        for c in (mine, leftover):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - removed by the test already
                pass
