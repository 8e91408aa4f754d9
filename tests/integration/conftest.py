"""A real local cluster of the reference broker for integration tests: processes on loopback, free ports."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.admin import create_topic, dump_state
from kafkaesque_harness.clusters.broker.local_cluster import broker_argv, controller_argv, wait_until_unfenced
from kafkaesque_harness.clusters.ports import free_ports


@dataclass
class TestCluster:
    root: Path
    brokers: int
    broker_flags: list[str]
    controller_flags: list[str]
    flush_policy: str = "never"
    variants: list[str] = field(default_factory=list)
    per_broker_flags: dict[int, list[str]] = field(default_factory=dict)  # e.g. one broker's flush policy
    controller_port: int = 0
    broker_ports: dict[int, int] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.broker_ports.values())

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def start_controller(self) -> None:
        d = self.root / "controller"
        d.mkdir(exist_ok=True)
        variant_flags = [f for v in self.variants for f in ("--variant", v)]  # no-elr, unclean-election
        self._spawn("controller", controller_argv("127.0.0.1", self.controller_port, str(d),
                                                  self.controller_flags + variant_flags))

    def start_broker(self, i: int) -> None:
        d = self.root / f"broker-{i}"
        d.mkdir(exist_ok=True)
        self._spawn(f"broker-{i}", broker_argv(i, "127.0.0.1", self.broker_ports[i],
                                               f"127.0.0.1:{self.controller_port}", str(d), self.flush_policy,
                                               self.variants,
                                               self.broker_flags + self.per_broker_flags.get(i, [])))

    def up(self) -> TestCluster:
        self.controller_port, *ports = free_ports(self.brokers + 1)
        self.broker_ports = dict(enumerate(ports, start=1))
        self.start_controller()
        for i in self.broker_ports:
            self.start_broker(i)
        assert wait_until_unfenced("127.0.0.1", self.controller_port, list(self.broker_ports), 30), self.logs()
        return self

    def wait_unfenced(self, ids: list[int], timeout: float = 30) -> None:
        assert wait_until_unfenced("127.0.0.1", self.controller_port, ids, timeout), self.logs()

    def kill(self, i: int) -> None:
        p = self.procs.pop(f"broker-{i}")
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def pause(self, i: int) -> None:
        """SIGSTOP broker i (a process pause: sockets stay open, nothing is answered)."""
        self.procs[f"broker-{i}"].send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        self.procs[f"broker-{i}"].send_signal(signal.SIGCONT)

    def restart(self, i: int) -> None:
        """Start broker i again on its port and data dir (after kill or stop)."""
        self.start_broker(i)

    def shutdown(self) -> None:
        self.down()

    def stop(self, i: int) -> int:
        p = self.procs.pop(f"broker-{i}")
        p.send_signal(signal.SIGTERM)
        return p.wait(30)

    def create_topic(self, topic: str, partitions: int = 1, rf: int = 3, min_isr: int = 2) -> None:
        create_topic(self.bootstrap, topic, partitions, rf, min_isr)

    def controller_state(self) -> dict:
        return dump_state("127.0.0.1", self.controller_port, include_log=False)

    def partition(self, topic: str, partition: int = 0) -> dict:
        for p in self.controller_state()["partitions"]:
            if p["topic"] == topic and p["partition"] == partition:
                return p
        raise KeyError((topic, partition))

    def rejoin(self, i: int, topic: str, timeout: float = 30) -> None:
        """Start broker i again and wait until it is back in the ISR of `topic` 0."""
        self.start_broker(i)
        self.wait_for(lambda: i in self.partition(topic)["isr"], timeout=timeout, what=f"broker {i} back in the ISR")

    def log_events(self, i: int) -> list[dict]:
        """Broker i's log, its JSON lines as events."""
        lines = (self.root / f"broker-{i}" / "broker.log").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def broker_state(self, i: int, include_log: bool = True) -> dict | None:
        try:
            return dump_state("127.0.0.1", self.broker_ports[i], include_log=include_log)
        except rpc.RpcError:
            return None

    def wait_for(self, predicate, timeout: float = 30, interval: float = 0.1, what: str = "condition"):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except (rpc.RpcError, KeyError):
                pass
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n{self.logs()}")

    def logs(self, lines: int = 15) -> str:
        out = []
        for f in sorted(self.root.rglob("*.log")) + sorted(self.root.glob("*.out")):
            text = f.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {f.relative_to(self.root)}\n" + "\n".join(text))
        return "\n".join(out)

    def down(self) -> None:
        for p in list(self.procs.values()):
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # a paused process must not outlive the test
                p.kill()
                p.wait(10)
        self.procs.clear()


