"""A cluster file (clusters/external.py) end to end: our reference broker described as an EXTERNAL system
(clusters/examples/reference-broker-over-ssh.toml) and driven over real SSH into the project's node
containers exactly as any other Kafka-protocol cluster would be: installed and started by the file's
commands, roles asked through the Kafka protocol only, faults through the same Remote code.

The containers and sshd come from test_ssh_cluster.py's `nodes` fixture (here `ssh_nodes`) (reused, not copied). These
tests need the Docker engine and fail, never skip, without it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.external import ExternalCluster
from kafkaesque_harness.clusters.ssh import code_tarball
from kafkaesque_harness.history import INVOKE, NEMESIS, Op
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.faults import ClockNemesis, DiskNemesis, LossyCrashNemesis, PartitionNemesis
from tests.integration import test_ssh_cluster
from tests.integration.conftest import set_up_nemesis
from tests.integration.test_ssh_cluster import NODES, SshNodes

pytestmark = pytest.mark.integration
ssh_nodes = test_ssh_cluster.nodes  # its module-scoped fixture (node containers running sshd), reused here

EXAMPLE = Path(__file__).resolve().parents[2] / "clusters" / "examples" / "reference-broker-over-ssh.toml"
# The same run on both paths: sequential faults so the schedule is the seed's alone.
RUN = {"nemesis": ["kill", "pause"], "nemesis_schedule": "sequential", "seed": 7, "time_limit": 20,
       "nemesis_interval": 4, "recovery_wait": 3}


def cluster_file(ssh: SshNodes, root: Path, user: str = "root") -> Path:
    """The example file with this test's node addresses, key, known_hosts and code tarball filled in."""
    tarball = root / "clusters.tar.gz"
    tarball.write_bytes(code_tarball())
    text = EXAMPLE.read_text().replace("@KEY@", str(ssh.key)).replace("@KNOWN_HOSTS@", str(ssh.known_hosts))
    text = text.replace("@TARBALL@", str(tarball)).replace("@SECRET@", rpc.new_secret())
    shutil.copy(EXAMPLE.parent / "cluster.secret.j2", root)  # the file's config_template, beside it
    for node in NODES:
        text = text.replace(f"@{node}@", ssh.ips[node])
    if user != "root":
        text = text.replace('user = "root"', f'user = "{user}"').replace(
            'dir = "/var/lib/kafkaesque-external"', f'dir = "/home/{user}/kafkaesque-external"')
    path = root / f"reference-broker-over-ssh-{user}.toml"
    path.write_text(text)
    return path


def outside_state(ssh: SshNodes, node: str, pidfile: str) -> str:
    """The kernel's state letter of the node's process, read through docker exec (not SSH, not the file)."""
    r = ssh.docker[node].run(["sh", "-c", f"grep '^State:' /proc/$(cat {pidfile})/status"])
    return r.out.split()[1] if r.ok else "gone"


