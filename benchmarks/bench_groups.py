"""Consumer-group rebalance time on the reference broker: a real 3-broker cluster on loopback, three
unmodified consumers (kafka-python and confluent-kafka) in threads of this process.

Prints figures (never asserts), over --rounds fresh groups per client:
  join:  from the three subscribe() calls to every member holding its share of the topic's
         partitions (FindCoordinator, the KIP-394 member-id round, JoinGroup, SyncGroup; the
         broker's group.initial.rebalance.delay.ms, KIP-134, is part of it and is printed);
  leave: from one member's close() (LeaveGroup) to the other two holding every partition.

    .venv/bin/python benchmarks/bench_groups.py [--rounds 3] [--initial-delay-ms 3000] [--partitions 6]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable

from bench_broker import start_cluster, stop_cluster  # a sibling script: benchmarks/ is on the path

from kafkaesque_harness.clusters.broker.admin import create_topic


class MemberThread(threading.Thread):
    """One consumer that subscribes and polls until told to close; `assigned` is its latest assignment."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str):
        super().__init__(daemon=True)
        self.client, self.bootstrap, self.group, self.topic = client, bootstrap, group, topic
        self.assigned: frozenset[int] = frozenset()
        self.close_now = threading.Event()

    def run(self) -> None:
        if self.client == "kafka-python":
            from kafka import KafkaConsumer

            c = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","), group_id=self.group,
                              enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=1000)
            c.subscribe([self.topic])
            while not self.close_now.is_set():
                c.poll(timeout_ms=50)
                self.assigned = frozenset(tp.partition for tp in c.assignment())
        else:
            from confluent_kafka import Consumer

            c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                          "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
            c.subscribe([self.topic])
            while not self.close_now.is_set():
                c.poll(0.05)
                self.assigned = frozenset(tp.partition for tp in c.assignment())
        c.close()


def wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> float:
    """Seconds until `condition` held (polled every 5 ms); raises on timeout."""
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout_s:
            raise SystemExit("error: the group did not settle within 60 s")
        time.sleep(0.005)
    return time.monotonic() - t0


def one_round(client: str, bootstrap: str, group: str, topic: str, partitions: int) -> tuple[float, float]:
    everything = frozenset(range(partitions))
    members = [MemberThread(client, bootstrap, group, topic) for _ in range(3)]
    t0 = time.monotonic()
    for m in members:
        m.start()
    wait_for(lambda: all(m.assigned for m in members) and frozenset().union(*(m.assigned for m in members)) == everything)
    join_s = time.monotonic() - t0
    leaver, rest = members[0], members[1:]
    leaver.close_now.set()
    leave_s = wait_for(lambda: frozenset().union(*(m.assigned for m in rest)) == everything)
    for m in members:
        m.close_now.set()
    for m in members:
        m.join(30)
    return join_s, leave_s


def summary(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:7.0f} ms  min {min(xs) * 1000:7.0f}  max {max(xs) * 1000:7.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--initial-delay-ms", type=int, default=3000, help="the brokers' group.initial.rebalance.delay.ms")
    args = p.parse_args()
    root = tempfile.mkdtemp(prefix="bench-groups-")
    procs: list[subprocess.Popen] = []
    try:
        procs, bootstrap = start_cluster(root, 3, "never", ["--group-initial-rebalance-delay-ms", str(args.initial_delay_ms)])
        create_topic(bootstrap, "bench", args.partitions, 3, 2)
        # Create __consumer_offsets (on first FindCoordinator) before any timed round.
        one_round("kafka-python", bootstrap, "warm-up", "bench", args.partitions)
        print(f"3 consumers, {args.partitions} partitions, 3 brokers, "
              f"group.initial.rebalance.delay.ms={args.initial_delay_ms}, {args.rounds} rounds each")
        for client in ("kafka-python", "confluent"):
            joins, leaves = [], []
            for r in range(args.rounds):
                j, lv = one_round(client, bootstrap, f"{client}-{r}", "bench", args.partitions)
                joins.append(j)
                leaves.append(lv)
            print(f"{client:13s} join (subscribe -> all assigned): {summary(joins)}")
            print(f"{client:13s} leave (close -> survivors hold all): {summary(leaves)}")
    finally:
        stop_cluster(procs, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
