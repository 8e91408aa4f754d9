"""The protocol-aware random nemesis (nemesis/protocol.py) on the fake cluster of test_scenario:
moves aim at roles from the cluster's metadata, faults pile up until a heal, a heal is forced
before too many brokers are down, absent roles are skipped, teardown undoes everything."""

from __future__ import annotations

from kafkaesque_harness.nemesis.plan import drive
from kafkaesque_harness.nemesis.protocol import (
    FAST_FAILOVER,
    MAX_DOWN,
    MOVES,
    NEEDS_ISOLATED_NODES,
    SEQUENCE_PREFIX,
    SEQUENCES,
    ProtocolNemesis,
)
from kafkaesque_harness.nemesis.registry import nemesis_problem
from kafkaesque_harness.nemesis.scenario import ScenarioNemesis
from kafkaesque_harness.nemesis.scenario_steps import Scenario
from tests.unit.fakes import FastClock, FastStop, StepLog, fault_actions, run_plans
from tests.unit.test_scenario import FakeCluster, run


def set_up(n: ProtocolNemesis, c: FakeCluster) -> ProtocolNemesis:
    n.setup(c, fault_actions(c))
    return n


def drive_moves(n: ProtocolNemesis, c: FakeCluster, moves: int) -> list[tuple[str, dict, object]]:
    if n.faults is None:
        set_up(n, c)
    ops = []
    for _ in range(moves):
        ops += run_plans([n._one_move(c)]).ops
    return ops


def test_a_random_walk_mixes_moves_keeps_a_quorum_up_and_teardown_undoes_it(monkeypatch):
    c = FakeCluster()
    n = set_up(ProtocolNemesis({"seed": 3, "scenario_delay": 0, "topic": "queue"}), c)
    n.moves = {m: steps for m, steps in n.moves.items() if not m.startswith(SEQUENCE_PREFIX)}  # see below
    ops, seen_moves = [], set()
    for _ in range(40):
        ops = drive_moves(n, c, 1)
        seen_moves |= {v["move"] for _, v, _ in ops}
        assert n._down() <= MAX_DOWN
        # a kill aimed at a role hits the node the move bound to it just before
        for (f1, _, bound), (f2, _, hit) in zip(ops, ops[1:], strict=False):
            if f1 == "scenario-bind" and f2 == "scenario-kill" and isinstance(bound, dict) and len(bound) == 1:
                assert hit == {"kill": next(iter(bound.values()))}
    assert {"heal", "kill-leader", "isolate-follower"} <= seen_moves and len(seen_moves) >= 5
    n.teardown(c)
    assert n._down() == 0 and not n.cut_off() and not c.fenced and not n.faults.ledger.active()


def test_kill_leader_hits_the_partitions_leader():
    c = FakeCluster()
    n = ProtocolNemesis({"seed": 1, "topic": "queue"})
    n.moves = {"kill-leader": n.moves["kill-leader"]}
    ops = drive_moves(n, c, 1)
    assert ops[0][2] == {"L": "broker-1"} and ops[1][2] == {"kill": "broker-1"}


def test_a_move_whose_role_is_absent_gives_way_to_another():
    c = FakeCluster()
    n = ProtocolNemesis({"seed": 1, "topic": "queue"})
    n.moves = {"kill-catching-up": n.moves["kill-catching-up"], "kill-leader": n.moves["kill-leader"]}
    ops = drive_moves(n, c, 1)  # every replica is in sync: nobody is catching up
    done = [v["move"] for _, v, result in ops if not str(result).startswith("error")]
    assert done == ["kill-leader", "kill-leader"]


def test_a_heal_is_forced_once_the_limit_is_down():
    c = FakeCluster()
    n = set_up(ProtocolNemesis({"seed": 2, "topic": "queue"}), c)
    for b in ("broker-1", "broker-2"):
        n.faults.kill(b, n.by)
    ops = drive_moves(n, c, 1)
    assert {v["move"] for _, v, _ in ops} == {"heal"}
    assert n._down() == 0 and c.calls.count("start broker-1") == 1


