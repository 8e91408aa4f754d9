"""The SSH cluster backend: the reference broker on machines reached over SSH (issue 6 item 3).

`kafkaesque run --cluster ssh:nodes.toml` reads a node file, uploads the project's
`clusters` package to every node over SFTP (a tarball, unpacked into the node's dir),
starts the controller and the brokers there as daemons through the SSH Remote
(clusters/ssh_remote.py), and kills, pauses and collects logs through it, like the docker
backend. The nodes must already have python3 and the broker's Python packages
(kafka-python, crc32c; pyfuse3 for `lossy`), as the project's node image has.

The node file (TOML; top-level keys are defaults for every node, a node's own keys win):

    user = "root"                        # login user
    key = "~/.ssh/id_ed25519"            # private key file (default: ssh agent / ~/.ssh keys)
    port = 22                            # SSH port
    sudo = false                         # run every command as `sudo -n ...`
    dir = "/var/lib/kafkaesque"          # the node's dir: code, data, logs, pid files (wiped at start-up)
    kafka_port = 9092                    # the broker's Kafka + RPC port
    python = "python3"
    known_hosts = "~/.ssh/known_hosts"
    host_key_policy = "strict"           # or "accept-new": trust and pin hosts seen the first time
    lossy = false                        # brokers write through the lossy file system (needs FUSE)

    [[nodes]]
    name = "controller-0"                # exactly one controller-0, and broker-1 .. broker-N
    host = "10.0.0.10"

    [[nodes]]
    name = "broker-1"
    host = "10.0.0.11"

The file decides the number of brokers. Faults: kill and pause always (signals through
the pid files); partition and net when every node is a host of its own whose user may run
iptables (probed at start-up, else refused by name); the clock faults when the clock
preload (built here, uploaded) works on the nodes; lossy-crash with `lossy = true`.
A bad file, an unreachable node or a wrong host key ends in one sentence naming the fix.

The node's dir is wiped (code, data, backing, lib) as root at every start-up, so it must be
a dir of its own: absolute, normalised, not a system dir nor a direct child of one
(clusters/ownership.py node_dir_problem), checked when the file is read; then, on the node
and before anything is wiped, absent, empty or holding the marker the harness wrote there
(`.kafkaesque-node.json`, which names the run using it). A harness that dies leaves a marker
here too (ssh_state_dir) so `kafkaesque cleanup` heals its nodes once the run is dead.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shlex
import signal
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.broker import node_code_members
from kafkaesque_harness.clusters.claimed_nodes import ClaimedNodes, heal_marked, heal_runs
from kafkaesque_harness.clusters.ownership import (
    Leftover,
    check_node_dir,
    read_node_marker,
    register_run,
    release_node_dir,
    release_run,
    remove_added_qdisc,
    state_dir,
)
from kafkaesque_harness.clusters.reference import CONTROLLER, ReferenceCluster
from kafkaesque_harness.clusters.ssh_remote import HOST_KEY_POLICIES, SshRemote, SshTarget
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until

CLOCK_PROBE_S = 1000  # the skew the clock probe asks for; any clock far from it means the preload failed

# key: (type, default). Top-level keys are defaults; the same keys (plus name, host) per node.
NODE_KEYS: dict[str, tuple[type, Any]] = {
    "user": (str, "root"), "key": (str, ""), "port": (int, 22), "sudo": (bool, False),
    "dir": (str, "/var/lib/kafkaesque"), "kafka_port": (int, 9092), "python": (str, "python3"),
    "known_hosts": (str, "~/.ssh/known_hosts"), "host_key_policy": (str, "strict"), "lossy": (bool, False),
}


class NodeFileError(ClusterError):
    """The node file cannot be used; the message names the file, the problem and the fix."""


@dataclass
class SshNode:
    name: str
    target: SshTarget
    dir: str
    kafka_port: int
    python: str
    lossy: bool


def load_node_file(path: str) -> list[SshNode]:
    """The nodes of a node file (format in the module docstring), or a NodeFileError sentence."""
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise NodeFileError(f"cannot read the node file {path} ({e.strerror}); give the path of a TOML file "
                            "as --cluster ssh:FILE.toml.") from None
    except tomllib.TOMLDecodeError as e:
        raise NodeFileError(f"the node file {path} is not valid TOML ({e}); fix that line.") from None
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes or not all(isinstance(n, dict) for n in raw_nodes):
        raise NodeFileError(f"the node file {path} has no [[nodes]] tables; add one per node with name and host "
                            "(see clusters/ssh.py).")
    if data.get("kind", "reference-ssh") != "reference-ssh":  # `--cluster FILE.toml` reads `kind` (clusters/cluster_file.py)
        raise NodeFileError(f"the node file {path} has kind = {data['kind']!r}; an SSH node file for the reference "
                            "broker is kind = \"reference-ssh\" (or has no kind); use --cluster FILE.toml for "
                            "kind = \"external\".")
    defaults = {k: v for k, v in data.items() if k not in ("nodes", "kind")}
    unknown = sorted(set(defaults) - set(NODE_KEYS))
    if unknown:
        raise NodeFileError(f"the node file {path} has unknown top-level key(s) {', '.join(unknown)}; "
                            f"valid: kind, {', '.join(NODE_KEYS)}, [[nodes]].")
    nodes = [_node(path, i, {**defaults, **raw}) for i, raw in enumerate(raw_nodes)]
    _check_roles(path, [n.name for n in nodes])
    seen: dict[tuple[str, str], str] = {}
    for n in nodes:
        for what, key in (("dir", (n.target.host, n.dir)), ("kafka_port", (n.target.host, str(n.kafka_port)))):
            other = seen.setdefault((what, *key), n.name)
            if other != n.name:
                raise NodeFileError(f"the node file {path} gives {other} and {n.name} the same host and {what}; "
                                    f"give each node on {n.target.host} its own {what}.")
    return sorted(nodes, key=lambda n: (n.name != CONTROLLER, n.name))


def _node(path: str, i: int, raw: dict[str, Any]) -> SshNode:
    where = f"node {i + 1} ({raw.get('name', 'no name')}) of {path}"
    unknown = sorted(set(raw) - set(NODE_KEYS) - {"name", "host"})
    if unknown:
        raise NodeFileError(f"{where} has unknown key(s) {', '.join(unknown)}; valid: name, host, "
                            f"{', '.join(NODE_KEYS)}.")
    for required in ("name", "host"):
        if not isinstance(raw.get(required), str) or not raw[required]:
            raise NodeFileError(f"{where} has no {required}; add `{required} = \"...\"` to it.")
    values: dict[str, Any] = {}
    for key, (typ, default) in NODE_KEYS.items():
        v = raw.get(key, default)
        if type(v) is not typ:  # not isinstance: TOML's true is not a port number
            raise NodeFileError(f"{where}: {key} = {v!r} should be a{'n' if typ is int else ''} {typ.__name__}; "
                                "fix its value.")
        values[key] = v
    if values["host_key_policy"] not in HOST_KEY_POLICIES:
        raise NodeFileError(f"{where}: host_key_policy = {values['host_key_policy']!r}; use one of "
                            f"{', '.join(HOST_KEY_POLICIES)}.")
    if values["key"] and not Path(values["key"]).expanduser().is_file():
        raise NodeFileError(f"{where}: the key file {values['key']} does not exist; fix the path.")
    try:
        node_dir = check_node_dir(values["dir"], where)
    except ClusterError as e:
        raise NodeFileError(str(e)) from None
    target = SshTarget(host=raw["host"], port=values["port"], user=values["user"], key=values["key"],
                       sudo=values["sudo"], known_hosts=values["known_hosts"],
                       host_key_policy=values["host_key_policy"])
    return SshNode(raw["name"], target, node_dir, values["kafka_port"], values["python"], values["lossy"])


def _check_roles(path: str, names: list[str]) -> None:
    brokers = sorted(n for n in names if n != CONTROLLER)
    want = [f"broker-{i}" for i in range(1, len(brokers) + 1)]
    if names.count(CONTROLLER) != 1 or sorted(brokers, key=lambda b: (len(b), b)) != want:
        raise NodeFileError(f"the node file {path} names its nodes {', '.join(names)}; it needs exactly one "
                            f"{CONTROLLER} and brokers named broker-1 .. broker-N, each once.")


def code_tarball() -> bytes:
    """The node code as a gzipped tar, laid out as the node's code dir holds it (node_code_members)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, f in node_code_members():
            tar.add(f, arcname=name)
    return buf.getvalue()


