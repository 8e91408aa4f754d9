"""The Cluster shape (DESIGN.md): the nodes, their lifecycle, and role lookups that ask the cluster itself.

Backends (local processes now; Docker containers and SSH nodes later) implement `Cluster`.
Optional abilities are separate protocols so a backend that cannot, say, pause a node
simply does not implement `Pausable`, and a nemesis can refuse the fault by name.
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
    name: str  # backend name: "local", "docker", "ssh", ...

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

    def partitions(self, topic: str) -> list[PartitionView]:
        """Leader, replicas and ISR of each partition, asked of the cluster itself."""

    def active_controller(self) -> str | None: ...

    def fenced_brokers(self) -> set[int]:
        """Broker ids the cluster's controller holds fenced (out of every ISR, no leadership)."""

    def dump_state(self, node: str) -> dict[str, Any] | None:
        """The node's own state dump (admin request); None when unreachable."""

    def collect(self, dest_dir: str) -> None:
        """Copy node logs and state dumps into dest_dir/<node>/ (called before teardown), and write the
        replicas' state, normalised, into replicas.json beside dest_dir (the run's nodes/ directory): the
        replica checker's input, whose schema is clusters/replica_dumps.py's."""

    def create_topic(self, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None: ...


@runtime_checkable
class Pausable(Protocol):
    def pause(self, node: str) -> None:
        """SIGSTOP the node's process."""

    def resume(self, node: str) -> None:
        """SIGCONT the node's process."""
