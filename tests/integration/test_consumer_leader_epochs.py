"""KIP-320 with unmodified clients on the reference broker (issue 38): a consumer whose position carries the
leader epoch of the last record it read validates that position with OffsetForLeaderEpoch when the leader
changes, and reads on.

Before the broker answered OffsetForLeaderEpoch, kafka-python 3.0.12 refused to send it locally
(IncompatibleBrokerVersion, which it counts as non-retriable) and retried every retry_backoff_ms, with the
partition unfetchable the whole time: its consumer stopped reading a partition for good after any leader
change that found its position holding an epoch (seen here at offset 520 for the rest of a 30 s probe).
librdkafka skipped the validation when the API was missing; it now validates too.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, TopicPartition

from kafkaesque_harness.workloads.kafka_python import produce_one_by_one

pytestmark = pytest.mark.integration

TOPIC = "ofle"


class KafkaPythonReader:
    def __init__(self, bootstrap: str) -> None:
        self.c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                               auto_offset_reset="earliest", request_timeout_ms=3000, fetch_max_wait_ms=100,
                               metadata_max_age_ms=500, reconnect_backoff_max_ms=500)
        self.tp = TopicPartition(TOPIC, 0)
        self.c.assign([self.tp])
        self.c.seek_to_beginning(self.tp)

    def read(self) -> list[tuple[int, int]]:
        """One poll: (offset, leader epoch of the record)."""
        return [(r.offset, r.leader_epoch) for recs in self.c.poll(timeout_ms=200).values() for r in recs]

    def close(self) -> None:
        self.c.close()


class ConfluentReader:
    def __init__(self, bootstrap: str) -> None:
        self.c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "ofle", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500,
                             "fetch.wait.max.ms": 100})
        self.c.assign([CKTopicPartition(TOPIC, 0, 0)])

    def read(self) -> list[tuple[int, int]]:
        return [(m.offset(), m.leader_epoch()) for m in self.c.consume(num_messages=500, timeout=0.2)
                if m.error() is None]

    def close(self) -> None:
        self.c.close()


def produce(bootstrap: str, values: range) -> None:
    """acks=all, one record at a time (the writes the consumers under test read)."""
    produce_one_by_one(bootstrap, TOPIC, values)


def read_until(reader, offset: int, timeout: float) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while (not got or got[-1][0] < offset) and time.monotonic() < deadline:
        got += reader.read()
    return got


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_consumer_reads_on_after_a_leader_change_by_validating_its_position(local_cluster, client):
    local_cluster.create_topic(TOPIC, partitions=1, rf=3, min_isr=2)
    produce(local_cluster.bootstrap, range(100))
    reader = (KafkaPythonReader if client == "kafka-python" else ConfluentReader)(local_cluster.bootstrap)
    try:
        first = read_until(reader, 99, timeout=30)
        assert first and first[-1] == (99, 0)
        # The reader stops polling here, so its position stays (100, epoch 0): the epoch of a record it read
        # (kafka-python drops it at the next empty fetch). The leader dies and another is elected in epoch 1.
        old = local_cluster.partition(TOPIC)
        local_cluster.kill(old["leader"])
        local_cluster.wait_for(lambda: local_cluster.partition(TOPIC)["leader_epoch"] > old["leader_epoch"],
                               timeout=30, what="a new leader")
        new = local_cluster.partition(TOPIC)
        produce(local_cluster.bootstrap, range(100, 200))
        # Metadata now says epoch 1, above the position's 0: the client validates (KIP-320) before it fetches.
        rest = read_until(reader, 199, timeout=30)
    finally:
        reader.close()
    assert rest and rest[-1][0] == 199, f"{client} stopped reading at {rest[-1][0] if rest else 'its position 100'}"
    assert [o for o, _ in rest] == list(range(100, 200))
    trace = local_cluster.root / f"broker-{new['leader']}" / "trace.jsonl"
    asked = [e for e in map(json.loads, trace.read_text().splitlines()) if
             e.get("event") == "offset_for_leader_epoch_answered" and e.get("topic") == TOPIC]
    assert any(e["epoch"] == 0 and e["error"] == 0 and e["end_offset"] == 100 for e in asked), asked
