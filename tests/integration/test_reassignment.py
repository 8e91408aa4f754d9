"""Partition reassignment on a real local cluster of the reference broker (PROTOCOL.md 7): a Kafka
client keeps producing with acks=all while the partition moves {1,2,3} -> {2,3,4} (the leader is
removed) -> {4,1,2} (broker 1 comes back with a fresh log, broker 3 goes) -> {4,1,3} while broker
2 is down (it deletes its stale copy when it returns)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from kafkaesque_harness.clusters.broker.reassign import elect_preferred, list_reassignments, reassign
from tests.integration.test_broker import assert_logs_identical_below_hwm, consume_all

pytestmark = pytest.mark.integration

TOPIC = "moving"


class BackgroundProducer:
    """acks=all, one request in flight (so retries keep order); remembers what was acknowledged."""

    def __init__(self, bootstrap: str):
        self.producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=2,
                                      retries=1_000_000, max_in_flight_requests_per_connection=1,
                                      request_timeout_ms=5000, retry_backoff_ms=50)
        self.acked: list[int] = []
        self.failed = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _done(self, i: int):
        def ok(_md):
            with self.lock:
                self.acked.append(i)

        def bad(_exc):
            with self.lock:
                self.failed += 1
        return ok, bad

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            ok, bad = self._done(i)
            self.producer.send(TOPIC, value=str(i).encode(), partition=0).add_callback(ok).add_errback(bad)
            i += 1
            if i % 20 == 0:
                time.sleep(0.01)

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def finish(self) -> list[int]:
        self.stop.set()
        self.thread.join(10)
        self.producer.flush(60)
        self.producer.close(10)
        with self.lock:
            return list(self.acked)


def _partition_dir(cluster, broker: int):
    return cluster.root / f"broker-{broker}" / "logs" / f"{TOPIC}-0"


def _events(cluster, broker: int, name: str) -> list[dict]:
    path = cluster.root / f"broker-{broker}" / "broker.log"
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == name:
            out.append(e)
    return out


def test_reassignment_under_acks_all_load_keeps_every_acknowledged_record(cluster_factory):
    cluster = cluster_factory(brokers=4)
    controller = f"127.0.0.1:{cluster.controller_port}"
    cluster.create_topic(TOPIC, partitions=1, rf=3, min_isr=2)
    p = cluster.partition(TOPIC)
    assert (p["replicas"], p["leader"]) == ([1, 2, 3], 1)

    prod = BackgroundProducer(cluster.bootstrap)
    prod.thread.start()
    cluster.wait_for(lambda: prod.acked_count() > 300, what="the producer to get going")

    # 1. {1,2,3} -> {2,3,4}: the leader (1) is removed; the new leader is the first ISR member of the target.
    final = reassign(controller, TOPIC, 0, [2, 3, 4], wait_s=90)
    assert final is not None
    assert (final["replicas"], final["adding"], final["removing"]) == ([2, 3, 4], [], [])
    assert final["leader"] in (2, 3, 4) and sorted(final["isr"]) == [2, 3, 4]
    assert final["leader_epoch"] > p["leader_epoch"]
    cluster.wait_for(lambda: not _partition_dir(cluster, 1).exists(), timeout=30,
                     what="broker 1 to delete its replica of the partition")
    assert _events(cluster, 1, "replica_deleted")
    before = prod.acked_count()
    cluster.wait_for(lambda: prod.acked_count() > before + 200, what="acknowledgements after the first move")

    # 2. {2,3,4} -> {4,1,2} with the CLI: broker 1 comes back from an empty log, broker 3 goes.
    out = subprocess.run([sys.executable, "-m", "kafkaesque_harness.clusters.broker", "reassign", "--controller", controller,
                          "--topic", TOPIC, "--partition", "0", "--replicas", "4,1,2", "--wait", "90"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + cluster.logs()
    assert "completed" in out.stdout
    cluster.wait_for(lambda: not _partition_dir(cluster, 3).exists(), timeout=30,
                     what="broker 3 to delete its replica of the partition")
    assert _partition_dir(cluster, 1).exists()
    before = prod.acked_count()
    cluster.wait_for(lambda: prod.acked_count() > before + 200, what="acknowledgements after the second move")

    # Preferred leader: 4 (the target's first replica), once it is in the ISR.
    results = elect_preferred(controller, [(TOPIC, 0)])
    assert results[0]["error"] in (0, 84), results  # elected, or 4 already leads
    assert cluster.partition(TOPIC)["leader"] == 4

    # 3. {4,1,2} -> {4,1,3} while broker 2 is down: the move completes without it, and broker 2,
    # back later, finds itself no longer a replica and deletes its stale copy.
    cluster.kill(2)
    final = reassign(controller, TOPIC, 0, [4, 1, 3], wait_s=90)
    assert final is not None and (final["replicas"], final["leader"]) == ([4, 1, 3], 4)
    assert _partition_dir(cluster, 2).exists()
    cluster.restart(2)
    cluster.wait_unfenced([2])
    cluster.wait_for(lambda: not _partition_dir(cluster, 2).exists(), timeout=30,
                     what="broker 2 to delete its stale replica after its restart")
    before = prod.acked_count()
    cluster.wait_for(lambda: prod.acked_count() > before + 200, what="acknowledgements after the third move")

    acked = prod.finish()
    assert prod.failed == 0
    assert len(acked) > 700

    p = cluster.partition(TOPIC)
    assert (p["replicas"], p["adding"], p["removing"]) == ([4, 1, 3], [], [])
    assert list_reassignments(controller) == []
    state = cluster.controller_state()
    assert state["reassignments"] == []

    # Every acknowledged record is in the leader's log, in the order it was acknowledged (a retry
    # may have written a duplicate, never a reordering), with contiguous offsets.
    total = max(acked) + 1
    got = consume_all(cluster.bootstrap, TOPIC, 0, total, timeout=60)
    assert [o for o, _ in got] == list(range(len(got)))
    values = [int(v) for _, v in got]
    pos = {}
    for idx, v in enumerate(values):
        pos.setdefault(v, idx)
    missing = [i for i in acked if i not in pos]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    firsts = [pos[i] for i in acked]
    assert firsts == sorted(firsts), "acknowledged records out of order"
    assert sorted(set(values)) == sorted(set(values) & set(range(total)))

    # The replicas agree below the HWM, and only the target brokers host the partition.
    assert_logs_identical_below_hwm(cluster, TOPIC)
    hosts = {i for i in cluster.broker_ports
             if any(x["topic"] == TOPIC for x in cluster.broker_state(i, False)["partitions"])}
    assert hosts == {1, 3, 4}

    # The Kafka wire APIs (45, 46) through a broker: nothing in progress; a bad target is refused.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","), request_timeout_ms=10000)
    try:
        assert admin.list_partition_reassignments() == {}
        res = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): [1, 1, 2]})
        assert res[TopicPartition(TOPIC, 0)] is not None  # INVALID_REPLICA_ASSIGNMENT
    finally:
        admin.close()
    assert cluster.partition(TOPIC)["replicas"] == [4, 1, 3]
