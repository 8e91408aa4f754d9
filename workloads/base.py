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

    def new_client(self, test: dict[str, Any]) -> Client: ...

    def op_mix(self, test: dict[str, Any]):
        """A callable (rng, process) -> (f, value) generating the next invocation."""

    def final_ops(self, test: dict[str, Any]) -> list[tuple]:
        """(f, value) invocations for the final-read phase (drain every partition to its HWM); (f, value,
        extra) when the invocation carries fields of its own (history/ops.py Op.extra)."""

    def checkers(self, test: dict[str, Any]) -> list[Checker]: ...


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


def drop_kafka_python_clients(producer: Any, consumer: Any) -> None:
    """A crash of kafka-python clients: they run sender and heartbeat threads that would outlive a dropped
    reference, and kafka-python has no close without leave-group, so close them with no grace and without
    the consumer's offset commit (close(autocommit=False)). Errors are ignored: the broker may be gone."""
    for closing in ((lambda: producer.close(timeout=0)) if producer is not None else None,
                    (lambda: consumer.close(autocommit=False)) if consumer is not None else None):
        if closing is not None:
            try:
                closing()
            except Exception:  # noqa: BLE001
                pass


# Group members this process left but never closed (close_confluent_consumer): closing or destroying one can
# freeze the process, so they are kept until the process ends with exit_without_finalizers().
PARKED_CONSUMERS: list[Any] = []


def close_confluent_consumer(consumer: Any, subscribed: bool, drain_s: float = 1.0) -> None:
    """Let go of a confluent-kafka consumer without ever letting librdkafka run a group member's rebalance
    callback from inside close() or destroy. There, confluent-kafka's callback calls rd_kafka_assign() or
    rd_kafka_rebalance_protocol() HOLDING THE GIL, and once the consumer group has begun to terminate that
    call can wait forever (librdkafka issue 4041): the whole harness froze, its heal included. Draining
    the revocation first (unsubscribe, then consume() for a while) was not enough: detection runs still
    froze in close() in about a third of runs with group members (the run's watchdog then killed them).
    So a consumer that was ever a group member (`subscribed`) leaves its group (unsubscribe: LeaveGroup,
    no more heartbeats or fetches), has its revocation served by consume() for `drain_s`, and is then
    PARKED: referenced until the process ends, never closed or destroyed, and the process ends with
    exit_without_finalizers(), which skips the finalizers that would destroy it. A consumer that never
    joined a group is closed. Errors are ignored: the broker may be gone."""
    try:
        if not subscribed:
            consumer.close()
            return
        consumer.unsubscribe()
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            consumer.consume(num_messages=1, timeout=0.1)
    except Exception:  # noqa: BLE001
        pass
    PARKED_CONSUMERS.append(consumer)


def confluent_rebalance_callbacks(journal: Callable[[str, list[int]], None]) -> dict[str, Callable]:
    """confluent-kafka subscribe()'s on_assign and on_revoke: each tells `journal` ("assigned" or "revoked", the
    partitions in order), the rebalance log both workloads keep per op."""
    return {"on_assign": lambda _consumer, tps: journal("assigned", sorted(tp.partition for tp in tps)),
            "on_revoke": lambda _consumer, tps: journal("revoked", sorted(tp.partition for tp in tps))}


def kafka_python_rebalance_listener(journal: Callable[[str, list[int]], None]) -> Any:
    """The same for kafka-python's subscribe(listener=...)."""
    from kafka import ConsumerRebalanceListener

    class Journal(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            journal("revoked", sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            journal("assigned", sorted(tp.partition for tp in assigned))

    return Journal()


class SpareMembers:
    """Group members a workload's processes let go of, for its next processes to rejoin the group with.

    A confluent-kafka group member cannot be closed safely (close_confluent_consumer), so each let go of is
    parked for good, with its librdkafka threads and its connections to every broker. A detection run
    retires hundreds of processes (Jepsen's rule: an info op ends its process), and the parked members
    filled a broker's connection limit (512) within five minutes: its final reads and state dump failed.
    A member put here leaves its group (unsubscribe: LeaveGroup, so it is no member any more, its member id
    forgotten) and is kept, parked; the next process takes it and subscribes with its own callbacks, as a
    new member that starts from the group's committed offsets. One librdkafka handle per worker, however
    many processes."""

    def __init__(self) -> None:
        self._spare: list[Any] = []
        self._lock = threading.Lock()

    def put(self, consumer: Any, drain_s: float = 1.0) -> None:
        """Leave the group and serve the revocation (consume() runs the rebalance callback) for up to
        `drain_s`, so the member the next process takes has no rebalance pending: a manual assign() into a
        revocation still under way is a state librdkafka is not known to survive."""
        try:
            consumer.unsubscribe()
            deadline = time.monotonic() + drain_s
            while consumer.assignment() and time.monotonic() < deadline:
                consumer.consume(num_messages=1, timeout=0.1)
        except Exception:  # noqa: BLE001 - the broker may be gone: it cannot be trusted again, only parked
            close_confluent_consumer(consumer, subscribed=True, drain_s=0)
            return
        with self._lock:
            if not any(c is consumer for c in PARKED_CONSUMERS):
                PARKED_CONSUMERS.append(consumer)  # kept, and the process ends without finalizers
            self._spare.append(consumer)

    def take(self) -> Any | None:
        with self._lock:
            return self._spare.pop() if self._spare else None


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
