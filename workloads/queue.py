"""The queue workload: Jepsen's Kafka queue test in our schema, driven by real Kafka clients.

Clients send unique integer values to a few keys (the partitions of one topic) and poll
them back; at the end, a final read drains every partition from its start to its HWM.
The history (the schema checkers/queue.py reads):

  send        invoke [key, value]     ok [key, [offset, value]]
  poll        invoke null             ok {"<key>": [[offset, value], ...], ...}
  final-poll  invoke [key]            ok [key, hwm, [[offset, value], ...]]   (drained [start, hwm))

Outcomes are exact (DESIGN.md): a send is ok only when the broker acknowledged it; fail
only when the request definitely was not applied; info otherwise. Each send is one attempt
(producer retries off, so a broker's "rejected before append" answer stays definite): a
retried attempt could have been appended before the error the client finally reports.
librdkafka (confluent-kafka) is the exception: retries=0 does not stop it re-sending a batch
answered NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION, or one it
never sent (rdkafka_request.c, rd_kafka_handle_Produce_error: it takes these for "not
persisted", so the retry is not counted). A Kafka leader answers NOT_LEADER_OR_FOLLOWER to an
acks=all produce it has already appended, if it stops leading while the produce waits, and the
record may still commit on the new leader: the re-sent copy is then appended too. The
confluent client reads librdkafka's own account of each send's produce requests (its `msg`
debug log, `_ProduceRequests`). A send that went out in more than one request carries
"resent": {"requests": n, "errors": [...]} on its completion (non-idempotent producers only).
If such a send failed, it is info, because an earlier request may have been appended.
The checkers count copies of its value, up to n, as the client's re-sends, not as a duplicate
(checkers/queue.py).
Definite rejections: NOT_ENOUGH_REPLICAS (002 2.6: checked before the append),
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, and client-side errors raised before
anything was sent. Everything else (timeouts, disconnects, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
which means "appended, not yet replicated") is info. NOT_LEADER_OR_FOLLOWER is info too: a
leader answers it both before an append (it does not lead) and after one, to acks=all
requests still waiting when it loses the leadership, whose records may already be on the
new leader and commit there (Kafka's DelayedProduce does the same); a scenario run caught
such a "failed" send being read back.
Reads change nothing, so a failed poll is "fail".

Option `queue_mode` "subscribe" (with `group`): the consumers join one consumer group instead of each
assigning every partition, and commit, synchronously, what each poll read (the poll's completion carries
"committed": {"<key>": next offset}, or "commit_error" with "commit_offsets"; the records read stand either
way), and every completion carries the rebalances the consumer went through during the op ("rebalance_log":
[{"keys": [...], "type": "assigned"|"revoked"}], as the txn workload's). Option
`crash_clients_interval_s`: `crash` ops (invoke null, completion info) drop a process's clients without
closing them (no commit, and with confluent-kafka no leave-group either); the worker goes on as a fresh
process whose consumer resumes from its group's committed offsets. The queue checker then judges the
group as a whole (group-skip), not each consumer's order (checkers/queue.py).

Client events (history/clients.py has the schema). Each process's producer and consumer name themselves to the
brokers "kafkaesque-p<process>" (the broker trace's `client`), and each completion carries "client_events":
what the process's client libraries did on their own since its previous completion that changes what a later
poll returns: a `reset` of a position after an answer the library took for an error (OFFSET_OUT_OF_RANGE, a
KIP-320 truncation: from, to, policy, error, the broker it took for the leader and that leader's epoch), a
`seek` (the workload's own, the group's committed offset, the reset policy placing a partition with no
position), a `leader` change of a partition in the library's view (from, to, their epochs: a regression is
metadata taken from a deposed leader), a `rebalance` (also kept in "rebalance_log"). kafka-python has no
reset callback: workloads/kafka_python.py (KafkaPythonWatch) watches the consumer's SubscriptionState and its
metadata listener; librdkafka says its resets and leader changes in its log, which workloads/confluent.py
(ConsumerLog) reads. The queue checker attributes an anomaly that follows from one (checkers/clients.py).

Option `idempotent` (workload_options {"idempotent": true}): the producers run idempotent (KIP-98: a
producer id and per-partition sequences, retries on), as most deployments do; a retry the broker
appended twice shows as a duplicate. Every failed send is then info: the client retried it, and an
earlier attempt may have been appended.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.checkers.queue import QUEUE_VALUES
from kafkaesque_harness.workloads.base import CrashSchedule
from kafkaesque_harness.workloads.confluent import ConfluentQueueClient, SpareMembers
from kafkaesque_harness.workloads.kafka_python import KafkaPythonQueueClient

QUEUE_OPTIONS = {
    "send_ratio": "share of ops that are sends (default 0.7)",
    "elle": "also run the Elle-style cycle checker (default false)",
    "idempotent": "idempotent producers, retries on (default false)",
    "queue_mode": "assign (default): each consumer reads every partition from the start; subscribe: consumers "
                  "join one group, commit their offsets after each poll, and a restarted consumer resumes from "
                  "its group's committed offsets",
    "group": "the consumer group in subscribe mode (default kafkaesque-queue)",
    "crash_clients_interval_s": "mean seconds between deliberate client crashes of each process (0: none; "
                                "default 0)",
}
QUEUE_MODES = ("assign", "subscribe")


class QueueWorkload:
    name = "queue"
    values = QUEUE_VALUES  # the history's value shapes (above), as the checkers read them
    OPTIONS = QUEUE_OPTIONS

    def __init__(self, options: dict[str, Any]):
        self.topic = options.get("topic", "queue")
        self.partitions = int(options.get("partitions", 4))
        self.client = options.get("client", "kafka-python")
        self.send_ratio = float(options.get("send_ratio", 0.7))
        self.elle = bool(options.get("elle", False))
        self.idempotent = bool(options.get("idempotent", False))
        self.mode = options.get("queue_mode", "assign")
        if self.mode not in QUEUE_MODES:
            raise ValueError(self.options_problem(options))
        self.group = str(options.get("group", "kafkaesque-queue")) if self.mode == "subscribe" else None
        self.crash_interval_s = float(options.get("crash_clients_interval_s", 0))
        self._values = itertools.count(1)
        self._lock = threading.Lock()
        self.members = SpareMembers()  # subscribe mode with confluent-kafka: members closed clients left

    def coordinated_keys(self, concurrency: int) -> dict[str, list[str]]:
        """The keys whose coordinators a nemesis may aim at: the group, in subscribe mode."""
        return {"groups": [self.group] if self.group is not None else []}

    @staticmethod
    def options_problem(options: dict[str, Any]) -> str | None:
        """Why these options cannot run (one sentence), or None."""
        mode = options.get("queue_mode", "assign")
        if mode not in QUEUE_MODES:
            return f"workload option queue_mode={mode!r} is unknown; valid: {', '.join(QUEUE_MODES)}."
        interval = options.get("crash_clients_interval_s", 0)
        if not isinstance(interval, int | float) or interval < 0:
            return (f"workload option crash_clients_interval_s={interval!r} is not a number of seconds; give 0 "
                    "(no crashes) or more.")
        return None

    def topics(self, test: dict[str, Any]) -> list[tuple[str, int]]:
        return [(self.topic, self.partitions)]

    def new_client(self, test: dict[str, Any], process: int | None = None):
        acks = {"all": -1, "-1": -1, "1": 1, "0": 0}[str(test.get("acks", "all"))]
        if self.client == "confluent-kafka":
            return ConfluentQueueClient(self.topic, self.partitions, acks, self.idempotent, self.group,
                                        members=self.members, process=process)
        return KafkaPythonQueueClient(self.topic, self.partitions, acks, self.idempotent, self.group, process=process)

    def op_mix(self, test: dict[str, Any], clock: Callable[[], float] = time.monotonic):
        """(rng, process) -> (f, value); `clock` times the crashes (the simulator's clients give their loop's)."""
        crashes = CrashSchedule(self.crash_interval_s, int(test.get("concurrency", 1)), clock)

        def next_op(rng: random.Random, process: int) -> tuple[str, Any]:
            if crashes.due(rng):
                return "crash", None
            if rng.random() < self.send_ratio:
                with self._lock:
                    value = next(self._values)
                return "send", [rng.randrange(self.partitions), value]
            return "poll", None
        return next_op

    def final_ops(self, test: dict[str, Any]) -> list[tuple[str, Any]]:
        return [("final-poll", [k]) for k in range(self.partitions)]

    def checkers(self, test: dict[str, Any]):
        from kafkaesque_harness.checkers.evidence import ProgressChecker
        from kafkaesque_harness.checkers.log_order import LogOrderChecker
        from kafkaesque_harness.checkers.queue import QueueChecker
        from kafkaesque_harness.checkers.replicas import ReplicaStateChecker
        from kafkaesque_harness.checkers.trace import TraceChecker

        # Progress first: a run that did nothing on a partition proved nothing there (checkers/evidence.py).
        checkers = [ProgressChecker(self.partitions), QueueChecker(subscribe=self.mode == "subscribe"),
                    LogOrderChecker()]
        if test.get("elle") or self.elle:
            from kafkaesque_harness.checkers.elle import QueueElleChecker

            checkers.append(QueueElleChecker())
        # The replicas' own states (replicas.json, handed in by the runner), after the queue checker: the
        # losses beyond the fault budget it counts must each have been reported by the cluster.
        checkers.append(ReplicaStateChecker())
        # Every protocol decision the nodes traced (checkers/trace.py; not applicable where none is written).
        checkers.append(TraceChecker())
        return checkers
