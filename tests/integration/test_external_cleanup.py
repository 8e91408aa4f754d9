"""After the harness of a run on an external cluster dies, `kafkaesque cleanup` resumes what the run paused
and removes its iptables chain on the user's hosts, on every node whose marker still names the run
(clusters/external.py, clusters/ownership.py; issue 20 item 1).

The "system we did not write" is a `sleep` per node, started and found by the cluster file's own
commands, on the SSH nodes of test_ssh_cluster.py's fixture (node containers running sshd). The run is
set up as ExternalCluster.up() sets it up (registration, marker here, each node's dir claimed), without
waiting for a Kafka broker that a sleep is not. The commands run with a state dir of the test's own, so
cleanup knows no run of anybody else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.external import ExternalCluster
from kafkaesque_harness.clusters.ownership import NODE_MARKER, register_run
from tests.integration import test_ssh_cluster
from tests.integration.test_ssh_cluster import NODES, SshNodes

pytestmark = pytest.mark.integration
ssh_nodes = test_ssh_cluster.nodes  # its module-scoped fixture, reused
PROJECT = Path(__file__).resolve().parents[2]
DIR = "/var/lib/kafkaesque-foreign"


def cluster_file(ssh: SshNodes, root: Path) -> Path:
    nodes = "".join(f'[[nodes]]\nname = "{n}"\nid = {i + 1}\nroles = ["broker"]\nhost = "{ssh.ips[n]}"\n'
                    for i, n in enumerate(NODES))
    path = root / "foreign.toml"
    path.write_text(f'kind = "external"\n[ssh]\nuser = "root"\nkey = "{ssh.key}"\nknown_hosts = "{ssh.known_hosts}"\n'
                    '[commands]\n'
                    'start = "nohup sleep 1000 > /dev/null 2>&1 < /dev/null & echo $! > {{ dir }}/foreign.pid"\n'
                    'stop = "kill $(cat {{ dir }}/foreign.pid)"\n'
                    'pid = "cat {{ dir }}/foreign.pid 2>/dev/null"\n'
                    f'[paths]\ndir = "{DIR}"\ndata_dir = "{DIR}/data"\n' + nodes)
    return path


def state_outside(ssh: SshNodes, node: str) -> str:
    """The foreign process's state letter, read through docker exec (not SSH, not the harness)."""
    r = ssh.docker[node].run(["sh", "-c", f"grep '^State:' /proc/$(cat {DIR}/foreign.pid)/status"])
    return r.out.split()[1] if r.ok else "gone"


def kafkaesque(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", *args], capture_output=True, text=True, env=env,
                          cwd=PROJECT, timeout=300)


def test_cleanup_resumes_and_unpartitions_the_nodes_a_dead_external_run_left(ssh_nodes, tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))
    env = {**os.environ, "KAFKAESQUE_STATE_DIR": str(tmp_path / "state")}
    c = ExternalCluster.from_file(str(cluster_file(ssh_nodes, tmp_path)), None, str(tmp_path / "run"))
    registration = register_run(c.owner, c.name, str(c.run_dir))
    c._each(c._connect)
    c._mark_leftover()
    c._each(c._claim)
    for node in NODES:
        c.start(node)
    try:
        # the run pauses broker-1 and broker-3 and cuts broker-2 off from broker-1 ...
        c.pause("broker-1")
        c.pause("broker-3")
        r2 = c.remote("broker-2")
        for argv in netrules.chain_setup() + netrules.drop_from([ssh_nodes.ips["broker-1"]]):
            r2.run(argv, check=True)
        assert state_outside(ssh_nodes, "broker-1") == state_outside(ssh_nodes, "broker-3") == "T"
        # ... another run has taken broker-3 over since (its marker names that run): not ours to resume
        theirs = json.loads(ssh_nodes.docker["broker-3"].get(f"{DIR}/{NODE_MARKER}"))
        ssh_nodes.docker["broker-3"].put(f"{DIR}/{NODE_MARKER}", json.dumps({**theirs, "run": "other-run"}).encode())
        # ... and its harness dies: no resume, no heal, no down
        for r in c.remotes.values():
            r.close()
        data = json.loads(registration.path.read_text())
        data["harness"].update(pid=1, start=1)  # a pid that is not the harness any more
        registration.path.write_text(json.dumps(data))

        dry = kafkaesque(env, "cleanup", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"would remove external cluster of run {c.owner}" in dry.stderr
        assert state_outside(ssh_nodes, "broker-1") == "T"  # listed, not touched

        r = kafkaesque(env, "cleanup")

        assert r.returncode == 0, r.stderr
        assert (f"removed external cluster of run {c.owner} (paused processes and rules on its nodes): "
                "external:controller-0, external:broker-1, external:broker-2") in r.stderr
        assert state_outside(ssh_nodes, "broker-1") in ("S", "R")  # resumed
        assert netrules.CHAIN not in ssh_nodes.docker["broker-2"].run(["iptables", "-S"]).out
        assert state_outside(ssh_nodes, "broker-3") == "T"  # the other run's node: left as it is
        for node in ("controller-0", "broker-1", "broker-2"):  # still the harness's dirs, used by no run
            marker = json.loads(ssh_nodes.docker[node].get(f"{DIR}/{NODE_MARKER}"))
            assert marker["run"] == "" and marker["chain"] == netrules.CHAIN
        assert not list((tmp_path / "state").rglob("*.json"))  # registration and marker here: gone
    finally:
        for node in NODES:
            ssh_nodes.docker[node].run(["sh", "-c", f"p=$(cat {DIR}/foreign.pid) && kill -CONT $p; kill -9 $p; "
                                                    f"rm -rf {DIR}"])
        for argv in netrules.remove_chain():
            ssh_nodes.docker["broker-2"].run(argv)
