"""The txn workload: Jepsen's Kafka transaction test (jepsen.tests.kafka) over the Kafka API.

Each logical process has a transactional producer and a read_committed consumer of one real client
library (confluent-kafka by default: `--client confluent-kafka`; kafka-python 3 has a transactional
producer too). Keys are the partitions of one topic. The history (the schema checkers/txn.py reads):

  txn        invoke [["send", k, v], ["poll"], ...]  (1-4 micro-ops)
             ok     [["send", k, [offset, v]], ["poll", {"<k>": [[offset, v], ...]}], ...]
  assign     invoke [k, ...]   ok the same; an "unseen" extra {"<k>": offset} seeks there (poll-unseen)
  subscribe  invoke [k, ...]   ok the same (one topic: the group decides which keys the member gets)
  crash      invoke null       info: the client was dropped without a clean shutdown
A txn that a producer stall held (below) carries "stalled": {"fault": its fault record's id, "seconds": how long}
on its completion.
  poll       final: true, key: k   ok [["poll", {"<k>": [...]}]], end_offset: the key drained from its
             start up to there, read_committed
Completions carry "rebalance_log": [{"keys": [...], "type": "assigned"|"revoked"}] when the
process's consumer went through rebalances since its last op (Jepsen's :rebalance-log).

Outcomes are exact (DESIGN.md): a txn is ok only when commit_transaction returned; fail only when it
definitely did not commit: abort_transaction returned (the coordinator wrote the abort; it refuses to
abort a transaction it committed), or the error came before anything was sent, or before the commit was
called (only the producer's EndTxn commits a transaction; one whose producer never asked is aborted, by
the abort, the coordinator's timeout or the next producer's re-init), or the producer had failed
fatally (fenced) before the commit was called, so the commit sent nothing (CommitNotSent: librdkafka
answers a commit outside a transaction's open state without a request); info otherwise (a commit that
timed out or failed after sends, a crash). A txn the workload chose to abort
(`txn_abort_p`, the invoke's "abort": true) ends fail with error "aborted-by-workload", its sends
filled with the offsets their delivery reports gave. A fatal error (a fenced producer) discards the
producer; the next op makes a new one, which re-initialises the same transactional.id.

The transactional.id is per worker slot (process mod concurrency): a fresh process after an info
re-inits its slot's id, which fences the old producer and aborts its open transaction (KIP-98), as a
restarted application instance does; read_committed readers then do not wait a transaction timeout
for the crashed process's transaction.

Producer stalls (the stall-producer fault, workloads/stalls.py): the workload shares one
ProducerStallControl between its clients and the run's fault actions (`producer_stalls()`). A client
that is asked to stall does it at its next stall point: in a transaction, before a send to a partition
the transaction has not written yet that follows an earlier send, it flushes (so a send of the open
transaction is delivered), stops for the asked seconds,
then goes on with the rest of the same transaction (more sends, then the commit; a transaction the workload
means to abort is never stalled). The op's
outcome follows the rules above whatever the stall made of it; the control is told the outcome.

Options (workload_options, `--workload-option KEY=VALUE`): see TXN_OPTIONS.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import Any

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
from kafkaesque_harness.workloads.stalls import ProducerStallControl, Stall, outcome_of

TXN_OPTIONS = {
    "txn_abort_p": "probability that the workload aborts a transaction instead of committing it (default 0.1)",
    "subscribe_p": "probability that a (re)assignment op subscribes to the topic through the group rather than "
                   "assigning keys (default 0.5)",
    "reassign_p": "probability that an op is an assign or subscribe instead of a transaction (default 0.05)",
    "crash_clients_interval_s": "mean seconds between deliberate client crashes of each process (0: none; "
                                "default 0)",
    "crash_on_rebalance": "a consumer whose group rebalances during an op crashes (default false)",
    "poll_unseen": "assign ops that seek to offsets written but not yet polled by anyone (default true)",
    "isolation": "read_committed (default) or read_uncommitted",
    "group": "the consumer group id (default kafkaesque-txn)",
    "max_txn_len": "most micro-ops in a transaction, 1-4 (default 4)",
    "txn_timeout_ms": "transaction.timeout.ms of the producers (default 10000)",
    # Read by the checker (checkers/txn.py check_options), set on the same command line:
    "allowed": "anomaly names the txn checker reports as allowed rather than as anomalies (comma-separated)",
    "ww_deps": "the checker's dependency graph also links successive writes of a key (ww, as Jepsen's option)",
    "rw_deps": "the checker's dependency graph also has anti-dependencies (rw, as Jepsen's option)",
    "sub_via": "how consumers took keys, for the checker's allowed rules (default: from subscribe_p)",
}
ISOLATIONS = ("read_committed", "read_uncommitted")
OP_TIMEOUT_S = 5.0        # each blocking client call (init, commit, abort, flush, send offsets)
POLL_TIMEOUT_S = 0.05     # a poll micro-op is a read, not a wait
FINAL_READ_TIMEOUT_S = 30.0
WORKLOAD_ABORT = "aborted-by-workload"
CRASHED_ON_REBALANCE = "crashed-on-rebalance"


class CommitNotSent(Exception):
    """The library knows that no commit of this transaction went out: its producer had failed fatally (was
    fenced) before commit was called. The transaction cannot have committed: the op is a definite fail."""


class CrashedOnRebalance(Exception):
    """The consumer went through a rebalance during this op and the test asks clients to crash then."""


class TxnOptionError(ValueError):
    """A workload option of the txn workload that cannot be used; the message is one sentence with the fix."""


def txn_options(options: dict[str, Any]) -> dict[str, Any]:
    """The txn workload's options with their defaults, checked (TxnOptionError names a bad one)."""
    o = {"txn_abort_p": 0.1, "subscribe_p": 0.5, "reassign_p": 0.05, "crash_clients_interval_s": 0.0,
         "crash_on_rebalance": False, "poll_unseen": True, "isolation": "read_committed",
         "group": "kafkaesque-txn", "max_txn_len": 4, "txn_timeout_ms": 10000}
    o.update({k: v for k, v in options.items() if k in TXN_OPTIONS})
    for key in ("txn_abort_p", "subscribe_p", "reassign_p"):
        if not isinstance(o[key], int | float) or not 0 <= o[key] <= 1:
            raise TxnOptionError(f"workload option {key}={o[key]!r} is not a probability; give a number from 0 to 1")
    if not isinstance(o["crash_clients_interval_s"], int | float) or o["crash_clients_interval_s"] < 0:
        raise TxnOptionError(f"workload option crash_clients_interval_s={o['crash_clients_interval_s']!r} is not "
                             "a number of seconds; give 0 (no crashes) or more")
    if o["isolation"] not in ISOLATIONS:
        raise TxnOptionError(f"workload option isolation={o['isolation']!r} is unknown; valid: {', '.join(ISOLATIONS)}")
    if o["max_txn_len"] not in (1, 2, 3, 4):
        raise TxnOptionError(f"workload option max_txn_len={o['max_txn_len']!r} is not 1 to 4 (Jepsen's "
                             "transactions have at most four micro-ops)")
    return o


