"""The local backend as root: every node a process in a network namespace of its own (issue 6 item 5).

For machines without Docker. Each node gets a namespace `kq<tag>-<i>` with one end of a
veth pair; the other ends hang on a bridge `kqbr<tag>`, which also carries an address for
this host so the harness and its clients reach the nodes. So a partition is an iptables
rule inside one node's namespace, tc shapes one node's interface, exactly as in a
container. Brokers write their data dir through the lossy file system (clusters/lossyfs.py,
mounted on this host before the broker starts: `ip netns exec` gives the broker a mount
namespace that receives mounts from the host), so the lossy-crash fault works too. The
clock preload of the plain local backend stays.

Everything carries the run's tag: `kafkaesque cleanup` (cleanup_netns) removes namespaces,
bridges, our FORWARD rules and lossyfs mounts that a crashed run left behind. Addresses
come from 10.213.0.0/16, one /24 per run, skipping any subnet this host already routes.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from clusters.base import ClusterError, ClusterSpec
from clusters.local import LocalCluster
from clusters.reference import OWNER_ENV
from harness.remote import LocalRemote, RemoteResult

PORT = 9092
SUBNET = "10.213"
NS_PREFIX = "kq"
BRIDGE_PREFIX = "kqbr"


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if check and p.returncode != 0:
        fix = ("a leftover of an earlier run holds the name: run `kafkaesque cleanup`" if "File exists" in p.stderr
               else "network namespaces need root and iproute2 (run as root, or use --cluster docker)")
        raise ClusterError(f"`ip {' '.join(argv)}` failed ({p.stderr.strip()}); {fix}.")
    return p


def netns_available() -> bool:
    """Root, iproute2 and iptables: what a node per namespace needs."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("iptables") is not None


class NetnsRemote(LocalRemote):
    """Commands inside one node's namespace; files and signals are this host's (shared fs and pids)."""

    def __init__(self, name: str, netns: str, env: dict[str, str] | None = None):
        super().__init__(name, env)
        self.netns = netns

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = False) -> RemoteResult:
        return super().run(["ip", "netns", "exec", self.netns, *argv], timeout, check)

    def start_daemon(self, argv: list[str], pidfile: str, logfile: str, env: dict[str, str] | None = None) -> int:
        # `ip netns exec` execs the program in place, so the pid file holds the broker's own pid.
        return super().start_daemon(["ip", "netns", "exec", self.netns, *argv], pidfile, logfile, env)


