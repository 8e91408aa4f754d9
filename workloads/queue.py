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
from typing import Any

from kafkaesque_harness.checkers.queue import QUEUE_VALUES
from kafkaesque_harness.history import FAIL, INFO, OK, Op
from kafkaesque_harness.history.extras import need
from kafkaesque_harness.workloads.base import (
    CrashSchedule,
    SpareMembers,
    close_confluent_consumer,
    confluent_rebalance_callbacks,
    drop_kafka_python_clients,
    kafka_python_rebalance_listener,
)

DEFINITE_SEND_ERRORS = {
    "NotEnoughReplicasError", "UnknownTopicOrPartitionError", "LeaderNotAvailableError",
    "NOT_ENOUGH_REPLICAS", "UNKNOWN_TOPIC_OR_PART", "LEADER_NOT_AVAILABLE",
}
SEND_TIMEOUT_S = 5.0
POLL_TIMEOUT_MS = 10  # a poll that finds nothing new returns at once: it is a read, not a wait


def send_outcome(error_name: str) -> str:
    """fail only for errors that mean the broker certainly did not append; info otherwise."""
    return FAIL if error_name in DEFINITE_SEND_ERRORS else INFO


class _QueueClient:
    """What both client libraries share: the topic, and one op dispatch."""

    def __init__(self, topic: str, partitions: int, acks: int, idempotent: bool = False, group: str | None = None):
        self.topic, self.partitions, self.acks, self.idempotent = topic, partitions, acks, idempotent
        self.group = group  # subscribe mode: the consumer group; None: assign every partition
        self.producer = None
        self.consumer = None
        self.bootstrap = ""
        # subscribe mode: the rebalances the consumer went through since the last completion (the client
        # library calls back from inside a poll), as the txn workload's rebalance_log
        self.rebalances: list[dict[str, Any]] = []

    def invoke(self, op: Op) -> Op:
        comp = self._invoke(op)
        if self.rebalances:
            comp.extra = {**(comp.extra or {}), "rebalance_log": self.rebalances}
            self.rebalances = []
        return comp

    def _invoke(self, op: Op) -> Op:
        if op.f == "send":
            return self._send(op)
        if op.f == "poll":
            return self._poll(op)
        if op.f == "final-poll":
            return final_poll_kafka_python(self.bootstrap, self.topic, op)
        if op.f == "crash":
            self.crash()
            return _completion(op, INFO, None, error="crashed")
        raise ValueError(f"unknown queue op {op.f!r}")

    def journal(self, kind: str, partitions: list[int]) -> None:
        """A rebalance callback: the checker judges a member's first read of an assigned partition against the
        commits acknowledged before the op it was assigned in (checkers/queue.py, lost-commit)."""
        self.rebalances.append({"keys": sorted(partitions), "type": kind})

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


class KafkaPythonQueueClient(_QueueClient):
    """One logical process's producer and consumer, with kafka-python."""

    def open(self, bootstrap: str) -> None:
        from kafka import KafkaProducer

        self.bootstrap = bootstrap
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap.split(","), acks="all" if self.acks == -1 else self.acks,
            retries=5 if self.idempotent else 0, enable_idempotence=self.idempotent, linger_ms=0,
            request_timeout_ms=3000, max_block_ms=3000,
            delivery_timeout_ms=4000, reconnect_backoff_max_ms=500, metadata_max_age_ms=2000)

    def _consumer(self):
        if self.consumer is None:
            from kafka import KafkaConsumer, TopicPartition

            self.consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap.split(","), enable_auto_commit=False, group_id=self.group,
                auto_offset_reset="earliest", request_timeout_ms=3000, fetch_max_wait_ms=100,
                session_timeout_ms=6000, heartbeat_interval_ms=1000,
                reconnect_backoff_max_ms=500, metadata_max_age_ms=2000, max_poll_records=500)
            if self.group is not None:
                self.consumer.subscribe([self.topic], listener=kafka_python_rebalance_listener(self.journal))
            else:
                tps = [TopicPartition(self.topic, k) for k in range(self.partitions)]
                self.consumer.assign(tps)
                self.consumer.seek_to_beginning(*tps)
        return self.consumer

    def _send(self, op: Op) -> Op:
        key, value = op.value
        try:
            fut = self.producer.send(self.topic, value=str(value).encode(), partition=key)
            md = fut.get(timeout=SEND_TIMEOUT_S)
            return _completion(op, OK, [key, [md.offset, value]])
        except Exception as e:  # noqa: BLE001 - every client error maps to fail or info
            name = type(e).__name__
            return _completion(op, self.outcome(name), [key, value], error=f"{name}: {e}"[:300])

    def _poll(self, op: Op) -> Op:
        try:
            batches = self._consumer().poll(timeout_ms=POLL_TIMEOUT_MS)
        except Exception as e:  # noqa: BLE001
            return _completion(op, FAIL, None, error=f"{type(e).__name__}: {e}"[:300])
        out: dict[str, list] = {}
        for tp, records in batches.items():
            out.setdefault(str(tp.partition), []).extend([r.offset, int(r.value)] for r in records)
        if self.group is None or not out:
            return _completion(op, OK, out)
        # subscribe mode: commit what was read, synchronously; the read stands whatever the commit does
        from kafka.structs import OffsetAndMetadata, TopicPartition

        committed = {str(k): recs[-1][0] + 1 for k, recs in out.items()}
        try:
            self.consumer.commit({TopicPartition(self.topic, int(k)): OffsetAndMetadata(o, "", -1)
                                  for k, o in committed.items()})
        except Exception as e:  # noqa: BLE001
            return _completion(op, OK, out, extra={"commit_error": f"{type(e).__name__}: {e}"[:300],
                                                   "commit_offsets": committed})
        return _completion(op, OK, out, extra={"committed": committed})

    def crash(self) -> None:
        p, c = self.producer, self.consumer
        self.producer = self.consumer = None
        drop_kafka_python_clients(p, c)

    def close(self) -> None:
        for c in (self.producer, self.consumer):
            if c is not None:
                try:
                    c.close(timeout=1) if c is self.producer else c.close()
                except Exception:  # noqa: BLE001 - closing a client to a dead broker must not hang the run
                    pass