# --- what the op mix knows of the run: offsets written and seen (Jepsen's poll-unseen) ----------------
class OffsetTracker:
    """The highest offset acknowledged in a committed send and the highest polled in a committed
    transaction, per key, over all processes: a key whose written offsets run past what anyone polled is
    unseen (Jepsen's poll-unseen), and an assign op seeks there. Shared by the workload's clients
    (thread-safe)."""

    def __init__(self) -> None:
        self._sent: dict[int, int] = {}
        self._polled: dict[int, int] = {}
        self._lock = threading.Lock()

    def sent(self, key: int, offset: int) -> None:
        with self._lock:
            self._sent[key] = max(offset, self._sent.get(key, -1))

    def polled(self, records: dict[str, list]) -> None:
        with self._lock:
            for k, recs in records.items():
                if recs:
                    self._polled[int(k)] = max(int(recs[-1][0]), self._polled.get(int(k), -1))

    def unseen(self) -> dict[int, int]:
        """key -> the first offset past what anyone polled, for the keys written beyond it."""
        with self._lock:
            return {k: self._polled.get(k, -1) + 1 for k, top in sorted(self._sent.items())
                    if top > self._polled.get(k, -1)}


# --- the op mix -----------------------------------------------------------------------------------------
class TxnOpMix:
    """(rng, process) -> (f, value[, extra]): Jepsen's mix of transactions of 1-4 sends and polls, with
    assign/subscribe ops, poll-unseen assigns and crash ops at an interval. Deterministic given the rng and
    the clock's readings; `clock` is injectable for the tests."""

    def __init__(self, options: dict[str, Any], partitions: int, concurrency: int, tracker: OffsetTracker,
                 clock: Callable[[], float] = time.monotonic):
        self.o, self.partitions, self.concurrency = options, partitions, max(1, concurrency)
        self.tracker, self.clock = tracker, clock
        self._values = itertools.count(1)
        self._crashes = CrashSchedule(options["crash_clients_interval_s"], concurrency, clock)

    def __call__(self, rng: random.Random, process: int) -> tuple:
        if self._crashes.due(rng):
            return "crash", None
        if rng.random() < self.o["reassign_p"]:
            return self._reassign(rng)
        n = rng.randint(1, self.o["max_txn_len"])
        micro: list[list] = []
        for _ in range(n):
            if rng.random() < 0.5:
                micro.append(["send", rng.randrange(self.partitions), next(self._values)])
            else:
                micro.append(["poll"])
        if rng.random() < self.o["txn_abort_p"]:
            return "txn", micro, {"abort": True}
        return "txn", micro

    def _reassign(self, rng: random.Random) -> tuple:
        keys = list(range(self.partitions))
        if rng.random() < self.o["subscribe_p"]:
            return "subscribe", keys  # one topic: subscribing takes every key; the group divides them
        unseen = self.tracker.unseen() if self.o["poll_unseen"] else {}
        if unseen and rng.random() < 0.5:
            return "assign", sorted(unseen), {"unseen": {str(k): o for k, o in unseen.items()}}
        chosen = sorted(rng.sample(keys, rng.randint(1, len(keys))))
        return "assign", chosen

