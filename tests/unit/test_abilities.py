"""Abilities are declared, not probed (clusters/base.py, nemesis/requirements.py).

Each backend class declares what it can do by implementing small protocols; where the answer
depends on the run it says why not in one clause. These tests ask every ability of every backend
without starting anything, check that the faults refuse through nemesis/requirements.py with
those answers, that every nemesis has the shape the runner and the composite use, and that no
code of the project looks for attributes on a cluster or a nemesis any more (a new probe fails
here).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kafkaesque_harness.clusters.base as ab  # the abilities: ab.Pausable, ab.ClockControl, ...
from kafkaesque_harness.clusters.base import ABILITIES, Cluster, ClusterSpec
from kafkaesque_harness.clusters.capabilities import CAPABILITIES, Capability
from kafkaesque_harness.clusters.docker import DockerCluster
from kafkaesque_harness.clusters.external import ExternalCluster
from kafkaesque_harness.clusters.local import LocalCluster
from kafkaesque_harness.clusters.netns import NetnsCluster
from kafkaesque_harness.clusters.remote import RemoteResult
from kafkaesque_harness.clusters.ssh import SshCluster, SshNode
from kafkaesque_harness.clusters.ssh_remote import SshTarget
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused, SelfDriven
from kafkaesque_harness.nemesis.fault import Need
from kafkaesque_harness.nemesis.kinds import kind
from kafkaesque_harness.nemesis.registry import make_nemesis, nemesis_names
from kafkaesque_harness.nemesis.requirements import ability_refusal, can, why_not
from kafkaesque_harness.nemesis.schedule import NemesisEvent
from tests.unit.fakes import FakeCluster, fault_actions
from tests.unit.test_external_cluster_file import GOOD

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = {ab.Pausable, ab.HasRemotes, ab.NetDevice, ab.IsolatedNodes, ab.ClockControl, ab.SegmentFiles, ab.ControllerAdmin, ab.StateDumps,
             ab.PageCacheDrop, ab.ProtocolTrace}
DECLARED = {
    "local": REFERENCE,
    "local-netns": REFERENCE | {ab.LossyDisk},
    "docker": REFERENCE | {ab.LossyDisk},
    "ssh": REFERENCE | {ab.LossyDisk},
    # a system we did not build: no hooks into its clock, storage or controller
    "external": {ab.Pausable, ab.HasRemotes, ab.NetDevice, ab.IsolatedNodes, ab.StateDumps, ab.PageCacheDrop,
                 ab.ClockControl},  # ClockControl with a reason, always (the preload is not in its brokers)
}


class Answers:
    """A Remote whose every command exits with one status (`test -w`, `iptables -S`), recording them."""

    def __init__(self, exit_status: int = 0):
        self.exit = exit_status
        self.commands: list[list[str]] = []

    def run(self, argv, timeout=30.0, check=False):
        self.commands.append(argv)
        return RemoteResult(self.exit, "", "")


def ssh_nodes(hosts=("10.0.0.1", "10.0.0.2", "10.0.0.3"), lossy=False) -> list[SshNode]:
    names = ["controller-0", *(f"broker-{i}" for i in range(1, len(hosts)))]
    return [SshNode(n, SshTarget(host=h), "/var/lib/kafkaesque", 9092, "python3", lossy)
            for n, h in zip(names, hosts, strict=True)]


def backend(kind: str, tmp_path: Path):
    spec = ClusterSpec()
    if kind == "local":
        return LocalCluster(spec, str(tmp_path))
    if kind == "local-netns":
        return NetnsCluster(spec, str(tmp_path))
    if kind == "docker":
        return DockerCluster(spec, str(tmp_path))
    if kind == "ssh":
        return SshCluster(spec, str(tmp_path), ssh_nodes())
    f = tmp_path / "cluster.toml"
    f.write_text(GOOD)
    return ExternalCluster.from_file(str(f), None, str(tmp_path))


# --- each backend declares its abilities ------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(DECLARED))
def test_every_backend_has_the_core_shape_and_declares_exactly_its_abilities(kind, tmp_path):
    c = backend(kind, tmp_path)
    assert c.name == kind and isinstance(c, Cluster)
    assert {a for a in ABILITIES if isinstance(c, a)} == DECLARED[kind]
    for ability in set(ABILITIES) - DECLARED[kind]:  # undeclared: refused with a reason naming the cluster
        assert not can(c, ability) and why_not(c, ability)


def test_the_local_backend_runs_on_loopback_and_its_clock_depends_on_the_preload_build(tmp_path, monkeypatch):
    from kafkaesque_harness.clusters import clock_preload

    c = LocalCluster(ClusterSpec(), str(tmp_path))
    assert why_not(c, ab.IsolatedNodes) == "the local cluster runs every node as a process on this host's loopback"
    assert c.netem_probe_unavailable() == "not probed: the nodes share this host's network devices"
    assert "has not" in why_not(c, ab.ClockControl)  # the preload is built at start-up
    assert why_not(c, ab.LossyDisk).startswith("the local cluster's brokers do not write through the harness's "
                                               "lossy file system")  # no lossy file system at all

    def no_gcc(*a, **k):
        raise clock_preload.PreloadBuildError("No C compiler found for the clock preload library")

    monkeypatch.setattr(clock_preload, "build_preload", no_gcc)
    c._build_clock_preload()
    assert why_not(c, ab.ClockControl) == "the clock preload library could not be built here (install gcc)"
    assert "LD_PRELOAD" not in c.node_env("broker-1")
    monkeypatch.setattr(clock_preload, "build_preload", lambda *a, **k: tmp_path / "libclockoffset.so")
    c._build_clock_preload()
    assert can(c, ab.ClockControl) and "LD_PRELOAD" in c.node_env("broker-1")
    assert can(c, ab.StateDumps) and can(c, ab.SegmentFiles) and can(c, ab.ControllerAdmin) and can(c, ab.Pausable)
    assert c.pid_command("broker-1") == f"cat {c.pidfile('broker-1')} 2>/dev/null"


def test_the_netns_backend_isolates_its_nodes_on_lossy_disks_and_shapes_their_own_devices(tmp_path):
    c = NetnsCluster(ClusterSpec(), str(tmp_path))
    assert can(c, ab.IsolatedNodes) and can(c, ab.LossyDisk) and c.isolated_nodes
    assert c.netem_probe_unavailable() is None and c.net_device("broker-1") == f"kqn{c.tag}1"


def test_the_docker_backend_says_lossy_by_its_flag_and_read_only_proc_sys_by_its_containers(tmp_path):
    c = DockerCluster(ClusterSpec(), str(tmp_path))
    assert can(c, ab.IsolatedNodes) and can(c, ab.ClockControl) and can(c, ab.LossyDisk)
    assert c.net_device("broker-1") == "eth0"
    plain = DockerCluster(ClusterSpec(), str(tmp_path), lossy=False)
    assert why_not(plain, ab.LossyDisk) == "this cluster was started without it"
    c.remotes = {n: Answers(1) for n in c.nodes()}  # `test -w` fails, as in every container
    assert why_not(c, ab.PageCacheDrop) == ("/proc/sys/vm/drop_caches is not writable on broker-1 "
                                         "(/proc/sys is read-only in the containers)")
    assert c.remotes["broker-1"].commands == [["test", "-w", "/proc/sys/vm/drop_caches"]]  # asked, never written


def test_the_ssh_backend_answers_isolation_and_clock_from_what_it_probed_at_start_up(tmp_path, monkeypatch):
    from kafkaesque_harness.clusters import clock_preload

    c = SshCluster(ClusterSpec(), str(tmp_path), ssh_nodes())
    assert "has not" in why_not(c, ab.IsolatedNodes) and "has not" in why_not(c, ab.ClockControl)
    assert why_not(c, ab.LossyDisk) == "this cluster was started without it"
    assert can(SshCluster(ClusterSpec(), str(tmp_path), ssh_nodes(lossy=True)), ab.LossyDisk)
    c.remotes = {n: Answers(0) for n in c.nodes()}
    c._probe_isolation()
    assert can(c, ab.IsolatedNodes) and c.isolated_nodes
    c.remotes["broker-2"] = Answers(1)  # iptables does not run there
    c._probe_isolation()
    assert why_not(c, ab.IsolatedNodes).startswith("iptables does not run for the SSH user on broker-2")
    shared = SshCluster(ClusterSpec(), str(tmp_path), ssh_nodes(("10.0.0.1", "10.0.0.1", "10.0.0.2")))
    shared.remotes = {n: Answers(0) for n in shared.nodes()}
    shared._probe_isolation()
    assert why_not(shared, ab.IsolatedNodes) == "in the ssh node file, several nodes share 10.0.0.1"

    def no_gcc(*a, **k):
        raise clock_preload.PreloadBuildError("No C compiler found for the clock preload library")

    monkeypatch.setattr(clock_preload, "build_preload", no_gcc)
    assert c._install_clock_preload() is None
    assert why_not(c, ab.ClockControl) == "the clock preload library could not be built here (install gcc)"


def test_the_external_backend_is_isolated_only_when_the_probe_found_iptables_everywhere(tmp_path):
    c = backend("external", tmp_path)
    assert "iptables does not run for the node's user on k1, k2" in why_not(c, ab.IsolatedNodes)  # not probed yet
    c.capabilities = {n: {k: Capability(True) for k in CAPABILITIES} for n in c.nodes()}
    assert can(c, ab.IsolatedNodes)
    assert why_not(c, ab.StateDumps) == "a system we did not build gives no admin dump of its partitions and logs"
    assert why_not(c, ab.ClockControl) == ("the cluster file's start commands do not run the brokers under the "
                                           "clock preload")
    assert why_not(c, ab.SegmentFiles) == "external does not say where"
    c.remotes = {n: Answers(0) for n in c.nodes()}  # /proc/sys writable on the nodes
    assert can(c, ab.PageCacheDrop)


# --- the faults ask through nemesis/requirements.py, and say why -----------------------------------------
class Isolated(FakeCluster):
    def isolation_unavailable(self):
        return None


def test_undeclared_abilities_are_refused_with_a_sentence_naming_the_cluster():
    c = FakeCluster()
    assert why_not(c, ab.Pausable) == "the fake cluster cannot pause processes"
    assert why_not(c, ab.IsolatedNodes) == "the fake cluster does not say its nodes have their own network, disk and clock"
    assert not can(c, ab.ControllerAdmin) and not can(c, ab.StateDumps)
    refusals = {
        "pause": "^the pause fault needs a cluster that can pause processes: the fake cluster cannot pause processes; "
                 "drop pause from --nemesis$",
        "partition": "the partition fault needs nodes with their own network.*: the fake cluster does not say",
        "disk": "the disk fault needs the brokers' data dirs and logs: fake does not say where; drop disk from --nemesis",
        "drop-caches": "drop-caches fault needs the nodes' page-cache control: the fake cluster does not say whether",
        "membership": "controller: the fake cluster does not have one; drop membership",
    }
    for name, says in refusals.items():
        with pytest.raises(NemesisRefused, match=says):
            make_nemesis([name], {}).setup(c, fault_actions(c))


@pytest.mark.parametrize("name", [n for n in nemesis_names() if kind(n).abilities])
def test_each_kind_is_refused_for_exactly_the_abilities_it_declares(name):
    """The kind's declaration is what is checked (nemesis/requirements.py's ability_refusal), for the
    nemesis set up alone and before any part of a composite is set up."""
    needs = kind(name).abilities
    assert all(isinstance(n, Need) and isinstance(n.ability, type) for n in needs)
    first = needs[0]
    c = FakeCluster()
    expected = f"the {name} fault {first.why}: {why_not(c, first.ability)}; drop {name} from --nemesis"
    assert ability_refusal(name, c) == expected
    with pytest.raises(NemesisRefused) as refused:
        (part,) = make_nemesis([name], {"min_isr": 2}).parts
        part.setup(c, fault_actions(c))
    assert str(refused.value) == expected
    # in a composite, the refusal comes before the other part (kill, which this cluster can do) is set up
    composite = make_nemesis(["kill", name], {"min_isr": 2})
    set_up = []
    composite.parts[0].setup = lambda cluster, faults: set_up.append("kill")
    with pytest.raises(NemesisRefused, match=re.escape(expected)):
        composite.setup(c, fault_actions(c))
    assert set_up == []


def test_a_declared_ability_that_is_unavailable_now_is_refused_with_the_clusters_own_reason():
    class NoGcc(Isolated):
        def clock_file(self, node):
            return f"/tmp/{node}/clock-offset"

        def clock_unavailable(self):
            return "the clock preload library could not be built here (install gcc)"

        def lossyfs_files(self, node):
            return "/run/lossyfs.pid", "/run/lossyfs.status"

        def lossy_unavailable(self):
            return "this cluster was started without it"

    c = NoGcc()
    for fault in ("clock", "clock-jump", "clock-strobe"):
        with pytest.raises(NemesisRefused, match=f"the {fault} fault needs nodes started with the clock preload: "
                                                 r"the clock preload library could not be built here \(install gcc\)"):
            make_nemesis([fault], {}).setup(c, fault_actions(c))
    with pytest.raises(NemesisRefused, match="needs brokers writing through the lossy file system: this cluster was "
                                             "started without it"):
        make_nemesis(["lossy-crash"], {"min_isr": 2}).setup(c, fault_actions(c))
    NoGcc.clock_unavailable = lambda self: None
    make_nemesis(["clock"], {}).setup(c, fault_actions(c))  # now it can


def test_isolation_decides_the_moves_of_the_protocol_and_controller_nemeses():
    from kafkaesque_harness.nemesis.controller import ControllerNemesis

    class Quorum(FakeCluster):
        def pause(self, node):
            pass

        def resume(self, node):
            pass

        def remote(self, node):
            return Answers(0)

    plain = ControllerNemesis({})
    plain.setup(Quorum(), fault_actions(Quorum()))
    assert "isolate-active" not in plain.moves()

    class IsolatedQuorum(Quorum, Isolated):
        pass

    isolated = ControllerNemesis({})
    isolated.setup(IsolatedQuorum(), fault_actions(IsolatedQuorum()))
    assert "isolate-active" in isolated.moves()


# --- the nemesis shape ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [*nemesis_names(), "scenario:zombie-leader"])
def test_every_nemesis_has_the_shape_the_runner_and_the_composite_use(name):
    (part,) = make_nemesis([name], {}).parts
    assert isinstance(part, NemesisBase)
    drives = name in ("protocol", "scenario:zombie-leader")
    assert can(part, SelfDriven) is drives
    assert (part.pairs() == []) is drives  # a self-driven nemesis has no schedule
    assert part.heal_last is (name == "membership")  # it waits for every broker: healed after the others
    assert list(part.not_run) == []  # nothing left out before setup
    assert isinstance(part.target, str)


def test_the_composite_gathers_plans_pairs_and_what_its_parts_left_out():
    nem = make_nemesis(["kill", "net"], {})
    assert nem.schedule() == [("start-kill", "stop-kill"), ("start-net", "stop-net")]
    events = [NemesisEvent(1.0, "start-kill"), NemesisEvent(2.0, "stop-net")]
    (plan,) = nem.plans(FakeCluster(), events)
    first = next(plan)  # the schedule's events, performed by the composite's invoke
    assert (first.f, first.value, first.at) == ("start-kill", None, 1.0)
    nem.parts[1].not_run.append("netem (delay/duplicate/reorder): the kernel has no netem qdisc (x)")
    assert nem.not_run == ["netem (delay/duplicate/reorder): the kernel has no netem qdisc (x)"]
    scenario = make_nemesis(["scenario:zombie-leader"], {"scenario_delay": 0})
    (own,) = scenario.plans(FakeCluster(), events)  # its own steps, and no schedule: it has no pairs
    assert next(own).f == ""  # the scenario's delay, a pause
    step = next(own)
    assert step.f == "scenario-bind" and step.at is None and step.value["scenario"] == "zombie-leader"
    with_kills = make_nemesis(["scenario:zombie-leader", "kill"], {"scenario_delay": 0})
    own, random_kills = with_kills.plans(FakeCluster(), events)  # the scenario, and the random faults beside it
    assert next(own).f == "" and next(random_kills).f == "start-kill"


# --- no probes: nothing outside nemesis/requirements.py looks for attributes on a cluster or a nemesis -------
ABILITY_NAMES = {a.__name__ for a in ABILITIES} | {"SelfDriven", "Cluster", "Nemesis"}
SUBJECT = re.compile(r"^(cluster|\w+_cluster|nemesis|\w+_nemesis|part)$")
OWN_CLASS = re.compile(r"(Cluster|Nemesis|Fault)$")  # `self` there is a cluster or a nemesis
ASKER = "nemesis/requirements.py"


def probes(source: str, path: str = "x.py") -> list[str]:
    """Where `source` asks a cluster or a nemesis what it can do other than through nemesis/requirements.py:
    hasattr or getattr-with-a-default on one, a read of a cluster's private attribute from outside its
    class, an isinstance against an ability, or a branch on the backend's name."""
    tree = ast.parse(source)
    found: list[str] = []
    parts_vars = {t.id for node in ast.walk(tree) if isinstance(node, ast.For | ast.comprehension)
                  for t in [node.target] if isinstance(t, ast.Name)
                  and isinstance(node.iter, ast.Attribute) and node.iter.attr == "parts"}

    def last_name(e: ast.AST) -> str:
        return e.id if isinstance(e, ast.Name) else e.attr if isinstance(e, ast.Attribute) else ""

    def is_subject(e: ast.AST, owner: str) -> bool:
        """A cluster or a nemesis by its name; `self` in a class of one (`owner`)."""
        if isinstance(e, ast.Name) and e.id == "self":
            return bool(OWN_CLASS.search(owner))
        return bool(SUBJECT.match(last_name(e))) or (isinstance(e, ast.Name) and e.id in parts_vars)

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, ast.ClassDef) else owner

            def subject(e: ast.AST, here: str = here) -> bool:
                return is_subject(e, here)

            where = f"{path}:{getattr(child, 'lineno', '?')}"
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.args:
                fn, first = child.func.id, child.args[0]
                if fn == "hasattr" and subject(first):
                    found.append(f"{where} hasattr({ast.unparse(first)}, ...)")
                if fn == "getattr" and len(child.args) == 3 and subject(first):
                    found.append(f"{where} getattr({ast.unparse(first)}, ..., default)")
                if (fn == "isinstance" and len(child.args) == 2 and path != ASKER
                        and any(last_name(n) in ABILITY_NAMES for n in ast.walk(child.args[1]))):
                    found.append(f"{where} isinstance(..., {ast.unparse(child.args[1])})")
            if (isinstance(child, ast.Attribute) and child.attr.startswith("_") and not child.attr.startswith("__")
                    and subject(child.value) and not (isinstance(child.value, ast.Name) and child.value.id == "self")):
                found.append(f"{where} {ast.unparse(child)}")
            if isinstance(child, ast.Compare):
                sides = [child.left, *child.comparators]
                named = any(isinstance(s, ast.Attribute) and s.attr == "name" and subject(s.value) for s in sides)
                literal = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
                if named and literal:
                    found.append(f"{where} {ast.unparse(child)}")
            visit(child, here)

    visit(tree, "")
    return found


