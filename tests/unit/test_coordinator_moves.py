"""The moves and scenarios that aim at the transaction and group coordinators (nemesis/scenario.py
COORDINATOR_ROLES, nemesis/protocol.py), on test_scenario's fake cluster given the internal topics:
a coordinator is found the way clients find it (Kafka's partition rule, then that partition's leader),
each fault goes through the fault ledger, and a workload without transactions or groups gets none."""

from __future__ import annotations

import pytest

from kafkaesque_harness.clusters.base import PartitionView
from kafkaesque_harness.clusters.broker.group_coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    coordinator_partition,
)
from kafkaesque_harness.clusters.broker.txn_coordinator import TransactionCoordinator, TxnConfig
from kafkaesque_harness.nemesis.actions import FaultActions
from kafkaesque_harness.nemesis.ledger import FaultLedger
from kafkaesque_harness.nemesis.protocol import MOVES, SEQUENCE_PREFIX, ProtocolNemesis
from kafkaesque_harness.nemesis.scenario import ScenarioNemesis
from kafkaesque_harness.nemesis.scenarios import SCENARIOS
from kafkaesque_harness.nemesis.targets import coordinator_node
from kafkaesque_harness.workloads.queue import QueueWorkload
from kafkaesque_harness.workloads.txn import TxnWorkload
from kafkaesque_harness.workloads.txn_client import transactional_id
from tests.unit.fakes import fault_actions, run_plans
from tests.unit.test_protocol_nemesis import drive_moves, set_up
from tests.unit.test_scenario import FakeCluster, run

TXN_IDS = [transactional_id(s) for s in range(6)]
INTERNAL = 5  # partitions of __transaction_state and __consumer_offsets in the fake


class CoordinatorCluster(FakeCluster):
    """The fake with a second partition of the test topic (led by broker-2) and the two internal topics,
    partition i led by broker 1 + i % 3 while it is up (else by the first broker that is)."""

    def __init__(self, internal: bool = True):
        super().__init__()
        self.internal = internal

    def partitions(self, topic):
        if topic in ("__transaction_state", "__consumer_offsets"):
            if not self.internal:
                return []  # not created yet: no client has asked for a coordinator
            up = [b for b in (1, 2, 3) if b not in self.fenced]
            return [PartitionView(topic, i, (1 + i % 3) if (1 + i % 3) in up else (up[0] if up else -1),
                                  [1, 2, 3], up) for i in range(INTERNAL)]
        second_leader = 2 if 2 not in self.fenced else 3
        return [PartitionView(topic, 0, self.leader, [1, 2, 3], list(self.isr)),
                PartitionView(topic, 1, second_leader, [1, 2, 3], list(self.isr))]


def coordinators_of(keys, topic="__transaction_state"):
    return [1 + coordinator_partition(k, INTERNAL) % 3 for k in keys]


def test_the_coordinator_partition_is_the_brokers_own_rule_for_groups_and_transactional_ids():
    txn = TransactionCoordinator(lambda: 1, TxnConfig(txn_partitions=INTERNAL))
    groups = GroupCoordinator(CoordinatorConfig(offsets_partitions=INTERNAL))
    for key in TXN_IDS + ["kafkaesque-queue", "kafkaesque-txn"]:
        assert coordinator_partition(key, INTERNAL) == txn.partition_for(key) == groups.partition_for(key)
    # String.hashCode of "kafkaesque-txn-0" (s[0]*31^(n-1) + ... + s[n-1] in int32) is -2028087379;
    # Kafka takes Utils.abs of it, modulo the partitions
    assert coordinator_partition("kafkaesque-txn-0", 50) == 2028087379 % 50 == 29


def test_coordinator_node_is_the_leader_of_the_keys_partition_and_none_before_the_topic_exists():
    c = CoordinatorCluster()
    key = TXN_IDS[0]
    assert coordinator_node(c, "__transaction_state", key) == f"broker-{coordinators_of([key])[0]}"
    assert coordinator_node(CoordinatorCluster(internal=False), "__transaction_state", key) is None


