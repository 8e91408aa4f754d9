"""The Cluster shape (DESIGN.md): the nodes, their lifecycle, and role lookups that ask the cluster itself.

Backends (local processes, namespaces, Docker containers, SSH hosts, a cluster file's system)
implement the core `Cluster`. What only some backends can do is an ability: a small protocol
of its own, named after what it lets a fault do (pause a node, cut its network off, shift its
clock, power-cut its disk, ...). A backend declares an ability by implementing its methods;
where the answer depends on the run (a preload that did not build, nodes that turned out to
share a host), the ability's `*_unavailable()` method says why not, in one clause, and None
when it can. nemesis/requirements.py is the one place that asks (`can`, `why_not`); nothing
else looks for attributes on a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class ClusterError(RuntimeError):
    """A cluster could not be set up or operated; the message is one sentence with the fix."""


@dataclass
class ClusterSpec:
    brokers: int = 3
    controllers: int = 1
    base_port: int = 0            # 0: pick free ports
    data_dir: str = ""            # where node data dirs live (inside the run dir by default)
    flush_policy: str = "never"   # every-write | every-N-records:N | every-ms:N | never
    broker_variant: str = "default"
    broker_config: dict[str, Any] = field(default_factory=dict)  # extra broker flags (timeouts, ...)
    # A directory holding a copy of clusters/ (clusters/code_copy.py: a mutant's code) that the nodes
    # run instead of this tree's; "" runs this tree's. Local backends put it first on the nodes' Python
    # path, the docker backend mounts its clusters/ over the image's.
    node_code: str = ""


@dataclass
class PartitionView:
    """A partition's state as the cluster reports it (Kafka Metadata / admin dump)."""

    topic: str
    partition: int
    leader: int            # node id, -1 when there is none
    replicas: list[int]
    isr: list[int]
    leader_epoch: int = -1


