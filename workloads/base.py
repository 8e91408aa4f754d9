"""The Client and Workload shapes (DESIGN.md).

A Client is one per logical process and uses a real Kafka client library. A Workload
bundles: how to make clients, which ops the generator issues, the final reads, the
checkers that judge the history, and how its ops' values read (a ValueReader, for the
views of a history that are not its checkers: the report, the Spark pipeline's ingest).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kafkaesque_harness.checkers.core import Checker
from kafkaesque_harness.history import Op

if TYPE_CHECKING:
    from kafkaesque_harness.workloads.stalls import ProducerStallControl


class Client(Protocol):
    def open(self, bootstrap: str) -> None: ...

    def invoke(self, op: Op) -> Op:
        """Perform the invocation; return its completion with type ok / fail / info.

        ok only when the system acknowledged; fail only when the request was definitely
        not applied; info for timeouts, disconnects and anything uncertain.
        """

    def close(self) -> None: ...


class ValueReader(Protocol):
    """How a workload's op values read: the keys, offsets and values its ops carry, defined once beside
    its checker's own parsing (the queue's: checkers/queue.py QueueValues), so the report and the
    pipeline read a history of any workload without knowing its value shapes. Keys are ints; offsets
    and values as the history holds them; an op whose value does not have the shape gives nothing."""

    op_names: Collection[str]  # the client ops (f) whose values it reads; others' values are opaque payloads

    def key(self, op: Op) -> int | None:
        """The one key the op is about (a write's, a final read's), None for an op on many (a poll)."""

    def written(self, op: Op) -> tuple[int, Any, Any] | None:
        """(key, offset, value) of the record a write carries: offset None until an ok completion placed it."""

    def records(self, op: Op) -> Iterable[tuple[int, Any, Any]]:
        """(key, offset, value) of each record a read's completion returned, in order."""

    def drained(self, op: Op) -> tuple[int, Any] | None:
        """(key, end offset) of a final read's ok completion: the key read from its start up to there."""


class Workload(Protocol):
    name: str
    values: ValueReader  # how its ops' values read

    def topics(self, test: dict[str, Any]) -> list[tuple[str, int]]:
        """(topic, partitions) to create before the main phase."""

    def new_client(self, test: dict[str, Any], process: int) -> Client:
        """The client of logical process `process` (the runner makes one per process: an info op retires the
        process and its client). Its libraries name themselves to the brokers by the process
        (history/clients.py client_id), so the broker trace's answers tie to the history's process."""

    def op_mix(self, test: dict[str, Any]):
        """A callable (rng, process) -> (f, value) generating the next invocation."""

    def final_ops(self, test: dict[str, Any]) -> list[tuple]:
        """(f, value) invocations for the final-read phase (drain every partition to its HWM); (f, value,
        extra) when the invocation carries fields of its own (history/ops.py Op.extra)."""

    def checkers(self, test: dict[str, Any]) -> list[Checker]: ...


@runtime_checkable
class PreflightCheck(Protocol):
    """An ability of a workload: a question it asks the cluster after set-up and before the main phase, through
    each bootstrap its clients will use, where a wrong answer would fail every op of the run (the txn workload:
    InitProducerId for a transactional id). The runner refuses the run with its sentence (exit 3)."""

    def preflight(self, bootstraps: list[str]) -> str | None:
        """None when the cluster answers as the workload needs; else one sentence with the cluster's answer."""


@runtime_checkable
class StallableProducers(Protocol):
    """An ability of a workload: its clients hold transactional producers that stop mid-transaction when
    asked (the stall-producer fault, workloads/stalls.py). The runner asks for it with
    nemesis/requirements.py's `can` and hands the control to the fault actions; a workload without it
    (the queue's producers are not transactional) gets no such fault."""

    def producer_stalls(self) -> ProducerStallControl:
        """The one control the workload's clients obey, shared with the run's fault actions."""


class CrashSchedule:
    """When an op mix hands out a deliberate client crash ("crash" op: the client is dropped without a clean
    shutdown, its worker continues as a fresh process): Jepsen's crash-client generator, crash ops staggered
    at interval/concurrency over all processes, so each process crashes about once per interval. 0: never.
    Deterministic given the rng and the clock's readings (`clock` injectable for the tests)."""

    def __init__(self, interval_s: float, concurrency: int, clock: Callable[[], float] = time.monotonic):
        self.gap = interval_s / max(1, concurrency) if interval_s > 0 else 0.0
        self.clock = clock
        self._next: float | None = None

    def due(self, rng: random.Random) -> bool:
        if self.gap <= 0:
            return False
        now = self.clock()
        if self._next is not None and now < self._next:
            return False
        first = self._next is None
        self._next = now + rng.uniform(0, 2 * self.gap)
        return not first


class ClientEventLog:
    """The client events of one process (history/clients.py has their schema), as its client libraries report
    them from whichever thread they act on (kafka-python's I/O thread, librdkafka's log served by a poll, a
    delivery callback), until the process's next completion takes them (`take`). Each event is stamped with
    the library and the host's monotonic clock (`clock`: the simulator's clients give their loop's)."""

    def __init__(self, library: str, clock: Callable[[], float] = time.monotonic):
        self.library = library
        self.clock = clock
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, type_: str, **fields: Any) -> None:
        event = {"type": type_, "library": self.library, "mono": round(self.clock(), 6), **fields}
        with self._lock:
            self._events.append(event)

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            out, self._events = self._events, []
        return out


# Group members this process left but never closed (close_confluent_consumer): closing or destroying one can
# freeze the process, so they are kept until the process ends with exit_without_finalizers().
PARKED_CONSUMERS: list[Any] = []


def exit_without_finalizers(code: int) -> None:
    """End the process with `code`; when group members are parked (close_confluent_consumer), without the
    interpreter's finalizers, which would destroy them and could freeze here. Output is flushed first."""
    if not PARKED_CONSUMERS:
        return
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
            pass
    os._exit(code)