def start_local_cluster(tmp_path: Path, brokers: int = 3, flush_policy: str = "never",
                        variants: list[str] | None = None, broker_flags: list[str] | None = None,
                        controller_flags: list[str] | None = None,
                        per_broker_flags: dict[int, list[str]] | None = None, **flag_values: object) -> TestCluster:
    """Start a controller and `brokers` brokers; the caller must call down() (the fixture does).

    Broker flags can also be given by name: `replica_lag_time_max_ms=5000` adds
    `--replica-lag-time-max-ms 5000` (overriding the quick-failover defaults).
    """
    flags = broker_flags if broker_flags is not None else [
        "--replica-lag-time-max-ms", "3000", "--heartbeat-interval-ms", "250"]
    for name, value in flag_values.items():
        flag = "--" + name.replace("_", "-")
        if flag in flags:
            i = flags.index(flag)
            flags = flags[:i] + flags[i + 2:]
        flags = flags + [flag, str(value)]
    cflags = controller_flags if controller_flags is not None else ["--session-timeout-ms", "2000"]
    return TestCluster(tmp_path, brokers, flags, cflags, flush_policy, variants or [], per_broker_flags or {}).up()


@pytest.fixture
def local_cluster(tmp_path):
    c = start_local_cluster(tmp_path)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def cluster_factory(tmp_path):
    started: list[TestCluster] = []

    def make(**kw) -> TestCluster:
        sub = tmp_path / f"cluster{len(started)}"
        sub.mkdir()
        c = start_local_cluster(sub, **kw)
        started.append(c)
        return c

    try:
        yield make
    finally:
        for c in started:
            c.down()


os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture
def kafkaesque_store(tmp_path) -> Path:
    """The project's own tests keep the runs the pytest plugin makes in pytest's tmp dir, not ./store."""
    return tmp_path / "store"


@contextlib.contextmanager
def docker_cluster_up(spec, tmp_path_factory, name: str):
    """A module's DockerCluster: up, yielded, always down at the end. Without a Docker engine the
    tests fail, never skip (CI must have one)."""
    import random

    from kafkaesque_harness.clusters.base import ClusterError
    from kafkaesque_harness.clusters.docker import DockerCluster, docker_client

    try:
        docker_client()
    except ClusterError as e:
        pytest.fail(f"the docker backend tests need a Docker engine: {e}")
    c = DockerCluster(spec, str(tmp_path_factory.mktemp(name)), owner=f"test{random.randrange(10**6)}")
    c.up()
    try:
        yield c
    finally:
        c.down()


def set_up_nemesis(nemesis, cluster):
    """Set a nemesis up as the runner does, with the run's shared fault actions over a fresh ledger; the
    actions come back so a test can look at the ledger or run the final heal (heal_everything)."""
    from kafkaesque_harness.nemesis.actions import FaultActions
    from kafkaesque_harness.nemesis.ledger import FaultLedger

    faults = FaultActions(cluster, FaultLedger())
    nemesis.setup(cluster, faults)
    return faults


def fill_partition(cluster, topic: str, n: int, prefix: bytes = b"") -> None:
    """`n` records (prefix + their number) at `topic` 0 of a harness cluster (clusters/base.py), acks=all,
    flushed."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=cluster.bootstrap().split(","), acks="all")
    for i in range(n):
        p.send(topic, value=prefix + b"%d" % i, partition=0)
    p.flush(30)
    p.close()


def replica_view(cluster, node: str, topic: str) -> dict | None:
    """`topic` 0 as the node's state dump shows its replica (None: no answer, or no replica there)."""
    parts = [x for x in (cluster.dump_state(node) or {}).get("partitions", []) if x["topic"] == topic]
    return parts[0] if parts else None
