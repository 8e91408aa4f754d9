"""The local backend as root: every node a process in a network namespace of its own (issue 6 item 5).

For machines without Docker. Each node gets a namespace `kq<tag>-<i>` with one end of a
veth pair; the other ends hang on a bridge `kqbr<tag>`, which also carries an address for
this host so the harness and its clients reach the nodes. So a partition is an iptables
rule inside one node's namespace, tc shapes one node's interface, exactly as in a
container. Brokers and controllers write their data dir through the lossy file system
(clusters/lossyfs.py, mounted on this host before the node starts: `ip netns exec` gives the node a
mount namespace that receives mounts from the host), so the lossy-crash fault works, and the protocol
nemesis can power-cut the controller too. The
clock preload of the plain local backend stays.

Everything carries the run's tag (clusters/ownership.py owner_tag: namespaces, bridge, the
FORWARD rule's comment, which names the run id too) or, for a lossyfs mount, a marker in the
node dir beside it: `kafkaesque cleanup` (find_network) removes what a run whose harness is
gone left behind, never a live run's. Addresses come from 10.213.0.0/16, one /24 per run,
skipping any subnet this host already routes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.local import LocalCluster
from kafkaesque_harness.clusters.ownership import (
    Leftover,
    local_dir_owner,
    mark_local_dir,
    owner_tag,
    owners_by_tag,
    pick,
    registered_runs,
    remove_all,
)
from kafkaesque_harness.clusters.reference import OWNER_ENV
from kafkaesque_harness.clusters.remote import LocalRemote, RemoteResult
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until
from kafkaesque_harness.history.extras import extra_missing

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
    lossy = True

    def __init__(self, spec: ClusterSpec, run_dir: str, owner: str | None = None):
        super().__init__(spec, run_dir, owner)
        self.tag = owner_tag(self.owner)
        self.bridge = f"{BRIDGE_PREFIX}{self.tag}"
        self.namespaces = {node: f"{NS_PREFIX}{self.tag}-{i}" for i, node in enumerate(self.nodes())}
        self.remotes = {node: NetnsRemote(node, ns) for node, ns in self.namespaces.items()}
        self.host_remote = LocalRemote("host")
        self.ips: dict[str, str] = {}
        self.subnet = ""

    # --- where nodes live ------------------------------------------------------------------------
    def remote(self, node: str) -> NetnsRemote:
        return self.remotes[node]

    # --- abilities (clusters/base.py) ----------------------------------------------------------------
    def isolation_unavailable(self) -> str | None:
        return None  # own network stack per node: partition, net and lossy-crash faults work

    def client_address(self, node: str) -> str | None:
        """ClientCuts: every node sees the harness's clients come from the bridge's address."""
        return f"{self.subnet}.1" if self.subnet else None

    def client_cut_unavailable(self) -> str | None:
        return None if self.subnet else "its network is not up (no bridge address yet)"

    def lossy_unavailable(self) -> str | None:
        """Every broker's data dir is a lossyfs mount, when the lossy extra (pyfuse3, trio) is installed."""
        return extra_missing("lossy", "the lossy file system")

    def netem_probe_unavailable(self) -> str | None:
        return None  # each node's device is its own veth end

    def lossy_controllers_unavailable(self) -> str | None:
        """The controllers' metadata dirs are lossyfs mounts as well, with the same extra."""
        return self.lossy_unavailable()

    def net_device(self, node: str) -> str:
        """The node's own end of its veth pair, inside its namespace: what tc shapes (no eth0 there)."""
        return f"kqn{self.tag}{list(self.namespaces).index(node)}"

    def address(self, node: str) -> tuple[str, int]:
        return self.ips[node], PORT

    def listen(self, node: str) -> str:
        return f"{self.ips[node]}:{PORT}"

    def data_dir(self, node: str) -> str:
        return f"{self.node_dir(node)}/data"

    def lossy_status_file(self, node: str) -> str | None:
        return self.lossyfs_files(node)[1] if self.lossy_unavailable() is None else None

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
            mark_local_dir(self.node_dir(node), self.owner)
            self.ports[node] = PORT
            # Controllers too: a power cut of the controller drops its unsynced metadata records (002 1.2.1).
            if self.lossy_unavailable() is None:
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
                        "--comment", f"kafkaesque {self.bridge} run {self.owner}"[:255], "-j", "ACCEPT"], capture_output=True, check=False)
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
        self.host_remote.start_daemon([sys.executable, "-m", "kafkaesque_harness.clusters.lossyfs", backing, mount,
                                       "--status-file", status], pidfile, f"{self.node_dir(node)}/lossyfs.log",
                                      env={"PYTHONPATH": project, OWNER_ENV: self.owner})
        try:
            wait_until(lambda: Path(status).exists() and "mounted" in Path(status).read_text(), 15, 0.1,
                       f"the lossy file system's mount for {node}")
        except WaitTimeout:
            raise ClusterError(f"The lossy file system did not mount for {node}; see {self.node_dir(node)}/lossyfs.log "
                               "(is /dev/fuse there and fuse3 installed?).") from None

    def down(self) -> None:
        for node in reversed(self.nodes()):
            self.remotes[node].signal_daemon(self.pidfile(node), signal.SIGCONT)
            try:
                self.kill(node)
            except Exception:  # noqa: BLE001 - not started
                pass
        for node in self.nodes():
            _unmount(self.data_dir(node))
            self.host_remote.signal_daemon(self.lossyfs_files(node)[0], signal.SIGKILL)
        _remove_network(self.tag)
        self._unregister()


