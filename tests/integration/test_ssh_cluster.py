"""The SSH remote and the SSH cluster backend against real sshd in the project's node containers (issue 6 item 3).

The fixture starts containers of the node image on a network labelled like the docker
backend's (so `kafkaesque cleanup` removes them after a crash), runs sshd in each with
fresh host keys and a client key generated for this test, and writes a known_hosts file
from the host keys read through `docker exec` (a channel independent of SSH). Everything
after that goes over SSH with paramiko. These tests need the Docker engine and fail,
never skip, without it.
"""

from __future__ import annotations

import json
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.docker import LABEL, docker_client
from kafkaesque_harness.clusters.remote import DockerRemote, RemoteError
from kafkaesque_harness.clusters.ssh import SshCluster, load_node_file
from kafkaesque_harness.clusters.ssh_remote import SshRemote, SshTarget
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.faults import ClockNemesis, PartitionNemesis
from tests.integration.conftest import set_up_nemesis

pytestmark = pytest.mark.integration

NODES = ("controller-0", "broker-1", "broker-2", "broker-3")
SPARE = "spare"  # a node of its own for the host-key tests, which change its host key


@dataclass
class SshNodes:
    ips: dict[str, str]
    docker: dict[str, DockerRemote]   # the containers through docker exec: set-up and outside checks
    key: Path
    known_hosts: Path
    root: Path

    def target(self, node: str, **kw) -> SshTarget:
        return SshTarget(host=self.ips[node], key=str(self.key), known_hosts=kw.pop("known_hosts", str(self.known_hosts)),
                         **kw)

    def node_file(self, lossy: bool = False, user: str = "root", dir: str = "/var/lib/kafkaesque",
                  sudo: bool = False) -> Path:
        lines = [f'user = "{user}"\nkey = "{self.key}"\nknown_hosts = "{self.known_hosts}"\n'
                 f'dir = "{dir}"\nlossy = {str(lossy).lower()}\nsudo = {str(sudo).lower()}\n']
        lines += [f'[[nodes]]\nname = "{n}"\nhost = "{self.ips[n]}"\n' for n in NODES]
        path = self.root / f"nodes-{user}{'-lossy' if lossy else ''}{'-sudo' if sudo else ''}.toml"
        path.write_text("\n".join(lines))
        return path


def start_sshd(remote: DockerRemote, public_key: str) -> None:
    remote.run(["sh", "-c", "ssh-keygen -A >/dev/null && mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh"],
               check=True)
    remote.put("/root/.ssh/authorized_keys", public_key.encode())
    # An unprivileged login too (no sudo in the image): the broker runs as any user, iptables does not.
    remote.run(["sh", "-c", "useradd -m -s /bin/sh kq && mkdir -p /home/kq/.ssh && "
                            "cp /root/.ssh/authorized_keys /home/kq/.ssh/ && chown -R kq:kq /home/kq/.ssh && "
                            "chmod 700 /home/kq/.ssh"], check=True)
    remote.run(["/usr/sbin/sshd"], check=True)


def host_key_line(remote: DockerRemote, ip: str) -> str:
    kind, blob = remote.run(["cat", "/etc/ssh/ssh_host_ed25519_key.pub"], check=True).out.split()[:2]
    return f"{ip} {kind} {blob}\n"


def wait_for_port(remote: DockerRemote) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if remote.run(["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 22), 1)"]).ok:
            return
        time.sleep(0.2)
    raise AssertionError(f"sshd did not listen in {remote.name}")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    try:
        client = docker_client()
    except ClusterError as e:
        pytest.fail(f"the SSH backend tests need a Docker engine to run sshd in: {e}")
    from kafkaesque_harness.clusters.image import ensure_image

    image = ensure_image(log=lambda m: None)
    root = tmp_path_factory.mktemp("ssh")
    owner = f"sshtest{random.randrange(10**6)}"
    network = client.networks.create(f"kafkaesque-{owner}", driver="bridge", labels={LABEL: owner})
    containers = []
    try:
        key = paramiko.RSAKey.generate(2048)
        key_path = root / "id_rsa"
        key.write_private_key_file(str(key_path))
        key_path.chmod(0o600)
        public = f"{key.get_name()} {key.get_base64()} kafkaesque-test\n"
        ips, remotes = {}, {}
        for node in (*NODES, SPARE):
            kwargs = {}
            if node.startswith("broker"):  # the lossy file system is a FUSE mount, as in clusters/docker.py
                kwargs = {"cap_add": ["NET_ADMIN", "SYS_ADMIN"], "devices": ["/dev/fuse:/dev/fuse:rwm"],
                          "security_opt": ["apparmor:unconfined"]}
            c = client.containers.run(image, name=f"kq-{owner}-{node}", hostname=node, network=network.name,
                                      detach=True, init=True, command=["sleep", "infinity"],
                                      labels={LABEL: owner, f"{LABEL}.node": node},
                                      **{"cap_add": ["NET_ADMIN"], **kwargs})
            containers.append(c)
            c.reload()
            ips[node] = c.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
            remotes[node] = DockerRemote(c, node)
            start_sshd(remotes[node], public)
        known_hosts = root / "known_hosts"
        known_hosts.write_text("".join(host_key_line(remotes[n], ips[n]) for n in NODES))
        for r in remotes.values():
            wait_for_port(r)
        yield SshNodes(ips, remotes, key_path, known_hosts, root)
    finally:
        for c in containers:
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        try:
            network.remove()
        except Exception:  # noqa: BLE001 - a container still attached: cleanup finds it by label
            pass