class SshCluster(ClaimedNodes, ReferenceCluster):
    name = "ssh"
    legacy_dirs_ok = True

    def __init__(self, spec: ClusterSpec, run_dir: str, nodes: list[SshNode], owner: str | None = None):
        brokers = sum(1 for n in nodes if n.name != CONTROLLER)
        super().__init__(dataclasses.replace(spec, brokers=brokers), run_dir, owner)
        self.by_name = {n.name: n for n in nodes}
        self.remotes = {n.name: SshRemote(n.target, n.name) for n in nodes}
        self.python = nodes[0].python
        self.lossy = any(n.lossy for n in nodes if n.name != CONTROLLER)
        # Probed in up(): both depend on what the nodes allow (IsolatedNodes, ClockControl).
        self._not_isolated: str | None = "the nodes' isolation is probed when the cluster starts, which it has not"
        self._clock_lib: str | None = None
        self._clock_problem: str | None = "the clock preload is installed when the cluster starts, which it has not"
        self._claimed: set[str] = set()  # nodes whose dir this run holds: the only ones down() touches

    @classmethod
    def from_file(cls, path: str, spec: ClusterSpec, run_dir: str, owner: str | None = None) -> SshCluster:
        c = cls(spec, run_dir, load_node_file(path), owner)
        c.node_file = str(Path(path).resolve())
        return c

    node_file: str | None = None  # set by from_file: what a leftover marker needs to find the nodes again

    # --- where nodes live ---------------------------------------------------------------------------
    def remote(self, node: str) -> SshRemote:
        return self.remotes[node]

    def address(self, node: str) -> tuple[str, int]:
        n = self.by_name[node]
        return n.target.host, n.kafka_port

    def listen(self, node: str) -> str:
        return f"0.0.0.0:{self.by_name[node].kafka_port}"

    def node_dir(self, node: str) -> str:
        return self.by_name[node].dir

    @property
    def dirs_named_in(self) -> str:
        return f"the node file {self.node_file or ''}".rstrip()

    def clock_file(self, node: str) -> str:
        return f"{self.node_dir(node)}/clock-offset"

    # --- abilities (clusters/base.py) ----------------------------------------------------------------------
    def isolation_unavailable(self) -> str | None:
        return self._not_isolated

    def clock_unavailable(self) -> str | None:
        return self._clock_problem

    def lossy_unavailable(self) -> str | None:
        return None if self.lossy else "this cluster was started without it"

    def lossy_status_file(self, node: str) -> str | None:
        return self.lossyfs_files(node)[1] if self.lossy_unavailable() is None else None

    def lossyfs_files(self, node: str) -> tuple[str, str]:
        return f"{self.node_dir(node)}/lossyfs.pid", f"{self.node_dir(node)}/lossyfs.status"

    def node_env(self, node: str) -> dict[str, str]:
        env = {**super().node_env(node), "PYTHONPATH": f"{self.node_dir(node)}/code"}
        if self._clock_lib:
            from kafkaesque_harness.clusters.clock_preload import preload_env

            env.update(preload_env(f"{self.node_dir(node)}/lib/{Path(self._clock_lib).name}", self.clock_file(node)))
        return env

    # --- lifecycle ----------------------------------------------------------------------------------------
    def up(self) -> str:
        with self._down_if_up_fails():
            register_run(self.owner, self.name, str(self.run_dir))  # live to `kafkaesque cleanup` until down()
            self._each(self._connect)
            self._mark_leftover()
            self._each(self._claim)  # every node's dir checked before any is wiped
            tarball = code_tarball()
            self._each(lambda node: self._install(node, tarball))
            self._clock_lib = self._install_clock_preload()
            self._probe_isolation()
            if self.lossy:
                self._each(self._mount_lossyfs, self.broker_nodes())
            return self._start_every_node(timeout_s=90)

    def _probe_isolation(self) -> None:
        """Partitions and tc need a network stack per node (distinct hosts) and iptables there."""
        hosts = [self.address(n)[0] for n in self.nodes()]
        shared = sorted({h for h in hosts if hosts.count(h) > 1})
        iptables = self._each(lambda node: self.remote(node).run(["iptables", "-w", "-S", "INPUT"], timeout=20).ok)
        denied = [n for n, ok in zip(self.nodes(), iptables, strict=True) if not ok]
        self._not_isolated = None
        if shared:
            self._not_isolated = f"in the ssh node file, several nodes share {', '.join(shared)}"
        elif denied:
            self._not_isolated = (f"iptables does not run for the SSH user on {', '.join(denied)} (install it, "
                                  "and log in as root or set sudo = true)")

    def _connect(self, node: str) -> None:
        r = self.remote(node)
        r.connect()
        if r.target.sudo and not r.run(["true"], timeout=20).ok:
            raise ClusterError(f"{node}: `sudo -n` does not work for {r.where()}; allow that user passwordless "
                               "sudo there, or set sudo = false and log in as a user who may run the broker.")

    def _install(self, node: str, tarball: bytes) -> None:
        """Stop what an earlier run left, wipe the node's data, and unpack this project's code there."""
        r, d = self.remote(node), self.node_dir(node)
        self._stop_processes(node)
        r.run(["rm", "-rf", f"{d}/code", f"{d}/data", f"{d}/backing", f"{d}/lib", self.log_path(node),
               self.trace_path(node), f"{d}/stdout.log", f"{d}/lossyfs.log", f"{d}/lossyfs.status", self.pidfile(node)], check=True)
        r.run(["mkdir", "-p", f"{d}/code", f"{d}/data", f"{d}/backing"], check=True)
        r.put(f"{d}/clusters.tar.gz", tarball)
        r.run(["tar", "-xzf", f"{d}/clusters.tar.gz", "-C", f"{d}/code"], check=True)
        probe = r.run(["env", f"PYTHONPATH={d}/code", self.python, "-c", "import kafka, crc32c, kafkaesque_harness.clusters.broker"],
                      timeout=60)
        if not probe.ok:
            last = (probe.err.strip().splitlines() or ["no output"])[-1]
            raise ClusterError(f"{node} ({r.where()}) cannot run the broker ({last}); install python3 and its "
                               "packages there: pip install kafka-python crc32c (the project's node image has them).")

    def _install_clock_preload(self) -> str | None:
        """Upload the clock preload (built here) and check on one node that it shifts the wall clock;
        None (the clock faults then refuse) when it cannot be built or does not work there."""
        from kafkaesque_harness.clusters.clock_preload import (
            PreloadBuildError,
            build_preload,
            offset_file_text,
            preload_env,
        )

        try:
            lib = build_preload()
        except PreloadBuildError:
            self._clock_problem = "the clock preload library could not be built here (install gcc)"
            return None
        data = lib.read_bytes()
        for node in self.nodes():
            self.remote(node).put(f"{self.node_dir(node)}/lib/{lib.name}", data)
            self.remote(node).put(self.clock_file(node), offset_file_text(0).encode())
        node = self.nodes()[0]
        probe_file = f"{self.node_dir(node)}/clock-probe"
        self.remote(node).put(probe_file, offset_file_text(CLOCK_PROBE_S * 10**9).encode())
        env = preload_env(f"{self.node_dir(node)}/lib/{lib.name}", probe_file)
        r = self.remote(node).run(["env", *(f"{k}={v}" for k, v in env.items()), self.python, "-c",
                                   "import time; print(time.time())"], timeout=30)
        now = self.remote(node).run([self.python, "-c", "import time; print(time.time())"], timeout=30)
        try:
            works = abs(float(r.out) - float(now.out) - CLOCK_PROBE_S) < CLOCK_PROBE_S / 2
        except ValueError:
            works = False
        self._clock_problem = None if works else (
            f"the clock preload library does not shift the wall clock on {node} ({self.remote(node).where()}; a node "
            "whose libc or architecture differs from this host's)")
        return str(lib) if works else None

    def _mount_lossyfs(self, node: str) -> None:
        r, d = self.remote(node), self.node_dir(node)
        pidfile, status = self.lossyfs_files(node)
        r.start_daemon([self.python, "-m", "kafkaesque_harness.clusters.lossyfs", f"{d}/backing", self.data_dir(node),
                        "--status-file", status], pidfile, f"{d}/lossyfs.log", env={"PYTHONPATH": f"{d}/code"})
        try:
            wait_until(lambda: r.run(["grep", "-q", "mounted", status]).ok, 20, 0.2,
                       f"the lossy file system's mount on {node}")
        except WaitTimeout:
            raise ClusterError(f"The lossy file system did not mount on {node} ({r.where()}); see {d}/lossyfs.log "
                               "there (it needs /dev/fuse and pyfuse3), or set lossy = false in the node file.") from None

    def _stop_processes(self, node: str) -> None:
        """Kill the node's broker and unmount its lossy file system, whoever started them."""
        r = self.remote(node)
        r.signal_daemon(self.pidfile(node), signal.SIGCONT)
        r.signal_daemon(self.pidfile(node), signal.SIGKILL)
        r.wait_daemon(self.pidfile(node), 10)
        pidfile, _ = self.lossyfs_files(node)
        if r.signal_daemon(pidfile, signal.SIGTERM) and not r.wait_daemon(pidfile, 10):  # TERM unmounts
            r.signal_daemon(pidfile, signal.SIGKILL)
        if r.run(["grep", "-qs", f" {self.data_dir(node)} fuse", "/proc/mounts"]).ok:
            q = shlex.quote(self.data_dir(node))
            r.run(["sh", "-c", f"fusermount3 -u -z {q} || umount -l {q}"])

    def down(self) -> None:
        try:
            self._release_claimed(self._stop_processes)
        finally:
            for r in self.remotes.values():
                r.close()
        self._unmark_leftover()
        release_run(self.owner)

    # --- leftovers: what `kafkaesque cleanup` finds when a harness died with nodes still faulted ------------
    def _marker(self) -> Path | None:
        return ssh_state_dir() / f"{self.owner}.json" if self.node_file and self.owner else None

    def _mark_leftover(self) -> None:
        marker = self._marker()
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(json.dumps({"node_file": self.node_file, "owner": self.owner,
                                          "run_dir": str(self.run_dir)}))

    def _unmark_leftover(self) -> None:
        marker = self._marker()
        if marker is not None:
            marker.unlink(missing_ok=True)

    def heal_leftovers(self) -> list[str]:
        """Undo every fault a dead harness may have left on the nodes (partition and loss rules, tc
        qdiscs, clock offsets, paused or running brokers, lossy mounts); returns what was reached. A node
        whose dir another run has claimed since is that run's now: it is left alone."""
        from kafkaesque_harness.clusters import netrules
        from kafkaesque_harness.clusters.clock_preload import offset_file_text

        def heal(node: str) -> str | None:
            try:
                self._connect(node)
                r = self.remote(node)
                marker = read_node_marker(r, self.node_dir(node))
                if marker is not None and marker.get("run") not in ("", self.owner):
                    return None
                for argv in netrules.remove_chain():
                    r.run(argv, timeout=20)
                if marker is not None:  # a dir the harness made: its clock file and pid files are ours
                    remove_added_qdisc(r, {"device": self.net_device(node), **marker})
                    if r.run(["test", "-e", self.clock_file(node)], timeout=20).ok:
                        r.put(self.clock_file(node), offset_file_text(0).encode())
                    self._stop_processes(node)
                    release_node_dir(r, self.node_dir(node), self.owner)
                return node
            except Exception:  # noqa: BLE001 - an unreachable node is reported by its absence
                return None

        try:
            reached = [n for n in self._each(heal) if n]
        finally:
            for r in self.remotes.values():
                r.close()
        return reached