def _unmount(path: str) -> None:
    for tool in ("fusermount3", "fusermount"):
        if shutil.which(tool):
            subprocess.run([tool, "-u", "-z", path], capture_output=True, check=False)
            return
    subprocess.run(["umount", "-l", path], capture_output=True, check=False)


NAMESPACE_RE = re.compile(rf"{NS_PREFIX}([0-9a-f]{{6}})-\d+")
BRIDGE_RE = re.compile(rf"{BRIDGE_PREFIX}([0-9a-f]{{6}})")
RULE_RE = re.compile(rf"kafkaesque {BRIDGE_PREFIX}([0-9a-f]{{6}})\b")


def _remove_network(tag: str) -> list[str]:
    """Namespaces, veths, the bridge and the FORWARD rule of one run (its tag): what down() removes."""
    return remove_all([i for i in _network_leftovers({}) if i.tag == tag])


def _network_leftovers(owners: dict[str, str]) -> list[Leftover]:
    """Our namespaces, bridges and FORWARD rules on this host, each with its tag and, when `owners`
    (tag -> run id) knows it, its run."""
    found = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if m := NAMESPACE_RE.fullmatch(ns):
            # its veth ends go with it
            found.append(Leftover(owners.get(m[1], ""), f"network namespace {ns}", _deleter("netns", "del", ns),
                                  rank=2, tag=m[1]))
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if m := BRIDGE_RE.fullmatch(name):
            found.append(Leftover(owners.get(m[1], ""), f"bridge {name}", _deleter("link", "del", name), rank=3,
                                  tag=m[1]))
    rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True).stdout
    for rule in rules.splitlines():
        if rule.startswith("-A ") and (m := RULE_RE.search(rule)):
            argv = ["iptables", "-w", "-D", *shlex.split(rule)[1:]]
            found.append(Leftover(owners.get(m[1], ""), f"FORWARD rule of {BRIDGE_PREFIX}{m[1]}",
                                  lambda argv=argv: subprocess.run(argv, capture_output=True, check=False),
                                  rank=4, tag=m[1]))
    return found


def _deleter(*argv: str):
    return lambda: _ip(*argv, check=False)


def _lossyfs_mounts() -> list[Leftover]:
    """lossyfs mounts on this host, each with the run its node dir's marker names, else (a dir made before
    markers) the run of the lossyfs daemon that serves it, while it lives."""
    found = []
    served = _served_mounts()
    with open("/proc/mounts") as f:
        for line in f:
            source, mountpoint = line.split()[:2]
            if source != "lossyfs":
                continue
            path = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), mountpoint)  # /proc/mounts escapes
            owner = local_dir_owner(os.path.dirname(path)) or served.get(path, "")
            found.append(Leftover(owner, f"lossyfs mount {path}", lambda path=path: _unmount(path), rank=1,
                                  tag=owner_tag(owner) if owner else ""))
    return found


def _served_mounts() -> dict[str, str]:
    """mount point -> run id of every lossyfs daemon running here (`python -m kafkaesque_harness.clusters.lossyfs BACKING MOUNT
    ...` with KAFKAESQUE_OWNER in its environment)."""
    served = {}
    marker = f"{OWNER_ENV}=".encode()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
            if b"kafkaesque_harness.clusters.lossyfs" not in argv[:4]:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        owner = next((kv[len(marker):].decode(errors="replace") for kv in environ if kv.startswith(marker)), "")
        at = argv.index(b"kafkaesque_harness.clusters.lossyfs")
        if owner and len(argv) > at + 2:
            mount = argv[at + 2].decode(errors="replace")
            try:
                mount = os.path.join(os.readlink(entry / "cwd"), mount)  # a relative store: its own cwd's
            except OSError:
                continue
            served[os.path.normpath(mount)] = owner
    return served


def find_network(owners: list[str] | tuple[str, ...] = ()) -> list[Leftover]:
    """Every lossyfs mount, namespace, bridge and FORWARD rule of ours on this host. Names carry only a
    run's tag: the registered runs and `owners` (run ids seen elsewhere) say whose it is."""
    if not netns_available():
        return []
    mounts = _lossyfs_mounts()
    known = owners_by_tag([*owners, *(r.owner for r in registered_runs()), *(m.owner for m in mounts)])
    return mounts + _network_leftovers(known)


def cleanup_netns(tag: str = "") -> list[str]:
    """Remove what one run left (the run `tag` names: a test cleaning up after itself), or, without a
    tag, what every run whose harness is gone left: lossyfs mounts, namespaces, bridges, FORWARD rules.
    A live run's, or one nothing here names, stays."""
    return remove_all(pick(find_network(), tag=tag))
