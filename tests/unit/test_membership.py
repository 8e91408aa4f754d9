"""Membership changes (issue 9 items 3-4): the alter-cluster coordinator and the membership nemesis,
driven against the real controller state machine (clusters/broker/controller.py) with a
controllable clock. Only the brokers are simulated, as far as the controller sees them:
heartbeats, and a leader that adds caught-up replicas to the ISR through AlterPartition."""

from __future__ import annotations

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.controller import Controller, ControllerConfig
from kafkaesque_harness.clusters.broker.membership import MembershipError, alter_cluster
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.membership import MembershipNemesis
from tests.unit.fakes import fault_actions

SESSION_MS = 1000


class ControllerCluster:
    """Just enough of a cluster backend for the coordinator and the nemesis: a real Controller,
    brokers that heartbeat while running, and leaders whose new replicas catch up at once
    (unless `slow` holds them back)."""

    name = "sim"

    def __init__(self, brokers: int = 4, partitions: int = 6, rf: int = 3, min_isr: int = 2):
        self.now = 0
        self.c = Controller(ControllerConfig(session_timeout_ms=SESSION_MS))
        self.c.start(0)
        self.epochs: dict[int, int] = {}
        self.stopped: set[int] = set()
        self.wiped: list[str] = []
        self.slow = False
        for b in range(1, brokers + 1):
            self._register(b)
        self._heartbeats()
        r = self.c.handle("create_topic", {"topic": "t", "partitions": partitions, "replication_factor": rf,
                                           "configs": {"min.insync.replicas": min_isr}}, self.now)
        assert r["error"] == rpc.NONE, r

    # --- the simulated brokers -------------------------------------------------------------
    def _register(self, b: int) -> None:
        r = self.c.handle("broker_registration", {"broker_id": b, "incarnation_id": f"{b}-{self.now}",
                                                  "host": "127.0.0.1", "port": 9000 + b,
                                                  "previous_broker_epoch": -1}, self.now)
        assert r["error"] == rpc.NONE, r
        self.epochs[b] = r["broker_epoch"]

    def _heartbeats(self) -> None:
        for b, e in self.epochs.items():
            if b not in self.stopped and b in self.c.image.brokers:
                self.c.handle("broker_heartbeat", {"broker_id": b, "broker_epoch": e, "want_fence": False,
                                                   "metadata_offset": self.c.end_offset}, self.now)

    def _catch_up(self) -> None:
        for key, p in sorted(self.c.image.partitions.items()):
            ready = [r for r in p.adding if r not in p.isr and r not in self.stopped]
            if self.slow or not ready or p.leader < 0:
                continue
            r = self.c.handle("alter_partition", {
                "broker_id": p.leader, "broker_epoch": self.epochs[p.leader], "topic": key[0], "partition": key[1],
                "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "new_isr": [{"broker_id": m, "broker_epoch": self.epochs[m]} for m in p.isr + ready]}, self.now)
            assert r["error"] == rpc.NONE, r

    def step(self, ms: int = 100) -> None:
        self.now += ms
        self._heartbeats()
        self.c.tick(self.now)
        self._catch_up()

    # --- the backend interface the nemesis uses ---------------------------------------------
    def controller_call(self, api, body, timeout=5.0):
        self.step()
        if api == "dump_state":
            return {"error": rpc.NONE, "state": self.c.dump()}
        resp = self.c.handle(api, body, self.now)
        self.step()
        return resp

    def broker_nodes(self):
        return [f"broker-{b}" for b in sorted(self.epochs)]

    def node_id(self, node):
        return int(node.split("-")[1])

    def is_running(self, node):
        return self.node_id(node) not in self.stopped

    def process_state(self, node):
        return "running" if self.is_running(node) else "down"

    def controller_nodes(self):
        return []

    def partitions(self, topic):
        return []

    def stop(self, node):
        self.stopped.add(self.node_id(node))
        self.step(SESSION_MS + 100)  # its session runs out: the controller fences it

    def start(self, node):
        b = self.node_id(node)
        self.stopped.discard(b)
        self._register(b)

    def wait_ready(self, nodes, timeout_s):
        self.step()

    def wipe_data(self, node):
        self.wiped.append(node)

    # --- what the tests look at ---------------------------------------------------------------
    def assignment(self):
        return {k: list(p.replicas) for k, p in self.c.image.partitions.items()}


def load(cluster):
    out = {b: 0 for b in cluster.c.image.brokers}
    for p in cluster.c.image.partitions.values():
        for r in p.replicas:
            out[r] += 1
    return out


def test_adding_a_broker_gives_it_its_share_and_nothing_else_moves():
    cl = ControllerCluster(brokers=3, partitions=6)
    before = cl.assignment()
    cl.epochs[4] = 0
    cl._register(4)
    cl.step()
    result = alter_cluster(cl.controller_call, add=[4], wait_s=5)
    assert result["completed"] and result["moved_replicas"] == 4  # 18 replicas over 4 brokers: 4 or 5 each
    assert sorted(load(cl).values()) == [4, 4, 5, 5]
    assert all(not p.adding and not p.removing for p in cl.c.image.partitions.values())
    # Only the moved replicas changed: each partition lost at most one old replica.
    for key, replicas in cl.assignment().items():
        assert len(set(before[key]) - set(replicas)) <= 1


def test_removing_a_broker_empties_it_and_preferred_leaders_follow():
    cl = ControllerCluster(brokers=4, partitions=8)
    result = alter_cluster(cl.controller_call, remove=[2], wait_s=5)
    assert result["completed"]
    assert all(2 not in p.replicas and 2 not in p.isr for p in cl.c.image.partitions.values())
    assert all(p.leader == p.replicas[0] for p in cl.c.image.partitions.values())  # preferred-leader election


def test_a_cluster_smaller_than_the_factor_shrinks_the_sets_and_adding_back_restores_them():
    cl = ControllerCluster(brokers=3, partitions=3)
    notes = []
    assert alter_cluster(cl.controller_call, remove=[3], wait_s=5, note=notes.append)["completed"]
    assert all(sorted(p.replicas) == [1, 2] for p in cl.c.image.partitions.values())
    assert any("cannot hold replication factor 3" in n for n in notes)
    assert alter_cluster(cl.controller_call, wait_s=5)["completed"]  # 3 is still registered: rebalance
    assert all(sorted(p.replicas) == [1, 2, 3] for p in cl.c.image.partitions.values())


def test_a_reassignment_that_cannot_catch_up_is_reported_not_waited_for_forever():
    cl = ControllerCluster(brokers=4, partitions=4)
    cl.slow = True
    result = alter_cluster(cl.controller_call, remove=[1], wait_s=0.5)
    assert not result["completed"] and result["pending"]
    cl.slow = False
    assert alter_cluster(cl.controller_call, remove=[1], wait_s=5)["completed"]  # run again: it finishes


def test_bad_membership_requests_get_one_sentence():
    cl = ControllerCluster(brokers=3)
    with pytest.raises(MembershipError, match="broker 7 is not registered"):
        alter_cluster(cl.controller_call, add=[7])
    with pytest.raises(MembershipError, match=r"broker\(s\) \[9\] are not registered"):
        alter_cluster(cl.controller_call, remove=[9])
    with pytest.raises(MembershipError, match="keep at least one"):
        alter_cluster(cl.controller_call, remove=[1, 2, 3])


@pytest.mark.parametrize("brokers", [3, 5])
def test_membership_nemesis_changes_the_shape_and_its_stop_restores_it(brokers):
    cl = ControllerCluster(brokers=brokers, partitions=6)
    nem = MembershipNemesis({"seed": brokers})
    nem.setup(cl, fault_actions(cl))
    moves = {}
    for _ in range(24):
        v = nem.invoke(cl, Op(INVOKE, "start-membership", "nemesis", None)).value
        assert "error" not in v, v
        moves[v["move"]] = moves.get(v["move"], 0) + 1
        if v["move"] == "remove-broker" and "skipped" not in v:
            gone = cl.node_id(v["broker"])
            assert gone not in cl.c.image.brokers  # unregistered
            assert all(gone not in p.replicas for p in cl.c.image.partitions.values())
            assert v["broker"] in cl.wiped
        if v["move"] == "reassign" and "refused" not in v:
            topic, _, part = v["partition"].rpartition("-")
            if v["completed"]:
                assert cl.c.image.partitions[(topic, int(part))].replicas == v["to"]
        healed = nem.invoke(cl, Op(INVOKE, "stop-membership", "nemesis", None)).value
        assert healed["completed"], healed
        # Healed: every broker registered, every partition at its full factor, load even.
        assert sorted(cl.c.image.brokers) == list(range(1, brokers + 1))
        for p in cl.c.image.partitions.values():
            assert len(p.replicas) == 3 and not p.adding and not p.removing and p.leader == p.replicas[0]
        spread = load(cl)
        assert max(spread.values()) - min(spread.values()) <= 1, spread
        assert not nem.faults.ledger.active()  # every move, and the broker a removal stopped, healed
    assert set(moves) == {"remove-broker", "reassign", "preferred-election"}, moves
    records = nem.faults.ledger.records()
    assert {r.detail["move"] for r in records if r.fault == "membership" and r.applied and r.observed} == set(moves)
    assert any(r.fault == "stop" and r.observed and r.healed for r in records)  # a decommissioned broker


def test_membership_is_refused_by_name_on_a_cluster_without_our_controller():
    class Foreign:
        name = "external"

    from kafkaesque_harness.nemesis.base import NemesisRefused

    with pytest.raises(NemesisRefused, match="drop membership from --nemesis"):
        MembershipNemesis({}).setup(Foreign(), fault_actions(Foreign()))