def test_the_txn_coordinator_role_binds_the_broker_coordinating_most_of_the_workloads_ids(monkeypatch):
    c = CoordinatorCluster()
    n = ScenarioNemesis("txn-coordinator-killed-mid-commit",
                        {"scenario_delay": 0, "seed": 1, "transactional_ids": TXN_IDS})
    ops = run(n, c)
    counts = {b: coordinators_of(TXN_IDS).count(b) for b in (1, 2, 3)}
    most = max(counts.values())
    bound = ops[0][2]["C"]
    assert counts[c.node_id(bound)] == most
    assert [f for f, _, _ in ops] == ["scenario-bind", "scenario-kill", "scenario-wait", "scenario-start",
                                      "scenario-wait"]
    assert c.calls == [f"kill {bound}", f"start {bound}"]
    # the kill went through the ledger: requested, applied, observed (the node is down), healed by the start
    [rec] = [r for r in n.faults.ledger.records() if r.fault == "kill"]
    assert (rec.nodes, rec.by, rec.applied, rec.observed, rec.healed) == (
        [bound], "scenario:txn-coordinator-killed-mid-commit", True, True, True)


def test_pause_leader_past_the_txn_timeout_pauses_a_leader_longer_than_the_transaction_timeout(monkeypatch):
    c = CoordinatorCluster()
    n = set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "transactional_ids": TXN_IDS}), c)
    n.moves = {"pause-leader-past-txn-timeout": MOVES["pause-leader-past-txn-timeout"]}
    log = run_plans([n._one_move(c)])
    ops = log.ops
    began = dict(log.began_at)
    slept = [round(began["scenario-resume"] - began["scenario-pause"], 6)]  # the pause's act takes no time here
    [(_, _, bound)] = [op for op in ops if op[0] == "scenario-bind"]
    assert c.calls == [f"pause {bound['L']}", f"resume {bound['L']}"]
    assert slept == [12] and slept[0] > TxnWorkload({}).o["txn_timeout_ms"] / 1000
    [rec] = [r for r in n.faults.ledger.records() if r.fault == "pause"]
    assert rec.applied and rec.observed and rec.healed


def test_late_markers_cut_the_coordinator_from_the_leader_only_and_heal_it(monkeypatch):
    c = CoordinatorCluster()
    ids = [k for k in TXN_IDS if coordinators_of([k])[0] == 1][:1]
    n = ScenarioNemesis("late-txn-markers", {"scenario_delay": 0, "seed": 1, "transactional_ids": ids})
    ops = run(n, c)
    cuts = [r for f, _, r in ops if f == "scenario-cut"]
    assert cuts == [{"cut": "broker-1", "from": ["broker-2"]}]
    assert not c.net.cut_between("broker-1", "controller-0")  # only the marker path is cut
    [rec] = [r for r in n.faults.ledger.records() if r.fault == "partition"]
    assert rec.applied and rec.healed and not c.net.cut_between("broker-1", "broker-2")


def test_group_coordinator_fails_over_isolates_then_kills_the_groups_coordinator(monkeypatch):
    c = CoordinatorCluster()
    c.fence_on_cut = True  # the fake controller fences a broker it cannot hear
    n = ScenarioNemesis("group-coordinator-fails-over",
                        {"scenario_delay": 0, "seed": 1, "groups": ["kafkaesque-queue"]})
    n.setup(c, fault_actions(c))
    log = run_plans(n.plans(c, []))
    ops = log.ops
    g = f"broker-{coordinators_of(['kafkaesque-queue'])[0]}"
    assert ops[0][2] == {"G": g} and log.began_at[0] == ("scenario-bind", 20.0)  # the group settles first
    assert [f for f, _ in log.began_at][1:3] == ["scenario-isolate", "scenario-kill"]
    assert log.began_at[2][1] - log.began_at[1][1] == 4.0  # the kill 4 s after the isolation
    assert c.calls == [f"kill {g}", f"start {g}"]
    assert not n.faults.ledger.active()  # isolation and kill both healed by the scenario's end