def test_the_probe_finder_sees_each_kind_of_probe_and_nothing_else():
    bad = {
        'hasattr(cluster, "clock_file")': "hasattr(cluster",
        'getattr(cluster, "isolated_nodes", False)': "getattr(cluster",
        'getattr(self.cluster, "lossy", False)': "getattr(self.cluster",
        'cluster._clock_lib is None': "cluster._clock_lib",
        'self.cluster._secret': "self.cluster._secret",
        'isinstance(cluster, Pausable)': "isinstance(",
        'isinstance(p, (SelfDriven, int))': "isinstance(",
        'cluster.name == "docker"': "cluster.name",
        '"local" != host_cluster.name': "host_cluster.name",
        'getattr(nemesis, "parts", [])': "getattr(nemesis",
        '[p for p in self.parts if hasattr(p, "drive")]': "hasattr(p",
        'class DockerCluster:\n    def f(self):\n        return hasattr(self, "_docker_client")': "hasattr(self",
        'class MembershipNemesis:\n    heal_last = getattr(self, "heal_last", False)': "getattr(self",
    }
    for source, says in bad.items():
        (hit,) = probes(source)
        assert says in hit, (source, hit)
    fine = [
        'hasattr(token, "lexpos") and hasattr(token, "value")',  # checkers/formats/edn.py: not a cluster
        'getattr(importlib.import_module(module), cls)(options)',
        'getattr(self, "_" + move.replace("-", "_"))(cluster)',  # dispatch on one's own methods, no default
        'class LocalCluster:\n    def env(self):\n        return self._clock_lib',  # a cluster's own state
        'class Thing:\n    def f(self):\n        return hasattr(self, "x")',
        'if spec.cluster == "docker": pass',  # the user's choice of backend, not a probe of one
        'cluster.capabilities or probe_cluster(cluster)',
        'for p in partitions: hasattr(p, "leader")',
    ]
    for source in fine:
        assert probes(source) == [], source
    assert probes("isinstance(cluster, Pausable)", ASKER) == []  # the one place that asks


def test_no_code_of_the_project_probes_a_cluster_or_a_nemesis():
    files = sorted(p for room in ("nemesis", "harness", "checkers", "results", "workloads")
                   for p in (ROOT / room).rglob("*.py")) + sorted((ROOT / "clusters").glob("*.py"))
    assert len(files) > 50
    found = [hit for f in files for hit in probes(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == [], ("ask through nemesis/requirements.py (can, why_not) and declare the ability on the "
                         "backend (clusters/base.py) instead of probing for it:\n" + "\n".join(found))
