"""One member of a consume-transform-produce group, as its own process so a test can SIGKILL it: an
unmodified confluent-kafka Consumer in a consumer group and a transactional Producer of its own that, for
each batch it consumes, writes one output record per input record and commits the consumed offsets with
send_offsets_to_transaction (the consumer's group metadata, so KIP-447's generation check fences a member
that lost its partitions) in the same transaction. One JSON line per fact on stdout:

  {"event": "assigned", "partitions": [...]}               its assignment changed (seen after a consume)
  {"event": "begun", "txn": n, "records": k}               transaction n wrote k output records
  {"event": "committed", "txn": n, "records": k, "offsets": {p: offset}}   commit_transaction returned
  {"event": "aborted", "txn": n, "error": "..."}           abort_transaction returned: none of n is visible
  {"event": "uncertain", "txn": n, "error": "..."}         the producer failed fatally mid-transaction and
                                                           was made again: n is visible whole or not at all

An output record is "<txn>:<input partition>:<input offset>", in the output partition of the input's
number (modulo the output's partitions). Transactions are numbered from --txn-base, so the members of a
test number theirs apart. After a transaction that did not commit, the member seeks every partition it
holds back to the group's committed offset (read with require_stable: after any transaction still open
on it has ended), so what it reads again is what no committed transaction consumed. SIGTERM closes the
consumer (it leaves the group) and exits.

    python -m tests.integration.eos_member --client confluent --bootstrap H:P,... --group G --topic IN \
        --name NAME --out-topic OUT --out-partitions N --txn-id ID --txn-base B [--batch 5] [--pause-s 0.05]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "time": time.monotonic(), **fields}), flush=True)


def error_of(e: KafkaException) -> Any:
    return e.args[0] if e.args else None


class EosMember:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group, "client.id": a.name,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed", "session.timeout.ms": 6000,
                                  "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 20000})
        self.consumer.subscribe([a.topic])
        self.producer = self.new_producer()

    def new_producer(self) -> Producer:
        """A producer with the member's transactional.id; init_transactions fences any earlier one and
        ends (commits or aborts, as decided) whatever transaction the id left open."""
        for attempt in range(10):
            # librdkafka's "eos" debug goes to the member's .err file: what the transaction manager
            # did, should a member stall (a test that fails shows it)
            p = Producer({"bootstrap.servers": self.a.bootstrap, "transactional.id": self.a.txn_id,
                          "transaction.timeout.ms": 10000, "linger.ms": 1, "debug": "eos"})
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:  # a coordinator moving: make it again
                emit("init_failed", attempt=attempt, error=repr(e)[:300])
                time.sleep(1)
        raise RuntimeError("init_transactions failed ten times")

    def consume(self) -> list[Any]:
        """One batch, without records of a partition no longer assigned (revoked while they were queued:
        the partition's new owner reads them again from the committed offset)."""
        messages = [m for m in self.consumer.consume(num_messages=self.a.batch, timeout=0.5) if m.error() is None]
        held = {tp.partition for tp in self.consumer.assignment()}
        return [m for m in messages if m.partition() in held]

    def transform(self, txn: int, messages: list[Any]) -> dict[int, int]:
        """Transaction `txn` over the batch; raises KafkaException if it did not commit."""
        p = self.producer
        p.begin_transaction()
        for m in messages:
            p.produce(self.a.out_topic, value=f"{txn}:{m.partition()}:{m.offset()}".encode(),
                      partition=m.partition() % self.a.out_partitions)
        emit("begun", txn=txn, records=len(messages))
        offsets: dict[int, int] = {}
        for m in messages:
            offsets[m.partition()] = max(offsets.get(m.partition(), 0), m.offset() + 1)
        emit("sending_offsets", txn=txn)
        p.send_offsets_to_transaction([TopicPartition(self.a.topic, q, o) for q, o in offsets.items()],
                                      self.consumer.consumer_group_metadata(), 30)
        for attempt in range(5):
            emit("committing", txn=txn, attempt=attempt)
            try:
                p.commit_transaction(30)
                return offsets
            except KafkaException as e:
                if not error_of(e).retriable():
                    raise
                last = e  # a coordinator moving: librdkafka resumes the commit when called again
        raise last

    def recover(self, e: KafkaException) -> str:
        """End a transaction that failed: "aborted" if the coordinator took our abort, else "uncertain"
        (the producer is made again, which ends the transaction one way or the other)."""
        err = error_of(e)
        if err is not None and not err.fatal():
            for attempt in range(5):
                emit("aborting", attempt=attempt, error=repr(e)[:300])
                try:
                    self.producer.abort_transaction(30)
                    return "aborted"
                except KafkaException as abort_error:
                    if error_of(abort_error).fatal():
                        break
        self.producer = self.new_producer()
        return "uncertain"

    def rewind(self) -> None:
        """Seek every held partition back to the group's committed offset."""
        for _ in range(10):
            try:
                held = self.consumer.assignment()
                for tp in self.consumer.committed(held, timeout=30):
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                      tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
                emit("rewound", partitions=sorted(tp.partition for tp in held))
                return
            except KafkaException as e:  # a coordinator moving, or the partition revoked meanwhile
                emit("rewind_failed", error=repr(e)[:300])
                time.sleep(0.5)

    def close(self) -> None:
        self.consumer.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=["confluent"], default="confluent")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True, help="the input topic")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out-topic", required=True)
    ap.add_argument("--out-partitions", type=int, required=True)
    ap.add_argument("--txn-id", required=True)
    ap.add_argument("--txn-base", type=int, required=True)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--pause-s", type=float, default=0.05, help="pause after each transaction")
    a = ap.parse_args()
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    member = EosMember(a)
    emit("ready")
    last_assignment, txn = None, a.txn_base
    while not stopping:
        messages = member.consume()
        assignment = sorted(tp.partition for tp in member.consumer.assignment())
        if assignment != last_assignment:
            emit("assigned", partitions=assignment)
            last_assignment = assignment
        if not messages:
            continue
        try:
            offsets = member.transform(txn, messages)
            emit("committed", txn=txn, records=len(messages), offsets=offsets)
        except KafkaException as e:
            emit(member.recover(e), txn=txn, error=repr(e)[:300])
            member.rewind()
        txn += 1
        time.sleep(a.pause_s)
    member.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