def test_on_a_loopback_cluster_moves_needing_own_nodes_are_left_out():
    c = FakeCluster()
    c.not_isolated = "the fake cluster runs every node on loopback"
    n = set_up(ProtocolNemesis({"topic": "queue"}), c)
    assert not NEEDS_ISOLATED_NODES & set(n.moves)


def test_protocol_nemesis_runs_with_random_faults_beside_it_but_not_with_a_scenario():
    assert nemesis_problem(["protocol"]) is None
    assert nemesis_problem(["protocol", "kill"]) is None
    assert "give one of them" in nemesis_problem(["protocol", "scenario:zombie-leader"])


def test_flaw_sequences_start_only_from_a_healed_cluster_and_run_their_steps(monkeypatch):
    c = FakeCluster()
    n = set_up(ProtocolNemesis({"seed": 4, "topic": "queue"}), c)
    assert {SEQUENCE_PREFIX + s for s in SEQUENCES} <= set(n.moves)
    started = {}
    for _ in range(60):
        healed_before = n._down() == 0 and not n.cut_off()
        ops = drive_moves(n, c, 1)
        move = ops[-1][1]["move"]
        if move.startswith(SEQUENCE_PREFIX):
            assert healed_before, f"{move} started on top of other faults"
            done = [f for f, v, _ in ops if v["move"] == move]
            started[move] = started.get(move, 0) + 1
            # the sequence's own steps, in order, from its first bind
            steps = [f"scenario-{st.do}" for st in n.moves[move] if st.do != "sleep"]  # a sleep is a pause, no op
            assert done == steps[:len(done)]
        assert n._down() <= MAX_DOWN + 1  # a sequence's two kills may add to a paused broker of its own
    assert len(started) >= 3, started
    n.teardown(c)
    assert n._down() == 0 and not n.cut_off()


def test_controller_and_zombie_moves_aim_at_the_controller_and_a_heal_undoes_their_cuts(monkeypatch):
    c = FakeCluster()
    n = set_up(ProtocolNemesis({"seed": 2, "topic": "queue"}), c)
    n.moves = {"pause-controller": n.moves["pause-controller"]}
    drive_moves(n, c, 1)
    assert c.calls == ["pause controller-0", "resume controller-0"] and n._down() == 0
    ops = []
    for m in ("cut-leader-from-controllers", "cut-follower-from-controllers"):
        n.moves = {m: MOVES[m]}
        ops += drive_moves(n, c, 1)
    cuts = {v["move"]: r for f, v, r in ops if f == "scenario-cut"}
    assert cuts["cut-leader-from-controllers"] == {"cut": "broker-1", "from": ["controller-0"]}
    assert cuts["cut-follower-from-controllers"]["cut"] in ("broker-2", "broker-3")
    assert len(n.faults.ledger.active(("partition",))) == 2 and n.cut_off()
    n.moves = {"heal": MOVES["heal"]}
    drive_moves(n, c, 1)
    assert not n.faults.ledger.active() and not n.cut_off() and not any(c.net.drops.values())


def test_flaw_sequences_are_dealt_from_a_deck_each_once_per_round(monkeypatch):
    c = FakeCluster()
    n = set_up(ProtocolNemesis({"seed": 5, "topic": "queue"}), c)
    n.moves = {m: s for m, s in n.moves.items() if m.startswith(SEQUENCE_PREFIX) or m == "heal"}
    begun = []
    while len(begun) < 2 * len(SEQUENCES):
        ops = drive_moves(n, c, 1)
        move = ops[0][1]["move"]
        if move.startswith(SEQUENCE_PREFIX):
            begun.append(move)
        n.teardown(c)  # back to a healed cluster, so the next draw may be a sequence again
    first, second = begun[:len(SEQUENCES)], begun[len(SEQUENCES):]
    assert sorted(first) == sorted(second) == sorted(SEQUENCE_PREFIX + s for s in SEQUENCES)