@pytest.mark.parametrize("name", ["txn-coordinator-killed-mid-commit", "producer-paused-past-txn-timeout",
                                  "late-txn-markers", "group-coordinator-fails-over"])
def test_a_coordinator_scenario_is_refused_when_the_workload_has_no_such_keys(name):
    n = ScenarioNemesis(name, {"scenario_delay": 0, "seed": 1})
    why = n.ability_refusal(CoordinatorCluster())
    assert why and "this workload has none; run it with --workload txn" in why
    assert SCENARIOS[name].targets  # each exists for one of the variants


def test_coordinator_scenarios_stall_until_the_internal_topic_exists(monkeypatch):
    c = CoordinatorCluster(internal=False)
    n = ScenarioNemesis("txn-coordinator-killed-mid-commit",
                        {"scenario_delay": 0, "seed": 1, "transactional_ids": TXN_IDS})
    ops = run(n, c)
    assert len(ops) == 1 and "does not exist yet" in ops[0][2] and c.calls == []


def test_the_protocol_nemesis_has_coordinator_moves_only_with_a_workload_of_transactions_or_groups():
    coordinator_moves = {m for m, steps in MOVES.items()
                         if any(s.do == "bind" and s.role.endswith("-coordinator") for s in steps)}
    assert {"kill-txn-coordinator", "isolate-txn-coordinator", "cut-txn-coordinator-from-leader",
            "kill-group-coordinator", SEQUENCE_PREFIX + "late-txn-markers"} <= coordinator_moves
    plain = set_up(ProtocolNemesis({"seed": 1, "topic": "queue"}), CoordinatorCluster())
    assert not coordinator_moves & set(plain.moves)
    txn = ProtocolNemesis({"seed": 1, "topic": "queue", "transactional_ids": TXN_IDS})
    c = CoordinatorCluster()
    txn.setup(c, FaultActions(c, FaultLedger(), "queue", TxnWorkload({}).producer_stalls()))
    assert coordinator_moves - set(txn.moves) == {"kill-group-coordinator", "move-group-coordinator-mid-commit",
                                                  "cut-group-coordinator-from-clients",
                                                  SEQUENCE_PREFIX + "group-coordinator-fails-over"}
    assert "pause-leader-past-txn-timeout" in txn.moves


def test_kill_txn_coordinator_move_hits_the_coordinator_and_a_heal_restarts_it():
    c = CoordinatorCluster()
    n = set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "transactional_ids": TXN_IDS[:1]}), c)
    n.moves = {"kill-txn-coordinator": MOVES["kill-txn-coordinator"]}
    ops = drive_moves(n, c, 1)
    target = f"broker-{coordinators_of(TXN_IDS[:1])[0]}"
    assert ops[-1][2] == {"kill": target} and n.down_nodes() == {target}
    n.moves = {"heal": MOVES["heal"]}
    drive_moves(n, c, 1)
    assert c.calls == [f"kill {target}", f"start {target}"] and not n.faults.ledger.active()


def test_workloads_name_the_keys_their_clients_use():
    txn = TxnWorkload({"partitions": 2})
    assert txn.coordinated_keys(3) == {"transactional_ids": ["kafkaesque-txn-0", "kafkaesque-txn-1",
                                                             "kafkaesque-txn-2"], "groups": ["kafkaesque-txn"]}
    assert TxnWorkload({"subscribe_p": 0}).coordinated_keys(1)["groups"] == []  # it never joins the group
    assert QueueWorkload({"queue_mode": "subscribe"}).coordinated_keys(2) == {"groups": ["kafkaesque-queue"]}
    assert QueueWorkload({}).coordinated_keys(2) == {"groups": []}