def test_the_file_drives_the_reference_broker_over_ssh_with_protocol_roles_and_remote_faults(ssh_nodes, tmp_path):
    c = ExternalCluster.from_file(str(cluster_file(ssh_nodes, tmp_path)), None, str(tmp_path))
    assert (c.nodes(), c.broker_nodes(), c.controller_nodes()) == (list(NODES), list(NODES[1:]), ["controller-0"])
    pidfile = "/var/lib/kafkaesque-external/node.pid"
    bootstrap = c.up()
    try:
        assert bootstrap == ",".join(f"{ssh_nodes.ips[n]}:9092" for n in NODES[1:])
        # what the nodes allow, probed over SSH
        caps = c.capabilities
        assert all(caps[n]["iptables"].ok and caps[n]["tc"].ok and caps[n]["sigstop"].ok for n in NODES)
        assert all(caps[n]["fuse"].ok for n in NODES[1:])  # the broker containers have /dev/fuse
        assert not caps["controller-0"]["fuse"].ok and "no /dev/fuse" in caps["controller-0"]["fuse"].detail
        assert not caps["broker-1"]["netem"].ok and caps["broker-1"]["netem"].detail  # this kernel has no netem
        assert not caps["broker-1"]["cap_sys_time"].ok  # containers do not get CAP_SYS_TIME
        assert c.isolated_nodes

        # roles through the Kafka protocol: Metadata for leaders and ISRs; the reference broker answers
        # neither DescribeQuorum nor DescribeCluster, so the controller is the one the file lists
        c.create_topic("t", 2, 3, 2)
        parts = c.partitions("t")
        assert [p.partition for p in parts] == [0, 1]
        assert all(p.leader in (1, 2, 3) and sorted(p.isr) == [1, 2, 3] for p in parts)
        assert c.active_controller() == "controller-0"

        # process faults through the pid command, seen from outside
        c.pause("broker-1")
        assert c.process_state("broker-1") == "paused" and outside_state(ssh_nodes, "broker-1", pidfile) == "T"
        c.resume("broker-1")
        assert outside_state(ssh_nodes, "broker-1", pidfile) in ("S", "R")
        c.kill("broker-2")
        assert not c.is_running("broker-2") and outside_state(ssh_nodes, "broker-2", pidfile) == "gone"
        c.start("broker-2")
        assert c.is_running("broker-2")
        c.wait_ready(c.broker_nodes(), 60)

        # a partition with the same nemesis code as for our own backends
        part = PartitionNemesis({"target": "random-node", "seed": 3})
        faults = set_up_nemesis(part, c)
        done = part.invoke(c, Op(INVOKE, "start-partition", NEMESIS, None))
        (isolated,) = [n for n, drops in done.value["partition"].items() if len(drops) == 3]
        assert netrules.CHAIN in ssh_nodes.docker[isolated].run(["iptables", "-S"]).out
        part.invoke(c, Op(INVOKE, "stop-partition", NEMESIS, None))
        part.teardown(c)
        assert faults.heal_everything() == []
        assert netrules.CHAIN not in ssh_nodes.docker[isolated].run(["iptables", "-S"]).out

        # faults that need hooks only our own backends give are refused by name
        for fault, says in ((LossyCrashNemesis({}), "lossy file system"), (ClockNemesis({}), "clock preload"),
                            (DiskNemesis({}), "data dir")):
            with pytest.raises(NemesisRefused, match=says):
                set_up_nemesis(fault, c)

        c.collect(str(tmp_path / "nodes"))
        assert (tmp_path / "nodes" / "broker-1" / "node.log").stat().st_size > 0
        assert (tmp_path / "nodes" / "controller-0" / "node.log").stat().st_size > 0
    finally:
        c.down()
    for node in NODES:  # the stop command stopped every node cleanly
        assert not c.is_running(node)
        assert outside_state(ssh_nodes, node, pidfile) == "gone"


def nemesis_fs(run_dir: Path) -> list[str]:
    return [json.loads(line)["f"] for line in (run_dir / "history.jsonl").read_text().splitlines()
            if '"nemesis"' in line and json.loads(line)["type"] == "invoke"]