# --- the SSH remote -----------------------------------------------------------------------------------------
def test_run_passes_awkward_arguments_literally(nodes):
    r = SshRemote(nodes.target("broker-1"), "broker-1")
    args = ["a b", "it's", '"double"', "$(touch /tmp/pwned)", "`touch /tmp/pwned2`", "$HOME", "*", "x;y", ""]
    out = r.run(["printf", "%s\\n", *args], check=True).out
    assert out.split("\n")[:-1] == args
    assert not nodes.docker["broker-1"].run(["sh", "-c", "ls /tmp/pwned*"]).ok  # nothing was interpreted
    failed = r.run(["sh", "-c", "echo to-err >&2; exit 7"])
    assert (failed.exit, failed.err) == (7, "to-err\n")
    with pytest.raises(RemoteError, match="exited 7"):
        r.run(["sh", "-c", "exit 7"], check=True)
    r.close()


def test_put_and_get_round_trip_every_byte(nodes):
    r = SshRemote(nodes.target("broker-2"), "broker-2")
    data = bytes(range(256)) * 1000
    path = "/tmp/dir with space/it's a file"
    r.put(path, data)
    assert r.get(path) == data
    # the file is really there, seen through docker exec rather than SSH
    assert nodes.docker["broker-2"].get(path) == data
    with pytest.raises(RemoteError, match="cannot read"):
        r.get("/tmp/does-not-exist")
    r.close()


def test_daemon_start_signals_and_liveness(nodes):
    r = SshRemote(nodes.target("broker-3"), "broker-3")
    pidfile, logfile = "/tmp/d/sleeper.pid", "/tmp/d/sleeper.log"
    pid = r.start_daemon(["sh", "-c", 'echo "started $GREETING"; exec sleep 1000'], pidfile, logfile,
                         env={"GREETING": "with $(no) expansion"})
    assert pid > 0 and r.daemon_alive(pidfile)

    def state() -> str:  # the kernel's word for the process, read outside SSH
        return nodes.docker["broker-3"].run(["sh", "-c", f"grep '^State:' /proc/{pid}/status"]).out.split()[1]

    assert r.signal_daemon(pidfile, signal.SIGSTOP) and state() == "T"
    assert r.signal_daemon(pidfile, signal.SIGCONT) and state() == "S"
    assert r.signal_daemon(pidfile, signal.SIGKILL)
    assert r.wait_daemon(pidfile, 10) and not r.daemon_alive(pidfile)
    assert not r.signal_daemon(pidfile, signal.SIGCONT)  # nothing left to signal
    assert r.get(logfile) == b"started with $(no) expansion\n"
    r.close()