def final_poll_kafka_python(bootstrap: str, topic: str, op: Op, timeout_s: float = 30.0) -> Op:
    """Drain one partition from its start to the HWM seen now; info when it cannot finish."""
    from kafka import KafkaConsumer, TopicPartition

    (key,) = op.value
    tp = TopicPartition(topic, key)
    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                      auto_offset_reset="earliest", request_timeout_ms=5000, fetch_max_wait_ms=100,
                      max_poll_records=5000)
    try:
        c.assign([tp])
        hwm = c.end_offsets([tp])[tp]
        c.seek_to_beginning(tp)
        records: list[list[int]] = []
        deadline = time.monotonic() + timeout_s
        while c.position(tp) < hwm:
            if time.monotonic() > deadline:
                return _completion(op, INFO, None, error=f"final read reached offset {c.position(tp)} of {hwm}")
            for recs in c.poll(timeout_ms=500).values():
                records.extend([r.offset, int(r.value)] for r in recs if r.offset < hwm)
        return _completion(op, OK, [key, hwm, records])
    except Exception as e:  # noqa: BLE001
        return _completion(op, INFO, None, error=f"{type(e).__name__}: {e}"[:300])
    finally:
        c.close()


CONFLUENT = ("confluent_kafka", "confluent", "the confluent-kafka client (--client confluent-kafka)")


