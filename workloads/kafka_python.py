"""The kafka-python adapter: the queue workload's client (KafkaPythonQueueClient), the final read both
queue clients use, and the txn workload's library (KafkaPythonTxnLibrary); with how kafka-python is let
go of, how its rebalances reach the history, and how its own position changes and leader changes do
(KafkaPythonWatch: the client events of history/clients.py). Everything kafka-python-specific lives here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.history import FAIL, INFO, OK, Op, client_id
from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.queue_client import POLL_TIMEOUT_MS, SEND_TIMEOUT_S, QueueClient, completion
from kafkaesque_harness.workloads.txn_client import OP_TIMEOUT_S, POLL_TIMEOUT_S, TxnLibrary


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


def kafka_python_rebalance_listener(journal: Callable[[str, list[int]], None]) -> Any:
    """The same for kafka-python's subscribe(listener=...)."""
    from kafka import ConsumerRebalanceListener

    class Journal(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            journal("revoked", sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            journal("assigned", sorted(tp.partition for tp in assigned))

    return Journal()


LIBRARY = "kafka-python"
# kafka-python's OffsetResetStrategy values (kafka.protocol.consumer.offsets), by the policy's name
_POLICIES = {-2: "earliest", -1: "latest", 0: "none"}


class KafkaPythonWatch:
    """The client events (history/clients.py) of one kafka-python 3 consumer, from its own state. kafka-python
    has no reset callback and moves positions on its I/O thread, so the watch wraps the two methods of the
    consumer's SubscriptionState (`consumer._subscription`, the one object the fetcher, the coordinator and
    the consumer all move positions through) on that instance alone:

    - `request_offset_reset(tp, strategy)`: with no strategy, the library asks for a reset on its own: after
      a fetch answered OFFSET_OUT_OF_RANGE (Fetcher._parse_fetched_data: "Fetch offset X is out of range for
      topic-partition ..."), or, for a position awaiting KIP-320 validation, after an OffsetForLeaderEpoch
      answer with no end offset ("Truncation detected ..."). The position it held, the leader it believed
      (cluster.leader_for_partition, the node its request went to) and that leader's epoch are noted then,
      before the reset forgets the position. With a strategy it is seek_to_beginning/seek_to_end (the
      workload's own seek).
    - `seek(tp, offset)`: the position is placed. Awaiting a reset, it is that reset's end (the ListOffsets
      answer: "Resetting offset for partition ... to offset N"): a `reset` event if the library asked for
      it, a `seek` if the workload did, or, with no request seen, the policy placing a partition that had no
      position. Awaiting validation, it is KIP-320's truncation ("seeking to first diverging offset"). Else
      it is the group's committed offset, on an assignment.
    - the cluster's metadata listener (`cluster.add_listener`, called after every Metadata answer) and a
      look at each completion (a fetch's KIP-951 hint moves the leader without a Metadata answer): a change of
      a partition's leader or leader epoch is a `leader` event. kafka-python takes whatever the last answer
      said, an older epoch too (docs/FINDINGS.md, kafka-python 1): that is the regression such an event shows.

    The workload's own `consumer.seek(tp, offset)` does not pass through SubscriptionState.seek: the adapter
    records it (`workload_seek`)."""

    def __init__(self, events: ClientEventLog, topic: str):
        self.events, self.topic = events, topic
        self._asked: dict[int, dict[str, Any]] = {}  # partition -> a reset asked for, not yet placed
        self._leaders: dict[int, tuple[int, int]] = {}  # partition -> (leader, epoch) last seen
        self._cluster: Any = None
        self._lock = threading.Lock()

    def watch(self, consumer: Any) -> None:
        sub, cluster = consumer._subscription, consumer._client.cluster
        self._cluster = cluster
        asked, placed = sub.request_offset_reset, sub.seek

        def request_offset_reset(partition, offset_reset_strategy=None):
            with sub._lock:  # the RLock the original takes: the position read here is the one it forgets
                self._reset_asked(sub, partition, offset_reset_strategy)
                return asked(partition, offset_reset_strategy)

        def seek(partition, offset):
            with sub._lock:
                self._placed(sub, partition, offset)
                return placed(partition, offset)

        sub.request_offset_reset, sub.seek = request_offset_reset, seek
        cluster.add_listener(lambda _cluster: self.look())
        self.look()

    def _ours(self, partition: Any) -> bool:
        return getattr(partition, "topic", None) == self.topic

    def _leader(self, partition: Any) -> tuple[int | None, int | None]:
        if self._cluster is None:
            return None, None
        return self._cluster.leader_for_partition(partition), self._cluster.leader_epoch_for_partition(partition)

    def _reset_asked(self, sub: Any, partition: Any, strategy: Any) -> None:
        if not self._ours(partition):
            return
        state = sub.assignment.get(partition)
        position = state.position if state is not None else None
        if strategy is not None:  # seek_to_beginning / seek_to_end: the workload's
            self._asked[partition.partition] = {"why": "workload", "policy": _POLICIES.get(strategy, str(strategy))}
            return
        leader, epoch = self._leader(partition)
        truncation = state is not None and state.awaiting_validation
        self._asked[partition.partition] = {
            "from": position.offset if position is not None else None,
            "from_epoch": position.leader_epoch if position is not None else None,
            "policy": _POLICIES.get(sub._default_offset_reset_strategy, "earliest"),
            "error": "LOG_TRUNCATION" if truncation else "OFFSET_OUT_OF_RANGE",
            "detail": ("Truncation detected: OffsetForLeaderEpoch answered no end offset for the position's epoch"
                       if truncation else f"Fetch offset {position.offset if position is not None else '?'} is out "
                                          f"of range for topic-partition {partition}"),
            "broker": leader, "leader_epoch": epoch}

    def _placed(self, sub: Any, partition: Any, offset: Any) -> None:
        if not self._ours(partition):
            return
        state = sub.assignment.get(partition)
        to = getattr(offset, "offset", offset)
        key, topic = partition.partition, partition.topic
        if state is not None and state.awaiting_reset:
            asked = self._asked.pop(key, None)
            if asked is not None and "error" in asked:
                leader, epoch = self._leader(partition)
                self.events.add("reset", topic=topic, key=key, **{k: v for k, v in asked.items() if k != "why"},
                                to=to, answered_by=leader)
            elif asked is not None:
                self.events.add("seek", topic=topic, key=key, to=to, why="workload", policy=asked["policy"])
            else:
                self.events.add("seek", topic=topic, key=key, to=to, why="no-position",
                                policy=_POLICIES.get(state.reset_strategy, str(state.reset_strategy)))
        elif state is not None and state.awaiting_validation:
            position = state.position
            leader, epoch = self._leader(partition)
            self.events.add("reset", topic=topic, key=key, **{"from": position.offset if position else None},
                            from_epoch=position.leader_epoch if position else None, to=to, policy="truncation",
                            error="LOG_TRUNCATION",
                            detail=f"Truncation detected at position {position.offset if position else '?'}: "
                                   f"seeking to the first diverging offset {to}",
                            broker=leader, leader_epoch=epoch)
        else:
            self.events.add("seek", topic=topic, key=key, to=to, why="committed")

    def workload_seek(self, key: int, offset: int) -> None:
        """The workload's own consumer.seek(), which bypasses SubscriptionState.seek."""
        self.events.add("seek", topic=self.topic, key=key, to=offset, why="workload")

    def look(self) -> None:
        """A `leader` event for each partition of the topic whose leader or leader epoch changed since the last
        look (called by the metadata listener on the I/O thread, and at each completion)."""
        cluster = self._cluster
        if cluster is None:
            return
        from kafka import TopicPartition

        with self._lock:
            for p in sorted(cluster.partitions_for_topic(self.topic) or ()):
                tp = TopicPartition(self.topic, p)
                now = (cluster.leader_for_partition(tp), cluster.leader_epoch_for_partition(tp))
                if now[0] is None:
                    continue
                now = (int(now[0]), int(now[1]) if now[1] is not None else -1)
                before = self._leaders.get(p)
                if before == now:
                    continue
                self._leaders[p] = now
                self.events.add("leader", topic=self.topic, key=p, **{"from": before[0] if before else -1},
                                to=now[0], from_epoch=before[1] if before else -1, leader_epoch=now[1])


class KafkaPythonQueueClient(QueueClient):
    """One logical process's producer and consumer, with kafka-python."""

    LIBRARY = LIBRARY
    watch: KafkaPythonWatch | None = None

    def open(self, bootstrap: str) -> None:
        from kafka import KafkaProducer

        self.bootstrap = bootstrap
        self.producer = KafkaProducer(
            client_id=self.client_id,
            bootstrap_servers=bootstrap.split(","), acks="all" if self.acks == -1 else self.acks,
            retries=5 if self.idempotent else 0, enable_idempotence=self.idempotent, linger_ms=0,
            request_timeout_ms=3000, max_block_ms=3000,
            delivery_timeout_ms=4000, reconnect_backoff_max_ms=500, metadata_max_age_ms=2000)

    def _consumer(self):
        if self.consumer is None:
            from kafka import KafkaConsumer, TopicPartition

            self.consumer = KafkaConsumer(
                client_id=self.client_id,
                bootstrap_servers=self.bootstrap.split(","), enable_auto_commit=False, group_id=self.group,
                auto_offset_reset="earliest", request_timeout_ms=3000, fetch_max_wait_ms=100,
                session_timeout_ms=6000, heartbeat_interval_ms=1000,
                reconnect_backoff_max_ms=500, metadata_max_age_ms=2000, max_poll_records=500)
            self.watch = KafkaPythonWatch(self.events, self.topic)
            self.watch.watch(self.consumer)
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
            return completion(op, OK, [key, [md.offset, value]])
        except Exception as e:  # noqa: BLE001 - every client error maps to fail or info
            name = type(e).__name__
            return completion(op, self.outcome(name), [key, value], error=f"{name}: {e}"[:300])

    def _poll(self, op: Op) -> Op:
        try:
            batches = self._consumer().poll(timeout_ms=POLL_TIMEOUT_MS)
        except Exception as e:  # noqa: BLE001
            return completion(op, FAIL, None, error=f"{type(e).__name__}: {e}"[:300])
        out: dict[str, list] = {}
        for tp, records in batches.items():
            out.setdefault(str(tp.partition), []).extend([r.offset, int(r.value)] for r in records)
        if self.group is None or not out:
            return completion(op, OK, out)
        # subscribe mode: commit what was read, synchronously; the read stands whatever the commit does
        from kafka.structs import OffsetAndMetadata, TopicPartition

        committed = {str(k): recs[-1][0] + 1 for k, recs in out.items()}
        try:
            self.consumer.commit({TopicPartition(self.topic, int(k)): OffsetAndMetadata(o, "", -1)
                                  for k, o in committed.items()})
        except Exception as e:  # noqa: BLE001
            return completion(op, OK, out, extra={"commit_error": f"{type(e).__name__}: {e}"[:300],
                                                   "commit_offsets": committed})
        return completion(op, OK, out, extra={"committed": committed})

    def take_events(self) -> list[dict[str, Any]]:
        if self.watch is not None:
            self.watch.look()  # a fetch's leader hint moves the leader without a Metadata answer
        return super().take_events()

    def _final_poll(self, op: Op) -> Op:
        return final_poll_kafka_python(self.bootstrap, self.topic, op)

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
                      max_poll_records=5000, client_id=client_id(op.process))
    try:
        c.assign([tp])
        hwm = c.end_offsets([tp])[tp]
        c.seek_to_beginning(tp)
        records: list[list[int]] = []
        deadline = time.monotonic() + timeout_s
        while c.position(tp) < hwm:
            if time.monotonic() > deadline:
                return completion(op, INFO, None, error=f"final read reached offset {c.position(tp)} of {hwm}")
            for recs in c.poll(timeout_ms=500).values():
                records.extend([r.offset, int(r.value)] for r in recs if r.offset < hwm)
        return completion(op, OK, [key, hwm, records])
    except Exception as e:  # noqa: BLE001
        return completion(op, INFO, None, error=f"{type(e).__name__}: {e}"[:300])
    finally:
        c.close()


def _error_text(e: BaseException) -> str:
    """An error as the library gives it: kafka-python's errors already start with their class's name."""
    text = str(e)
    return (text if text.startswith(type(e).__name__) else f"{type(e).__name__}: {text}")[:300]


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
                 on_rebalance: Callable[[str, list[int]], None], process: int | None = None):
        self.bootstrap, self.topic, self.partitions, self.txn_id, self.o = bootstrap, topic, partitions, txn_id, o
        self.on_rebalance = on_rebalance
        self.client_id = client_id(process)
        self.events = ClientEventLog(LIBRARY)
        self.watch: KafkaPythonWatch | None = None
        self.producer = None
        self.consumer = None
        self.subscribed = False
        self._broken = False  # a call that never returned: the producer is not used again

    def ensure_producer(self) -> None:
        if self.producer is None:
            from kafka import KafkaProducer

            p = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), transactional_id=self.txn_id,
                              client_id=self.client_id,
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
        # the library's own answer to a send it gave up on (KafkaTimeoutError "Expiring 1 record(s) ...": its
        # commit_transaction may still commit, docs/FINDINGS.md kafka-python 2), on the sender thread
        fut.add_errback(lambda e: self.events.add("send-error", topic=self.topic, key=key, value=value,
                                                  error=_error_text(e)))
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
                reconnect_backoff_max_ms=500, metadata_max_age_ms=2000, max_poll_records=500,
                client_id=self.client_id)
            self.watch = KafkaPythonWatch(self.events, self.topic)
            self.watch.watch(self.consumer)
            self.consumer.assign([TopicPartition(self.topic, k) for k in range(self.partitions)])
        return self.consumer

    def poll(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for tp, records in self._consumer().poll(timeout_ms=int(POLL_TIMEOUT_S * 1000)).items():
            out.setdefault(str(tp.partition), []).extend([r.offset, int(r.value)] for r in records)
        return out

    def assign(self, keys: list[int], seek: dict[int, int]) -> None:
        from kafka import TopicPartition

        c = self._consumer_out_of_the_group()
        c.assign([TopicPartition(self.topic, k) for k in keys])
        for k, offset in seek.items():
            c.seek(TopicPartition(self.topic, k), offset)
            if self.watch is not None:
                self.watch.workload_seek(k, offset)

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
                          max_poll_records=5000, client_id=self.client_id)
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

    def take_events(self) -> list[dict[str, Any]]:
        if self.watch is not None:
            self.watch.look()
        return self.events.take()

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
        self.watch = None
        self.subscribed = False
        drop_kafka_python_clients(p, c)

    def close(self) -> None:
        self.crash()


# kafka-python's error classes the transaction manager treats as fatal (transition_to_fatal_error)
FATAL_KAFKA_PYTHON_ERRORS = frozenset({
    "ProducerFencedError", "InvalidProducerEpochError", "TransactionalIdAuthorizationFailedError",
    "UnsupportedVersionError", "UnsupportedForMessageFormatError", "InvalidTxnStateError",
    "InvalidProducerIdMappingError", "IllegalStateError", "AuthenticationFailedError"})


def produce_one_by_one(bootstrap: str, topic: str, values, partition: int = 0) -> None:
    """acks=all, one record at a time, each acknowledged before the next (a probe's or a test's own writes,
    made to put records where its consumers are under test)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=0, retries=20,
                      retry_backoff_ms=200, request_timeout_ms=3000, metadata_max_age_ms=500)
    try:
        for v in values:
            p.send(topic, value=str(v).encode(), partition=partition).get(timeout=30)
    finally:
        p.close()
