"""Test doubles the nemesis unit tests share: a network that obeys the iptables commands our fault code
sends (so the probes that observe a cut see it, or see that it did not happen), the run's fault
actions over a fresh ledger, and node processes that record what was done to them, in two models:
RecordedProcesses keeps down and paused apart (a paused node killed is still paused when started
again), ProcessStates one state a node. The real network is exercised by the integration tests."""

from __future__ import annotations

import math
import re
import threading
from collections import defaultdict

from kafkaesque_harness.clusters.remote import RemoteResult
from kafkaesque_harness.nemesis.actions import FaultActions
from kafkaesque_harness.nemesis.ledger import FaultLedger
from kafkaesque_harness.nemesis.plan import drive

_PROBE = re.compile(r" (\S+) (\d+) [\d.]+; else timeout")
_DROP = re.compile(r"-A KAFKAESQUE -s (\S+) -j DROP")


class FakeNetwork:
    """Each node's chain as the set of source addresses it drops, kept from the commands the fake remotes
    receive (flush, add, remove the chain); a TCP probe from A to B answers "timeout" when B drops A."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.drops: dict[str, set[str]] = defaultdict(set)
        self.broken: set[str] = set()  # nodes whose rules silently do nothing (a fault that does not take)

    def run(self, node: str, argv: list[str]) -> RemoteResult | None:
        """The answer to a network command on `node`, or None when the command is not about the network."""
        cmd = " ".join(argv)
        m = _PROBE.search(cmd)
        if m:
            dst = next(n for n in self.cluster.nodes() if self.cluster.address(n)[0] == m.group(1))
            cut = self.cluster.address(node)[0] in self.drops[dst]
            return RemoteResult(0, "timeout\n" if cut else "open\n", "")
        if "KAFKAESQUE" not in cmd:
            return None
        for part in cmd.split("&&"):
            if "-F KAFKAESQUE" in part or "-X KAFKAESQUE" in part:
                self.drops[node].clear()
            d = _DROP.search(part)
            if d and node not in self.broken:
                self.drops[node].update(d.group(1).split(","))
        return RemoteResult(0, "", "")

    def cut_between(self, a: str, b: str) -> bool:
        """Does either of the two drop the other's packets?"""
        return (self.cluster.address(a)[0] in self.drops[b]) or (self.cluster.address(b)[0] in self.drops[a])


def fault_actions(cluster, topic: str = "queue") -> FaultActions:
    """The shared fault actions over a fresh ledger, as the runner hands them to a nemesis at setup."""
    return FaultActions(cluster, FaultLedger(), topic)


