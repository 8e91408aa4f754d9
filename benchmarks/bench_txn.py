"""Transactions per second on the reference broker: a real 3-broker cluster on loopback, an unmodified
confluent-kafka transactional producer.

Prints figures (never asserts): for --seconds, one producer runs transactions of one record each
(begin_transaction, produce, commit_transaction) back to back. Each costs AddPartitionsToTxn (a record
of __transaction_state, acks=all), the Produce, EndTxn (PrepareCommit, acks=all) and, before the next
transaction may touch the partition, the marker (acks=all at the partition) and CompleteCommit. Also a read_committed consumer's
count of what it reads afterwards, which must equal the number of commits.

    .venv/bin/python benchmarks/bench_txn.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time

from bench_broker import pct, start_cluster, stop_cluster  # a sibling script: benchmarks/ is on the path
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kafkaesque_harness.clusters.broker.admin import create_topic


def read_committed_count(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reader", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    n, deadline = 0, time.monotonic() + 60
    while time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        n += 1
    c.close()
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args()
    root = tempfile.mkdtemp(prefix="bench-txn-")
    procs: list[subprocess.Popen] = []
    try:
        procs, bootstrap = start_cluster(root, 3, "never")
        create_topic(bootstrap, "bench-txn", 1, 3, 2)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench", "linger.ms": 0})
        t0 = time.monotonic()
        producer.init_transactions(60)  # creates __transaction_state: not timed below
        init_s = time.monotonic() - t0
        latencies: list[float] = []
        start = time.monotonic()
        while time.monotonic() - start < args.seconds:
            t = time.monotonic()
            producer.begin_transaction()
            producer.produce("bench-txn", value=b"x", partition=0)
            producer.commit_transaction(60)
            latencies.append(time.monotonic() - t)
        elapsed = time.monotonic() - start
        committed = len(latencies)
        print(f"confluent-kafka, 3 brokers, rf=3 min.insync.replicas=2, one record per transaction, {elapsed:.1f} s")
        print(f"first init_transactions (creates __transaction_state): {init_s * 1000:.0f} ms")
        print(f"commits/s: {committed / elapsed:.1f} ({committed} commits); commit latency ms "
              f"p50 {pct(latencies, 0.5) * 1000:.1f} p99 {pct(latencies, 0.99) * 1000:.1f} "
              f"max {max(latencies) * 1000:.1f}")
        print(f"read_committed consumer reads {read_committed_count(bootstrap, 'bench-txn')} records "
              f"(expected {committed})")
    finally:
        stop_cluster(procs, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