def ssh_state_dir() -> Path:
    """Where a running SSH cluster leaves its marker (node file, owner) until its `down`."""
    return state_dir() / "ssh-clusters"


def find_ssh() -> list[Leftover]:
    """The SSH clusters whose harness has not reached `down` (their markers), as leftovers of their runs:
    removing one heals and stops its nodes."""
    return [Leftover(marker.stem, f"SSH cluster of run {marker.stem} (faults, brokers and mounts on its nodes)",
                     lambda marker=marker: heal_marked(marker, "ssh", _marked_cluster, NodeFileError), rank=7,
                     extra={"marker": marker})
            for marker in sorted(ssh_state_dir().glob("*.json"))]


def _marked_cluster(info: dict[str, Any]) -> SshCluster:
    """The cluster of a leftover marker, made again from its node file."""
    return SshCluster.from_file(info["node_file"], ClusterSpec(), info.get("run_dir", "."), info["owner"])


def cleanup_ssh(owner: str = "") -> list[str]:
    """Heal and stop the nodes of one run's SSH cluster (`owner`), or, without an owner, of every SSH
    cluster whose harness is gone; returns "ssh:<node>" for each node reached. A marker whose node file is
    gone is dropped with a line saying so, since nothing can reach those nodes any more."""
    return heal_runs(find_ssh(), owner)
