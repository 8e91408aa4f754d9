"""The Raft controller quorum on real processes (issue #9 item 1; 002 1.2.1, 1.2.2): three
controllers and three brokers; SIGKILL the active controller, the other two elect a new one, the
brokers follow it, it still elects partition leaders, broker epochs keep growing, and the
controllers' metadata logs agree on every offset they share (the restarted one included). With
--snapshot-every 20 the run crosses compactions: a broker restarted with a wiped disk and the
restarted controller catch up through a snapshot."""

import shutil
import signal
import subprocess
import time

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.admin import create_topic, dump_state
from kafkaesque_harness.clusters.broker.local_cluster import (
    CONTROLLER_ID,
    active_controller_state,
    broker_argv,
    controller_argv,
    quorum_spec,
    wait_until_unfenced,
)
from kafkaesque_harness.clusters.ports import free_ports

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"


class Quorum:
    def __init__(self, root):
        self.root = root
        ports = free_ports(6)
        self.cports = {CONTROLLER_ID + j: ports[j] for j in range(3)}
        self.bports = {i: ports[2 + i] for i in (1, 2, 3)}
        self.procs: dict[str, subprocess.Popen] = {}

    def spawn(self, name, argv):
        self.procs[name] = subprocess.Popen(argv, stdout=open(self.root / f"{name}.out", "ab"),
                                            stderr=subprocess.STDOUT)

    def start_controller(self, cid):
        d = self.root / f"controller-{cid}"
        d.mkdir(exist_ok=True)
        flags = ["--session-timeout-ms", "3000", "--snapshot-every", "20", "--quorum", quorum_spec(HOST, list(self.cports.values()))]
        self.spawn(f"controller-{cid}", controller_argv(HOST, self.cports[cid], str(d), flags, cid))

    def start_broker(self, i):
        d = self.root / f"broker-{i}"
        d.mkdir(exist_ok=True)
        controllers = ",".join(f"{HOST}:{p}" for p in self.cports.values())
        self.spawn(f"broker-{i}", broker_argv(i, HOST, self.bports[i], controllers, str(d), "never", [],
                                              ["--replica-lag-time-max-ms", "3000", "--heartbeat-interval-ms",
                                               "250"]))

    def kill(self, name):
        p = self.procs.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def live_cports(self):
        return [p for cid, p in self.cports.items() if f"controller-{cid}" in self.procs]

    def active(self):
        return active_controller_state(HOST, self.live_cports())

    def wait_for(self, predicate, what, timeout=20):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
            except (rpc.RpcError, KeyError):
                last = None
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n{self.logs()}")

    def logs(self, lines=12):
        out = []
        for f in sorted(self.root.rglob("*.log")) + sorted(self.root.glob("*.out")):
            text = f.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {f.relative_to(self.root)}\n" + "\n".join(text))
        return "\n".join(out)

    def down(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)


def partition(state, topic):
    return next(p for p in state["partitions"] if p["topic"] == topic and p["partition"] == 0)


def epochs(state):
    return {b["broker_id"]: b["broker_epoch"] for b in state["brokers"]}