# --- the client library adapters -------------------------------------------------------------------------
class TxnLibrary:
    """What the txn client needs of a Kafka client library: one process's transactional producer and
    consumer. The two implementations below are thin; the outcome rules live in TxnClient."""

    producer: Any = None  # None until ensure_producer() brought one up (init_transactions returned)
    txn_id: str  # the transactional.id of its producer

    def ensure_producer(self) -> None: ...
    def producer_identity(self) -> dict[str, int] | None:
        """{"producer_id", "producer_epoch"} of the producer where the library tells them; None where not."""
    def begin(self) -> None: ...
    def send(self, key: int, value: int) -> Callable[[], int | None]:
        """Queue a record of the open transaction; returns a reader of its offset (None until delivered)."""
    def flush(self) -> None: ...
    def send_offsets(self) -> bool:
        """Put the consumer's positions into the transaction when it is a group member; False when not."""
    def commit(self) -> None:
        """commit_transaction; CommitNotSent when the library knows it sent none (a producer failed before)."""
    def abort(self) -> None: ...
    def poll(self) -> dict[str, list]: ...
    def assign(self, keys: list[int], seek: dict[int, int]) -> None: ...
    def subscribe(self) -> None: ...
    def final_read(self, key: int, timeout_s: float) -> tuple[int, list] | None:
        """(end offset, records) of the key read from its start to its high watermark; None when unfinished."""
    def is_fatal(self, e: BaseException) -> bool: ...
    def commit_retriable(self, e: BaseException) -> bool:
        """Whether commit may be called again after this error (librdkafka: KafkaError.retriable())."""
    def discard_producer(self) -> None: ...
    def crash(self) -> None:
        """Drop the producer and consumer without closing them (no abort, no leave-group, no commit)."""
    def close(self) -> None: ...


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


