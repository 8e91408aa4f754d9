"""What a queue workload's client does whatever its library: one logical process's op dispatch, the send
outcome rules (workloads/queue.py's docstring states them), the rebalance journal and the client events
(history/clients.py) each completion carries. Each client library's adapter subclasses QueueClient:
workloads/kafka_python.py, workloads/confluent.py.
"""

from __future__ import annotations

from typing import Any

from kafkaesque_harness.history import CLIENT_EVENTS, FAIL, INFO, Op, client_id
from kafkaesque_harness.workloads.base import ClientEventLog

DEFINITE_SEND_ERRORS = {
    "NotEnoughReplicasError", "UnknownTopicOrPartitionError", "LeaderNotAvailableError",
    "NOT_ENOUGH_REPLICAS", "UNKNOWN_TOPIC_OR_PART", "LEADER_NOT_AVAILABLE",
}
SEND_TIMEOUT_S = 5.0
POLL_TIMEOUT_MS = 10  # a poll that finds nothing new returns at once: it is a read, not a wait


def send_outcome(error_name: str) -> str:
    """fail only for errors that mean the broker certainly did not append; info otherwise."""
    return FAIL if error_name in DEFINITE_SEND_ERRORS else INFO


class QueueClient:
    """What both client libraries share: the topic, one op dispatch, and the client events. `process`: the
    logical process the client serves, whose client id its libraries send (history/clients.py)."""

    LIBRARY = ""  # the adapter's library, as history/clients.py names it

    def __init__(self, topic: str, partitions: int, acks: int, idempotent: bool = False, group: str | None = None,
                 process: int | None = None):
        self.topic, self.partitions, self.acks, self.idempotent = topic, partitions, acks, idempotent
        self.group = group  # subscribe mode: the consumer group; None: assign every partition
        self.process = process
        self.client_id = client_id(process)
        self.producer = None
        self.consumer = None
        self.bootstrap = ""
        # subscribe mode: the rebalances the consumer went through since the last completion (the client
        # library calls back from inside a poll), as the txn workload's rebalance_log
        self.rebalances: list[dict[str, Any]] = []
        # what the libraries did on their own since the last completion (history/clients.py)
        self.events = ClientEventLog(self.LIBRARY)

    def invoke(self, op: Op) -> Op:
        comp = self._invoke(op)
        if self.rebalances:
            comp.extra = {**(comp.extra or {}), "rebalance_log": self.rebalances}
            self.rebalances = []
        events = self.take_events()
        if events:
            comp.extra = {**(comp.extra or {}), CLIENT_EVENTS: events}
        return comp

    def take_events(self) -> list[dict[str, Any]]:
        """The client events since the last completion (an adapter may look at its library's state first)."""
        return self.events.take()

    def _invoke(self, op: Op) -> Op:
        if op.f == "send":
            return self._send(op)
        if op.f == "poll":
            return self._poll(op)
        if op.f == "final-poll":
            return self._final_poll(op)
        if op.f == "crash":
            self.crash()
            return completion(op, INFO, None, error="crashed")
        raise ValueError(f"unknown queue op {op.f!r}")

    def journal(self, kind: str, partitions: list[int]) -> None:
        """A rebalance callback: the checker judges a member's first read of an assigned partition against the
        commits acknowledged before the op it was assigned in (checkers/queue.py, lost-commit)."""
        self.rebalances.append({"keys": sorted(partitions), "type": kind})
        self.events.add("rebalance", topic=self.topic, how=kind, keys=sorted(partitions))

    def crash(self) -> None:
        """Drop the clients without a clean shutdown: no offset commit (a restarted consumer resumes from its
        group's last committed offsets)."""
        raise NotImplementedError

    def _send(self, op: Op) -> Op:
        raise NotImplementedError

    def outcome(self, error_name: str) -> str:
        """A failed send's type: with retries on (idempotent), no error is definite."""
        return INFO if self.idempotent else send_outcome(error_name)

    def _poll(self, op: Op) -> Op:
        raise NotImplementedError

    def _final_poll(self, op: Op) -> Op:
        """Drain the op's partition from its start to the HWM seen now (the final read)."""
        raise NotImplementedError


def completion(op: Op, type_: str, value: Any, error: Any = None, extra: dict | None = None) -> Op:
    """The completion of `op`: its f, process and node, with what was observed."""
    return Op(type=type_, f=op.f, process=op.process, value=value, node=op.node, error=error, extra=extra)
