"""Broker throughput and latency with acks=all: a real 3-broker cluster on loopback, real clients.

Prints figures (never asserts): single-record sends from N concurrent kafka-python producers
(each waits for its ack before the next send, so this measures acks=all round trips through
replication and the HWM), the same with confluent-kafka producers at several counts (with the
CPU the brokers used: on 2 cores they are the bound), and batched sends (one producer, linger)
with kafka-python and confluent-kafka. Targets from issue 2: >= 2,000 acked single-record
sends/s and >= 20,000 batched records/s; issue 26: 5,000 acked single-record sends/s with
confluent-kafka.

    .venv/bin/python benchmarks/bench_broker.py [--seconds 10] [--producers 10] [--confluent-producers 10,20,40]
        [--batched 50000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from yardstick import bracket  # benchmarks/yardstick.py (this script's directory is on sys.path)

from kafkaesque_harness.clusters.broker.admin import create_topic
from kafkaesque_harness.clusters.broker.local_cluster import broker_argv, controller_argv, wait_until_unfenced
from kafkaesque_harness.clusters.ports import free_ports


def start_cluster(root: str, brokers: int, flush_policy: str,
                  extra: list[str] | None = None) -> tuple[list[subprocess.Popen], str]:
    """A controller and `brokers` brokers as local processes under `root` (output in root/nodes.out), started
    and unfenced; (their processes, the bootstrap list). `extra`: more broker flags. Also used by
    bench_groups.py and bench_txn.py."""
    cport, *chosen = free_ports(brokers + 1)
    ports = dict(enumerate(chosen, start=1))
    procs = []
    cdir = os.path.join(root, "controller")
    os.makedirs(cdir)
    out = open(os.path.join(root, "nodes.out"), "ab")
    procs.append(subprocess.Popen(controller_argv("127.0.0.1", cport, cdir), stdout=out, stderr=out))
    for i, port in ports.items():
        d = os.path.join(root, f"broker-{i}")
        os.makedirs(d)
        procs.append(subprocess.Popen(broker_argv(i, "127.0.0.1", port, f"127.0.0.1:{cport}", d, flush_policy, [],
                                                  extra), stdout=out, stderr=out))
    if not wait_until_unfenced("127.0.0.1", cport, list(ports), 60):
        raise SystemExit(f"error: brokers did not unfence within 60 s; see {root}/nodes.out")
    return procs, ",".join(f"127.0.0.1:{p}" for p in ports.values())


def stop_cluster(procs: list[subprocess.Popen], root: str) -> None:
    """SIGKILL what start_cluster started and remove its directory."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
    shutil.rmtree(root, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far, from /proc (Linux); OSError if it is gone."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_seconds(procs: list[subprocess.Popen]) -> list[float]:
    """CPU seconds each process has used so far."""
    return [cpu_seconds(p.pid) for p in procs]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def report_single_sends(client: str, run, producers: int, lat: list[list[float]], errors: list[int]) -> None:
    """Run `run(i)` in one thread per producer and print the acked sends/s and latencies they recorded."""
    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    all_lat = [x for xs in lat for x in xs]
    print(f"single-record acks=all, {producers} {client} producers, 3 partitions: "
          f"{len(all_lat) / elapsed:,.0f} acked sends/s ({len(all_lat)} in {elapsed:.1f} s, {sum(errors)} errors); "
          f"latency p50 {pct(all_lat, 0.5):.1f} ms, p99 {pct(all_lat, 0.99):.1f} ms")


def single_sends(bootstrap: str, topic: str, producers: int, seconds: float) -> None:
    from kafka import KafkaProducer

    lat: list[list[float]] = [[] for _ in range(producers)]
    errors = [0] * producers
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=0)
        p.send(topic, b"warmup", partition=i % 3).get(30)
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                p.send(topic, b"x" * 100, partition=i % 3).get(30)
                lat[i].append((time.perf_counter() - t0) * 1000)
            except Exception:  # noqa: BLE001 - counted, the figure is what matters
                errors[i] += 1
        p.close()

    report_single_sends("kafka-python", run, producers, lat, errors)