class _ProduceRequests:
    """librdkafka's own account of a message's produce requests: its `msg` debug log, which confluent-kafka hands
    to `log` from the producer's poll(). "Produce MessageSet" is logged each time a request is built for the
    message, "encountered error" each time a request fails. A client sends one message at a time, so the lines
    logged between its produce() and the delivery report are that message's."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors: list[str] = []

    def log(self, level: int, fmt: str, fac: str = "", name: str = "", buf: str = "", *rest: Any) -> None:
        if fac == "PRODUCE" and "Produce MessageSet" in buf:
            self.requests += 1
        elif fac == "MSGSET" and "encountered error: " in buf:
            self.errors.append(buf.split("encountered error: ", 1)[1].split(" (actions", 1)[0][:200])

    def take(self) -> tuple[int, list[str]]:
        out = (self.requests, self.errors)
        self.requests, self.errors = 0, []
        return out


class ConfluentQueueClient(_QueueClient):
    """The same client with confluent-kafka (librdkafka). `members`: in subscribe mode, where a closed client
    leaves its group member for the next process (SpareMembers says why)."""

    def __init__(self, *args: Any, members: SpareMembers | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.members = members

    def open(self, bootstrap: str) -> None:
        Producer = need(*CONFLUENT).Producer

        self.bootstrap = bootstrap
        self.requests = _ProduceRequests()
        self.in_flight = 0  # messages produced whose delivery report has not come yet
        # debug=msg and log_level 7 for the produce requests' lines only (_ProduceRequests drops the rest).
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all" if self.acks == -1 else self.acks,
                                  "enable.idempotence": self.idempotent, "retries": 5 if self.idempotent else 0,
                                  "linger.ms": 0,
                                  "message.timeout.ms": 4000, "request.timeout.ms": 3000,
                                  "topic.metadata.refresh.interval.ms": 2000,
                                  "debug": "msg", "log_level": 7, "logger": self.requests})

    def _send(self, op: Op) -> Op:
        key, value = op.value
        result: dict[str, Any] = {}
        done = threading.Event()

        def on_delivery(err, msg):
            self.in_flight -= 1
            result["err"], result["offset"] = err, (msg.offset() if msg is not None else None)
            done.set()

        if self.in_flight:
            # An earlier send returned before its delivery report: let that report come first, so the
            # request lines counted below are this message's alone.
            self.producer.flush(SEND_TIMEOUT_S)
        self.requests.take()
        try:
            self.producer.produce(self.topic, value=str(value).encode(), partition=key, on_delivery=on_delivery)
        except Exception as e:  # noqa: BLE001 - raised before anything was sent (a full queue, a bad arg)
            return _completion(op, FAIL, [key, value], error=f"{type(e).__name__}: {e}"[:300])
        self.in_flight += 1
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while not done.is_set() and time.monotonic() < deadline:
            self.producer.poll(0.05)
        if not done.is_set():
            return _completion(op, INFO, [key, value], error="no delivery report in time")
        requests, errors = self.requests.take()
        # A non-idempotent producer's re-sent message may be appended once per request (module doc); an
        # idempotent producer's re-sends carry its sequence numbers, which the broker deduplicates.
        resent = {"resent": {"requests": requests, "errors": errors}} if requests > 1 and not self.idempotent else None
        err = result["err"]
        if err is None:
            return _completion(op, OK, [key, [result["offset"], value]], extra=resent)
        type_ = INFO if resent else self.outcome(err.name())
        return _completion(op, type_, [key, value], error=f"{err.name()}: {err.str()}"[:300], extra=resent)

    def _poll(self, op: Op) -> Op:
        confluent = need(*CONFLUENT)
        Consumer, TopicPartition = confluent.Consumer, confluent.TopicPartition

        try:
            if self.consumer is None and self.group is not None and self.members is not None:
                spare = self.members.take()  # a member an earlier process left: it joins again as ours
                if spare is not None:
                    self.consumer = spare
                    self._subscribe()
            if self.consumer is None:
                self.consumer = Consumer({"bootstrap.servers": self.bootstrap,
                                          "group.id": self.group or "kafkaesque-unused",
                                          "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                          "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                                          "log_level": 0})
                if self.group is not None:
                    self._subscribe()
                else:
                    self.consumer.assign([TopicPartition(self.topic, k, 0) for k in range(self.partitions)])
            msgs = self.consumer.consume(num_messages=500, timeout=POLL_TIMEOUT_MS / 1000)
        except Exception as e:  # noqa: BLE001
            return _completion(op, FAIL, None, error=f"{type(e).__name__}: {e}"[:300])
        out: dict[str, list] = {}
        for m in msgs:
            if m.error() is None:
                out.setdefault(str(m.partition()), []).append([m.offset(), int(m.value())])
        if self.group is None or not out:
            return _completion(op, OK, out)
        # subscribe mode: commit what was read, synchronously; the read stands whatever the commit does
        committed = {str(k): recs[-1][0] + 1 for k, recs in out.items()}
        try:
            answered = self.consumer.commit(offsets=[TopicPartition(self.topic, int(k), o)
                                                     for k, o in committed.items()], asynchronous=False)
        except Exception as e:  # noqa: BLE001
            return _completion(op, OK, out, extra={"commit_error": f"{type(e).__name__}: {e}"[:300],
                                                   "commit_offsets": committed})
        # A synchronous commit raises for the request; each partition's own error comes back in its
        # TopicPartition, and such a partition was not committed
        failed = [tp for tp in answered or [] if tp.error is not None]
        if failed:
            refused = {str(tp.partition) for tp in failed}
            extra = {"commit_error": "; ".join(f"partition {tp.partition}: {tp.error}" for tp in failed)[:300],
                     "commit_offsets": {k: o for k, o in committed.items() if k in refused}}
            if len(refused) < len(committed):
                extra["committed"] = {k: o for k, o in committed.items() if k not in refused}
            return _completion(op, OK, out, extra=extra)
        return _completion(op, OK, out, extra={"committed": committed})

    def _subscribe(self) -> None:
        """Join the group with this client's rebalance journal (a spare member's earlier callbacks replaced)."""
        self.consumer.subscribe([self.topic], **confluent_rebalance_callbacks(self.journal))

    def crash(self) -> None:
        # Dropping the last reference destroys the handles without rd_kafka_consumer_close: no commit, no
        # leave-group (the coordinator ends the member's session when it times out).
        self.producer = self.consumer = None

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(0.5)
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            if self.group is not None and self.members is not None:
                self.members.put(consumer)  # leaves the group; the worker's next process joins with it
            else:  # dropped unclosed if its group did not revoke in time
                close_confluent_consumer(consumer, subscribed=self.group is not None)


def _completion(op: Op, type_: str, value: Any, error: Any = None, extra: dict | None = None) -> Op:
    return Op(type=type_, f=op.f, process=op.process, value=value, node=op.node, error=error, extra=extra)


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

    def new_client(self, test: dict[str, Any]):
        acks = {"all": -1, "-1": -1, "1": 1, "0": 0}[str(test.get("acks", "all"))]
        if self.client == "confluent-kafka":
            return ConfluentQueueClient(self.topic, self.partitions, acks, self.idempotent, self.group,
                                        members=self.members)
        return KafkaPythonQueueClient(self.topic, self.partitions, acks, self.idempotent, self.group)

    def op_mix(self, test: dict[str, Any]):
        crashes = CrashSchedule(self.crash_interval_s, int(test.get("concurrency", 1)))

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