class ConfluentTxnLibrary(TxnLibrary):
    """confluent-kafka (librdkafka): KafkaError.fatal() / txn_requires_abort() / retriable() classify errors."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, txn_id: str, o: dict[str, Any],
                 on_rebalance: Callable[[str, list[int]], None], members: SpareMembers | None = None):
        self.ck = need("confluent_kafka", "confluent", "the txn workload (--client confluent-kafka)")
        self.bootstrap, self.topic, self.partitions, self.txn_id, self.o = bootstrap, topic, partitions, txn_id, o
        self.on_rebalance = on_rebalance
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
                self.consumer.assign([self.ck.TopicPartition(self.topic, k) for k in range(self.partitions)])
        if self.consumer is None:
            self.consumer = self.ck.Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": self.o["group"], "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "isolation.level": self.o["isolation"],
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "log_level": 0})
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
        c = self._consumer()
        if self.subscribed:
            c.unsubscribe()
            self.subscribed = False
        c.assign([self.ck.TopicPartition(self.topic, k, seek[k]) if k in seek else self.ck.TopicPartition(self.topic, k)
                  for k in keys])

    def subscribe(self) -> None:
        c = self._consumer()
        if not self.subscribed:
            c.unassign()

        c.subscribe([self.topic], **confluent_rebalance_callbacks(self.on_rebalance))
        self.subscribed = self.was_member = True

    def final_read(self, key: int, timeout_s: float) -> tuple[int, list] | None:
        c = self.ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "kafkaesque-final-read",
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


def _bounded(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run a kafka-python call that takes no timeout (commit_transaction, abort_transaction wait forever)
    on a thread of its own; a TimeoutError after `timeout_s` leaves it running, and the client is then
    given up (an info outcome retires the process and its client)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=target, name=f"kafka-python {what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError(f"{what} did not return in {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("result")


class KafkaPythonTxnLibrary(TxnLibrary):
    """kafka-python 3 (KafkaProducer(transactional_id=...), KafkaConsumer(isolation_level=...))."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, txn_id: str, o: dict[str, Any],
                 on_rebalance: Callable[[str, list[int]], None]):
        self.bootstrap, self.topic, self.partitions, self.txn_id, self.o = bootstrap, topic, partitions, txn_id, o
        self.on_rebalance = on_rebalance
        self.producer = None
        self.consumer = None
        self.subscribed = False
        self._broken = False  # a call that never returned: the producer is not used again

    def ensure_producer(self) -> None:
        if self.producer is None:
            from kafka import KafkaProducer

            p = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), transactional_id=self.txn_id,
                              transaction_timeout_ms=self.o["txn_timeout_ms"], acks="all", linger_ms=0,
                              request_timeout_ms=3000, max_block_ms=int(OP_TIMEOUT_S * 1000),
                              delivery_timeout_ms=min(4000, self.o["txn_timeout_ms"]),
                              reconnect_backoff_max_ms=500, metadata_max_age_ms=2000)
            self.producer = p
            try:
                _bounded(p.init_transactions, OP_TIMEOUT_S, "init_transactions")
            except BaseException:
                self.discard_producer()  # never initialised: the next op starts a new one
                raise

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, key: int, value: int) -> Callable[[], int | None]:
        fut = self.producer.send(self.topic, value=str(value).encode(), partition=key)
        return lambda: fut.value.offset if fut.is_done and fut.succeeded() else None

    def flush(self) -> None:
        self.producer.flush(timeout=OP_TIMEOUT_S)

    def send_offsets(self) -> bool:
        if not self.subscribed or self.consumer is None:
            return False
        from kafka.structs import OffsetAndMetadata

        offsets = {tp: OffsetAndMetadata(self.consumer.position(tp), "", -1) for tp in self.consumer.assignment()}
        if not offsets:
            return False
        _bounded(lambda: self.producer.send_offsets_to_transaction(offsets, self.consumer.group_metadata()),
                 OP_TIMEOUT_S, "send_offsets_to_transaction")
        return True

    def commit(self) -> None:
        _bounded(self.producer.commit_transaction, OP_TIMEOUT_S, "commit_transaction")

    def abort(self) -> None:
        _bounded(self.producer.abort_transaction, OP_TIMEOUT_S, "abort_transaction")

    def _consumer(self):
        if self.consumer is None:
            from kafka import KafkaConsumer, TopicPartition

            self.consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap.split(","), group_id=self.o["group"], enable_auto_commit=False,
                auto_offset_reset="earliest", isolation_level=self.o["isolation"], request_timeout_ms=3000,
                fetch_max_wait_ms=100, session_timeout_ms=6000, heartbeat_interval_ms=1000,
                reconnect_backoff_max_ms=500, metadata_max_age_ms=2000, max_poll_records=500)
            self.consumer.assign([TopicPartition(self.topic, k) for k in range(self.partitions)])
        return self.consumer

    def poll(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for tp, records in self._consumer().poll(timeout_ms=int(POLL_TIMEOUT_S * 1000)).items():
            out.setdefault(str(tp.partition), []).extend([r.offset, int(r.value)] for r in records)
        return out

    def assign(self, keys: list[int], seek: dict[int, int]) -> None:
        from kafka import TopicPartition

        c = self._consumer()
        if self.subscribed:
            c.unsubscribe()
            self.subscribed = False
        c.assign([TopicPartition(self.topic, k) for k in keys])
        for k, offset in seek.items():
            c.seek(TopicPartition(self.topic, k), offset)

    def subscribe(self) -> None:
        c = self._consumer()
        if not self.subscribed:
            c.unsubscribe()  # drops the manual assignment: the two modes exclude each other
        c.subscribe([self.topic], listener=kafka_python_rebalance_listener(self.on_rebalance))
        self.subscribed = True

    def final_read(self, key: int, timeout_s: float) -> tuple[int, list] | None:
        from kafka import KafkaConsumer, TopicPartition

        tp = TopicPartition(self.topic, key)
        c = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","), group_id=None, enable_auto_commit=False,
                          isolation_level=self.o["isolation"], request_timeout_ms=5000, fetch_max_wait_ms=100,
                          max_poll_records=5000)
        try:
            c.assign([tp])
            c.seek_to_beginning(tp)
            records: list[list[int]] = []
            deadline = time.monotonic() + timeout_s
            end = None
            while time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500).values():
                    records.extend([r.offset, int(r.value)] for r in recs)
                # the high watermark the fetches report; with read_committed the position stops at the LSO,
                # so reaching the HWM means no transaction is left open below it
                end = c.highwater(tp)
                if end is not None and c.position(tp) >= end:
                    return end, [r for r in records if r[0] < end]
            return None
        finally:
            c.close()

    def commit_retriable(self, e: BaseException) -> bool:
        # kafka-python retries inside commit_transaction itself; a commit our bound gave up on is still
        # running on its thread, so calling it again would race it
        return False

    def is_fatal(self, e: BaseException) -> bool:
        from kafka.errors import KafkaError

        # a call that never returned leaves kafka-python's transaction manager mid-request: treat as fatal
        return isinstance(e, TimeoutError) or (isinstance(e, KafkaError) and not e.retriable
                                                and type(e).__name__ in FATAL_KAFKA_PYTHON_ERRORS)

    def discard_producer(self) -> None:
        if self.producer is not None:
            try:
                self.producer.close(timeout=0)
            except Exception:  # noqa: BLE001
                pass
        self.producer = None

    def producer_identity(self) -> dict[str, int] | None:
        # kafka-python has no public accessor; its transaction manager holds the pair (evidence only)
        try:
            pe = self.producer._transaction_manager.producer_id_and_epoch
            return {"producer_id": int(pe.producer_id), "producer_epoch": int(pe.epoch)}
        except Exception:  # noqa: BLE001 - another version of the library: no evidence, no harm
            return None

    def crash(self) -> None:
        p, c = self.producer, self.consumer
        self.producer = self.consumer = None
        self.subscribed = False
        drop_kafka_python_clients(p, c)

    def close(self) -> None:
        self.crash()