@runtime_checkable
class Cluster(Protocol):
    """What every backend has: nodes, their processes, the roles the cluster reports, and the run's
    capability table (clusters/capabilities.py; None until the set-up probe has run)."""

    name: str  # backend name: "local", "docker", "ssh", ...
    capabilities: dict[str, dict[str, Any]] | None

    def up(self) -> str:
        """Start every node; return Kafka bootstrap servers "host:port,..." once all brokers serve."""

    def down(self) -> None:
        """Stop and remove everything this cluster started. Idempotent; never raises for a dead node."""

    def nodes(self) -> list[str]:
        """Node names, e.g. ["controller-0", "broker-1", "broker-2", "broker-3"]."""

    def broker_nodes(self) -> list[str]: ...

    def controller_nodes(self) -> list[str]: ...

    def node_id(self, node: str) -> int: ...

    def node_name(self, node_id: int) -> str: ...

    def bootstrap(self) -> str: ...

    def start(self, node: str) -> None:
        """Start (or restart) a stopped node."""

    def kill(self, node: str) -> None:
        """SIGKILL the node's process; it stays down until start()."""

    def stop(self, node: str) -> None:
        """Clean shutdown (SIGTERM, wait)."""

    def is_running(self, node: str) -> bool: ...

    def process_state(self, node: str) -> str:
        """"running", "paused" or "down", asked of the node (what a process fault is seen by)."""

    def wait_ready(self, brokers: list[str], timeout_s: float) -> None:
        """Until every named broker serves; ClusterError when they do not within the time."""

    def partitions(self, topic: str) -> list[PartitionView]:
        """Leader, replicas and ISR of each partition, asked of the cluster itself."""

    def active_controller(self) -> str | None:
        """The controller that leads the metadata quorum, as the cluster reports it; None when unknown."""

    def fenced_brokers(self) -> set[int]:
        """Broker ids the cluster's controller holds fenced (out of every ISR, no leadership)."""

    def dump_state(self, node: str, include_log: bool = True) -> dict[str, Any] | None:
        """The node's own state dump (admin request); None when unreachable or when the backend has none."""

    def collect(self, dest_dir: str) -> None:
        """Copy node logs and state dumps into dest_dir/<node>/ (called before teardown), and write the
        replicas' state, normalised, into replicas.json beside dest_dir (the run's nodes/ directory): the
        replica checker's input, whose schema is clusters/replica_dumps.py's."""

    def create_topic(self, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None: ...


# --- abilities: what only some backends can do, each named after what it lets a fault do ---------------
# Every method here is a method (never a property), so `isinstance` sees a declaration without running
# anything; the `*_unavailable()` answers are asked only through nemesis/requirements.py.

DEFAULT_NET_DEVICE = "eth0"  # the device tc shapes on a node that does not name its own
DROP_CACHES = "/proc/sys/vm/drop_caches"
# How long a role lookup (Metadata through kafka-python's admin client) waits for any broker to answer: its default,
# 30 s, held a restart that long when every broker was down (a kill of a one-broker system, tansu).
ADMIN_BOOTSTRAP_MS = 3000


@runtime_checkable
class Pausable(Protocol):
    """Pause a node (SIGSTOP) and resume it: the pause fault, pause steps, the controller's pause move."""

    def pause(self, node: str) -> None:
        """SIGSTOP the node's process."""

    def resume(self, node: str) -> None:
        """SIGCONT the node's process."""


@runtime_checkable
class HasRemotes(Protocol):
    """Run commands on a node, move files and signal its daemons (clusters/remote.py), reach it on its
    address: how every fault acts on and looks at a node, and how the capability probe asks it."""

    def remote(self, node: str) -> Any: ...

    def address(self, node: str) -> tuple[str, int]:
        """Where the harness and the other nodes reach the node (Kafka port)."""

    def pid_command(self, node: str) -> str:
        """Shell text printing the pid of the node's process (the capability probe's sigstop check)."""


@runtime_checkable
class NetDevice(Protocol):
    """Shape a node's traffic with tc (the net fault): the device that carries it."""

    def net_device(self, node: str) -> str:
        """The network device of the node that tc shapes (eth0, or a namespace's veth end)."""

    def netem_probe_unavailable(self) -> str | None:
        """None when a netem qdisc may be tried on the nodes' devices at set-up; else why not."""


@runtime_checkable
class IsolatedNodes(Protocol):
    """Cut a node's network off, degrade it, power-cut its disk: every node has a network stack, a disk
    and a clock view of its own (partition, net, lossy-crash, the cutting scenario steps)."""

    def isolation_unavailable(self) -> str | None:
        """None when every node is isolated from the others; else why not, one clause."""


@runtime_checkable
class ClientCuts(Protocol):
    """Cut one node off from the harness's own clients, not from the other nodes: the address each node sees
    the clients' packets come from, which its iptables rules can drop. Two faults use it: the protocol move
    cut-group-coordinator-from-clients (issue 40: the coordinator stays up and leads while its members'
    heartbeats are lost) and client-partition (issue 43: one diskless broker the clients cannot reach)."""

    def client_address(self, node: str) -> str | None:
        """The address `node` sees the harness's clients' packets come from; None when it is not known."""

    def client_cut_unavailable(self) -> str | None:
        """None when client_address answers for every node and the nodes can drop it; else why not, one clause."""


@runtime_checkable
class ClockControl(Protocol):
    """Shift a node's wall clock (clock, clock-jump, clock-strobe): its processes run under the clock
    preload (clusters/clock_preload.py), which reads the node's control file."""

    def clock_file(self, node: str) -> str: ...

    def clock_unavailable(self) -> str | None:
        """None when the preload is in the nodes' processes and works; else why not, one clause."""


@runtime_checkable
class LossyDisk(Protocol):
    """Power-cut a broker's disk (lossy-crash): its data dir is on the lossy file system
    (clusters/lossyfs.py), which drops every unsynced byte when signalled."""

    def lossyfs_files(self, node: str) -> tuple[str, str]:
        """(pid file, status file) of the node's lossy file system daemon."""

    def lossy_unavailable(self) -> str | None:
        """None when the brokers write through the lossy file system; else why not, one clause."""


@runtime_checkable
class LossyControllers(Protocol):
    """Power-cut a controller (the protocol nemesis's power-cut-controller): its metadata dir, too, is on
    the lossy file system, so a power cut drops what it had not fsynced (002 1.2.1: durable before acted on)."""

    def lossyfs_files(self, node: str) -> tuple[str, str]: ...

    def lossy_controllers_unavailable(self) -> str | None:
        """None when the controllers write their metadata through the lossy file system; else why not."""


@runtime_checkable
class SegmentFiles(Protocol):
    """Corrupt a stopped broker's segment (disk): the reference broker's data dir layout, and a Python
    on the node to do it with."""

    python: str

    def data_dir(self, node: str) -> str: ...

    def log_path(self, node: str) -> str:
        """The broker's JSON log on the node, where its start-up recovery says what it cut."""


@runtime_checkable
class ControllerAdmin(Protocol):
    """Reassign replicas, decommission a broker and add it back (membership): the reference controller's
    internal requests, and a broker's disk wiped as for a replaced machine."""

    def controller_call(self, api: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]: ...

    def wipe_data(self, node: str) -> None: ...


@runtime_checkable
class StateDumps(Protocol):
    """Read a replica's own log end offset (the log-reaches wait; the replica checkers): every node answers
    an admin state dump of its partitions and logs."""

    def state_dumps_unavailable(self) -> str | None:
        """None when the nodes give state dumps; else why not, one clause."""


@runtime_checkable
class ProtocolTrace(Protocol):
    """Check every protocol decision from the inside (checkers/trace.py): each node writes the protocol
    trace of clusters/broker/trace.py, and the collect step brings it into the run dir."""

    def trace_path(self, node: str) -> str:
        """The node's trace file, on the node."""


@runtime_checkable
class PageCacheDrop(Protocol):
    """Evict a node's page cache (drop-caches): the nodes may write /proc/sys/vm/drop_caches."""

    def page_cache_unavailable(self) -> str | None:
        """None when a broker's node may write it; else why not, one clause naming the node."""


@runtime_checkable
class SharedIds(Protocol):
    """A cluster whose nodes may share a Kafka node id or have none fixed (clusters/external.py): an ISR or a
    replica list then names no single node, and faults aimed at ISR members do not apply. Not an ability
    (ABILITIES): a cluster without it gives each node an id of its own."""

    def shared_ids_reason(self) -> str | None:
        """None when every node has an id of its own; else why an id may name several nodes, one clause."""


@runtime_checkable
class ObjectStore(Protocol):
    """A cluster whose brokers keep their data in an object store of its own nodes (role `storage`:
    clusters/examples/tansu-s3.toml), the target of the storage faults (nemesis/storage.py)."""

    def storage_nodes(self) -> list[str]:
        """The store's nodes (none: the cluster has no store of its own)."""

    def store_kill_unavailable(self) -> str | None:
        """None when the store keeps its objects across a kill and restart; else why not, one clause."""

    def brokers_share_nothing_reason(self) -> str | None:
        """None when brokers talk to each other; else why they share only the store (a partition between
        brokers then cuts nothing the system uses), one clause."""


@runtime_checkable
class SpreadClients(Protocol):
    """A cluster that says which broker each of the workload's workers should bootstrap to (brokers that
    each advertise themselves alone: tansu), so clients go through several brokers at once."""

    def worker_bootstrap(self, worker: int) -> str:
        """The bootstrap servers of worker `worker` (host:port, comma-separated)."""


def proc_sys_refusal(cluster, why_denied: str) -> str | None:
    """PageCacheDrop's answer for a backend whose nodes reach their kernel's /proc/sys: ask the first broker's
    node whether it may write drop_caches. `test -w` asks access(2), which answers EROFS for a read-only
    /proc/sys and EACCES for a non-root user, without dropping anything."""
    node = cluster.broker_nodes()[0]
    if cluster.remote(node).run(["test", "-w", DROP_CACHES]).ok:
        return None
    return f"{DROP_CACHES} is not writable on {node} ({why_denied})"


ABILITIES = (Pausable, HasRemotes, NetDevice, IsolatedNodes, ClockControl, LossyDisk, SegmentFiles, ControllerAdmin,
             StateDumps, ProtocolTrace, PageCacheDrop)
