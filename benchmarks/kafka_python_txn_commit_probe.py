"""An independent probe of kafka-python's committed transaction without its record (docs/FINDINGS.md,
kafka-python 3.0.12, finding 2), with no harness code: the reference broker as processes on loopback, one
kill, and an unmodified transactional producer of kafka-python, then of librdkafka (confluent-kafka).

The topic `probe` has three replicas and min.insync.replicas 3, so once any broker is down every acks=all
produce to it is refused with NOT_ENOUGH_REPLICAS (a retriable error) while the transaction coordinator, on
__transaction_state with min ISR 2, keeps working. A broker other than the coordinator of the transactional
id is killed; then each client runs one transaction: begin, send one record to `probe`, commit (bounded).
The record cannot be written, so its delivery fails when delivery.timeout.ms (message.timeout.ms) runs out.
Kafka's contract (KafkaProducer.commitTransaction, TransactionManager.maybeTransitionToErrorState): a send
of the transaction that failed makes the transaction abortable, and the commit throws. Finally the broker
comes back and a read_committed consumer reads `probe` from its start: a committed transaction's record
must be there.

    .venv/bin/python benchmarks/kafka_python_txn_commit_probe.py

Exit 1 when a client's commit returned although its send failed (the finding), 0 when not.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from probe_cluster import ProbeCluster, ask  # a sibling script: benchmarks/ is on the path

TOPIC = "probe"
DELIVERY_TIMEOUT_MS = 4000  # as the txn workload's kafka-python producer (workloads/txn.py)


def bounded(call, timeout_s: float) -> str:
    """Run a blocking client call on a thread: "returned", "raised <error>", or "still blocked"."""
    out: dict[str, str] = {}

    def target() -> None:
        try:
            call()
            out["r"] = "returned"
        except Exception as e:  # noqa: BLE001 - what the client raised is the result
            out["r"] = f"raised {type(e).__name__}: {e}"[:300]

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    return out.get("r", f"still blocked after {timeout_s:g} s")


def coordinator_of(cluster: ProbeCluster, txn_id: str) -> int:
    R = FindCoordinatorRequest
    resp = ask(next(iter(cluster.ports.values())), R(version=4, key_type=1, coordinator_keys=[txn_id]),
               FindCoordinatorResponse)
    return resp.coordinators[0].node_id


def kafka_python_txn(bootstrap: str, txn_id: str, value: bytes) -> dict[str, Any]:
    p = KafkaProducer(bootstrap_servers=bootstrap.split(","), transactional_id=txn_id, acks="all", linger_ms=0,
                      request_timeout_ms=3000, delivery_timeout_ms=DELIVERY_TIMEOUT_MS, max_block_ms=5000,
                      metadata_max_age_ms=2000, reconnect_backoff_max_ms=500)
    p.init_transactions()
    p.begin_transaction()
    fut = p.send(TOPIC, value=value, partition=0)
    commit = bounded(p.commit_transaction, 20)
    delivery = ("not reported" if not fut.is_done else
                f"offset {fut.value.offset}" if fut.succeeded() else f"failed: {fut.exception!r}"[:200])
    bounded(lambda: p.close(timeout=1), 5)
    return {"commit": commit, "delivery": delivery}


def confluent_txn(bootstrap: str, txn_id: str, value: bytes) -> dict[str, Any]:
    from confluent_kafka import Producer

    reports: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": DELIVERY_TIMEOUT_MS, "request.timeout.ms": 3000})
    p.init_transactions(10)
    p.begin_transaction()

    def delivered(err, msg) -> None:
        reports.append(f"failed: {err}" if err is not None else f"offset {msg.offset()}")

    p.produce(TOPIC, value=value, partition=0, on_delivery=delivered)
    commit = bounded(lambda: p.commit_transaction(20), 25)
    p.poll(0)
    return {"commit": commit, "delivery": reports[0] if reports else "not reported"}


def read_committed(bootstrap: str) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                      isolation_level="read_committed", request_timeout_ms=5000)
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    end = c.end_offsets([tp])[tp]
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while c.position(tp) < end and time.monotonic() < deadline:
        values += [r.value for recs in c.poll(timeout_ms=500).values() for r in recs]
    c.close()
    return values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="kafka-python,confluent-kafka")
    args = ap.parse_args()
    clients = args.clients.split(",")
    results: dict[str, dict[str, Any]] = {}
    with ProbeCluster(3) as cluster:
        cluster.create_topic(TOPIC, 1, 3, 3)
        coordinators = {c: coordinator_of(cluster, f"probe-{c}") for c in clients}
        victim = next(b for b in cluster.ports if b not in coordinators.values())
        print(f"transaction coordinators: {coordinators}; killing broker {victim}")
        cluster.kill(victim)
        cluster.wait_for(lambda: victim not in cluster.partition(TOPIC)["isr"], 30,
                         f"broker {victim} to leave the ISR of {TOPIC}")
        print(f"{TOPIC}: ISR {cluster.partition(TOPIC)['isr']} with min.insync.replicas 3: every acks=all produce "
              "is refused with NOT_ENOUGH_REPLICAS")
        alive = cluster.address(*[b for b in cluster.ports if b != victim])
        for c in clients:
            run = kafka_python_txn if c == "kafka-python" else confluent_txn
            results[c] = run(alive, f"probe-{c}", f"committed-by-{c}".encode())
            print(f"{c}: send {results[c]['delivery']}; commit_transaction {results[c]['commit']}")
        cluster.start_broker(victim)
        cluster.wait_for(lambda: len(cluster.partition(TOPIC)["isr"]) == 3, 60, f"broker {victim} back in the ISR")
        values = read_committed(cluster.bootstrap)
        for c, coordinator in coordinators.items():  # what each coordinator decided (its protocol trace)
            for e in cluster.trace(coordinator):
                if e.get("event") == "txn_end_started" and e.get("transactional_id") == f"probe-{c}":
                    print(f"{c}: coordinator broker {coordinator} ended its transaction: {e['result']} of "
                          f"{e['partitions']} (started by {e['started_by']})")
    found = 0
    for c in clients:
        committed = results[c]["commit"] == "returned"
        there = f"committed-by-{c}".encode() in values
        print(f"{c}: commit {'returned' if committed else 'did not return'}; its record "
              f"{'is' if there else 'is NOT'} in the read_committed log of {TOPIC}")
        found += committed and not there
    print(f"read_committed {TOPIC}: {[v.decode() for v in values]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
