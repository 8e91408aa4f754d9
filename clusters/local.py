"""The local cluster backend: the reference broker's controller and brokers as processes on this machine.

Each node has its own data dir and port under the run directory, its process carries
KAFKAESQUE_OWNER=<run id> in its environment (so `kafkaesque cleanup` finds the leftovers
of a crashed run), and the clock-offset preload (nemesis/clock_preload.py) so the clock
nemesis can skew one node's wall clock without touching the host's. Partitions and traffic
shaping need a node per network namespace and are refused here by name (the netns
backend is separate).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

from clusters.base import ClusterError, ClusterSpec, PartitionView
from clusters.broker import rpc
from clusters.broker.admin import create_topic, dump_state
from clusters.broker.local_cluster import CONTROLLER_ID, broker_argv, controller_argv
from harness.remote import LocalRemote

OWNER_ENV = "KAFKAESQUE_OWNER"
CONTROLLER = "controller-0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    name = "local"

    def __init__(self, spec: ClusterSpec, run_dir: str, owner: str | None = None):
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.data_root = Path(spec.data_dir) if spec.data_dir else self.run_dir / "data"
        self.owner = owner or self.run_dir.name
        self.remote = LocalRemote("local")
        self.ports: dict[str, int] = {}
        self._clock_lib: str | None = None
        self._up = False

    # --- naming -------------------------------------------------------------------------------
    def broker_nodes(self) -> list[str]:
        return [f"broker-{i}" for i in range(1, self.spec.brokers + 1)]

    def controller_nodes(self) -> list[str]:
        return [CONTROLLER]

    def nodes(self) -> list[str]:
        return self.controller_nodes() + self.broker_nodes()

    def node_id(self, node: str) -> int:
        return CONTROLLER_ID if node == CONTROLLER else int(node.split("-")[1])

    def node_name(self, node_id: int) -> str:
        return CONTROLLER if node_id == CONTROLLER_ID else f"broker-{node_id}"

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[n]}" for n in self.broker_nodes())

    def address(self, node: str) -> tuple[str, int]:
        return "127.0.0.1", self.ports[node]

    def node_dir(self, node: str) -> Path:
        return self.data_root / node

    def _pidfile(self, node: str) -> str:
        return str(self.node_dir(node) / "node.pid")

    def log_file(self, node: str) -> Path:
        return self.node_dir(node) / ("controller.log" if node == CONTROLLER else "broker.log")

    def clock_file(self, node: str) -> Path:
        return self.node_dir(node) / "clock-offset"

    # --- lifecycle ----------------------------------------------------------------------------
    def _argv(self, node: str) -> list[str]:
        d = str(self.node_dir(node))
        if node == CONTROLLER:
            extra = ["--session-timeout-ms", str(self.spec.broker_config.get("session_timeout_ms", 3000))]
            if self.spec.broker_variant in ("unclean-election",):
                extra.append("--unclean-leader-election")
            return controller_argv("127.0.0.1", self.ports[node], d, extra)
        variants = [] if self.spec.broker_variant in ("default", "", "unclean-election") else [self.spec.broker_variant]
        extra = ["--replica-lag-time-max-ms", str(self.spec.broker_config.get("replica_lag_time_max_ms", 5000)),
                 "--heartbeat-interval-ms", str(self.spec.broker_config.get("heartbeat_interval_ms", 300))]
        return broker_argv(self.node_id(node), "127.0.0.1", self.ports[node],
                           f"127.0.0.1:{self.ports[CONTROLLER]}", d, self.spec.flush_policy, variants, extra)

    def _env(self, node: str) -> dict[str, str]:
        env = {OWNER_ENV: self.owner, "PYTHONUNBUFFERED": "1"}
        if self._clock_lib:
            from nemesis.clock_preload import preload_env

            env.update(preload_env(self._clock_lib, self.clock_file(node)))
        return env

    def up(self) -> str:
        try:
            from nemesis.clock_preload import PreloadBuildError, build_preload

            try:
                self._clock_lib = str(build_preload())
            except PreloadBuildError:
                self._clock_lib = None  # the clock nemesis will refuse, naming the reason
            base = self.spec.base_port
            for i, node in enumerate(self.nodes()):
                self.ports[node] = base + i if base else free_port()
                if base and not _port_free(self.ports[node]):
                    raise ClusterError(f"Port {self.ports[node]} for {node} is already in use; pick another "
                                       "--base-port or stop what listens there.")
                self.node_dir(node).mkdir(parents=True, exist_ok=True)
            for node in self.nodes():
                self.start(node)
            self._up = True
            self.wait_ready(list(self.broker_nodes()), timeout_s=60)
            return self.bootstrap()
        except BaseException:
            self.down()
            raise

    def wait_ready(self, brokers: list[str], timeout_s: float) -> None:
        """Until every named broker is registered and unfenced at the controller."""
        want = {self.node_id(b) for b in brokers}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.dump_state(CONTROLLER, include_log=False)
            if state and want <= {b["broker_id"] for b in state["brokers"] if not b["fenced"]}:
                return
            time.sleep(0.1)
        tail = self.log_file(CONTROLLER).read_text(errors="replace")[-600:] if self.log_file(CONTROLLER).exists() else ""
        raise ClusterError(f"The brokers did not register with the controller within {timeout_s:.0f} s; see the node "
                           f"logs under {self.data_root} (controller log ends: {tail[-200:]!r}).")

    def start(self, node: str) -> None:
        if self.is_running(node):
            return
        self.remote.start_daemon(self._argv(node), self._pidfile(node), str(self.node_dir(node) / "stdout.log"),
                                 env=self._env(node))

    def kill(self, node: str) -> None:
        # A paused process must still die: SIGKILL works on stopped processes too.
        self.remote.signal_daemon(self._pidfile(node), signal.SIGKILL)

    def stop(self, node: str, timeout_s: float = 20.0) -> None:
        self.remote.signal_daemon(self._pidfile(node), signal.SIGCONT)
        if self.remote.signal_daemon(self._pidfile(node), signal.SIGTERM):
            if not self.remote.wait_daemon(self._pidfile(node), timeout_s):
                self.kill(node)

    def pause(self, node: str) -> None:
        self.remote.signal_daemon(self._pidfile(node), signal.SIGSTOP)

    def resume(self, node: str) -> None:
        self.remote.signal_daemon(self._pidfile(node), signal.SIGCONT)

    def is_running(self, node: str) -> bool:
        return self.remote.daemon_alive(self._pidfile(node))

    def down(self) -> None:
        for node in reversed(self.nodes()):
            try:
                self.remote.signal_daemon(self._pidfile(node), signal.SIGCONT)
                self.kill(node)
            except OSError:
                pass
        self._up = False

    # --- roles, asked of the cluster itself ---------------------------------------------------
    def dump_state(self, node: str, include_log: bool = True) -> dict[str, Any] | None:
        try:
            return dump_state("127.0.0.1", self.ports[node], include_log=include_log, timeout=3.0)
        except (rpc.RpcError, KeyError):
            return None

    def partitions(self, topic: str) -> list[PartitionView]:
        state = self.dump_state(CONTROLLER, include_log=False)
        if state is None:
            return _metadata_partitions(self.bootstrap(), topic)
        return [PartitionView(p["topic"], p["partition"], p["leader"], p["replicas"], p["isr"], p["leader_epoch"])
                for p in state["partitions"] if p["topic"] == topic]

    def active_controller(self) -> str | None:
        return CONTROLLER if self.dump_state(CONTROLLER, include_log=False) is not None else None

    def create_topic(self, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None:
        try:
            create_topic(self.bootstrap(), topic, partitions, replication_factor, min_isr)
        except Exception as e:  # noqa: BLE001 - one sentence for the user
            raise ClusterError(f"Creating topic {topic!r} failed ({e}); check the broker logs under "
                               f"{self.data_root}.") from None

    def collect(self, dest_dir: str) -> None:
        for node in self.nodes():
            out = Path(dest_dir) / node
            out.mkdir(parents=True, exist_ok=True)
            for f in self.node_dir(node).glob("*.log"):
                shutil.copy2(f, out / f.name)
            state = self.dump_state(node)
            (out / "state.json").write_text(json.dumps(state, indent=1) if state is not None
                                            else json.dumps({"unreachable": True}))


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _metadata_partitions(bootstrap: str, topic: str) -> list[PartitionView]:
    """Leaders and ISRs through the Kafka Metadata API (when the controller is unreachable)."""
    from kafka import KafkaAdminClient

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=3000)
        try:
            (t,) = admin.describe_topics([topic])
        finally:
            admin.close()
    except Exception:  # noqa: BLE001 - no answer is an answer: nothing known
        return []
    return [PartitionView(topic, p["partition"], p["leader"], p["replicas"], p["isr"], p.get("leader_epoch", -1))
            for p in t.get("partitions", [])]


def cleanup_leftovers() -> list[str]:
    """Kill every process a Kafkaesque run started and left behind (found by KAFKAESQUE_OWNER)."""
    killed = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"{OWNER_ENV}=".encode() not in environ:
            continue
        pid = int(entry.name)
        owner = next((kv.split(b"=", 1)[1].decode(errors="replace") for kv in environ.split(b"\0")
                      if kv.startswith(f"{OWNER_ENV}=".encode())), "?")
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
            killed.append(f"process {pid} (run {owner})")
        except ProcessLookupError:
            pass
    return killed
