"""Nemesis composition and role targets: dispatch by op name, heal everything, refuse by name."""

import random

import pytest

from kafkaesque_harness.clusters.base import PartitionView
from kafkaesque_harness.history import Op
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.registry import make_nemesis
from kafkaesque_harness.nemesis.targets import choose
from tests.unit.fakes import RecordedPauses, fault_actions

BROKERS = ["broker-1", "broker-2", "broker-3", "broker-4", "broker-5"]


class FakeCluster(RecordedPauses):
    name = "local"
    capabilities = None  # not probed

    def broker_nodes(self):
        return BROKERS

    def controller_nodes(self):
        return ["controller-0"]

    def nodes(self):
        return ["controller-0"] + BROKERS

    def node_name(self, i):
        return f"broker-{i}"

    def node_id(self, n):
        return int(n.rsplit("-", 1)[1])

    def partitions(self, topic):
        return [PartitionView(topic, 0, 4, [4, 5, 1], [4, 5, 1])]


def set_up(nemesis, cluster):
    """What the runner does before the main phase: set the nemesis up with the run's fault actions."""
    nemesis.setup(cluster, fault_actions(cluster))
    return nemesis


def test_targets():
    rng = random.Random(1)
    assert choose("leader", BROKERS, rng, leaders=["broker-4"]) == ["broker-4"]
    assert choose("controller", BROKERS, rng, controllers=["controller-0"]) == ["controller-0"]
    assert len(choose("minority", BROKERS, rng)) == 2 and len(choose("majority", BROKERS, rng)) == 3
    assert choose("all", BROKERS, rng) == BROKERS
    isrs = [["broker-1", "broker-2"], ["broker-3"]]
    assert choose("last-isr-member", BROKERS, rng, isrs=isrs) == ["broker-3"]
    assert choose("last-isr-member", BROKERS, rng, isrs=[["broker-1", "broker-2"]]) == []
    assert choose("isr-member", BROKERS, rng, isrs=isrs)[0] in {"broker-1", "broker-2", "broker-3"}
    with pytest.raises(ValueError, match="valid: random-node"):
        choose("someone", BROKERS, rng)


def test_kill_of_the_leader_and_heal_by_restart():
    c = FakeCluster()
    n = set_up(make_nemesis(["kill"], {"target": "leader"}), c)
    done = n.invoke(c, Op("invoke", "start-kill", "nemesis", None))
    assert done.value == {"kill": ["broker-4"]} and c.events == [("kill", "broker-4")]
    n.invoke(c, Op("invoke", "stop-kill", "nemesis", None))
    assert c.events[-1] == ("start", "broker-4")


def test_overlapping_faults_never_pick_a_broker_another_fault_has_down():
    # Under the mix schedule a kill can start while a pause-free kill of another nemesis part
    # holds: the second must choose among the brokers still up, or its restart would end the first.
    c = FakeCluster()
    c.down = {"broker-1", "broker-2", "broker-3", "broker-4"}  # e.g. killed or power-cut by other parts
    n = set_up(make_nemesis(["kill"], {"target": "random-node", "seed": 3}), c)
    for _ in range(5):
        done = n.invoke(c, Op("invoke", "start-kill", "nemesis", None))
        assert done.value == {"kill": ["broker-5"]}
        n.invoke(c, Op("invoke", "stop-kill", "nemesis", None))
    c.down = set(BROKERS)
    assert n.invoke(c, Op("invoke", "start-kill", "nemesis", None)).value == {"kill": []}


def test_teardown_heals_every_fault_even_when_one_part_fails():
    c = FakeCluster()
    n = set_up(make_nemesis(["pause", "kill"], {"target": "all"}), c)
    n.invoke(c, Op("invoke", "start-pause", "nemesis", None))
    n.invoke(c, Op("invoke", "start-kill", "nemesis", None))
    original_resume = c.resume

    def broken_resume(node):
        original_resume(node)
        raise RuntimeError("resume failed")

    c.resume = broken_resume
    errors = n.teardown(c)
    assert errors and "pause" in errors[0]
    assert {n for e, n in c.events if e == "resume"} == set(BROKERS)  # every node resumed despite errors
    assert {n for e, n in c.events if e == "start"} == set(BROKERS)  # and the kill healed too
    assert not n.faults.ledger.active()  # and the ledger holds nothing active any more


