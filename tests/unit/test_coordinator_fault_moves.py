"""Issue 40's fault moves, planned on the fake clusters (no cluster runs): the coordinators moved by a controlled
shutdown (SIGTERM) mid-commit and mid-transaction, a follower's controlled shutdown followed by an election, and
`stop` as a fault kind that random plans draw (`kafkaesque faults` lists it)."""

from __future__ import annotations

from kafkaesque_harness.nemesis.fault import FaultKind
from kafkaesque_harness.nemesis.kinds import all_kinds
from kafkaesque_harness.nemesis.process import StopNemesis
from kafkaesque_harness.nemesis.protocol import MOVES, SEQUENCE_PREFIX, SEQUENCES, ProtocolNemesis
from kafkaesque_harness.nemesis.registry import make_nemesis, nemesis_names
from kafkaesque_harness.nemesis.scenario_steps import ACTIONS
from tests.unit.fakes import fault_actions, run_plans
from tests.unit.test_coordinator_moves import TXN_IDS, CoordinatorCluster, coordinators_of
from tests.unit.test_protocol_nemesis import drive_moves, set_up
from tests.unit.test_scenario import FakeCluster

GROUP = "kafkaesque-queue"


class RunningFake(FakeCluster):
    """The scenario fake, asked whether a node runs as the process faults ask (nemesis/targets.py)."""

    def is_running(self, n: str) -> bool:
        return self.process_state(n) != "down"


def only(n: ProtocolNemesis, *moves: str) -> ProtocolNemesis:
    n.moves = {m: MOVES[m] for m in moves}
    return n


def stop_records(n) -> list:
    return [r for r in n.faults.ledger.records() if r.fault == "stop"]


def test_the_group_coordinator_is_moved_by_a_controlled_shutdown_and_comes_back():
    c = CoordinatorCluster()
    n = only(set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "groups": [GROUP]}), c),
             "move-group-coordinator-mid-commit")
    log = run_plans([n._one_move(c)])
    g = f"broker-{coordinators_of([GROUP])[0]}"
    assert [f for f, _, _ in log.ops] == ["scenario-bind", "scenario-stop", "scenario-start"]
    assert log.ops[0][2] == {"G": g} and c.calls == [f"stop {g}", f"start {g}"]
    began = dict(log.began_at)
    assert began["scenario-start"] - began["scenario-stop"] == 3  # the coordinator is away 3 s, then back
    [rec] = stop_records(n)
    assert (rec.nodes, rec.by, rec.applied, rec.observed, rec.healed) == ([g], "protocol", True, True, True)
    assert not n.faults.ledger.active()


def test_the_txn_coordinator_is_moved_mid_transaction_only_where_the_workload_has_transactional_ids():
    c = CoordinatorCluster()
    n = only(set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "transactional_ids": TXN_IDS[:1]}), c),
             "move-txn-coordinator-mid-transaction")
    run_plans([n._one_move(c)])
    target = f"broker-{coordinators_of(TXN_IDS[:1])[0]}"
    assert c.calls == [f"stop {target}", f"start {target}"]
    plain = set_up(ProtocolNemesis({"seed": 1, "topic": "queue"}), CoordinatorCluster())
    assert not {"move-txn-coordinator-mid-transaction", "move-group-coordinator-mid-commit"} & set(plain.moves)
    groups_only = set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "groups": [GROUP]}), CoordinatorCluster())
    assert "move-group-coordinator-mid-commit" in groups_only.moves
    assert "move-txn-coordinator-mid-transaction" not in groups_only.moves


def test_a_follower_stopped_cleanly_then_an_election_without_it():
    c = FakeCluster()
    n = only(set_up(ProtocolNemesis({"seed": 2, "topic": "queue"}), c), SEQUENCE_PREFIX + "stop-follower-then-elect")
    ops: list = []
    for _ in range(20):  # a sequence is drawn from a healed cluster two times in three (SEQUENCE_SHARE)
        ops = ops or drive_moves(n, c, 1)
    [(_, _, leader), (_, _, follower)] = [op for op in ops if op[0] == "scenario-bind"]
    L, F = leader["L"], follower["F"]
    assert L == "broker-1" and F in ("broker-2", "broker-3")  # the fake's leader, and one of its ISR followers
    assert c.calls == [f"stop {F}", f"kill {L}", f"start {F}"]
    assert c.leader not in (-1, 1)  # elected while F was down, or after it came back: not the killed leader
    assert n.down_nodes() == {L}  # the killed leader stays down until a heal, as kill-leader leaves it
    [rec] = stop_records(n)
    assert rec.nodes == [F] and rec.healed


def test_stop_follower_then_elect_is_a_sequence_drawn_from_a_healed_cluster():
    assert "stop-follower-then-elect" in SEQUENCES
    steps = MOVES[SEQUENCE_PREFIX + "stop-follower-then-elect"]
    assert [s.do for s in steps] == ["bind", "bind", "stop", "kill", "wait", "start"]
    assert {s.do for s in steps} - {"bind", "wait", "sleep"} <= set(ACTIONS)


def test_stop_is_a_fault_kind_random_plans_draw():
    kind = all_kinds()["stop"]
    assert isinstance(kind, FaultKind) and "stop" in nemesis_names() and not kind.self_driven
    assert "SIGTERM" in kind.help and "controlled shutdown" in kind.help
    composite = make_nemesis(["kill", "stop"], {"seed": 1})
    assert ("start-stop", "stop-stop") in composite.pairs()  # the random schedule draws its start/stop pair
    assert isinstance(composite.parts[1], StopNemesis)