class FakeCluster:
    """The core Cluster shape (clusters/base.py) over fixed nodes, and no ability: a test declares the
    abilities it needs by adding their methods (a subclass, or an attribute on the instance)."""

    name = "fake"
    capabilities = None  # not probed

    def __init__(self, brokers: int = 3):
        self._brokers = [f"broker-{i}" for i in range(1, brokers + 1)]
        self.stopped: set[str] = set()

    def up(self) -> str:
        return self.bootstrap()

    def down(self) -> None:
        self.stopped = set(self.nodes())

    def nodes(self) -> list[str]:
        return self.controller_nodes() + self.broker_nodes()

    def broker_nodes(self) -> list[str]:
        return list(self._brokers)

    def controller_nodes(self) -> list[str]:
        return ["controller-0"]

    def node_id(self, node: str) -> int:
        role, _, n = node.partition("-")
        return 1000 + int(n) if role == "controller" else int(n)

    def node_name(self, node_id: int) -> str:
        return f"controller-{node_id - 1000}" if node_id >= 1000 else f"broker-{node_id}"

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{9000 + self.node_id(b)}" for b in self._brokers)

    def start(self, node: str) -> None:
        self.stopped.discard(node)

    def kill(self, node: str) -> None:
        self.stopped.add(node)

    def stop(self, node: str) -> None:
        self.stopped.add(node)

    def is_running(self, node: str) -> bool:
        return node not in self.stopped

    def process_state(self, node: str) -> str:
        return "down" if node in self.stopped else "running"

    def wait_ready(self, brokers: list[str], timeout_s: float) -> None:
        pass

    def partitions(self, topic: str) -> list:
        return []

    def active_controller(self) -> str | None:
        return "controller-0"

    def fenced_brokers(self) -> set[int]:
        return set()

    def dump_state(self, node: str, include_log: bool = True):
        return None

    def collect(self, dest_dir: str) -> None:
        pass

    def create_topic(self, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None:
        pass


class RecordedProcesses:
    """A fake cluster's node processes (the core Cluster's kill, stop and start): each call is kept in
    `events` as (verb, node), and `down` holds the nodes killed or stopped and not started since."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.down: set[str] = set()
        self.paused: set[str] = set()  # RecordedPauses' nodes; empty without that ability

    def is_running(self, n: str) -> bool:
        return n not in self.down

    def process_state(self, n: str) -> str:
        return "down" if n in self.down else "paused" if n in self.paused else "running"

    def kill(self, n: str) -> None:
        self._record("kill", n, self.down.add)

    def stop(self, n: str) -> None:
        self._record("stop", n, self.down.add)

    def start(self, n: str) -> None:
        self._record("start", n, self.down.discard)

    def _record(self, verb: str, n: str, change) -> None:
        self.events.append((verb, n))
        change(n)


class RecordedPauses(RecordedProcesses):
    """RecordedProcesses with the Pausable ability: pause and resume, recorded the same way, and `paused`."""

    def pause(self, n: str) -> None:
        self._record("pause", n, self.paused.add)

    def resume(self, n: str) -> None:
        self._record("resume", n, self.paused.discard)


class ProcessStates:
    """A fake cluster's node processes as states: `process` holds each node that is "down" or "paused"
    (running otherwise), and `calls` each kill, stop, pause, resume and start as "VERB node". A verb in
    `ignore` is sent and nothing happens (a signal the process does not obey); went_down(node) is where a
    fake's controller reacts to a node it lost. Resume and start are each fake's own."""

    def __init__(self):
        self.process: dict[str, str] = {}
        self.calls: list[str] = []
        self.ignore: set[str] = set()  # e.g. {"kill"}: the signal is sent and the process lives on

    def process_state(self, n: str) -> str:
        return self.process.get(n, "running")

    def kill(self, n: str) -> None:
        self._act("kill", n, "down")

    def stop(self, n: str) -> None:
        self._act("stop", n, "down")

    def pause(self, n: str) -> None:
        self._act("pause", n, "paused")

    def _act(self, verb: str, n: str, state: str) -> None:
        """`verb` sent to the node's process, which is `state` afterwards (down, paused or running)."""
        self.calls.append(f"{verb} {n}")
        if verb in self.ignore:
            return
        if state == "running":
            self.process.pop(n, None)
        else:
            self.process[n] = state
            self.went_down(n)

    def went_down(self, n: str) -> None:
        pass


# --- the one scheduler on a clock that moves only when it waits (nemesis/plan.py drive) ------------------
class FastClock:
    """The main phase's clock in seconds, moved only by FastStop's waits: no real sleeping."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FastStop(threading.Event):
    """drive's stop event: a wait moves the clock by its timeout instead of sleeping; set at `stop_at`."""

    def __init__(self, clock: FastClock, stop_at: float = math.inf):
        super().__init__()
        self.clock, self.stop_at, self.waits = clock, stop_at, []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if self.clock.t + timeout >= self.stop_at:
            self.clock.t = self.stop_at
            self.set()
            return True
        self.clock.t += timeout
        return False


class StepLog:
    """A Recorder keeping each ended step as (f, value, its result, or "error: ..."), and when each began."""

    def __init__(self, clock: FastClock | None = None):
        self.clock = clock
        self.ops: list[tuple] = []
        self.began_at: list[tuple[str, float]] = []

    def began(self, step) -> None:
        self.began_at.append((step.f, self.clock.t if self.clock else 0.0))

    def ended(self, step, value, error) -> None:
        self.ops.append((step.f, step.value, value if error is None else f"error: {error}"))


def run_plans(plans, end: float = math.inf, stop_at: float = math.inf) -> StepLog:
    """drive() the plans on a FastClock; what was recorded."""
    clock = FastClock()
    log = StepLog(clock)
    drive(plans, log, FastStop(clock, stop_at), clock, end=end)
    return log
