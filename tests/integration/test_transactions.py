"""Transactions on a 3-broker reference cluster with unmodified clients (issue 24, deliverable 2):
committed transactions visible whole and aborted ones invisible to read_committed consumers (and both
visible to read_uncommitted ones); offsets sent to a transaction visible only when it commits; and the
transaction coordinator's broker (the leader of the transactional.id's __transaction_state partition)
SIGKILLed while a producer runs transactions, with every committed transaction intact afterwards. The
producer is a process of its own (tests/integration/txn_producer.py).

The coordinator kill runs with confluent-kafka only: kafka-python 3.0.12's transactional producer, asked
FindCoordinator right after the kill (before the controller has fenced the dead broker, so the answer is
still the dead broker, as Kafka's would be), kept that coordinator and never looked it up again; its
transaction expired after delivery.timeout.ms (120 s) instead of moving to the new coordinator."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kafkaesque_harness.clusters.broker.txn_coordinator import TXN_STATE_TOPIC, TransactionCoordinator
from tests.integration.group_txn_helpers import (
    TxnProducer,
    assert_atomic,
    by_txn,
    read_all,
    read_all_kafka_python,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(local_cluster):
    """Each test's own 3-broker local cluster, down at its end."""
    return local_cluster


def open_transaction(bootstrap: str, topic: str, value: bytes, transactional_id: str, **config) -> Producer:
    """A transactional producer whose transaction is open, holding one record at `topic` 0, sent and acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **config})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=value, partition=0)
    p.flush(30)
    return p


def produce_plain(bootstrap: str, topic: str, value: bytes) -> None:
    """One record at `topic` 0 outside any transaction, acknowledged."""
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=value, partition=0)
    plain.flush(30)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_committed_visible_and_aborted_invisible_to_read_committed(cluster, client, tmp_path):
    partitions, count = 3, 9
    cluster.create_topic("txns", partitions=partitions, rf=3, min_isr=2)
    producer = TxnProducer(tmp_path, client, cluster.bootstrap, "txns", partitions, f"tx-{client}", count)
    assert producer.wait(90) == 0, (tmp_path / f"tx-{client}.err").read_text()[-2000:]
    assert producer.txns("committed") == {0, 1, 3, 4, 6, 7} and producer.txns("aborted") == {2, 5, 8}
    per_txn = partitions * 2
    committed = by_txn(read_all(cluster.bootstrap, "txns", partitions, "read_committed"))
    assert_atomic(committed, producer, per_txn, outcome_known=True)
    # read_uncommitted reads the aborted transactions' records too (their markers hide them only
    # from read_committed consumers)
    uncommitted = by_txn(read_all(cluster.bootstrap, "txns", partitions, "read_uncommitted"))
    assert set(uncommitted) == set(range(count)) and all(len(v) == per_txn for v in uncommitted.values())
    # kafka-python's consumer, too
    kp_committed = by_txn(read_all_kafka_python(cluster.bootstrap, "txns", partitions, "read_committed"))
    assert_atomic(kp_committed, producer, per_txn, outcome_known=True)
    kp_uncommitted = by_txn(read_all_kafka_python(cluster.bootstrap, "txns", partitions, "read_uncommitted"))
    assert set(kp_uncommitted) == set(range(count))


def test_an_open_transaction_holds_read_committed_consumers_at_its_first_offset(cluster):
    cluster.create_topic("open", partitions=1, rf=3, min_isr=2)
    p = open_transaction(cluster.bootstrap, "open", b"0:0:0", "tx-open")
    produce_plain(cluster.bootstrap, "open", b"99:0:0")  # after the open transaction's first record
    assert read_all(cluster.bootstrap, "open", 1, "read_committed", idle_s=2) == []  # the LSO is 0
    assert sorted(read_all(cluster.bootstrap, "open", 1, "read_uncommitted", idle_s=2)) == ["0:0:0", "99:0:0"]
    p.commit_transaction(30)
    assert sorted(read_all(cluster.bootstrap, "open", 1, "read_committed", idle_s=2)) == ["0:0:0", "99:0:0"]


def test_offsets_sent_to_a_transaction_are_committed_only_with_it(cluster):
    cluster.create_topic("in", partitions=1, rf=3, min_isr=2)
    cluster.create_topic("out", partitions=1, rf=3, min_isr=2)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(4):
        plain.produce("in", value=str(i).encode(), partition=0)
    plain.flush(30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "eos", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.subscribe(["in"])
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-eos"})
    p.init_transactions(30)
    tp = TopicPartition("in", 0)

    def committed() -> int:
        return consumer.committed([tp], 10)[0].offset

    for outcome, offset in (("abort", 2), ("commit", 3), ("abort", 4)):
        p.begin_transaction()
        p.produce("out", value=f"{offset}".encode(), partition=0)
        cluster.wait_for(lambda: consumer.poll(0.2) is not None or consumer.assignment(), timeout=30,
                         what="the consumer to join its group")
        p.send_offsets_to_transaction([TopicPartition("in", 0, offset)], consumer.consumer_group_metadata(), 30)
        (p.abort_transaction if outcome == "abort" else p.commit_transaction)(30)
        # the markers reach __consumer_offsets after EndTxn is answered: KIP-447's require_stable
        # makes the consumer wait for them rather than read the older offset
        assert committed() == (3 if offset >= 3 else -1001), (outcome, offset)  # -1001: none committed
    assert read_all(cluster.bootstrap, "out", 1, "read_committed", idle_s=2) == ["3"]
    consumer.close()


def test_every_committed_transaction_survives_the_txn_coordinators_death(cluster, tmp_path):
    partitions, count, txn_id = 3, 60, "tx-failover"
    cluster.create_topic("ledger", partitions=partitions, rf=3, min_isr=2)
    producer = TxnProducer(tmp_path, "confluent", cluster.bootstrap, "ledger", partitions, txn_id, count,
                           pause_s=0.05)
    cluster.wait_for(lambda: len(producer.txns("committed")) >= 10, timeout=60, what="ten committed transactions")
    state_partition = TransactionCoordinator(lambda: 0).partition_for(txn_id)
    coordinator = cluster.partition(TXN_STATE_TOPIC, state_partition)["leader"]
    committed_before = len(producer.txns("committed"))
    cluster.kill(coordinator)
    cluster.wait_for(lambda: cluster.partition(TXN_STATE_TOPIC, state_partition)["leader"] not in (coordinator, -1),
                     timeout=30, what="a new transaction coordinator")
    assert producer.wait(180) == 0, (tmp_path / f"{txn_id}.err").read_text()[-2000:]
    assert len(producer.txns("committed")) > committed_before + 5  # it went on committing after the kill
    seen = by_txn(read_all(cluster.bootstrap, "ledger", partitions, "read_committed"))
    assert_atomic(seen, producer, partitions * 2, outcome_known=False)


def test_a_zombie_producer_is_fenced_and_its_open_transaction_aborted(cluster):
    cluster.create_topic("z", partitions=1, rf=3, min_isr=2)
    zombie = open_transaction(cluster.bootstrap, "z", b"0:0:zombie", "tx-z")
    # A new instance with the same transactional.id: InitProducerId aborts the zombie's open
    # transaction with a bumped epoch, then gives the new instance the epoch after it.
    successor = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-z"})
    successor.init_transactions(30)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal(), fenced.value
    successor.begin_transaction()
    successor.produce("z", value=b"1:0:successor", partition=0)
    successor.commit_transaction(30)
    assert read_all(cluster.bootstrap, "z", 1, "read_committed", idle_s=2) == ["1:0:successor"]
    assert read_all(cluster.bootstrap, "z", 1, "read_uncommitted", idle_s=2) == ["0:0:zombie", "1:0:successor"]


def test_an_abandoned_transaction_is_aborted_at_its_timeout(cluster):
    cluster.create_topic("abandoned", partitions=1, rf=3, min_isr=2)
    open_transaction(cluster.bootstrap, "abandoned", b"0:0:abandoned", "tx-abandoned",
                     **{"transaction.timeout.ms": 3000})  # and never committed nor aborted
    produce_plain(cluster.bootstrap, "abandoned", b"1:0:plain")
    assert read_all(cluster.bootstrap, "abandoned", 1, "read_committed", idle_s=1) == []  # held at the LSO
    # the coordinator aborts it after 3 s: the LSO moves past it, its record stays hidden
    cluster.wait_for(lambda: read_all(cluster.bootstrap, "abandoned", 1, "read_committed", idle_s=1)
                     == ["1:0:plain"], timeout=30, what="the abandoned transaction aborted by its timeout")
