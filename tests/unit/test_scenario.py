"""Protocol-aware scenarios (nemesis/scenario.py) against a fake cluster whose "controller" reacts to
faults at once: steps bind roles, act, wait for the protocol's reaction, stall when it does not
come, and teardown undoes everything. The real thing runs in tests/integration/test_scenario_runs.py."""

from __future__ import annotations

import pytest

from kafkaesque_harness.clusters.base import PartitionView
from kafkaesque_harness.clusters.remote import RemoteResult
from kafkaesque_harness.nemesis.base import NemesisRefused, SelfDriven
from kafkaesque_harness.nemesis.registry import make_nemesis, nemesis_problem
from kafkaesque_harness.nemesis.requirements import can
from kafkaesque_harness.nemesis.scenario import ScenarioNemesis
from kafkaesque_harness.nemesis.scenario_steps import CONTROLLERS, Scenario, act, bind, cut, wait
from kafkaesque_harness.nemesis.scenarios import SCENARIOS
from tests.unit.fakes import FakeNetwork, ProcessStates, fault_actions, run_plans


class FakeRemote:
    def __init__(self, cluster, node):
        self.cluster, self.node = cluster, node

    def run(self, argv, timeout=30.0, check=False):
        self.cluster.commands.append((self.node, " ".join(argv)))
        answer = self.cluster.net.run(self.node, argv)
        if answer is not None and "KAFKAESQUE" in " ".join(argv) and self.cluster.fence_on_cut:
            self.cluster.fence_by_network()
        return answer or RemoteResult(0, "", "")


class FakeCluster(ProcessStates):
    """Brokers 1-3, partition 0 led by 1; a killed, paused or isolated broker leaves the ISR and
    is fenced at once; a start or heal brings it back in sync."""

    name = "fake"
    capabilities = None  # not probed
    not_isolated: str | None = None     # IsolatedNodes' answer (a test sets a reason)
    no_state_dumps: str | None = None   # StateDumps' answer

    def __init__(self):
        super().__init__()
        self.leader, self.isr, self.fenced = 1, [1, 2, 3], set()
        self.leos = {1: 10, 2: 10, 3: 10}  # each broker's log end offset for partition 0
        self.commands = []
        self.net = FakeNetwork(self)
        self.fence_on_cut, self.fenced_by_cut = False, set()

    def isolation_unavailable(self):
        return self.not_isolated

    def state_dumps_unavailable(self):
        return self.no_state_dumps

    def active_controller(self):
        return None  # not known: the protocol nemesis takes the first controller

    def fence_by_network(self):
        """Like a real controller, fence a broker it cannot hear, and take it back when it can again."""
        cut_off = {b for b in self.broker_nodes() if self.net.cut_between(b, "controller-0")}
        for b in cut_off - self.fenced_by_cut:
            self.went_down(b)
        for b in self.fenced_by_cut - cut_off:
            self.came_up(b)
        self.fenced_by_cut = cut_off

    def broker_nodes(self):
        return ["broker-1", "broker-2", "broker-3"]

    def controller_nodes(self):
        return ["controller-0"]

    def nodes(self):
        return self.controller_nodes() + self.broker_nodes()

    def node_name(self, i):
        return f"broker-{i}"

    def node_id(self, n):
        return int(n.split("-")[1])

    def address(self, n):
        return (f"10.0.0.{self.node_id(n) % 100}", 9092)

    def remote(self, n):
        return FakeRemote(self, n)

    def partitions(self, topic):
        return [PartitionView(topic, 0, self.leader, [1, 2, 3], list(self.isr))]

    def dump_state(self, node, include_log=True):
        return {"partitions": [{"topic": "queue", "partition": 0, "leo": self.leos[self.node_id(node)]}]}

    def fenced_brokers(self):
        return set(self.fenced)

    def went_down(self, n):
        if n.startswith("controller"):
            return  # this fake's "controller" is the cluster itself: pausing it changes no partition
        b = self.node_id(n)
        self.fenced.add(b)
        self.isr = [r for r in self.isr if r != b]
        if self.leader == b:
            self.leader = self.isr[0] if self.isr else -1

    def came_up(self, n):
        if n.startswith("controller"):
            return
        b = self.node_id(n)
        self.fenced.discard(b)
        self.isr = sorted(set(self.isr) | {b})
        if self.leader == -1:
            self.leader = b

    def resume(self, n):
        self.calls.append(f"resume {n}")
        if self.process.get(n) == "paused":
            del self.process[n]
        self.came_up(n)

    def start(self, n):
        self._act("start", n, "running")
        self.came_up(n)


