"""One member of a consumer group, as its own process so a test can SIGKILL it: an unmodified
kafka-python KafkaConsumer or confluent-kafka Consumer that subscribes, consumes slowly and commits
what it consumed synchronously, writing one JSON line per fact to stdout:

  {"event": "assigned", "partitions": [...]}     its assignment changed (seen after a poll)
  {"event": "committed", "offsets": {p: offset}} a commit the coordinator acknowledged
  {"event": "commit_failed", "error": "..."}     a commit refused (a rebalance, a coordinator move)

SIGTERM closes the consumer (it leaves the group) and exits.

    python -m tests.integration.group_consumer --client kafka-python|confluent --bootstrap H:P,... \
        --group G --topic T [--batch 5] [--pause-s 0.1]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "time": time.monotonic(), **fields}), flush=True)


class KafkaPythonMember:
    def __init__(self, a: argparse.Namespace):
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        self.tp, self.om = TopicPartition, OffsetAndMetadata
        self.topic = a.topic
        self.c = KafkaConsumer(bootstrap_servers=a.bootstrap.split(","), group_id=a.group, client_id=a.name,
                               enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
                               heartbeat_interval_ms=1000, max_poll_records=a.batch, request_timeout_ms=15000)
        self.c.subscribe([a.topic])

    def poll(self) -> dict[int, int]:
        """Records of one poll -> the next offset to consume, by partition."""
        out = {}
        for tp, records in self.c.poll(timeout_ms=200).items():
            out[tp.partition] = records[-1].offset + 1
        return out

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.c.assignment())

    def commit(self, offsets: dict[int, int]) -> None:
        self.c.commit({self.tp(self.topic, p): self.om(o, "", -1) for p, o in offsets.items()})

    def close(self) -> None:
        self.c.close()


class ConfluentMember:
    def __init__(self, a: argparse.Namespace):
        from confluent_kafka import Consumer, TopicPartition

        self.tp = TopicPartition
        self.topic, self.batch = a.topic, a.batch
        self.c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group, "client.id": a.name,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
        self.c.subscribe([a.topic])

    def poll(self) -> dict[int, int]:
        out = {}
        for m in self.c.consume(num_messages=self.batch, timeout=0.2):
            if m.error() is None:
                out[m.partition()] = m.offset() + 1
        return out

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.c.assignment())

    def commit(self, offsets: dict[int, int]) -> None:
        self.c.commit(offsets=[self.tp(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)

    def close(self) -> None:
        self.c.close()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--client", choices=["kafka-python", "confluent"], required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", default="member")
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--pause-s", type=float, default=0.1, help="pause after each poll: a slow consumer")
    a = p.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    member = KafkaPythonMember(a) if a.client == "kafka-python" else ConfluentMember(a)
    last_assignment = None
    while not stopping:
        offsets = member.poll()
        assignment = member.assignment()
        if assignment != last_assignment:
            emit("assigned", partitions=assignment)
            last_assignment = assignment
        if not offsets:
            continue
        time.sleep(a.pause_s)
        try:
            member.commit(offsets)
        except Exception as e:  # noqa: BLE001 - a refused commit is a fact to report, the member goes on
            emit("commit_failed", error=repr(e)[:300])
            continue
        emit("committed", offsets=offsets)
    member.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
