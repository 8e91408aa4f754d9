#!/usr/bin/env python3
"""docs/analyses/tansu-0.6.0.md section 3 (subscribe mode), outside the harness's workload: does a consumer
group form on three tansu brokers over one bucket? Brings up clusters/examples/tansu-s3.toml (containers of the node
image), writes 20 records to each of two partitions, then runs two groups of three kafka-python consumers
(subscribe, auto_offset_reset earliest), each consumer polling in a thread of its own for 30 s:

- group `together`: the three consumers bootstrap to one broker (one coordinator);
- group `spread`: one consumer per broker (every tansu broker is the group coordinator, README).

For each group: when each member was first assigned partitions (kafka-python's rebalance listener), how
many times it was revoked, and how many records the group read (40 exist). Takes about 2 minutes;
starts a real cluster (one at a time).

Usage: .venv/bin/python scripts/tansu_s3_group_probe.py RUN_DIR   (RUN_DIR: where the cluster's
commands.jsonl and node logs go)
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer

from kafkaesque_harness.clusters.external import ExternalCluster

CLUSTER_FILE = Path(__file__).resolve().parents[1] / "clusters" / "examples" / "tansu-s3.toml"
TOPIC, PARTITIONS, RECORDS_EACH, SECONDS = "groups", 2, 20, 30


class Member(ConsumerRebalanceListener):
    """One consumer of a group, polled by its own thread until `stop`: what the group gave it, and what it read."""

    def __init__(self, group: str, broker: str, began: float):
        self.group, self.broker, self.began = group, broker, began
        self.first_assigned: float | None = None
        self.assignments, self.revocations, self.read = 0, 0, 0

    def on_partitions_assigned(self, assigned):
        self.assignments += 1
        if assigned and self.first_assigned is None:
            self.first_assigned = time.monotonic() - self.began

    def on_partitions_revoked(self, revoked):
        self.revocations += 1

    def run(self, stop: threading.Event) -> None:
        consumer = KafkaConsumer(bootstrap_servers=[self.broker], group_id=self.group, enable_auto_commit=False,
                                 auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1000)
        try:
            consumer.subscribe([TOPIC], listener=self)
            while not stop.is_set():
                self.read += sum(len(records) for records in consumer.poll(timeout_ms=500).values())
        finally:
            consumer.close(autocommit=False)


def run_group(group: str, brokers: list[str]) -> list[Member]:
    began, stop = time.monotonic(), threading.Event()
    members = [Member(group, b, began) for b in brokers]
    threads = [threading.Thread(target=m.run, args=(stop,)) for m in members]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(30)
    return members


def main(run_dir: str) -> int:
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    cluster = ExternalCluster.from_file(str(CLUSTER_FILE), None, run_dir)
    cluster.up()
    formed = {}
    try:
        cluster.create_topic(TOPIC, PARTITIONS, 3, 2)
        brokers = ["{}:{}".format(*cluster.address(n)) for n in cluster.broker_nodes()]
        producer = KafkaProducer(bootstrap_servers=[brokers[0]], acks="all", linger_ms=0)
        for p in range(PARTITIONS):
            for i in range(RECORDS_EACH):
                producer.send(TOPIC, f"{p}-{i}".encode(), partition=p).get(60)
        producer.close()
        for group, members_at in (("together", [brokers[0]] * 3), ("spread", brokers)):
            members = run_group(group, members_at)
            read = sum(m.read for m in members)
            formed[group] = read >= PARTITIONS * RECORDS_EACH
            print(f"group {group}: {read} of {PARTITIONS * RECORDS_EACH} records read in {SECONDS} s", flush=True)
            for m in members:
                first = f"{m.first_assigned:.1f} s" if m.first_assigned is not None else "never"
                print(f"  member via {m.broker}: first given partitions after {first}; "
                      f"{m.assignments} assignments, {m.revocations} revocations; read {m.read}", flush=True)
    finally:
        cluster.down()
    return 0 if all(formed.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
