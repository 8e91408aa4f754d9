"""A transactional producer as its own process, so a test can kill brokers under it: an unmodified
confluent-kafka Producer or kafka-python KafkaProducer with a transactional.id that runs transactions
0, 1, 2, ... each writing one record "<txn>:<partition>:<i>" per partition and record index, and
aborting every --abort-every'th one. One JSON line per fact on stdout:

  {"event": "committed", "txn": n}   commit_transaction returned: every record of n must be readable
  {"event": "aborted", "txn": n}     abort_transaction returned: no record of n may be readable
  {"event": "uncertain", "txn": n, "error": "..."}  the outcome is unknown (all or nothing either way)

    python -m tests.integration.txn_producer --client confluent|kafka-python --bootstrap H:P,... \
        --topic T --partitions N --txn-id ID --count N [--records 2] [--abort-every 3] [--pause-s 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "time": time.monotonic(), **fields}), flush=True)


class Confluent:
    def __init__(self, a: argparse.Namespace):
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": a.txn_id,
                           "transaction.timeout.ms": 30000, "linger.ms": 1})
        self.p.init_transactions(60)

    def run(self, topic: str, records: list[tuple[int, bytes]], abort: bool) -> None:
        self.p.begin_transaction()
        for partition, value in records:
            self.p.produce(topic, value=value, partition=partition)
        if abort:
            self.p.flush(60)  # the records reach the log first: an abort must hide them, not just drop them
            self.p.abort_transaction(60)
        else:
            self.p.commit_transaction(60)

    def recover(self, e: Exception) -> bool:
        """After a failed transaction: abort it if the client allows; False if the producer is dead."""
        err = e.args[0] if e.args else None
        if err is not None and hasattr(err, "fatal") and err.fatal():
            return False
        try:
            self.p.abort_transaction(60)
        except Exception:  # noqa: BLE001 - already ended: go on with the next one
            pass
        return True


class KafkaPython:
    def __init__(self, a: argparse.Namespace):
        from kafka import KafkaProducer

        self.p = KafkaProducer(bootstrap_servers=a.bootstrap.split(","), transactional_id=a.txn_id,
                               transaction_timeout_ms=30000, linger_ms=1)
        self.p.init_transactions()

    def run(self, topic: str, records: list[tuple[int, bytes]], abort: bool) -> None:
        self.p.begin_transaction()
        for partition, value in records:
            self.p.send(topic, value=value, partition=partition)
        if abort:
            self.p.flush()
            self.p.abort_transaction()
        else:
            self.p.commit_transaction()

    def recover(self, e: Exception) -> bool:
        try:
            self.p.abort_transaction()
        except Exception:  # noqa: BLE001
            return False
        return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=["confluent", "kafka-python"], required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--txn-id", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--records", type=int, default=2)
    ap.add_argument("--abort-every", type=int, default=3)
    ap.add_argument("--pause-s", type=float, default=0.0)
    a = ap.parse_args(argv)
    producer = Confluent(a) if a.client == "confluent" else KafkaPython(a)
    emit("ready")
    for n in range(a.count):
        records = [(p, f"{n}:{p}:{i}".encode()) for p in range(a.partitions) for i in range(a.records)]
        abort = a.abort_every > 0 and n % a.abort_every == a.abort_every - 1
        try:
            producer.run(a.topic, records, abort)
        except Exception as e:  # noqa: BLE001 - any failure leaves the outcome unknown
            emit("uncertain", txn=n, error=repr(e))
            if not producer.recover(e):
                return 1
            continue
        emit("aborted" if abort else "committed", txn=n)
        time.sleep(a.pause_s)
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