def run(nemesis, cluster):
    if nemesis.faults is None:
        nemesis.setup(cluster, fault_actions(cluster))
    return run_plans(nemesis.plans(cluster, [])).ops


def scenario(*steps, isolated=False):
    return ScenarioNemesis(Scenario("t", "test", tuple(steps), needs_isolated_nodes=isolated),
                           {"scenario_delay": 0, "seed": 1})


def test_steps_bind_roles_act_on_them_and_wait_for_the_reaction():
    c = FakeCluster()
    n = scenario(bind("L", "leader"), bind("F", "follower"), act("kill", "L"),
                 wait("leader-is-not", "L", timeout=1), wait("not-in-isr", "L", timeout=1), act("pause", "F"))
    ops = run(n, c)
    assert [f for f, _, _ in ops] == ["scenario-bind", "scenario-bind", "scenario-kill", "scenario-wait",
                                      "scenario-wait", "scenario-pause"]
    assert ops[0][2] == {"L": "broker-1"} and ops[1][2]["F"] in ("broker-2", "broker-3")
    assert c.calls == ["kill broker-1", f"pause {ops[1][2]['F']}"]
    assert ops[3][2]["reached"] is True and ops[3][2]["leader"] != "broker-1"
    n.teardown(c)
    assert c.calls[-2:] == [f"resume {ops[1][2]['F']}", "start broker-1"]


def test_a_wait_that_never_holds_stalls_the_scenario_and_later_steps_do_not_run():
    c = FakeCluster()
    n = scenario(bind("L", "leader"), act("kill", "L"), wait("leader-is", "L", timeout=0.3), act("kill", "broker-2"))
    ops = run(n, c)
    assert ops[-1][0] == "scenario-wait" and "not reached" in ops[-1][2]
    assert c.calls == ["kill broker-1"]
    n.teardown(c)
    assert c.calls[-1] == "start broker-1"


def test_isolate_cuts_one_node_off_and_heal_reconnects_it():
    c = FakeCluster()
    n = scenario(act("isolate", "broker-2"), isolated=True)
    run(n, c)
    assert all(c.net.cut_between("broker-2", other) for other in c.nodes() if other != "broker-2")
    assert not c.net.cut_between("broker-1", "broker-3")  # only broker-2 is cut off
    (rec,) = n.faults.ledger.records()
    assert rec.fault == "partition" and rec.nodes == ["broker-2"] and rec.applied and rec.observed
    assert set(rec.evidence["probes"].values()) == {"timeout"}  # seen: a probe across the cut timed out
    n._perform(c, act("heal", "broker-2"))
    assert not any(c.net.drops.values())
    assert rec.healed and set(rec.heal_evidence["probes"].values()) == {"open"}


def _drops(cluster):
    """node -> the addresses it drops now."""
    return cluster.net.drops


def test_cut_separates_two_nodes_both_ways_and_heal_of_one_node_undoes_only_its_cuts():
    c = FakeCluster()
    n = scenario(bind("Z", "follower"), cut("Z", CONTROLLERS), cut("broker-1", "broker-3"), isolated=True)
    run(n, c)
    z = n.node("Z")
    ip = {node: c.address(node)[0] for node in c.nodes()}
    drops = _drops(c)
    assert ip["controller-0"] in drops[z] and ip[z] in drops["controller-0"]
    assert ip["broker-3"] in drops["broker-1"] and ip["broker-1"] in drops["broker-3"]
    other = ({"broker-2", "broker-3"} - {z}).pop()
    assert ip[other] not in drops[z]                      # a cut is not an isolation
    n._perform(c, act("heal", "broker-3"))
    drops = _drops(c)
    assert ip["controller-0"] in drops[z] and not drops["broker-1"] and not drops["broker-3"] - {ip["controller-0"]}
    n.teardown(c)
    assert not any(_drops(c).values())


