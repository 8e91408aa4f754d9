"""A reference-broker cluster for the probes of docs/FINDINGS.md: a controller and brokers as processes on
loopback, started with the broker's own command lines (clusters/broker/local_cluster.py), faults by signal,
and raw Kafka requests encoded and decoded with kafka-python's protocol classes. No harness code: no run, no
workload, no checker.

`controller_address` lets one broker reach the controller at an address of its own (127.0.0.2 is loopback
too), so that a probe can cut that broker off from the controller alone with one iptables rule.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.broker.admin import create_topic, dump_state
from kafkaesque_harness.clusters.broker.local_cluster import broker_argv, controller_argv, wait_until_unfenced
from kafkaesque_harness.clusters.ports import free_ports

HOST = "127.0.0.1"


class ProbeCluster:
    def __init__(self, brokers: int = 3, controller_address: dict[int, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kafkaesque-probe-"))
        ports = free_ports(brokers + 1)
        self.controller_port, self.ports = ports[0], {i: ports[i] for i in range(1, brokers + 1)}
        self.controller_address = controller_address or {}
        self.procs: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / f"{name}.out", "ab")  # noqa: SIM115 - the child's, for its life
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def __enter__(self) -> ProbeCluster:
        (self.root / "controller").mkdir()
        # on every loopback address, so that a broker may use an address of its own to reach it
        self._spawn("controller", controller_argv("0.0.0.0", self.controller_port, str(self.root / "controller")))
        for i in self.ports:
            (self.root / f"broker-{i}").mkdir()
            self.start_broker(i)
        if not wait_until_unfenced(HOST, self.controller_port, list(self.ports), 60):
            self.__exit__(None, None, None)
            sys.exit(f"the brokers did not register within 60 s; see {self.root}")
        return self

    def start_broker(self, i: int) -> None:
        """Start broker i (again: a killed broker restarts on its data dir)."""
        address = self.controller_address.get(i, HOST)
        self._spawn(f"broker-{i}", broker_argv(i, HOST, self.ports[i], f"{address}:{self.controller_port}",
                                               str(self.root / f"broker-{i}"), "never", []))

    def kill(self, i: int) -> None:
        p = self.procs.pop(f"broker-{i}")
        p.kill()
        p.wait()

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # a paused process must not outlive the probe
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{p}" for p in self.ports.values())

    def address(self, *brokers: int) -> str:
        return ",".join(f"{HOST}:{self.ports[i]}" for i in brokers)

    def create_topic(self, topic: str, partitions: int, rf: int, min_isr: int) -> None:
        create_topic(self.bootstrap, topic, partitions, rf, min_isr)

    def partition(self, topic: str, partition: int = 0) -> dict[str, Any]:
        """The controller's record of the partition: leader, leader_epoch, isr, ..."""
        state = dump_state(HOST, self.controller_port, include_log=False)
        return next(p for p in state["partitions"] if p["topic"] == topic and p["partition"] == partition)

    def fenced(self) -> dict[int, bool]:
        state = dump_state(HOST, self.controller_port, include_log=False)
        return {b["broker_id"]: b["fenced"] for b in state["brokers"]}

    def wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                sys.exit(f"timed out waiting for {what}; see {self.root}")
            time.sleep(0.1)

    def signal(self, name: str, sig: int) -> None:
        os.kill(self.procs[name].pid, sig)

    def trace(self, broker: int) -> list[dict[str, Any]]:
        """The broker's protocol trace so far (buffered: flushed every 100 ms)."""
        out = []
        for line in (self.root / f"broker-{broker}" / "trace.jsonl").read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a torn last line
        return out


def ask(port: int, request: Any, response_cls: Any, client_id: str = "probe") -> Any:
    """One Kafka request to a broker on loopback, its answer decoded (kafka-python's codecs)."""
    request.with_header(correlation_id=1, client_id=client_id)
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", _read(s, 4))
        return response_cls[request.API_VERSION].decode(_read(s, size), header=True)


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return buf