# kafka-python's error classes the transaction manager treats as fatal (transition_to_fatal_error)
FATAL_KAFKA_PYTHON_ERRORS = frozenset({
    "ProducerFencedError", "InvalidProducerEpochError", "TransactionalIdAuthorizationFailedError",
    "UnsupportedVersionError", "UnsupportedForMessageFormatError", "InvalidTxnStateError",
    "InvalidProducerIdMappingError", "IllegalStateError", "AuthenticationFailedError"})


def transactional_id(slot: int) -> str:
    """The transactional.id of a worker slot (every process of the slot re-initialises it)."""
    return f"kafkaesque-txn-{slot}"


# --- the client: outcome rules ----------------------------------------------------------------------------
class TxnClient:
    """One logical process: runs txn, assign, subscribe, crash and final poll ops on a TxnLibrary and
    decides each outcome (module docstring)."""

    def __init__(self, make_library: Callable[..., TxnLibrary], topic: str, partitions: int, concurrency: int,
                 options: dict[str, Any], tracker: OffsetTracker, stalls: ProducerStallControl | None = None):
        self.make_library, self.topic, self.partitions = make_library, topic, partitions
        self.concurrency, self.o, self.tracker = max(1, concurrency), options, tracker
        self.stalls = stalls  # the run's producer stalls (workloads/stalls.py); None: never stalls
        self._stall: Stall | None = None  # the stall the current op went through
        self.lib: TxnLibrary | None = None
        self.bootstrap = ""
        self._rebalances: list[dict[str, Any]] = []
        self._rebalanced_during_op = False
        self._lock = threading.Lock()

    def open(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _library(self, process: int) -> TxnLibrary:
        if self.lib is None:
            # per worker slot: the next process of this worker re-inits the same id, fencing this one
            self.lib = self.make_library(self.bootstrap, self.topic, self.partitions,
                                         transactional_id(process % self.concurrency), self.o, self._journal)
        return self.lib

    def _journal(self, kind: str, keys: list[int]) -> None:
        with self._lock:
            self._rebalances.append({"keys": keys, "type": kind})
            self._rebalanced_during_op = True

    def invoke(self, op: Op) -> Op:
        try:
            comp = self._invoke(op)
        except BaseException as e:  # a bug in the client: the runner records the op info, the stall unknown
            self._stall_finished(INFO, _error_text(e))
            raise
        stall = self._stall_finished(comp.type, comp.error)
        if stall is not None:  # the completion says it stood still, and how long (the ledger has the rest)
            comp.extra = {**(comp.extra or {}), "stalled": {"fault": stall.fault, "seconds": stall.stalled_s}}
        return comp

    def _stall_finished(self, type_: str, error: Any) -> Stall | None:
        """Tell the stall this op went through (if any) what its transaction came to; that stall."""
        stall, self._stall = self._stall, None
        if stall is not None:
            stall.finish(outcome_of(type_, error))
        return stall

    def _invoke(self, op: Op) -> Op:
        with self._lock:
            self._rebalanced_during_op = False
        if op.f == "txn":
            comp = self._txn(op)
        elif op.f in ("assign", "subscribe"):
            comp = self._reassign(op)
        elif op.f == "crash":
            if self.lib is not None:
                self.lib.crash()
            self.lib = None
            comp = _completion(op, INFO, None, error="crashed")
        elif op.f == "poll" and (op.extra or {}).get("final"):
            comp = self._final_poll(op)
        else:
            raise ValueError(f"unknown txn workload op {op.f!r}")
        with self._lock:
            if self._rebalances:
                comp.extra = {**(comp.extra or {}), "rebalance_log": self._rebalances}
                self._rebalances = []
        return comp

    def _crash_if_rebalanced(self) -> None:
        if self.o["crash_on_rebalance"] and self._rebalanced_during_op:
            raise CrashedOnRebalance(CRASHED_ON_REBALANCE)

    def _txn(self, op: Op) -> Op:
        micro = op.value
        done: list[list] = [list(m) for m in micro]
        offsets: list[tuple[int, int, int, Callable[[], int | None]]] = []  # (index, key, value, offset reader)
        abort = bool((op.extra or {}).get("abort"))
        sent = False  # whether anything reached the transaction: before that an error is a definite fail
        committing = False  # whether the commit was called: before that an error is a definite fail too
        try:
            lib = self._library(op.process)
            lib.ensure_producer()
            lib.begin()
            polled = False
            for i, m in enumerate(micro):
                if m[0] == "send":
                    _, k, v = m
                    if offsets and k not in {o[1] for o in offsets}:  # the stall point: a send to a new partition
                        self._stall_point(op, lib, done, offsets)
                    sent = True
                    offsets.append((i, k, v, lib.send(k, v)))
                else:
                    records = lib.poll()
                    polled = True
                    done[i] = ["poll", records]
                    self._crash_if_rebalanced()
            if polled and lib.send_offsets():
                sent = True
            lib.flush()
            _fill_offsets(done, offsets)
            if abort:
                lib.abort()
                return _completion(op, FAIL, done, error=WORKLOAD_ABORT)
            committing = True
            _commit(lib)
        except CrashedOnRebalance:
            _fill_offsets(done, offsets)
            if self.lib is not None:
                self.lib.crash()
            self.lib = None
            return _completion(op, INFO, done, error=CRASHED_ON_REBALANCE)
        except Exception as e:  # noqa: BLE001 - every client error maps to fail or info
            _fill_offsets(done, offsets)
            return self._after_error(op, done, sent and committing, e)
        _fill_offsets(done, offsets)
        # Only a committed transaction's sends and polls count (Jepsen's poll-unseen updates on :ok alone):
        # records an aborted transaction polled are unread, and an assign that seeks past them would make
        # sure no committed read ever returns them.
        for m in done:
            if m[0] == "send" and isinstance(m[2], list):
                self.tracker.sent(m[1], m[2][0])
            elif m[0] == "poll" and len(m) > 1:
                self.tracker.polled(m[1])
        return _completion(op, OK, done)

    def _stall_point(self, op: Op, lib: TxnLibrary, done: list[list],
                     offsets: list[tuple[int, int, int, Callable[[], int | None]]]) -> None:
        """Stop here when a stall is asked of this process (workloads/stalls.py): the transaction is open,
        a send of it delivered (flushed first), and a send to a partition it has not written yet and the
        commit are still to come. That send makes the resumed producer ask its coordinator to add the
        partition, which a coordinator that aborted the transaction without fencing the producer takes for
        a new transaction (a send to a partition it wrote is refused by the partition leader instead, KIP-890
        part 1). A transaction the workload means to abort has no stall point: what follows a stall must
        try to commit."""
        if (self.stalls is None or self._stall is not None or (op.extra or {}).get("abort")
                or not self.stalls.wanted(op.process, lib.txn_id)):
            return
        lib.flush()
        _fill_offsets(done, offsets)
        delivered = [m[2][0] for m in done if m[0] == "send" and isinstance(m[2], list)]
        if not delivered:
            return
        stall = self.stalls.claim(op.process, lib.txn_id)
        if stall is None:
            return  # another process took it
        self._stall = stall
        stall.hold({"process": op.process, "transactional_id": lib.txn_id, **(lib.producer_identity() or {}),
                    "partitions": sorted({m[1] for m in done if m[0] == "send" and isinstance(m[2], list)}),
                    "delivered_offsets": delivered, "txn_timeout_s": self.stalls.txn_timeout_s})

    def _after_error(self, op: Op, done: list[list], open_: bool, e: Exception) -> Op:
        """A transaction that raised: info when its outcome is `open_` (sends, then the commit called) unless
        the abort went through or the library knows the commit sent nothing; else fail."""
        lib = self.lib
        if lib is not None and lib.producer is None and not open_:
            # the producer never came up (init_transactions failed or timed out): no transaction to abort
            return _completion(op, FAIL, done, error=_error_text(e))
        if lib is not None and isinstance(e, CommitNotSent):
            lib.discard_producer()  # fenced or dead: the next op inits a new producer on this id
            return _completion(op, FAIL, done, error=_error_text(e))
        if lib is None or lib.is_fatal(e):
            if lib is not None:
                lib.discard_producer()  # fenced or dead: the next op inits a new producer on this id
            return _completion(op, INFO if open_ else FAIL, done, error=_error_text(e))
        try:
            lib.abort()
        except Exception as abort_error:  # noqa: BLE001 - the abort did not go through: the outcome is open
            # Even a fatal INVALID_TXN_STATE: the coordinator's last transaction of this epoch is committed,
            # and that may be this one (an EndTxn(commit) that reached it) or the one before, when librdkafka
            # sends EndTxn(abort) for an AddPartitionsToTxn that failed (a coordinator fail-over; it counts
            # a failed one as possibly received, rdkafka_txnmgr.c): Kafka answers the same to both.
            lib.discard_producer()
            return _completion(op, INFO if open_ else FAIL, done,
                               error=f"{_error_text(e)}; abort failed: {_error_text(abort_error)}"[:600])
        return _completion(op, FAIL, done, error=f"{_error_text(e)}; aborted"[:600])

    def _reassign(self, op: Op) -> Op:
        try:
            lib = self._library(op.process)
            if op.f == "subscribe":
                lib.subscribe()
            else:
                seek = {int(k): int(o) for k, o in ((op.extra or {}).get("unseen") or {}).items()}
                lib.assign(list(op.value), seek)
        except Exception as e:  # noqa: BLE001 - a consumer's assignment changes nothing in the log
            return _completion(op, FAIL, op.value, error=_error_text(e))
        return _completion(op, OK, op.value)

    def _final_poll(self, op: Op) -> Op:
        key = int(op.extra["key"])
        extra = {"final": True, "key": key}
        try:
            got = self._library(op.process).final_read(key, FINAL_READ_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a read changes nothing, but an unfinished one proves nothing
            return _completion(op, INFO, None, error=_error_text(e), extra=extra)
        if got is None:
            return _completion(op, INFO, None, error=f"final read of key {key} did not reach its end offset in "
                                                     f"{FINAL_READ_TIMEOUT_S:g} s", extra=extra)
        end, records = got
        return _completion(op, OK, [["poll", {str(key): records}]], extra={**extra, "end_offset": end})

    def close(self) -> None:
        if self.lib is not None:
            self.lib.close()
            self.lib = None


def _commit(lib: TxnLibrary) -> None:
    """commit_transaction, called once more after a retriable failure (the library says the same commit may
    be retried): a commit that timed out while the coordinator was moving often completes on the retry."""
    try:
        lib.commit()
    except Exception as e:  # noqa: BLE001 - re-raised unless the library allows the retry
        if not lib.commit_retriable(e):
            raise
        lib.commit()


def _fill_offsets(done: list[list], offsets: list[tuple[int, int, int, Callable[[], int | None]]]) -> None:
    """Each send whose delivery report gave an offset becomes ["send", k, [offset, v]]."""
    for i, k, v, offset_of in offsets:
        try:
            off = offset_of()
        except Exception:  # noqa: BLE001 - an undelivered record has no offset
            off = None
        if off is not None and off >= 0:
            done[i] = ["send", k, [off, v]]


def _completion(op: Op, type_: str, value: Any, error: Any = None, extra: dict | None = None) -> Op:
    return Op(type=type_, f=op.f, process=op.process, value=value, node=op.node, error=error, extra=extra)


class TxnValues:
    """How the txn workload's op values read, for the views that are not checkers (the report, the pipeline):
    a txn's polls give records; a final poll's completion gives (key, end offset). A txn writes several
    records, which this one-record interface cannot carry: its sends are left to checkers/txn.py."""

    op_names = frozenset({"txn", "poll"})

    @staticmethod
    def key(op: Op) -> int | None:
        extra = op.extra or {}
        return int(extra["key"]) if extra.get("final") and "key" in extra else None

    @staticmethod
    def written(op: Op) -> tuple[int, Any, Any] | None:
        return None

    @staticmethod
    def records(op: Op):
        if op.f not in TxnValues.op_names or not isinstance(op.value, list):
            return
        for m in op.value:
            if isinstance(m, list) and len(m) == 2 and m[0] == "poll" and isinstance(m[1], dict):
                for k, recs in m[1].items():
                    for rec in recs or ():
                        if isinstance(rec, list | tuple) and len(rec) == 2:
                            yield int(k), rec[0], rec[1]

    @staticmethod
    def drained(op: Op) -> tuple[int, Any] | None:
        extra = op.extra or {}
        if op.f == "poll" and extra.get("final") and "end_offset" in extra:
            return int(extra["key"]), extra["end_offset"]
        return None


TXN_VALUES = TxnValues()


class TxnWorkload:
    name = "txn"
    values = TXN_VALUES
    OPTIONS = TXN_OPTIONS

    @staticmethod
    def options_problem(options: dict[str, Any]) -> str | None:
        """Why these options cannot run (one sentence), or None."""
        try:
            txn_options(options)
        except TxnOptionError as e:
            return f"{e}."
        return None

    def __init__(self, options: dict[str, Any]):
        self.topic = options.get("topic", "queue")
        self.partitions = int(options.get("partitions", 4))
        self.client = options.get("client", "kafka-python")
        self.o = txn_options(options)
        self.tracker = OffsetTracker()
        self.stalls = ProducerStallControl(self.o["txn_timeout_ms"] / 1000)
        self.members = SpareMembers()  # confluent-kafka group members closed processes left
        self._mix: TxnOpMix | None = None

    def topics(self, test: dict[str, Any]) -> list[tuple[str, int]]:
        return [(self.topic, self.partitions)]

    def coordinated_keys(self, concurrency: int) -> dict[str, list[str]]:
        """The keys whose coordinators a nemesis may aim at (nemesis/scenario.py COORDINATOR_ROLES)."""
        return {"transactional_ids": [transactional_id(s) for s in range(max(1, concurrency))],
                "groups": [self.o["group"]] if self.o["subscribe_p"] > 0 else []}

    def new_client(self, test: dict[str, Any]) -> TxnClient:
        library = (functools.partial(ConfluentTxnLibrary, members=self.members) if self.client == "confluent-kafka"
                   else KafkaPythonTxnLibrary)
        return TxnClient(library, self.topic, self.partitions, int(test.get("concurrency", 1)), self.o, self.tracker,
                         self.stalls)

    def producer_stalls(self) -> ProducerStallControl:
        """Its clients' stall control (workloads/base.py StallableProducers; the stall-producer fault)."""
        return self.stalls

    def op_mix(self, test: dict[str, Any]) -> TxnOpMix:
        self._mix = TxnOpMix(self.o, self.partitions, int(test.get("concurrency", 1)), self.tracker)
        return self._mix

    def final_ops(self, test: dict[str, Any]) -> list[tuple]:
        return [("poll", [["poll"]], {"final": True, "key": k}) for k in range(self.partitions)]

    def checkers(self, test: dict[str, Any]):
        # checkers/txn.py: the transaction analyses (issue 25, deliverable 2)
        from kafkaesque_harness.checkers.evidence import ProgressChecker
        from kafkaesque_harness.checkers.replicas import ReplicaStateChecker
        from kafkaesque_harness.checkers.trace import TraceChecker
        from kafkaesque_harness.checkers.txn import TxnChecker

        # The replicas' own states (log matching below the HWMs, the controller's ISR and ELR, corrupt batches
        # kept), over every partition, __consumer_offsets and __transaction_state among them; the txn checker
        # excuses no loss beyond the fault budget, so there is no excused loss to ask the cluster about. Every
        # protocol decision the nodes traced, the coordinators' and the partition leaders' transaction facts
        # among them (checkers/trace.py). Both not applicable on a cluster that gives neither.
        return [ProgressChecker(self.partitions), TxnChecker(), ReplicaStateChecker(excused_by=None), TraceChecker()]
