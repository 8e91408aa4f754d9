"""What every backend running the reference broker shares: node names, command lines, process control
through each node's Remote, and role lookups that ask the cluster itself.

A backend (local processes, Docker containers, SSH hosts) says only where a node lives:
its Remote, the address the harness reaches it on, the address it listens on, and its
paths. Everything else (start, kill -9, pause, role lookups, collecting logs and state
dumps) is written once, here, with the abilities of clusters/base.py every such backend
has (Pausable, HasRemotes, NetDevice, SegmentFiles, ControllerAdmin, StateDumps, ProtocolTrace,
PageCacheDrop); each backend adds the ones only it has, or says why not.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.base import (
    ADMIN_BOOTSTRAP_MS,
    DEFAULT_NET_DEVICE,
    ClusterError,
    ClusterSpec,
    PartitionView,
    proc_sys_refusal,
)
from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.admin import create_topic, dump_state
from kafkaesque_harness.clusters.broker.trace import TRACE_FILE
from kafkaesque_harness.clusters.replica_dumps import collect_replicas
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until

CONTROLLER_ID = 1000
CONTROLLER = "controller-0"
OWNER_ENV = "KAFKAESQUE_OWNER"
# Historic flaws (issue 4), each a `--variant` of both node roles: the controller acts on no-elr and
# unclean-election, brokers on truncate-to-hw, no-elr and no-epoch-fencing.
REPLICATION_VARIANTS = ("truncate-to-hw", "no-elr", "unclean-election", "no-epoch-fencing")
# The transaction and consumer-group flaws (issue 24), acted on by brokers alone (their coordinators
# and partition leaders): see README "Recovery, and the historic flaws on demand".
TXN_GROUP_VARIANTS = ("txn-markers-no-epoch-bump", "read-committed-to-hwm", "offsets-commit-acks-1",
                      "zombie-not-fenced")
FLAW_VARIANTS = REPLICATION_VARIANTS + TXN_GROUP_VARIANTS
BROKER_VARIANTS = ("default",) + FLAW_VARIANTS


def create_topic_or_fail(bootstrap: str, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None:
    """CreateTopics through the Kafka protocol (any implementation); a failure is one ClusterError sentence."""
    try:
        create_topic(bootstrap, topic, partitions, replication_factor, min_isr)
    except Exception as e:  # noqa: BLE001 - one sentence for the user
        raise ClusterError(f"Creating topic {topic!r} failed ({e}); check the broker logs.") from None


class ReferenceCluster:
    """Base of the backends that run our broker. Subclasses set `python`, paths and addresses."""

    name = "reference"
    python = "python3"
    capabilities: dict[str, dict[str, Any]] | None = None  # the set-up probe's table (clusters/capabilities.py)
    proc_sys_denied = "the nodes' user may not write it (run as root)"  # why drop_caches may not be written

    def __init__(self, spec: ClusterSpec, run_dir: str, owner: str | None = None):
        if spec.broker_variant not in BROKER_VARIANTS:
            raise ClusterError(f"unknown broker variant {spec.broker_variant!r}; valid: {', '.join(BROKER_VARIANTS)}.")
        self.spec = spec
        self.run_dir = Path(run_dir)
        # The run's id on every process, container, network and namespace it makes. The run dir's
        # name is a timestamp: two runs starting in the same second (a campaign beside a test) would
        # share it and tear down each other's networks, so this process's pid joins it.
        self.owner = owner or f"{self.run_dir.name}-{os.getpid()}"
        # The cluster's secret (clusters/broker/rpc.py): internal requests carry its tag, so Kafka
        # clients cannot make them. It reaches each node as a file of mode 0600, never a command line.
        self.secret = rpc.new_secret()
        self._secret_installed: set[str] = set()

    # --- what a backend provides -------------------------------------------------------------
    def remote(self, node: str):
        raise NotImplementedError

    def address(self, node: str) -> tuple[str, int]:
        """Where the harness reaches the node (Kafka and RPC share the port)."""
        raise NotImplementedError

    def listen(self, node: str) -> str:
        raise NotImplementedError

    def node_dir(self, node: str) -> str:
        raise NotImplementedError

    def node_env(self, node: str) -> dict[str, str]:
        env = {OWNER_ENV: self.owner, "PYTHONUNBUFFERED": "1"}
        status = self.lossy_status_file(node)
        if status:
            # The broker reads the lossy file system's reports at start-up (server.py lossy_drops_seen), so its
            # trace says whether a lossy crash came between two starts (the trace's log-shorter-after-restart).
            env["KAFKAESQUE_LOSSYFS_STATUS"] = status
        return env

    def lossy_status_file(self, node: str) -> str | None:
        """Where the node's lossy file system reports its power cuts, when its broker writes through one (the
        backends that mount one say so); None: it writes to a plain disk."""
        return None

    # --- abilities (clusters/base.py): the answers every backend of our broker shares ---------------
    def pid_command(self, node: str) -> str:
        return f"cat {shlex.quote(self.pidfile(node))} 2>/dev/null"

    def net_device(self, node: str) -> str:
        return DEFAULT_NET_DEVICE

    def netem_probe_unavailable(self) -> str | None:
        return None

    def isolation_unavailable(self) -> str | None:
        return f"the {self.name} backend does not say whether its nodes have their own network"

    @property
    def isolated_nodes(self) -> bool:
        """IsolatedNodes as a yes or no, for people and tests (faults ask nemesis/requirements.py)."""
        return self.isolation_unavailable() is None

    def state_dumps_unavailable(self) -> str | None:
        return None

    def page_cache_unavailable(self) -> str | None:
        return proc_sys_refusal(self, self.proc_sys_denied)

    # --- naming --------------------------------------------------------------------------------
    def broker_nodes(self) -> list[str]:
        return [f"broker-{i}" for i in range(1, self.spec.brokers + 1)]

    def controller_nodes(self) -> list[str]:
        # spec.controllers > 1: a Raft controller quorum (controller_quorum.py), controller-0 .. -N-1.
        return [f"controller-{j}" for j in range(self.spec.controllers)]

    def nodes(self) -> list[str]:
        return self.controller_nodes() + self.broker_nodes()

    def node_id(self, node: str) -> int:
        role, _, n = node.partition("-")
        return CONTROLLER_ID + int(n) if role == "controller" else int(n)

    def node_name(self, node_id: int) -> str:
        return f"controller-{node_id - CONTROLLER_ID}" if node_id >= CONTROLLER_ID else f"broker-{node_id}"

    def bootstrap(self) -> str:
        return ",".join(_hostport(self.address(n)) for n in self.broker_nodes())

    def log_path(self, node: str) -> str:
        return f"{self.node_dir(node)}/{'controller' if node in self.controller_nodes() else 'broker'}.log"

    def trace_path(self, node: str) -> str:
        """The node's protocol trace (clusters/broker/trace.py), beside its log."""
        return f"{self.node_dir(node)}/{TRACE_FILE}"

    def pidfile(self, node: str) -> str:
        return f"{self.node_dir(node)}/node.pid"

    def data_dir(self, node: str) -> str:
        return f"{self.node_dir(node)}/data"

    def secret_file(self, node: str) -> str:
        # In a directory of its own, mode 0700: the file is never readable by others, not even while
        # a Remote's put writes it (they write a temporary file beside it, with the default umask).
        return f"{self.node_dir(node)}/secret/cluster.secret"

    # --- command lines (the flags of clusters/broker/__main__.py) -------------------------------
    def python_argv(self) -> list[str]:
        """The interpreter. With another copy of the node code (spec.node_code), `-P`: `python -m` would
        otherwise put the working directory (this tree, perhaps) before the copy on the path."""
        return [self.python, "-P"] if self.spec.node_code else [self.python]

    def node_argv(self, node: str) -> list[str]:
        cfg = self.spec.broker_config
        common = ["--node-id", str(self.node_id(node)), "--listen", self.listen(node),
                  "--advertise", _hostport(self.address(node)), "--data-dir", self.data_dir(node),
                  "--log-file", self.log_path(node), "--trace-file", self.trace_path(node),
                  "--secret-file", self.secret_file(node)]
        controllers = self.controller_nodes()
        if node in controllers:
            argv = [*self.python_argv(), "-m", "kafkaesque_harness.clusters.broker", "controller", *common,
                    "--session-timeout-ms", str(cfg.get("session_timeout_ms", 3000)),
                    "--unclean-recovery-strategy", str(cfg.get("unclean_recovery_strategy", "balanced"))]
            if len(controllers) > 1:
                argv += ["--quorum", ",".join(f"{self.node_id(c)}@{_hostport(self.address(c))}" for c in controllers)]
        else:
            argv = [*self.python_argv(), "-m", "kafkaesque_harness.clusters.broker", "broker", *common,
                    "--controller", ",".join(_hostport(self.address(c)) for c in controllers),
                    "--flush-policy", self.spec.flush_policy,
                    "--replica-lag-time-max-ms", str(cfg.get("replica_lag_time_max_ms", 5000)),
                    "--heartbeat-interval-ms", str(cfg.get("heartbeat_interval_ms", 300))]
            for key in ("replica_fetch_max_bytes", "hwm_checkpoint_interval_ms"):
                if cfg.get(key):  # 0 or absent: the broker's own default
                    argv += ["--" + key.replace("_", "-"), str(cfg[key])]
        if self.spec.broker_variant in FLAW_VARIANTS:
            argv += ["--variant", self.spec.broker_variant]
        return argv

    # --- process control through the node's Remote ---------------------------------------------
    def start(self, node: str) -> None:
        if self.is_running(node):
            return
        if node not in self._secret_installed:
            self.install_secret(node)
        self.remote(node).start_daemon(self.node_argv(node), self.pidfile(node),
                                       f"{self.node_dir(node)}/stdout.log", env=self.node_env(node))

    def install_secret(self, node: str) -> None:
        path = self.secret_file(node)
        d = shlex.quote(os.path.dirname(path))
        r = self.remote(node)
        r.run(["sh", "-c", f"umask 077 && mkdir -p {d} && chmod 700 {d}"], check=True)
        r.put(path, (self.secret + "\n").encode())
        r.run(["chmod", "600", path], check=True)
        self._secret_installed.add(node)

    def adopt_secret(self) -> bool:
        """Take the secret of a cluster another process started (`attach`), from its first controller's
        node; False if it cannot be read (that cluster's internal requests then fail)."""
        node = self.controller_nodes()[0]
        try:
            self.secret = self.remote(node).get(self.secret_file(node)).decode().strip()
        except Exception:  # noqa: BLE001 - a node without the file (gone, or from before secrets)
            return False
        self._secret_installed.update(self.nodes())
        return True

    def kill(self, node: str) -> None:
        # SIGKILL works on a stopped (paused) process too.
        self.remote(node).signal_daemon(self.pidfile(node), signal.SIGKILL)
        self.remote(node).wait_daemon(self.pidfile(node), 10)

    def stop(self, node: str, timeout_s: float = 20.0) -> None:
        r = self.remote(node)
        r.signal_daemon(self.pidfile(node), signal.SIGCONT)
        if r.signal_daemon(self.pidfile(node), signal.SIGTERM) and not r.wait_daemon(self.pidfile(node), timeout_s):
            self.kill(node)

    def pause(self, node: str) -> None:
        self.remote(node).signal_daemon(self.pidfile(node), signal.SIGSTOP)

    def resume(self, node: str) -> None:
        self.remote(node).signal_daemon(self.pidfile(node), signal.SIGCONT)

    def is_running(self, node: str) -> bool:
        return self.remote(node).daemon_alive(self.pidfile(node))

    def process_state(self, node: str) -> str:
        """"running", "paused" (SIGSTOP: state T) or "down" (no process, or a zombie), asked of the node."""
        q = shlex.quote(self.pidfile(node))
        r = self.remote(node).run(["sh", "-c", f"test -s {q} && p=$(cat {q}) && kill -0 $p 2>/dev/null && "
                                               "grep '^State:' /proc/$p/status"], timeout=10)
        state = r.out.split()[1:2] if r.ok else []
        return {"T": "paused", "t": "paused", "Z": "down", "X": "down"}.get(state[0], "running") if state else "down"

    # --- roles, asked of the cluster itself ------------------------------------------------------
    def dump_state(self, node: str, include_log: bool = True) -> dict[str, Any] | None:
        try:
            host, port = self.address(node)
            return dump_state(host, port, include_log=include_log, timeout=3.0, secret=self.secret)
        except (rpc.RpcError, KeyError):
            return None

    def active_controller_state(self) -> tuple[str, dict[str, Any]] | None:
        """The active controller and its state dump (a single controller is always the active one)."""
        for node in self.controller_nodes():
            state = self.dump_state(node, include_log=False)
            if state is not None and state.get("active", True):
                return node, state
        return None

    def partitions(self, topic: str) -> list[PartitionView]:
        found = self.active_controller_state()
        state = found[1] if found else None
        if state is None:
            return metadata_partitions(self.bootstrap(), topic)
        return [PartitionView(p["topic"], p["partition"], p["leader"], p["replicas"], p["isr"], p["leader_epoch"])
                for p in state["partitions"] if p["topic"] == topic]

    def fenced_brokers(self) -> set[int]:
        """The broker ids the active controller holds fenced (its own state dump)."""
        found = self.active_controller_state()
        if found is None:
            raise ClusterError("no controller answered a state dump; the fenced brokers are unknown")
        return {b["broker_id"] for b in found[1].get("brokers", []) if b["fenced"]}

    def active_controller(self) -> str | None:
        found = self.active_controller_state()
        return found[0] if found else None

    def _start_every_node(self, timeout_s: float) -> str:
        """up()'s last step: every node started, the controllers first, and its brokers registered and
        unfenced within `timeout_s`; the bootstrap."""
        for node in self.nodes():
            self.start(node)
        self.wait_ready(self.broker_nodes(), timeout_s=timeout_s)
        return self.bootstrap()

    def wait_ready(self, brokers: list[str], timeout_s: float) -> None:
        """Until every named broker is registered and unfenced at the controller."""
        want = {self.node_id(b) for b in brokers}

        def registered() -> bool:
            found = self.active_controller_state()
            state = found[1] if found else None
            return bool(state and want <= {b["broker_id"] for b in state["brokers"] if not b["fenced"]})

        try:
            wait_until(registered, timeout_s, 0.1, "the brokers' registration")
        except WaitTimeout:
            raise ClusterError(f"The brokers did not register with the controller within {timeout_s:.0f} s; see the "
                               f"node logs ({self.name} cluster, {self.log_path(CONTROLLER)}).") from None

    def controller_call(self, api: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """An internal-RPC request to the active controller (reassignments, membership: nemesis/membership.py)."""
        from kafkaesque_harness.clusters.broker.membership import active_controller_call

        return active_controller_call([self.address(c) for c in self.controller_nodes()], timeout,
                                      secret=self.secret)(api, body)

    def wipe_data(self, node: str) -> None:
        """Delete everything a (stopped) broker stored, as for a machine replaced after decommissioning.
        The directory itself stays: it may be a mount point (lossy-crash)."""
        r = self.remote(node).run(["find", self.data_dir(node), "-mindepth", "1", "-delete"], timeout=30)
        if not r.ok:
            raise ClusterError(f"Could not delete {node}'s data in {self.data_dir(node)} ({r.err.strip()}).")

    def create_topic(self, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None:
        create_topic_or_fail(self.bootstrap(), topic, partitions, replication_factor, min_isr)

    def collect(self, dest_dir: str) -> None:
        """Node logs and state dumps into dest_dir/<node>/ (an unreachable node is noted, not fatal), then
        the replicas' state normalised from them into replicas.json beside dest_dir (clusters/replica_dumps.py).

        Brokers first, controllers last: metadata may still be committing (a run cut short has no
        recovery wait), and a broker's copy of the metadata log taken after the controller's could be
        longer than it, which the replica checker rightly reads as a divergence (002 1.2.1: brokers
        replay only committed metadata, so a copy taken first can only be shorter)."""
        for node in self.broker_nodes() + self.controller_nodes():
            out = Path(dest_dir) / node
            out.mkdir(parents=True, exist_ok=True)
            for path in (self.log_path(node), self.trace_path(node), f"{self.node_dir(node)}/stdout.log",
                         f"{self.data_dir(node)}/metadata.log"):
                try:
                    (out / Path(path).name).write_bytes(self.remote(node).get(path))
                except Exception:  # noqa: BLE001 - a file that is not there (yet) is simply absent
                    pass
            state = self.dump_state(node)
            (out / "state.json").write_text(json.dumps(state, indent=1) if state is not None
                                            else json.dumps({"unreachable": True}))
        collect_replicas(Path(dest_dir), self.nodes())


def _hostport(addr: tuple[str, int]) -> str:
    return f"{addr[0]}:{addr[1]}"


def metadata_partitions(bootstrap: str, topic: str) -> list[PartitionView]:
    """Leaders and ISRs through the Kafka Metadata API (any Kafka-protocol cluster answers it)."""
    from kafka import KafkaAdminClient

    try:
        # bounded: kafka-python's admin waits 30 s to bootstrap by default, and a role lookup while every
        # broker is down (a kill of a one-broker system) held a restart that long
        admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=3000,
                                 bootstrap_timeout_ms=ADMIN_BOOTSTRAP_MS)
        try:
            (t,) = admin.describe_topics([topic])
        finally:
            admin.close()
    except Exception:  # noqa: BLE001 - no answer: nothing known
        return []
    # kafka-python 3 gives the MetadataResponse's own field names
    return sorted((PartitionView(topic, p["partition_index"], p["leader_id"], list(p["replica_nodes"]),
                                 list(p["isr_nodes"]), p.get("leader_epoch", -1))
                   for p in t.get("partitions", [])), key=lambda v: v.partition)