class NetnsCluster(LocalCluster):
    """LocalCluster with a namespace, an address and a lossy data dir per node."""

    name = "local-netns"
    isolated_nodes = True  # own network stack per node: partition, net and lossy-crash faults work
    lossy = True

    def __init__(self, spec: ClusterSpec, run_dir: str, owner: str | None = None):
        super().__init__(spec, run_dir, owner)
        self.tag = hashlib.sha1(self.owner.encode()).hexdigest()[:6]
        self.bridge = f"{BRIDGE_PREFIX}{self.tag}"
        self.namespaces = {node: f"{NS_PREFIX}{self.tag}-{i}" for i, node in enumerate(self.nodes())}
        self.remotes = {node: NetnsRemote(node, ns) for node, ns in self.namespaces.items()}
        self.host_remote = LocalRemote("host")
        self.ips: dict[str, str] = {}
        self.subnet = ""

    # --- where nodes live ------------------------------------------------------------------------
    def remote(self, node: str) -> NetnsRemote:
        return self.remotes[node]

    def net_device(self, node: str) -> str:
        """The node's own end of its veth pair, inside its namespace: what tc shapes (no eth0 there)."""
        return f"kqn{self.tag}{list(self.namespaces).index(node)}"

    def address(self, node: str) -> tuple[str, int]:
        return self.ips[node], PORT

    def listen(self, node: str) -> str:
        return f"{self.ips[node]}:{PORT}"

    def data_dir(self, node: str) -> str:
        return f"{self.node_dir(node)}/data"

    def lossyfs_files(self, node: str) -> tuple[str, str]:
        """(pid file, status file) of the node's lossy file system daemon."""
        return f"{self.node_dir(node)}/lossyfs.pid", f"{self.node_dir(node)}/lossyfs.status"

    # --- lifecycle ----------------------------------------------------------------------------------
    def up(self) -> str:
        if not netns_available():
            raise ClusterError("Network namespaces need root, iproute2 and iptables; run as root or use "
                               "--cluster docker.")
        return super().up()

    def _prepare_nodes(self) -> None:
        self._network()
        for node in self.nodes():
            os.makedirs(self.node_dir(node), exist_ok=True)
            self.ports[node] = PORT
            if node in self.broker_nodes():
                self._mount_lossyfs(node)
            else:
                os.makedirs(self.data_dir(node), exist_ok=True)

    def _free_subnet(self) -> str:
        routes = _ip("route", "show").stdout
        start = int(self.tag, 16) % 200 + 20
        for k in range(250):
            third = (start + k) % 250 + 1
            if f"{SUBNET}.{third}." not in routes:
                return f"{SUBNET}.{third}"
        raise ClusterError(f"No free /24 left in {SUBNET}.0.0/16 on this host; run `kafkaesque cleanup`.")

    def _network(self) -> None:
        self.subnet = self._free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        # Docker sets the FORWARD policy to DROP and bridged frames pass iptables here: let our
        # bridge's own traffic through (removed again by down and by cleanup).
        subprocess.run(["iptables", "-w", "-I", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-m", "comment",
                        "--comment", f"kafkaesque {self.bridge}", "-j", "ACCEPT"], capture_output=True, check=False)
        for i, (node, ns) in enumerate(self.namespaces.items()):
            host_end, node_end = f"kqh{self.tag}{i}", f"kqn{self.tag}{i}"
            self.ips[node] = f"{self.subnet}.{i + 10}"
            _ip("netns", "add", ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
            _ip("link", "set", node_end, "netns", ns)
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{self.ips[node]}/24", "dev", node_end)
            _ip("netns", "exec", ns, "ip", "link", "set", node_end, "up")
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def _mount_lossyfs(self, node: str) -> None:
        import sys

        backing, mount = f"{self.node_dir(node)}/backing", self.data_dir(node)
        os.makedirs(backing, exist_ok=True)
        os.makedirs(mount, exist_ok=True)
        pidfile, status = self.lossyfs_files(node)
        project = str(Path(__file__).resolve().parent.parent)
        self.host_remote.start_daemon([sys.executable, "-m", "clusters.lossyfs", backing, mount,
                                       "--status-file", status], pidfile, f"{self.node_dir(node)}/lossyfs.log",
                                      env={"PYTHONPATH": project, OWNER_ENV: self.owner})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if Path(status).exists() and "mounted" in Path(status).read_text():
                return
            time.sleep(0.1)
        raise ClusterError(f"The lossy file system did not mount for {node}; see {self.node_dir(node)}/lossyfs.log "
                           "(is /dev/fuse there and fuse3 installed?).")

    def down(self) -> None:
        for node in reversed(self.nodes()):
            self.remotes[node].signal_daemon(self.pidfile(node), signal.SIGCONT)
            try:
                self.kill(node)
            except Exception:  # noqa: BLE001 - not started
                pass
        for node in self.broker_nodes():
            _unmount(self.data_dir(node))
            self.host_remote.signal_daemon(self.lossyfs_files(node)[0], signal.SIGKILL)
        _remove_network(self.tag)


def _unmount(path: str) -> None:
    for tool in ("fusermount3", "fusermount"):
        if shutil.which(tool):
            subprocess.run([tool, "-u", "-z", path], capture_output=True, check=False)
            return
    subprocess.run(["umount", "-l", path], capture_output=True, check=False)


def _remove_network(tag: str) -> list[str]:
    """Namespaces, veths, the bridge and the FORWARD rule of one run (tag) or of all runs (tag "")."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if ns.startswith(f"{NS_PREFIX}{tag}") and "-" in ns and not ns.startswith(BRIDGE_PREFIX):
            _ip("netns", "del", ns, check=False)  # its veth ends go with it
            removed.append(f"network namespace {ns}")
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(f"{BRIDGE_PREFIX}{tag}"):
            _ip("link", "del", name, check=False)
            removed.append(f"bridge {name}")
    rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True).stdout
    for rule in rules.splitlines():
        if f"kafkaesque {BRIDGE_PREFIX}{tag}" in rule and rule.startswith("-A "):
            subprocess.run(["iptables", "-w", "-D", *shlex.split(rule)[1:]], capture_output=True, check=False)
            removed.append(f"FORWARD rule of {rule.split()[3]}")
    return removed


def cleanup_netns(tag: str = "") -> list[str]:
    """What crashed local-netns runs left: lossyfs mounts, namespaces, bridges, FORWARD rules; those
    of one run (its network only) when `tag` is given: a test cleaning up after itself must not cut
    other runs off."""
    if not netns_available():
        return []
    removed = []
    with open("/proc/mounts") as f:
        for line in f:
            source, mountpoint = line.split()[:2]
            if source == "lossyfs" and not tag:  # a run unmounts its own at down(); these are orphans
                _unmount(mountpoint.replace("\\040", " "))
                removed.append(f"lossyfs mount {mountpoint}")
    return removed + _remove_network(tag)
