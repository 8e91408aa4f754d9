"""The confluent-kafka (librdkafka) adapter: the queue workload's client (ConfluentQueueClient), the txn
workload's library (ConfluentTxnLibrary), how a librdkafka group member is let go of safely, the spare
members closed processes leave, how its rebalances reach the history, and how its own resets and leader
changes do (ConsumerLog: the client events of history/clients.py). Everything confluent-kafka-specific
lives here.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.history import FAIL, INFO, OK, Op, client_id
from kafkaesque_harness.history.extras import need
from kafkaesque_harness.workloads.base import PARKED_CONSUMERS, ClientEventLog
from kafkaesque_harness.workloads.kafka_python import final_poll_kafka_python
from kafkaesque_harness.workloads.queue_client import POLL_TIMEOUT_MS, SEND_TIMEOUT_S, QueueClient, completion
from kafkaesque_harness.workloads.txn_client import OP_TIMEOUT_S, POLL_TIMEOUT_S, CommitNotSent, TxnLibrary


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


CONFLUENT = ("confluent_kafka", "confluent", "the confluent-kafka client (--client confluent-kafka)")
LIBRARY = "confluent-kafka"

# librdkafka 2.16's own words (rdkafka_offset.c, rdkafka_topic.c), as its log hands them to `logger`:
#   OFFSET (warning) "t [0]: offset reset (at offset 1000 (leader epoch -1), broker 1) to cached BEGINNING offset
#                     offset 0 (leader epoch -1): fetch failed due to requested offset not available on the broker:
#                     Broker: Offset out of range"   (or "... to BEGINNING: ..." before its ListOffsets)
#   BROKER (debug topic) "t [0]: leader 1 epoch 0 -> leader 2 epoch 1"   (on every Metadata answer, changed or not)
_RESET = re.compile(r"(?P<topic>[^\s\[\]]+) \[(?P<p>\d+)\]: offset reset \(at (?P<at>.*?), broker (?P<broker>-?\d+)\) "
                    r"to (?P<to>.*?): (?P<why>.*)$")
_LEADER = re.compile(r"(?P<topic>[^\s\[\]]+) \[(?P<p>\d+)\]: leader (?P<l0>-?\d+) epoch (?P<e0>-?\d+) -> "
                     r"leader (?P<l1>-?\d+) epoch (?P<e1>-?\d+)")
_OFFSET = re.compile(r"offset (-?\d+)")
_EPOCH = re.compile(r"leader epoch (-?\d+)")
# what a consumer's config adds so that its log reaches ConsumerLog: the OFFSET warnings at any level above 3,
# the leader lines with debug "topic" (about one line per Metadata answer a partition: a consumer's metadata
# refreshes are rare, every 5 minutes, or on an error)
CONSUMER_LOGGING = {"log_level": 7, "debug": "topic"}


class ConsumerLog:
    """A librdkafka consumer's `logger` (confluent-kafka serves its log from poll()/consume() and calls
    `log(level, fmt, facility, name, text)`): the client events (history/clients.py) in it. librdkafka has no
    reset callback; it says each reset in an OFFSET warning ("offset reset (at offset X (leader epoch E), broker
    B) to BEGINNING: ... Offset out of range"), and each metadata answer's leader for a partition with debug
    "topic" ("leader X epoch E -> leader Y epoch F"; it keeps the newer epoch, "ignoring outdated metadata
    update" otherwise). `events` may be pointed at another process's log when a spare group member changes
    hands (SpareMembers); `client` is the client id the handle sends, which stays its first process's."""

    def __init__(self, events: ClientEventLog, topic: str, client: str):
        self.events, self.topic, self.client = events, topic, client
        self._leaders: dict[int, tuple[int, int]] = {}

    def log(self, level: int, fmt: str, fac: str = "", name: str = "", buf: str = "", *rest: Any) -> None:
        if fac == "OFFSET" and "offset reset" in buf:
            self._reset(buf)
        elif fac == "BROKER" and " -> leader " in buf:
            self._leader(buf)

    def _reset(self, buf: str) -> None:
        m = _RESET.search(buf)
        if m is None or m["topic"] != self.topic:
            return
        key, to_text, why = int(m["p"]), m["to"], m["why"]
        at, to = _OFFSET.search(m["at"]), _OFFSET.findall(to_text)
        at_epoch = _EPOCH.search(m["at"])
        truncation = "truncat" in why.lower()
        policy = ("truncation" if truncation else "earliest" if "BEGINNING" in to_text
                  else "latest" if "END" in to_text else "offset")
        error = ("OFFSET_OUT_OF_RANGE" if "Offset out of range" in why else "LOG_TRUNCATION" if truncation
                 else why.rsplit(": ", 1)[-1][:120])
        if at is None:  # "at offset INVALID ... no previously committed offset available": no position yet
            self.events.add("seek", topic=self.topic, key=key, to=int(to[-1]) if to else None, why="no-position",
                            policy=policy)
            return
        broker = int(m["broker"])
        leader = self._leaders.get(key)
        self.events.add("reset", topic=self.topic, key=key, client=self.client,
                        **{"from": int(at.group(1)) if at else None},
                        from_epoch=int(at_epoch.group(1)) if at_epoch else None,
                        to=int(to[-1]) if to else None, policy=policy, error=error, broker=broker,
                        leader_epoch=leader[1] if leader is not None and leader[0] == broker else None,
                        detail=buf.split("]: ", 1)[-1][:300])

    def _leader(self, buf: str) -> None:
        m = _LEADER.search(buf)
        if m is None or m["topic"] != self.topic:
            return
        key, now = int(m["p"]), (int(m["l1"]), int(m["e1"]))
        before = self._leaders.get(key, (int(m["l0"]), int(m["e0"])))
        self._leaders[key] = now
        if before != now:
            self.events.add("leader", topic=self.topic, key=key, client=self.client, **{"from": before[0]},
                            to=now[0], from_epoch=before[1], leader_epoch=now[1])


_CONSUMER_LOGS: dict[int, ConsumerLog] = {}  # id(consumer) -> its log (parked members are never freed)


def consumer_log_of(consumer: Any) -> ConsumerLog | None:
    return _CONSUMER_LOGS.get(id(consumer))


def new_consumer(Consumer: Any, config: dict[str, Any], events: ClientEventLog, topic: str, cid: str) -> Any:
    """A confluent-kafka Consumer whose log tells `events` its resets and leader changes (ConsumerLog)."""
    log = ConsumerLog(events, topic, cid)
    consumer = Consumer({**config, "client.id": cid, "logger": log, **CONSUMER_LOGGING})
    _CONSUMER_LOGS[id(consumer)] = log
    return consumer


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


class ConfluentQueueClient(QueueClient):
    """The same client with confluent-kafka (librdkafka). `members`: in subscribe mode, where a closed client
    leaves its group member for the next process (SpareMembers says why)."""

    LIBRARY = LIBRARY

    def __init__(self, *args: Any, members: SpareMembers | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.members = members

    def open(self, bootstrap: str) -> None:
        Producer = need(*CONFLUENT).Producer

        self.bootstrap = bootstrap
        self.requests = _ProduceRequests()
        self.in_flight = 0  # messages produced whose delivery report has not come yet
        # debug=msg and log_level 7 for the produce requests' lines only (_ProduceRequests drops the rest).
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": self.client_id,
                                  "acks": "all" if self.acks == -1 else self.acks,
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
            return completion(op, FAIL, [key, value], error=f"{type(e).__name__}: {e}"[:300])
        self.in_flight += 1
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while not done.is_set() and time.monotonic() < deadline:
            self.producer.poll(0.05)
        if not done.is_set():
            return completion(op, INFO, [key, value], error="no delivery report in time")
        requests, errors = self.requests.take()
        # A non-idempotent producer's re-sent message may be appended once per request (module doc); an
        # idempotent producer's re-sends carry its sequence numbers, which the broker deduplicates.
        resent = {"resent": {"requests": requests, "errors": errors}} if requests > 1 and not self.idempotent else None
        err = result["err"]
        if err is None:
            return completion(op, OK, [key, [result["offset"], value]], extra=resent)
        type_ = INFO if resent else self.outcome(err.name())
        return completion(op, type_, [key, value], error=f"{err.name()}: {err.str()}"[:300], extra=resent)

    def _poll(self, op: Op) -> Op:
        confluent = need(*CONFLUENT)
        Consumer, TopicPartition = confluent.Consumer, confluent.TopicPartition

        try:
            if self.consumer is None and self.group is not None and self.members is not None:
                spare = self.members.take()  # a member an earlier process left: it joins again as ours
                if spare is not None:
                    self.consumer = spare
                    log = consumer_log_of(spare)
                    if log is not None:
                        log.events = self.events  # its client id stays the one it was made with
                    self._subscribe()
            if self.consumer is None:
                self.consumer = new_consumer(Consumer, {"bootstrap.servers": self.bootstrap,
                                                        "group.id": self.group or "kafkaesque-unused",
                                                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                                        "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
                                             self.events, self.topic, self.client_id)
                if self.group is not None:
                    self._subscribe()
                else:
                    self.consumer.assign([TopicPartition(self.topic, k, 0) for k in range(self.partitions)])
                    for k in range(self.partitions):
                        self.events.add("seek", topic=self.topic, key=k, to=0, why="workload")
            msgs = self.consumer.consume(num_messages=500, timeout=POLL_TIMEOUT_MS / 1000)
        except Exception as e:  # noqa: BLE001
            return completion(op, FAIL, None, error=f"{type(e).__name__}: {e}"[:300])
        out: dict[str, list] = {}
        for m in msgs:
            if m.error() is None:
                out.setdefault(str(m.partition()), []).append([m.offset(), int(m.value())])
        if self.group is None or not out:
            return completion(op, OK, out)
        # subscribe mode: commit what was read, synchronously; the read stands whatever the commit does
        committed = {str(k): recs[-1][0] + 1 for k, recs in out.items()}
        try:
            answered = self.consumer.commit(offsets=[TopicPartition(self.topic, int(k), o)
                                                     for k, o in committed.items()], asynchronous=False)
        except Exception as e:  # noqa: BLE001
            return completion(op, OK, out, extra={"commit_error": f"{type(e).__name__}: {e}"[:300],
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
            return completion(op, OK, out, extra=extra)
        return completion(op, OK, out, extra={"committed": committed})

    def _subscribe(self) -> None:
        """Join the group with this client's rebalance journal (a spare member's earlier callbacks replaced)."""
        self.consumer.subscribe([self.topic], **confluent_rebalance_callbacks(self.journal))

    def _final_poll(self, op: Op) -> Op:
        return final_poll_kafka_python(self.bootstrap, self.topic, op)  # the read is the same with either library

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


class ConfluentTxnLibrary(TxnLibrary):
    """confluent-kafka (librdkafka): KafkaError.fatal() / txn_requires_abort() / retriable() classify errors."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, txn_id: str, o: dict[str, Any],
                 on_rebalance: Callable[[str, list[int]], None], members: SpareMembers | None = None,
                 process: int | None = None):
        self.ck = need("confluent_kafka", "confluent", "the txn workload (--client confluent-kafka)")
        self.bootstrap, self.topic, self.partitions, self.txn_id, self.o = bootstrap, topic, partitions, txn_id, o
        self.on_rebalance = on_rebalance
        self.client_id = client_id(process)
        self.events = ClientEventLog(LIBRARY)
        self.members = members  # where a closed library leaves its group member for the next (SpareMembers)
        self.producer = None
        self.consumer = None
        self.subscribed = False
        self.was_member = False  # ever subscribed: rebalance events may still be queued after an assign()
        self.fatal = None  # the producer's fatal error as librdkafka reported it (error_cb), before a commit

    def _on_producer_error(self, err) -> None:
        if err.fatal():
            self.fatal = err

    def ensure_producer(self) -> None:
        if self.producer is None:
            self.fatal = None
            p = self.ck.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                                  "client.id": self.client_id,
                                  "error_cb": self._on_producer_error,
                                  "transaction.timeout.ms": self.o["txn_timeout_ms"], "acks": "all",
                                  "linger.ms": 0, "message.timeout.ms": min(4000, self.o["txn_timeout_ms"]),
                                  "socket.timeout.ms": 3000,
                                  "topic.metadata.refresh.interval.ms": 2000, "log_level": 0})
            p.init_transactions(OP_TIMEOUT_S)
            self.producer = p

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, key: int, value: int) -> Callable[[], int | None]:
        got: dict[str, int] = {}

        def delivered(err, msg) -> None:
            if err is None and msg is not None:
                got["offset"] = msg.offset()
            elif err is not None:  # the library's own answer (its commit then refuses: docs/FINDINGS.md)
                self.events.add("send-error", topic=self.topic, key=key, value=value,
                                error=f"{err.name()}: {err.str()}"[:300])

        self.producer.produce(self.topic, value=str(value).encode(), partition=key, on_delivery=delivered)
        self.producer.poll(0)
        return lambda: got.get("offset")

    def flush(self) -> None:
        left = self.producer.flush(OP_TIMEOUT_S)  # serves the delivery reports
        if left:
            raise TimeoutError(f"{left} record(s) of the transaction undelivered after {OP_TIMEOUT_S:g} s")

    def send_offsets(self) -> bool:
        if not self.subscribed or self.consumer is None:
            return False
        positions = [tp for tp in self.consumer.position(self.consumer.assignment()) if tp.offset >= 0]
        if not positions:
            return False
        self.producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(), OP_TIMEOUT_S)
        return True

    def commit(self) -> None:
        # A producer in librdkafka's fatal state answers commit_transaction with that error and sends no EndTxn
        # (rdkafka_txnmgr.c: a commit needs the IN_TRANSACTION state). error_cb has told us of the fatal error
        # only if it came before this call (served by the poll after each produce and by the flush).
        if self.fatal is not None:
            raise CommitNotSent(f"the producer failed before the commit, so none was sent: {self.fatal.name()}: "
                                f"{self.fatal.str()}")
        self.producer.commit_transaction(OP_TIMEOUT_S)

    def abort(self) -> None:
        self.producer.abort_transaction(OP_TIMEOUT_S)

    def _consumer(self):
        if self.consumer is None and self.members is not None:
            spare = self.members.take()  # a member an earlier process left: it starts over with a manual assignment
            if spare is not None:
                self.consumer, self.was_member = spare, True
                log = consumer_log_of(spare)
                if log is not None:
                    log.events = self.events
                self.consumer.assign([self.ck.TopicPartition(self.topic, k) for k in range(self.partitions)])
        if self.consumer is None:
            self.consumer = new_consumer(self.ck.Consumer, {
                "bootstrap.servers": self.bootstrap, "group.id": self.o["group"], "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "isolation.level": self.o["isolation"],
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}, self.events, self.topic, self.client_id)
            self.consumer.assign([self.ck.TopicPartition(self.topic, k) for k in range(self.partitions)])
        return self.consumer

    def poll(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for m in self._consumer().consume(num_messages=500, timeout=POLL_TIMEOUT_S):
            if m.error() is None:
                out.setdefault(str(m.partition()), []).append([m.offset(), int(m.value())])
            elif m.error().fatal():
                raise self.ck.KafkaException(m.error())
        return out

    def assign(self, keys: list[int], seek: dict[int, int]) -> None:
        c = self._consumer_out_of_the_group()
        c.assign([self.ck.TopicPartition(self.topic, k, seek[k]) if k in seek else self.ck.TopicPartition(self.topic, k)
                  for k in keys])
        for k in keys:
            if k in seek:
                self.events.add("seek", topic=self.topic, key=k, to=seek[k], why="workload")

    def subscribe(self) -> None:
        c = self._consumer()
        if not self.subscribed:
            c.unassign()

        c.subscribe([self.topic], **confluent_rebalance_callbacks(self.on_rebalance))
        self.subscribed = self.was_member = True

    def final_read(self, key: int, timeout_s: float) -> tuple[int, list] | None:
        c = self.ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "kafkaesque-final-read",
                              "client.id": self.client_id,
                              "enable.auto.commit": False, "isolation.level": self.o["isolation"],
                              "enable.partition.eof": True, "log_level": 0})
        try:
            tp = self.ck.TopicPartition(self.topic, key, self.ck.OFFSET_BEGINNING)
            _, end = c.get_watermark_offsets(self.ck.TopicPartition(self.topic, key), timeout=OP_TIMEOUT_S)
            c.assign([tp])
            records: list[list[int]] = []
            deadline = time.monotonic() + timeout_s
            if end == 0:
                return end, records
            while time.monotonic() < deadline:
                for m in c.consume(num_messages=1000, timeout=0.5):
                    err = m.error()
                    if err is None:
                        if m.offset() < end:
                            records.append([m.offset(), int(m.value())])
                    elif err.code() == self.ck.KafkaError._PARTITION_EOF and m.offset() >= end:
                        return end, records  # at the end: read_committed hides what is not committed
            return None
        finally:
            c.close()

    def _kafka_error(self, e: BaseException):
        return e.args[0] if isinstance(e, self.ck.KafkaException) and e.args else None

    def is_fatal(self, e: BaseException) -> bool:
        err = self._kafka_error(e)
        return bool(err is not None and hasattr(err, "fatal") and err.fatal())

    def commit_retriable(self, e: BaseException) -> bool:
        # librdkafka: a commit_transaction that failed retriably (a timeout) may be called again and
        # then returns the outcome of the same commit; txn_requires_abort() errors must be aborted instead
        err = self._kafka_error(e)
        return bool(err is not None and hasattr(err, "retriable") and err.retriable()
                    and not err.txn_requires_abort())

    def discard_producer(self) -> None:
        self.producer = None

    def producer_identity(self) -> dict[str, int] | None:
        return None  # librdkafka keeps the producer id and epoch to itself

    def crash(self) -> None:
        # Dropping the last reference destroys the handles without rd_kafka_consumer_close (no leave-group,
        # no offset commit) and without flushing or aborting the producer's transaction.
        self.producer = self.consumer = None
        self.subscribed = False

    def close(self) -> None:
        if self.consumer is not None:
            if self.was_member and self.members is not None:
                self.members.put(self.consumer)  # leaves the group; the worker's next process takes it over
            else:
                close_confluent_consumer(self.consumer, self.was_member)
        self.producer = self.consumer = None