# nightly: a long end-to-end run, kept out of `make test` (30-minute budget); `make nightly` runs it
@pytest.mark.nightly
def test_the_cluster_file_path_has_the_docker_backends_verdict_on_the_same_seed(ssh_nodes, tmp_path, kafkaesque_run):
    path = cluster_file(ssh_nodes, tmp_path)
    # the cluster file through the command line, as a user runs it
    r = subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", "run", "--cluster", str(path),
                        "--nemesis", ",".join(RUN["nemesis"]), "--nemesis-schedule", RUN["nemesis_schedule"],
                        "--seed", str(RUN["seed"]), "--time-limit", str(RUN["time_limit"]),
                        "--nemesis-interval", str(RUN["nemesis_interval"]), "--recovery-wait", str(RUN["recovery_wait"]),
                        "--no-panel", "--store", str(tmp_path / "store")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "cluster external" in r.stderr
    table = r.stderr[r.stderr.index("node capabilities"):]
    assert table.splitlines()[1].split() == ["node", "iptables", "tc", "netem", "fuse", "cap_sys_time", "preload",
                                          "sigstop"]
    assert "no netem on controller-0, broker-1, broker-2, broker-3: " in table
    external = Path(r.stdout.strip().splitlines()[-1])
    test = json.loads((external / "test.json").read_text())
    assert test["cluster"] == str(path) and test["brokers"] == 3
    assert set(test["capabilities"]) == set(NODES) and test["capabilities"]["broker-1"]["netem"]["ok"] is False
    ext_results = json.loads((external / "results.json").read_text())
    assert ext_results["checkers"]["queue"]["stats"]["acked-sends"] > 0
    # a system we did not build has no state dumps: the broker-side checks say so, never guess
    assert "not_applicable" in ext_results["checkers"]["replicas"]["stats"]

    # the built-in docker backend, same seed and settings, through the pytest plugin
    docker = kafkaesque_run(cluster="docker", **RUN)
    assert docker.test["cluster"] == "docker"
    assert docker.valid == ext_results["valid"] is True
    assert nemesis_fs(docker.run_dir) == nemesis_fs(external)  # the same seed gave the same fault schedule
    assert "start-kill" in nemesis_fs(external) and "start-pause" in nemesis_fs(external)


def test_a_fault_the_nodes_cannot_do_is_refused_by_name_before_the_test_starts(ssh_nodes, tmp_path, kafkaesque_run):
    # An unprivileged login: the broker runs (as kq), iptables does not (not even on its PATH): partitions refused.
    path = cluster_file(ssh_nodes, tmp_path, user="kq")
    run = kafkaesque_run(cluster=str(path), nemesis=["partition"], time_limit=10, expect="unknown")
    error = run.results["error"]
    assert error.startswith("the partition fault cannot run on controller-0: it needs iptables"), error
    assert "(sh: 4: iptables: not found)" in error and "drop partition from --nemesis" in error  # kq: no sbin
    assert run.test["capabilities"]["broker-1"]["iptables"]["ok"] is False
    assert run.test["capabilities"]["broker-1"]["sigstop"]["ok"] is True  # kq may signal its own broker
    # refused before the main phase: no client op and no fault ran, only the final heal
    assert {op.f for op in run.history} <= {"heal"}
    assert run.code == 3


def test_the_same_file_over_the_docker_transport_reaches_nodes_by_container_name(ssh_nodes, tmp_path):
    text = cluster_file(ssh_nodes, tmp_path).read_text().replace('transport = "ssh"', 'transport = "docker"')
    text = re.sub(r"\[ssh\]\n(\w+ = .*\n)+", "", text)
    for node in NODES:
        text = text.replace(f'host = "{ssh_nodes.ips[node]}"', f'container = "{ssh_nodes.docker[node].container.name}"')
    path = tmp_path / "reference-broker-in-containers.toml"
    path.write_text(text)
    c = ExternalCluster.from_file(str(path), None, str(tmp_path))
    c.up()
    try:
        # the address each node is reached at is its container's, from the engine
        assert [c.address(n)[0] for n in NODES] == [ssh_nodes.ips[n] for n in NODES]
        assert c.capabilities["broker-1"]["sigstop"].ok and c.isolated_nodes
        c.create_topic("d", 1, 3, 2)
        assert sorted(c.partitions("d")[0].isr) == [1, 2, 3]
        c.pause("broker-3")
        assert outside_state(ssh_nodes, "broker-3", "/var/lib/kafkaesque-external/node.pid") == "T"
        c.resume("broker-3")
        c.kill("broker-3")
        assert c.process_state("broker-3") == "down"
    finally:
        c.down()
    assert not any(c.is_running(n) for n in NODES)