def single_sends_confluent(bootstrap: str, topic: str, producers: int, seconds: float) -> None:
    """The same with librdkafka producers: shows how much of the figure is the Python client's cost."""
    from confluent_kafka import Producer

    lat: list[list[float]] = [[] for _ in range(producers)]
    errors = [0] * producers
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        p.produce(topic, b"warmup", partition=i % 3)
        p.flush(30)
        while time.monotonic() < stop:
            done: list = []
            t0 = time.perf_counter()
            p.produce(topic, b"x" * 100, partition=i % 3, on_delivery=lambda err, msg, d=done: d.append(err))
            while not done:
                p.poll(0.05)
            if done[0] is None:
                lat[i].append((time.perf_counter() - t0) * 1000)
            else:
                errors[i] += 1
        p.flush(10)

    report_single_sends("confluent-kafka", run, producers, lat, errors)


def batched_kafka_python(bootstrap: str, topic: str, n: int) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5, batch_size=64 * 1024)
    t0 = time.monotonic()
    futures = [p.send(topic, b"x" * 100, partition=0) for _ in range(n)]
    p.flush(120)
    ok = sum(1 for f in futures if f.succeeded())
    elapsed = time.monotonic() - t0
    p.close()
    print(f"batched acks=all, kafka-python (linger 5 ms): {ok / elapsed:,.0f} records/s ({ok}/{n} in {elapsed:.1f} s)")


def batched_confluent(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked = [0]

    def cb(err, msg):
        if err is None:
            acked[0] += 1

    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, b"x" * 100, partition=0, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)
    elapsed = time.monotonic() - t0
    print(f"batched acks=all, confluent-kafka (linger 5 ms): {acked[0] / elapsed:,.0f} records/s "
          f"({acked[0]}/{n} in {elapsed:.1f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of the single-record phase")
    ap.add_argument("--producers", type=int, default=10)
    ap.add_argument("--confluent-producers", default="10,20,40",
                    help="comma list: the confluent-kafka single-record phase once per count (each producer still "
                         "waits for its ack; more of them let the followers' fetches carry several sends)")
    ap.add_argument("--batched", type=int, default=50_000, help="records per batched phase")
    ap.add_argument("--flush-policy", default="never")
    args = ap.parse_args()
    bracket()  # the machine's speed before and after: figures compare through it
    root = tempfile.mkdtemp(prefix="bench-broker-")
    procs: list[subprocess.Popen] = []
    try:
        procs, bootstrap = start_cluster(root, 3, args.flush_policy)
        print(f"3 brokers + controller on loopback, flush policy {args.flush_policy}, {os.cpu_count()} CPUs "
              f"(load average {os.getloadavg()[0]:.1f}: the machine may be shared)")
        create_topic(bootstrap, "single", 3, 3, 2)
        create_topic(bootstrap, "batched-kp", 1, 3, 2)
        create_topic(bootstrap, "batched-ck", 1, 3, 2)
        single_sends(bootstrap, "single", args.producers, args.seconds)
        for n in (int(x) for x in args.confluent_producers.split(",")):
            before = busy_seconds(procs)
            t0 = time.monotonic()
            single_sends_confluent(bootstrap, "single", n, args.seconds)
            spent = [(after - b) / (time.monotonic() - t0) for b, after in zip(before, busy_seconds(procs), strict=True)]
            print(f"  CPU of the controller and brokers over that phase: {' '.join(f'{x:.0%}' for x in spent)} "
                  f"(of {os.cpu_count()} cores)")
        batched_kafka_python(bootstrap, "batched-kp", args.batched)
        batched_confluent(bootstrap, "batched-ck", args.batched)
        return 0
    finally:
        stop_cluster(procs, root)


if __name__ == "__main__":
    sys.exit(main())