def test_quorum_survives_the_active_controller_sigkill_and_keeps_electing(tmp_path):
    q = Quorum(tmp_path)
    try:
        for cid in q.cports:
            q.start_controller(cid)
        for i in q.bports:
            q.start_broker(i)
        assert wait_until_unfenced(HOST, list(q.cports.values()), [1, 2, 3], 30), q.logs()
        create_topic(",".join(f"{HOST}:{p}" for p in q.bports.values()), "cq", 1, 3, 2)
        before = q.wait_for(lambda: (s := q.active()) and partition(s, "cq")["leader"] > 0 and s, "topic created")
        # Enough records (a topic and a partition record each) for compactions before the kill.
        # Two compactions, so the log the active controller still serves starts after offset 0.
        for i in range(25):
            create_topic(",".join(f"{HOST}:{p}" for p in q.bports.values()), f"pad{i}", 1, 3, 2)
        before = q.wait_for(lambda: (s := q.active()) and s["metadata_snapshot_offset"] > 0 and s, "a compaction")
        old_controller = before["node_id"]
        old_epochs = epochs(before)

        # SIGKILL the active controller: the other two elect a new leader in a later term.
        q.kill(f"controller-{old_controller}")
        after = q.wait_for(lambda: (s := q.active()) and s["node_id"] != old_controller and s, "a new controller")
        assert after["raft"]["term"] > before["raft"]["term"]
        assert after["raft"]["leader"] == after["node_id"] and after["raft"]["role"] == "leader"
        assert wait_until_unfenced(HOST, q.live_cports(), [1, 2, 3], 20), q.logs()
        assert epochs(after) == old_epochs  # nobody had to re-register

        # The new controller still elects partition leaders: kill the partition's leader broker.
        p0 = partition(after, "cq")
        q.kill(f"broker-{p0['leader']}")
        p1 = q.wait_for(lambda: (p := partition(q.active(), "cq"))["leader"] not in (-1, p0["leader"]) and p,
                        "a new partition leader")
        assert p1["leader_epoch"] > p0["leader_epoch"]

        # The killed broker comes back with a new, larger broker epoch (the offset of its new
        # registration record in the replicated log); it is live again.
        # Its disk is wiped: it comes up from the controller's snapshot (its log starts after it).
        q.procs.pop(f"broker-{p0['leader']}", None)
        shutil.rmtree(tmp_path / f"broker-{p0['leader']}")
        q.start_broker(p0["leader"])
        assert wait_until_unfenced(HOST, q.live_cports(), [1, 2, 3], 30), q.logs()
        new_epochs = epochs(q.active())
        assert new_epochs[p0["leader"]] > max(old_epochs.values())
        assert (tmp_path / f"broker-{p0['leader']}" / "metadata.log.snapshot").exists(), q.logs()
        # More records, so the restarted controller is behind another compaction.
        for i in range(12):
            create_topic(",".join(f"{HOST}:{p}" for p in q.bports.values()), f"more{i}", 1, 3, 2)

        # The killed controller restarts from its Raft log and catches up as a follower.
        q.start_controller(old_controller)
        states = q.wait_for(lambda: (ss := [dump_state(HOST, p, include_log=True, timeout=2) for p in q.cports.values()])
                            and len({s["metadata_end_offset"] for s in ss}) == 1 and ss, "the restarted controller "
                            "to catch up")
        assert sum(s["active"] for s in states) == 1
        assert next(s for s in states if s["node_id"] == old_controller)["raft"]["role"] == "follower"
        assert all(s["raft"]["snapshot_index"] > 0 for s in states)
        # Metadata logs by absolute offset: each starts at its snapshot offset; they agree where they overlap.
        logs = [(s["metadata_snapshot_offset"], s["metadata_log"]) for s in states]
        for b1, l1 in logs:
            for b2, l2 in logs:
                for o in range(max(b1, b2), min(b1 + len(l1), b2 + len(l2))):
                    assert l1[o - b1] == l2[o - b2], f"metadata logs diverge at offset {o}"
        # Broker epochs are offsets of registration records and grow in the log.
        base, log = max(logs, key=lambda bl: bl[0] + len(bl[1]))
        registrations = [r["broker_epoch"] for r in log if r["type"] == "register_broker"]
        assert registrations == sorted(registrations)
        assert all(log[e - base]["type"] == "register_broker" for e in registrations)
    finally:
        q.down()


def test_the_local_backend_runs_a_quorum_and_finds_the_active_controller(tmp_path):
    from kafkaesque_harness.clusters.base import ClusterSpec
    from kafkaesque_harness.clusters.local import LocalCluster

    c = LocalCluster(ClusterSpec(brokers=3, controllers=3), str(tmp_path), owner="test-controller-quorum")
    try:
        c.up()
        c.create_topic("lq", 1, 3, 2)
        first = c.active_controller()
        assert first in c.controller_nodes()
        c.kill(first)
        deadline = time.monotonic() + 20
        while c.active_controller() in (None, first) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.active_controller() not in (None, first)
        c.wait_ready(c.broker_nodes(), 20)
        assert [p.leader for p in c.partitions("lq")][0] in (1, 2, 3)
    finally:
        c.down()