def test_unknown_host_is_refused_by_default(nodes, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    r = SshRemote(nodes.target(SPARE, known_hosts=str(empty)), SPARE)
    with pytest.raises(RemoteError, match="is not in .*accept-new"):
        r.connect()
    assert r.run(["true"]).exit == 255
    assert empty.read_text() == ""


def test_accept_new_trusts_a_new_host_then_pins_its_key(nodes, tmp_path):
    known = tmp_path / "known_hosts"
    r = SshRemote(nodes.target(SPARE, known_hosts=str(known), host_key_policy="accept-new"), SPARE)
    assert r.run(["hostname"], check=True).out.strip() == SPARE
    r.close()
    assert known.read_text() == host_key_line(nodes.docker[SPARE], nodes.ips[SPARE])
    # The node gets new host keys (a reinstall, or a man in the middle): the pinned key refuses it.
    nodes.docker[SPARE].run(["sh", "-c", "kill $(cat /run/sshd.pid); rm -f /etc/ssh/ssh_host_*; ssh-keygen -A "
                                         ">/dev/null && /usr/sbin/sshd"], check=True)
    wait_for_port(nodes.docker[SPARE])
    again = SshRemote(nodes.target(SPARE, known_hosts=str(known), host_key_policy="accept-new"), SPARE)
    with pytest.raises(RemoteError, match="does not match"):
        again.connect()
    assert known.read_text().count("\n") == 1  # the changed key was not added


def test_unreachable_node_is_one_sentence(nodes, tmp_path):
    path = tmp_path / "nodes.toml"
    text = nodes.node_file().read_text().replace(f'host = "{nodes.ips["broker-2"]}"', 'host = "127.0.0.1"\nport = 1')
    path.write_text(text)
    c = SshCluster.from_file(str(path), ClusterSpec(), str(tmp_path))
    with pytest.raises(ClusterError, match=r"broker-2: cannot reach 127\.0\.0\.1:1 .*check the address"):
        c.up()


def wait_registered(c: SshCluster, node: str) -> None:
    """Until the restarted broker itself says it is registered and unfenced: the controller may still
    count its previous incarnation, whose session has not timed out yet."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = c.dump_state(node, include_log=False)
        if state and not state.get("fenced", True):
            return
        time.sleep(0.5)
    raise AssertionError(f"{node} did not register again: {c.dump_state(node, include_log=False)}")


# --- the SSH cluster ------------------------------------------------------------------------------------------
def test_ssh_cluster_runs_the_broker_and_its_faults(nodes, tmp_path):
    c = SshCluster.from_file(str(nodes.node_file(lossy=True)), ClusterSpec(), str(tmp_path))
    assert c.spec.brokers == 3 and c.nodes() == list(NODES)
    c.up()
    try:
        # what the nodes allow, probed over SSH: own hosts with iptables, the clock preload, FUSE
        assert c.isolated_nodes and c.clock_unavailable() is None and c.lossy
        c.create_topic("t", 1, 3, 2)
        assert c.partitions("t")[0].leader in (1, 2, 3)
        c.pause("broker-1")
        assert c.process_state("broker-1") == "paused"
        c.resume("broker-1")
        c.kill("broker-2")
        assert c.process_state("broker-2") == "down" and not c.is_running("broker-2")
        c.start("broker-2")
        wait_registered(c, "broker-2")

        part = PartitionNemesis({"target": "random-node", "seed": 3})
        faults = set_up_nemesis(part, c)
        done = part.invoke(c, Op(INVOKE, "start-partition", "nemesis", None))
        (isolated,) = [n for n, drops in done.value["partition"].items() if len(drops) == 3]
        assert netrules.CHAIN in nodes.docker[isolated].run(["iptables", "-S"]).out
        part.invoke(c, Op(INVOKE, "stop-partition", "nemesis", None))
        part.teardown(c)

        clock = ClockNemesis({"seed": 1})
        clock.setup(c, faults)
        clock.set_offset(c, "broker-3", 3600)
        time.sleep(0.1)  # past the preload's re-read of its control file
        assert abs(c.dump_state("broker-3", include_log=False)["time_ms"] / 1000 - time.time() - 3600) < 30
        clock.teardown(c)

        rec = faults.lossy_crash("broker-3", by="test")
        assert rec.evidence["lossyfs"].get("event") == "dropped" and rec.observed
        assert faults.heal_everything() == []  # restarts broker-3 and takes our chain off the nodes
        assert all(r.healed for r in faults.ledger.records() if r.applied)
        wait_registered(c, "broker-3")

        c.collect(str(tmp_path / "nodes"))
        for node in NODES:
            state = json.loads((tmp_path / "nodes" / node / "state.json").read_text())
            assert state.get("node_id") == c.node_id(node), (node, str(state)[:300])
        assert (tmp_path / "nodes" / "broker-1" / "broker.log").stat().st_size > 0
    finally:
        c.down()
    for node in NODES:  # down stopped every broker and unmounted the lossy file systems
        assert not c.is_running(node)
        assert " fuse" not in nodes.docker[node].run(["grep", "/var/lib/kafkaesque", "/proc/mounts"]).out


# nightly: a long end-to-end run, kept out of `make test` (30-minute budget); `make nightly` runs it
@pytest.mark.nightly
def test_kafkaesque_run_over_ssh_is_valid_and_stored(nodes, kafkaesque_run, capsys):
    node_file = nodes.node_file()
    assert len(load_node_file(str(node_file))) == 4
    # through the pytest plugin (harness/pytest_plugin.py), which asserts the verdict: valid
    run = kafkaesque_run(cluster=f"ssh:{node_file}", workload="queue", nemesis=["kill", "pause"],
                         nemesis_schedule="sequential", time_limit=20, nemesis_interval=4, recovery_wait=3)
    assert "cluster ssh" in capsys.readouterr().out
    run_dir = run.run_dir
    res = run.results
    assert res["valid"] is True and run.code == 0
    assert res["checkers"]["queue"]["stats"]["acked-sends"] > 0
    assert run.ops(f="start-kill") and run.ops(f="start-pause")
    for node in NODES:
        assert json.loads((run_dir / "nodes" / node / "state.json").read_text())["node_id"] in (1000, 1, 2, 3)
    assert (run_dir / "nodes" / "broker-1" / "broker.log").stat().st_size > 0
    assert (run_dir / "nodes" / "controller-0" / "controller.log").stat().st_size > 0


def test_nodes_sharing_a_host_run_but_partitions_are_refused_by_name(nodes, tmp_path):
    # controller-0 and broker-1 on one machine (own dir and port each): the broker runs, a partition cannot.
    text = nodes.node_file().read_text().replace(
        f'name = "broker-1"\nhost = "{nodes.ips["broker-1"]}"',
        f'name = "broker-1"\nhost = "{nodes.ips["controller-0"]}"\ndir = "/var/lib/kafkaesque-b1"\nkafka_port = 9093')
    path = tmp_path / "shared.toml"
    path.write_text(text)
    c = SshCluster.from_file(str(path), ClusterSpec(), str(tmp_path))
    c.up()
    try:
        assert c.address("broker-1") == (nodes.ips["controller-0"], 9093)
        assert not c.isolated_nodes
        with pytest.raises(NemesisRefused, match=f"several nodes share {nodes.ips['controller-0']}"):
            set_up_nemesis(PartitionNemesis({}), c)
        c.kill("broker-1")
        assert c.is_running("controller-0") and not c.is_running("broker-1")
    finally:
        c.down()


def test_an_unprivileged_user_runs_the_broker_and_iptables_faults_are_refused_by_name(nodes, tmp_path):
    c = SshCluster.from_file(str(nodes.node_file(user="kq", dir="/home/kq/kafkaesque")), ClusterSpec(), str(tmp_path))
    c.up()
    try:
        assert not c.isolated_nodes and c.clock_unavailable() is None  # the preload needs no privilege; iptables does
        with pytest.raises(NemesisRefused, match="iptables does not run for the SSH user on controller-0, broker-1"):
            set_up_nemesis(PartitionNemesis({}), c)
        set_up_nemesis(ClockNemesis({}), c)  # accepted
        c.pause("broker-2")
        assert c.process_state("broker-2") == "paused"
        c.resume("broker-2")
        owner = nodes.docker["broker-2"].run(["stat", "-c", "%U", "/home/kq/kafkaesque/node.pid"]).out.strip()
        assert owner == "kq"
    finally:
        c.down()


def test_sudo_that_does_not_work_is_one_sentence(nodes, tmp_path):
    # The image has no sudo at all: `sudo -n true` fails, and up() says so before touching anything.
    c = SshCluster.from_file(str(nodes.node_file(user="kq", sudo=True)), ClusterSpec(), str(tmp_path))
    with pytest.raises(ClusterError, match=r"`sudo -n` does not work for kq@.*passwordless sudo"):
        c.up()


def test_cleanup_heals_and_stops_the_nodes_of_a_harness_that_died(nodes, tmp_path, monkeypatch):
    """A harness killed mid-run leaves a partition, a paused broker and a skewed clock on SSH nodes;
    `kafkaesque cleanup` finds the cluster by its marker and undoes all of it."""
    from kafkaesque_harness.clusters.ssh import cleanup_ssh, ssh_state_dir

    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))
    c = SshCluster.from_file(str(nodes.node_file()), ClusterSpec(), str(tmp_path))
    c.up()
    marker = ssh_state_dir() / f"{c.owner}.json"
    assert json.loads(marker.read_text())["node_file"] == str(nodes.node_file().resolve())
    part = PartitionNemesis({"target": "random-node", "seed": 3})
    faults = set_up_nemesis(part, c)
    done = part.invoke(c, Op(INVOKE, "start-partition", "nemesis", None))
    (isolated,) = [n for n, drops in done.value["partition"].items() if len(drops) == 3]
    clock = ClockNemesis({"seed": 1})
    clock.setup(c, faults)
    clock.set_offset(c, "broker-3", 3600)
    c.pause("broker-1")
    for r in c.remotes.values():  # the harness dies: no teardown, no down
        r.close()

    assert cleanup_ssh("someone-else") == [] and marker.exists()  # another run's cleanup leaves it alone
    healed = cleanup_ssh(c.owner)
    assert sorted(healed) == sorted(f"ssh:{n}" for n in NODES) and not marker.exists()
    assert netrules.CHAIN not in nodes.docker[isolated].run(["iptables", "-S"]).out
    assert nodes.docker["broker-3"].run(["cat", c.clock_file("broker-3")]).out.strip() == "0"
    for node in NODES:
        assert not nodes.docker[node].run(["sh", "-c", f"kill -0 $(cat {c.pidfile(node)})"]).ok, node