def test_schedule_and_unknown_names():
    n = make_nemesis(["kill", "pause"], {})
    assert n.schedule() == [("start-kill", "stop-kill"), ("start-pause", "stop-pause")]
    with pytest.raises(ValueError, match="unknown nemesis 'meteor'; valid: .*kill, lossy-crash"):
        make_nemesis(["meteor"], {})


def test_network_faults_are_refused_by_name_on_the_local_backend():
    n = make_nemesis(["partition"], {})
    with pytest.raises(NemesisRefused, match="partition fault needs nodes with their own network"):
        set_up(n, FakeCluster())


def test_fault_targets_replay_from_the_seed_in_a_fresh_process():
    """The nodes a fault picks depend on --seed only, not on the process's string-hash salt."""
    import subprocess
    import sys

    code = ("from kafkaesque_harness.nemesis.faults import PartitionNemesis as P;import random;"
            "print([P({'seed': 7}).rng.random() for _ in range(1)])")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={"PYTHONHASHSEED": str(salt), "PATH": ""}).stdout for salt in (1, 2, 3)}
    assert len(outs) == 1 and outs != {""}


def test_mixed_target_draws_a_target_per_fault_lone_nodes_leaders_majorities_and_everyone():
    rng = random.Random(4)
    sizes = {len(choose("mixed", BROKERS, rng, leaders=["broker-4"])) for _ in range(200)}
    assert sizes == {1, 2, 3, 5}  # one node or the leader, a minority, a majority, all five
    c = FakeCluster()
    n = set_up(make_nemesis(["kill"], {"target": "mixed", "seed": 2}), c)
    hit = []
    for _ in range(30):
        hit.append(len(n.invoke(c, Op("invoke", "start-kill", "nemesis", None)).value["kill"]))
        n.invoke(c, Op("invoke", "stop-kill", "nemesis", None))
    assert {1, 5} <= set(hit) and not c.down  # every kill was healed by its stop


def test_mixed_partitions_draw_their_shape_per_fault():
    from kafkaesque_harness.nemesis.faults import PartitionNemesis

    class Net(FakeCluster):
        def isolation_unavailable(self):
            return None  # IsolatedNodes

        def address(self, n):
            return (f"10.0.0.{n[-1] if n[-1].isdigit() else 0}", 9092)

        def active_controller(self):
            return "controller-0"

    p = PartitionNemesis({"target": "mixed", "seed": 1})
    shapes = set()
    for _ in range(40):
        p.grudge(Net())
        shapes.add(p.shape)
    assert len(shapes) >= 5 and shapes <= {"random-node", "halves", "majorities-ring", "bridge", "leader",
                                            "controller", "one-way"}


def test_controller_nemesis_hits_the_quorum_by_role_and_its_stop_heals_every_move():
    class Quorum(FakeCluster):
        def controller_nodes(self):
            return ["controller-0", "controller-1", "controller-2"]

        def active_controller(self):
            return "controller-1"

    c = Quorum()
    n = set_up(make_nemesis(["controller"], {"seed": 5}), c)  # not isolated: the isolating move is left out
    seen = {}
    for _ in range(40):
        v = n.invoke(c, Op("invoke", "start-controller", "nemesis", None)).value
        seen.setdefault(v["move"], set()).add(len(v["controllers"]))
        if v["move"].endswith("-active"):
            assert v["controllers"] == ["controller-1"]
        n.invoke(c, Op("invoke", "stop-controller", "nemesis", None))
        assert not c.down
    assert set(seen) == {"kill-active", "pause-active", "kill-minority", "kill-majority"}
    assert seen["kill-minority"] == {1} and seen["kill-majority"] == {2}
    paused = {x for e, x in c.events if e == "pause"}
    assert paused == {"controller-1"} and {x for e, x in c.events if e == "resume"} == paused


def test_with_one_controller_every_start_of_the_controller_fault_acts_on_it():
    # A minority of a quorum of one is nobody: drawn, that move did nothing, and a run whose every controller
    # start drew it ended unknown ("planned but never applied"). It is not drawn there.
    class One(FakeCluster):  # one controller, controller-0
        def active_controller(self):
            return "controller-0"

    c = One()
    n = set_up(make_nemesis(["controller"], {"seed": 5}), c)
    moves = set()
    for _ in range(40):
        v = n.invoke(c, Op("invoke", "start-controller", "nemesis", None)).value
        assert v["controllers"] == ["controller-0"], v
        moves.add(v["move"])
        n.invoke(c, Op("invoke", "stop-controller", "nemesis", None))
    assert "kill-minority" not in moves and {"kill-active", "pause-active", "kill-majority"} <= moves