def test_a_move_stops_between_steps_once_the_run_is_over():
    c = FakeCluster()
    n = set_up(ProtocolNemesis({"seed": 1, "topic": "queue"}), c)
    n.moves = {"bounce-follower-then-kill-leader": MOVES["bounce-follower-then-kill-leader"]}
    clock = FastClock()
    stop = c.stop

    def stop_past_the_limit(node):
        clock.t = 100.0  # the time limit (50 s) passes while the follower is being stopped
        return stop(node)

    c.stop = stop_past_the_limit
    log = StepLog(clock)
    drive([n._one_move(c)], log, FastStop(clock), clock, end=50.0)
    done = [f for f, _, _ in log.ops]
    assert done == ["scenario-bind", "scenario-bind", "scenario-stop"]  # no start, no kill after the end
    assert c.calls == [f"stop {n.bound['F']}"]


def test_teardown_reconnects_what_the_protocol_nemesis_left_cut_off():
    """Found in the detection campaign: a leader cut off from the controller at the end of the run stayed
    cut through the final reads (the protocol's own Scenario record says it needs no isolated nodes)."""
    c = FakeCluster()
    n = set_up(ProtocolNemesis({"seed": 1, "topic": "queue"}), c)
    n.moves = {"cut-leader-from-controllers": MOVES["cut-leader-from-controllers"]}
    drive_moves(n, c, 1)
    assert c.net.cut_between("broker-1", "controller-0")
    n.teardown(c)
    assert not any(c.net.drops.values())  # every node's rules flushed, none added


class LossyControllersCluster(FakeCluster):
    """Controllers on the lossy file system too (as the netns cluster mounts them)."""

    def lossyfs_files(self, node):
        return f"/run/{node}/lossyfs.pid", f"/run/{node}/lossyfs.status"

    def lossy_controllers_unavailable(self):
        return None


def test_power_cut_controller_crashes_the_active_controller_and_restarts_it_within_the_fault_budget(power_cuts):
    c = LossyControllersCluster()
    n = set_up(ProtocolNemesis({"seed": 2, "topic": "queue"}), c)
    assert "power-cut-controller" in n.moves
    c.isr = [1]  # broker-1 alone in the ISR: the broker's power cut goes first, the controller's next
    n.moves = {"lossy-crash-last-isr": MOVES["lossy-crash-last-isr"]}
    drive_moves(n, c, 1)
    n.moves = {"power-cut-controller": MOVES["power-cut-controller"]}
    ops = drive_moves(n, c, 1)
    cut = [r for f, _, r in ops if f == "scenario-lossy-crash"]
    assert cut == [{"lossy-crash": "controller-0", "dropped": {"event": "dropped"}}]  # not beyond the budget
    assert c.calls[-2:] == ["kill controller-0", "start controller-0"]
    assert n.down_nodes() == {"broker-1"}  # the controller is back; the broker waits for a heal


def test_power_cut_controller_is_left_out_where_controllers_are_not_on_the_lossy_file_system():
    c = FakeCluster()  # brokers only (docker, SSH): a controller's power cut would drop nothing
    n = set_up(ProtocolNemesis({"seed": 2, "topic": "queue"}), c)
    assert "power-cut-controller" not in n.moves
    assert "power-cut-controller cannot run" in n.not_run[0] and "controllers do not write" in n.not_run[0]


def test_lagging_leader_then_failover_elects_the_successor_then_the_other_follower(monkeypatch):
    c = FakeCluster()
    c.fence_on_cut = True  # the fake's controller fences a broker it cannot hear
    n = ScenarioNemesis(Scenario("t", "test", MOVES[SEQUENCE_PREFIX + FAST_FAILOVER], needs_isolated_nodes=True),
                        {"scenario_delay": 0, "seed": 3})
    ops = run(n, c)
    assert [f for f, _, r in ops if isinstance(r, str)] == []  # no step failed or stalled
    L, A, C = n.node("L"), n.node("A"), n.node("C")
    assert (L, A, C) == ("broker-1", "broker-2", "broker-3")  # A is next in replica order: the fake elects it
    assert c.calls == [f"kill {L}", f"start {L}"]
    assert [(v.get("node"), v.get("peer")) for f, v, _ in ops if f == "scenario-cut"] == [("A", "L"), ("A", "C")]
    leaders = [(v["node"], r["reached"]) for f, v, r in ops if f == "scenario-wait" and v["until"] == "leader-is"]
    assert leaders == [("A", True), ("C", True)]