def test_log_reaches_waits_until_the_nodes_log_end_offset_reaches_the_others():
    c = FakeCluster()
    c.leos = {1: 10, 2: 12, 3: 12}
    n = scenario(bind("L", "leader"), wait("log-reaches", "L", nodes=("broker-2",), timeout=0.3))
    assert "not reached" in run(n, c)[-1][2]
    c.leos[1] = 12
    n = scenario(bind("L", "leader"), wait("log-reaches", "L", nodes=("broker-2",), timeout=0.3))
    ops = run(n, c)
    assert ops[-1][2]["reached"] is True and ops[-1][2]["leo"] == {"broker-1": 12, "broker-2": 12}


def test_log_reaches_on_a_cluster_without_state_dumps_says_why_it_cannot_wait():
    c = FakeCluster()
    c.no_state_dumps, c.name = "a system we did not build gives none", "external"
    n = scenario(bind("L", "leader"), wait("log-reaches", "L", nodes=("broker-2",), timeout=5))
    assert "reports no replica's log end offset" in run(n, c)[-1][2]


def test_zombie_follower_cuts_z_from_the_controllers_and_f_from_l_then_bounces_leadership():
    c = FakeCluster()
    n = ScenarioNemesis("zombie-follower", {"scenario_delay": 0, "seed": 3})
    c.leos = {1: 50, 2: 40, 3: 40}
    c.fence_on_cut = True  # the fake's controller fences a broker it cannot hear
    ops = run(n, c)
    assert [f for f, _, r in ops if isinstance(r, str)] == []  # no step failed or stalled
    L, F, Z = n.node("L"), n.node("F"), n.node("Z")
    assert c.calls == [f"pause {L}", f"resume {L}", f"kill {F}", f"start {F}"]
    cuts = [(v.get("node"), v.get("peer")) for f, v, _ in ops if f == "scenario-cut"]
    assert cuts == [("Z", "controllers"), ("F", "L")]
    assert [r["healed"] for f, _, r in ops if f == "scenario-heal"] == [[F], [Z]]


def test_successor_is_the_isr_member_the_controller_elects_next_and_none_once_it_is_bound():
    c = FakeCluster()
    c.isr = [1, 3]  # broker-2 left the ISR: the controller's replica-order choice skips it
    n = scenario(bind("L", "leader"), bind("A", "successor"))
    assert [r for _, _, r in run(n, c)] == [{"L": "broker-1"}, {"A": "broker-3"}]
    n = scenario(bind("A", "successor"), bind("B", "successor"))
    assert "no unbound successor" in run(n, FakeCluster())[-1][2]


def test_scenarios_that_cut_or_power_cut_nodes_are_refused_on_a_loopback_cluster():
    c = FakeCluster()
    c.not_isolated = "the fake cluster runs every node on loopback"
    with pytest.raises(NemesisRefused, match="needs nodes of their own"):
        ScenarioNemesis("last-replica-standing", {}).setup(c, fault_actions(c))


def test_every_shipped_scenario_uses_known_steps_and_conditions():
    from kafkaesque_harness.clusters.reference import FLAW_VARIANTS
    from kafkaesque_harness.nemesis.scenario_steps import ACTIONS, CONDITIONS

    for s in SCENARIOS.values():
        assert s.doc and set(s.targets) <= set(FLAW_VARIANTS), s.name
        for step in s.steps:
            assert step.do in (*ACTIONS, "bind", "wait", "sleep"), (s.name, step)
            if step.do == "wait":
                assert step.until in CONDITIONS, (s.name, step)
    # Every flaw variant is the target of some scenario (zombie-leader guards the default alone).
    assert {v for s in SCENARIOS.values() for v in s.targets} == set(FLAW_VARIANTS)


def test_nemesis_names_for_scenarios():
    assert nemesis_problem(["scenario:unclean-election"]) is None
    assert nemesis_problem(["scenario:unclean-election", "kill", "pause"]) is None  # random faults beside it
    assert "give one of them" in nemesis_problem(["scenario:unclean-election", "protocol"])
    assert "give one of them" in nemesis_problem(["scenario:unclean-election", "scenario:zombie-leader"])
    assert "unknown nemesis 'scenario:nope'" in nemesis_problem(["scenario:nope"])
    assert can(make_nemesis(["scenario:zombie-leader"], {}).parts[0], SelfDriven)


