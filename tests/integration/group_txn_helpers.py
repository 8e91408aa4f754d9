"""What the consumer-group and transaction integration tests share (test_groups.py, test_transactions.py,
test_eos.py): the client processes they start and read facts from, the watcher of a group's committed
offsets, the readers of a topic, and the checks of committed offsets and of transactions' atomicity."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """`per_partition` plain records "<partition>-<i>" in each partition, acks=all."""
    p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5)
    for i in range(per_partition):
        for part in range(partitions):
            p.send(topic, value=f"{part}-{i}".encode(), partition=part)
    p.flush(60)
    p.close()


class FactsProcess:
    """A client process started by a test that writes one JSON fact per line to its stdout file."""

    def __init__(self, out: Path, argv: list[str]):
        self.out = out
        self.proc = subprocess.Popen([sys.executable, "-m", *argv], stdout=open(out, "wb"),
                                     stderr=open(out.with_suffix(".err"), "wb"))

    def facts(self, event: str) -> list[dict]:
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        facts = []
        for line in lines:
            try:
                fact = json.loads(line)
            except ValueError:
                continue  # a line cut by SIGKILL
            if fact["event"] == event:
                facts.append(fact)
        return facts

    def txns(self, event: str) -> set[int]:
        return {f["txn"] for f in self.facts(event)}

    def errors(self) -> str:
        return self.out.with_suffix(".err").read_text()[-2000:]

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Member(FactsProcess):
    """A group member process (group_consumer.py, or another module writing the same facts)."""

    def __init__(self, root: Path, name: str, client: str, bootstrap: str, group: str, topic: str,
                 module: str = "tests.integration.group_consumer", extra: list[str] | None = None):
        self.name = name
        super().__init__(root / f"{name}.jsonl", [module, "--client", client, "--bootstrap", bootstrap,
                                                  "--group", group, "--topic", topic, "--name", name, *(extra or [])])

    def assignment(self) -> set[int]:
        assigned = self.facts("assigned")
        return set(assigned[-1]["partitions"]) if assigned else set()

    def acked_commits(self) -> dict[int, int]:
        """The highest offset of each partition this member's commits were acknowledged for."""
        out: dict[int, int] = {}
        for fact in self.facts("committed"):
            for p, o in fact["offsets"].items():
                out[int(p)] = max(out.get(int(p), -1), o)
        return out


class TxnProducer(FactsProcess):
    """A transactional producer process (txn_producer.py) and the facts it wrote."""

    def __init__(self, root: Path, client: str, bootstrap: str, topic: str, partitions: int, txn_id: str,
                 count: int, pause_s: float = 0.0):
        super().__init__(root / f"{txn_id}.jsonl", [
            "tests.integration.txn_producer", "--client", client, "--bootstrap", bootstrap, "--topic", topic,
            "--partitions", str(partitions), "--txn-id", txn_id, "--count", str(count), "--pause-s", str(pause_s)])


class CommittedWatcher(threading.Thread):
    """Reads the group's committed offsets over and over (a consumer with the group id that never
    joins: OffsetFetch only) and keeps every answer, by partition, in order."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int):
        super().__init__(daemon=True)
        self.tps = [KTopicPartition(topic, p) for p in range(partitions)]
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=group,
                                      enable_auto_commit=False, request_timeout_ms=10000)
        self.seen: dict[int, list[int]] = {tp.partition: [] for tp in self.tps}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for tp in self.tps:
                try:
                    offset = self.consumer.committed(tp)
                except Exception:  # noqa: BLE001 - a coordinator moving away: ask again
                    continue
                if offset is not None:
                    self.seen[tp.partition].append(offset)
            time.sleep(0.1)

    def latest(self) -> dict[int, int]:
        return {p: s[-1] for p, s in self.seen.items() if s}

    def stop(self) -> None:
        self.stopping.set()
        self.join(15)
        self.consumer.close()


def tear_down(cluster, members: list[Member], watcher: CommittedWatcher | None) -> None:
    """A group test's end, passed or not: members stopped (they leave the group), the watcher, the cluster."""
    for m in members:
        m.stop()
    if watcher is not None:
        watcher.stop()
    cluster.down()


def assert_never_backwards(watcher: CommittedWatcher) -> None:
    for p, series in watcher.seen.items():
        assert series == sorted(series), f"partition {p}: a committed offset went backwards: {series}"


def assert_no_acked_commit_lost(members: list[Member], final: dict[int, int]) -> None:
    for m in members:
        for p, o in m.acked_commits().items():
            assert final.get(p, -1) >= o, f"{m.name}'s acknowledged commit {p}:{o} is lost (committed now {final})"


def group_state(cluster, broker: int, group: str) -> str | None:
    """The group's state as its coordinator's dump shows it (None: not known there)."""
    return (group_dump(cluster, broker, group) or {}).get("state")


def group_dump(cluster, broker: int, group: str) -> dict | None:
    """The group as its coordinator's dump shows it: state, generation, members (None: not known there)."""
    st = cluster.broker_state(broker, include_log=False)
    groups = (st or {}).get("group_coordinator", {}).get("groups", [])
    return next((g for g in groups if g["group"] == group), None)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, idle_s: float = 3.0) -> list[str]:
    """Every record a consumer with this isolation level reads from the start of each partition up to
    its end (the LSO for read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}-{time.time()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end, last = [], set(), time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (len(at_end) < partitions or time.monotonic() - last < idle_s):
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
            continue
        at_end.discard(m.partition())
        values.append(m.value().decode())
        last = time.monotonic()
    c.close()
    return values


def read_all_kafka_python(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[str]:
    """The same with kafka-python's KafkaConsumer (it drops aborted records itself, by the aborted list)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), isolation_level=isolation, enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    tps = [KTopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    values = [m.value.decode() for m in c]
    c.close()
    return values


def by_txn(values: list[str]) -> dict[int, list[str]]:
    """Records "<txn>:..." grouped by the transaction that wrote them."""
    out: dict[int, list[str]] = defaultdict(list)
    for v in values:
        out[int(v.split(":")[0])].append(v)
    return out


def assert_atomic(seen: dict[int, list[str]], producer: FactsProcess, per_txn: int | Mapping[int, int],
                  outcome_known: bool) -> None:
    """Every record of each committed transaction read, none of an aborted one, all or none of one whose
    outcome is unknown, none twice. `per_txn`: the records of every transaction, or of each by number."""
    def size(n: int) -> int:
        return per_txn if isinstance(per_txn, int) else per_txn[n]

    committed, aborted, uncertain = producer.txns("committed"), producer.txns("aborted"), producer.txns("uncertain")
    for n in committed:
        assert len(seen.get(n, [])) == size(n), f"committed transaction {n}: {len(seen.get(n, []))} of {size(n)} records"
    for n in aborted:
        assert n not in seen, f"aborted transaction {n} read by a read_committed consumer: {seen[n]}"
    for n in uncertain:
        assert len(seen.get(n, [])) in (0, size(n)), f"transaction {n} is torn: {seen[n]}"
    if outcome_known:
        assert not uncertain and set(seen) == committed
    for n, records in seen.items():
        assert len(records) == len(set(records)), f"transaction {n} read twice: {records}"
