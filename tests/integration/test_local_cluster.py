"""LocalCluster on its own: role lookups, kill -9 and restart, pause/resume, cleanup after a crashed
owner."""

import os
import signal

import pytest

from kafkaesque_harness.clusters.base import ClusterSpec
from kafkaesque_harness.clusters.local import CONTROLLER, LocalCluster, cleanup_leftovers

pytestmark = pytest.mark.integration


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: bool, state: str = "T") -> bool:
    import time

    for _ in range(100):
        if (_state(pid) == state) == want:
            return True
        time.sleep(0.02)
    return False


def _wait_gone(pid: int) -> bool:
    import time

    for _ in range(250):
        try:
            if _state(pid) == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def test_local_cluster_lifecycle_roles_faults_and_cleanup(tmp_path):
    c = LocalCluster(ClusterSpec(brokers=3), str(tmp_path), owner="test-local-cluster")
    c.up()
    try:
        c.create_topic("t", 2, 3, 2)
        parts = c.partitions("t")
        assert len(parts) == 2 and all(p.leader in (1, 2, 3) and len(p.isr) == 3 for p in parts)
        assert c.active_controller() == CONTROLLER
        c.kill("broker-2")
        assert not c.is_running("broker-2")
        c.start("broker-2")
        c.wait_ready(["broker-2"], 30)
        pid = int(open(c.pidfile("broker-3")).read())
        c.pause("broker-3")
        assert _wait_state(pid, True)  # stopped (signals are delivered asynchronously)
        c.resume("broker-3")
        assert _wait_state(pid, False)
        # the owner "crashes" (never calls down): cleanup finds and kills every process
        pids = [int(open(c.pidfile(n)).read()) for n in c.nodes()]
        killed = cleanup_leftovers(c.owner)  # this run's only: other runs on the machine go on
        assert len(killed) >= len(pids)
        for p in pids:  # each one gone, or a zombie awaiting its (dead) parent's reaping
            assert _wait_gone(p)
    finally:
        c.down()
        for n in c.nodes():
            try:
                os.kill(int(open(c.pidfile(n)).read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