def test_the_stop_fault_stops_its_targets_and_its_stop_restarts_them():
    from kafkaesque_harness.history import Op

    c = RunningFake()
    n = StopNemesis({"seed": 1, "target": "leader", "topic": "queue"})
    n.setup(c, fault_actions(c))
    started = n.invoke(c, Op("invoke", "start-stop", "nemesis", None))
    assert started.value == {"stop": ["broker-1"]} and c.calls == ["stop broker-1"]
    again = n.invoke(c, Op("invoke", "start-stop", "nemesis", None))  # a new leader now: stopped too
    assert again.value["stop"] != ["broker-1"]
    healed = n.invoke(c, Op("invoke", "stop-stop", "nemesis", None))
    assert sorted(healed.value["healed"]) == sorted(["broker-1", *again.value["stop"]])
    assert [r.fault for r in n.faults.ledger.records()] == ["stop", "stop"] and not n.faults.ledger.active()


class ClientCutCluster(CoordinatorCluster):
    """The coordinator fake, saying from which address the harness's clients reach its nodes (ClientCuts)."""

    CLIENTS_AT = "10.0.0.250"

    def client_address(self, node: str) -> str:
        return self.CLIENTS_AT

    def client_cut_unavailable(self) -> str | None:
        return None


def test_the_group_coordinator_cut_off_from_the_clients_alone_past_the_session_timeout(monkeypatch):
    from kafkaesque_harness.nemesis import actions

    c = ClientCutCluster()
    # the harness's own probe, answered by the fake network: dropped when the node's rules drop the clients
    monkeypatch.setattr(actions, "probe_from_harness",
                        lambda cluster, dst: "timeout" if cluster.CLIENTS_AT in cluster.net.drops[dst] else "open")
    n = only(set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "groups": [GROUP]}), c),
             "cut-group-coordinator-from-clients")
    log = run_plans([n._one_move(c)])
    g = f"broker-{coordinators_of([GROUP])[0]}"
    assert [f for f, _, _ in log.ops] == ["scenario-bind", "scenario-cut-clients", "scenario-heal"]
    assert log.ops[1][2] == {"cut": g, "from": "clients", "address": "10.0.0.250"}
    began = dict(log.began_at)
    assert began["scenario-heal"] - began["scenario-cut-clients"] == 10  # past the members' 6 s session
    drops = [(node, cmd) for node, cmd in c.commands if "-s 10.0.0.250 -j DROP" in cmd]
    assert drops and {node for node, _ in drops} == {g}  # only the coordinator drops, and only the clients
    assert not any(c.net.cut_between(g, other) for other in c.nodes() if other != g)
    # the same fault as client-partition's, healed by the move's own heal step
    [rec] = n.faults.ledger.records()
    assert (rec.fault, rec.nodes, rec.applied, rec.observed, rec.healed) == ("client-partition", [g], True, True, True)
    assert rec.evidence["probes"] == {f"clients->{g}": "timeout"} and not c.net.drops[g]


def test_the_client_cut_is_left_out_where_the_cluster_does_not_say_where_the_clients_are():
    n = set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "groups": [GROUP]}), CoordinatorCluster())
    assert "cut-group-coordinator-from-clients" not in n.moves
    assert any("cut-group-coordinator-from-clients cannot run" in why and "harness's clients" in why
               for why in n.not_run)
    with_clients = set_up(ProtocolNemesis({"seed": 1, "topic": "queue", "groups": [GROUP]}), ClientCutCluster())
    assert "cut-group-coordinator-from-clients" in with_clients.moves


def test_protocol_moves_coordinator_keeps_only_the_moves_aimed_at_the_workloads_coordinators():
    from kafkaesque_harness.nemesis.base import NemesisRefused
    from kafkaesque_harness.nemesis.protocol import COORDINATOR_MOVES, PAST_TXN_TIMEOUT_MOVES

    opts = {"seed": 1, "topic": "queue", "groups": [GROUP], "protocol_moves": "coordinator"}
    n = set_up(ProtocolNemesis(opts), ClientCutCluster())
    assert set(n.moves) == {"heal", "kill-group-coordinator", "move-group-coordinator-mid-commit",
                            "cut-group-coordinator-from-clients", SEQUENCE_PREFIX + "group-coordinator-fails-over"}
    everything = set_up(ProtocolNemesis({**opts, "protocol_moves": "all"}), ClientCutCluster())
    assert set(n.moves) < set(everything.moves) and "kill-leader" in everything.moves
    txn = set_up(ProtocolNemesis({**opts, "groups": [], "transactional_ids": TXN_IDS[:1]}), ClientCutCluster())
    assert "pause-leader-past-txn-timeout" in txn.moves and "kill-txn-coordinator" in txn.moves
    assert set(txn.moves) - {"heal"} <= COORDINATOR_MOVES | PAST_TXN_TIMEOUT_MOVES and "kill-group-coordinator" not in txn.moves
    try:  # a workload without coordinators leaves it no move: refused at set-up, not a run without faults
        set_up(ProtocolNemesis({**opts, "groups": []}), ClientCutCluster())
    except NemesisRefused as e:
        assert "no move left" in str(e)
    else:
        raise AssertionError("a coordinator-only protocol nemesis without coordinators was not refused")
