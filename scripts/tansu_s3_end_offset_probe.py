#!/usr/bin/env python3
"""docs/analyses/tansu-0.6.0.md finding 4.1, outside the harness's workload: bring up
clusters/examples/tansu-s3.toml (three tansu brokers over one moto bucket, in containers of the node
image), write 30 records to one partition through the three brokers at once (so they land within about
a second), wait until nothing more is written, then ask each broker ListOffsets(latest) and read the
partition from offset 0 through it: the fetch's high watermark and the records it returns against the
end ListOffsets names. Three rounds. Takes about a minute; starts a real cluster (one at a time).

Usage: .venv/bin/python scripts/tansu_s3_end_offset_probe.py RUN_DIR   (RUN_DIR: where the cluster's
commands.jsonl and node logs go)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafkaesque_harness.clusters.external import ExternalCluster

CLUSTER_FILE = Path(__file__).resolve().parents[1] / "clusters" / "examples" / "tansu-s3.toml"


def read_through(broker: str, tp: TopicPartition, last_acked: int) -> tuple[int, int | None, list[int]]:
    """(ListOffsets(latest), the fetch's high watermark, the offsets a read from 0 returned) via one broker."""
    consumer = KafkaConsumer(bootstrap_servers=[broker], enable_auto_commit=False)
    try:
        end = consumer.end_offsets([tp])[tp]
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[int] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and (not got or got[-1] < last_acked):
            for records in consumer.poll(timeout_ms=1000).values():
                got += [r.offset for r in records]
        return end, consumer.highwater(tp), got
    finally:
        consumer.close()


def main(run_dir: str) -> int:
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    cluster = ExternalCluster.from_file(str(CLUSTER_FILE), None, run_dir)
    cluster.up()
    short = 0
    try:
        cluster.create_topic("probe", 1, 3, 2)
        brokers = ["{}:{}".format(*cluster.address(n)) for n in cluster.broker_nodes()]
        producers = [KafkaProducer(bootstrap_servers=[b], acks="all", linger_ms=0) for b in brokers]
        tp = TopicPartition("probe", 0)
        for round_ in range(3):
            futures = [producers[i % 3].send("probe", f"r{round_}-{i}".encode(), partition=0) for i in range(30)]
            offsets = sorted(f.get(60).offset for f in futures)
            time.sleep(2.5)  # the producers are idle: nothing more is written
            for broker in brokers:
                end, high, got = read_through(broker, tp, offsets[-1])
                short += end < offsets[-1] + 1
                print(f"round {round_} via {broker}: acknowledged offsets {offsets[0]}..{offsets[-1]}; "
                      f"ListOffsets(latest) {end}; fetch high watermark {high}; read {len(got)} records from 0, "
                      f"the last at {got[-1] if got else None}", flush=True)
        for p in producers:
            p.close()
    finally:
        cluster.down()
    print(f"ListOffsets(latest) fell short of the acknowledged end in {short} of 9 answers")
    return 1 if short else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