def test_power_cuts_beyond_min_isr_minus_one_at_once_are_marked_beyond_the_fault_budget(power_cuts):
    c = FakeCluster()
    n = scenario(act("lossy-crash", "broker-1"), act("start", "broker-1"), act("lossy-crash", "broker-2"),
                 act("lossy-crash", "broker-3"), isolated=True)
    ops = run(n, c)
    marks = [r.get("beyond_fault_budget", False) for f, _, r in ops if f == "scenario-lossy-crash"]
    assert marks == [False, False, True]  # min ISR 2: one at a time is within the contract, two are not


# --- scenario files ------------------------------------------------------------------------------------

GOOD_FILE = """
name = "cut-then-crash"
doc = "a zombie follower, then its leader loses power"
targets = ["no-elr"]
steps = [
  {do = "bind", node = "L", role = "leader"},
  {do = "bind", node = "Z", role = "follower"},
  {do = "cut", node = "Z", peer = "controllers"},
  {do = "wait", until = "fenced", node = "Z", timeout = 1},
  {do = "kill", node = "L"},
  {do = "wait", until = "leader-is-not", node = "L", timeout = 1},
  {do = "sleep", seconds = 0},
  {do = "heal"},
]
"""


def test_a_scenario_file_is_data_and_runs_like_a_shipped_one(tmp_path):
    from kafkaesque_harness.nemesis.scenario_steps import load_scenario_file

    f = tmp_path / "s.toml"
    f.write_text(GOOD_FILE)
    s = load_scenario_file(f)
    assert s.name == "cut-then-crash" and s.targets == ("no-elr",) and s.needs_isolated_nodes
    assert [st.do for st in s.steps] == ["bind", "bind", "cut", "wait", "kill", "wait", "sleep", "heal"]
    assert nemesis_problem([f"scenario:{f}"]) is None
    c = FakeCluster()
    n = make_nemesis([f"scenario:{f}"], {"scenario_delay": 0}).parts[0]
    c.fenced.update({2, 3})  # this fake fences on kills and pauses only: let the wait on Z hold
    ops = run(n, c)
    assert [f[len("scenario-"):] for f, _, r in ops if not isinstance(r, str)] == [st.do for st in s.steps
                                                                                   if st.do != "sleep"]
    assert c.calls == ["kill broker-1"]


@pytest.mark.parametrize("text, says", [
    ('steps = [{do = "explode"}]', "step 1 of {f} does 'explode'; valid: bind, wait, sleep, kill"),
    ('steps = [{do = "kill", node = "L"}]', "step 1 of {f} names 'L', which no earlier bind step binds"),
    ('steps = [{do = "bind", node = "L", role = "boss"}]', "binds 'L' to role 'boss'; give node = a name and role"),
    ('steps = [{do = "wait", until = "sunrise"}]', "waits until 'sunrise'; valid: isr-is"),
    ('steps = [{do = "wait", until = "isr-is"}]', "waits until isr-is of no nodes"),
    ('steps = [{do = "kill"}]', "(kill) names no node"),
    ('steps = [{do = "cut", node = "broker-1"}]', "cuts without node and peer"),
    ('steps = [{do = "sleep", seconds = "soon"}]', "timeout/seconds is 'soon'"),
    ('steps = [{do = "kill", node = "broker-1", color = "red"}]', "has unknown key 'color'"),
    ('name = "x"', "has no steps"),
    ('steps = [{do = "heal"}]\ntargets = ["all-of-them"]', "targets in {f} names 'all-of-them'"),
    ('stepz = []', "unknown key 'stepz'"),
    ('steps = [', "cannot read scenario file"),
])
def test_a_bad_scenario_file_is_one_sentence_naming_the_step_and_the_fix(tmp_path, text, says):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    why = nemesis_problem([f"scenario:{f}"])
    assert why is not None and says.format(f=f) in why and "\n" not in why
    assert "does not exist" in nemesis_problem([f"scenario:{tmp_path / 'nope.toml'}"])


def test_the_readme_scenario_file_example_loads(tmp_path):
    import re
    from pathlib import Path

    from kafkaesque_harness.nemesis.scenario_steps import load_scenario_file

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```toml\n(name = .*?)```", readme, re.S)
    assert block, "README's scenario-file example is gone"
    (tmp_path / "example.toml").write_text(block.group(1))
    s = load_scenario_file(tmp_path / "example.toml")
    assert s.needs_isolated_nodes and s.steps[0].do == "bind"
