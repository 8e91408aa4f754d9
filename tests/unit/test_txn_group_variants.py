"""The four transaction and consumer-group flaws of issue 24 (clusters/reference.py TXN_GROUP_VARIANTS),
each shown by the rule it breaks: one scenario, run on the default broker (the rule holds) and under
the variant (it does not). Sans-IO where the rule lives in a state machine (txn_coordinator.py,
producer_state.py), a real Broker object with no sockets where it lives in the shell (server.py)."""

from __future__ import annotations

import asyncio
import itertools

from kafkaesque_harness.clusters.broker import kafka_api, rpc
from kafkaesque_harness.clusters.broker.log import build_batch, validate_batches
from kafkaesque_harness.clusters.broker.log.batch import build_control_batch
from kafkaesque_harness.clusters.broker.producer_state import ProducerStateTable
from kafkaesque_harness.clusters.broker.server import Broker
from kafkaesque_harness.clusters.broker.txn_coordinator import TransactionCoordinator, TxnConfig
from kafkaesque_harness.clusters.reference import BROKER_VARIANTS, FLAW_VARIANTS, TXN_GROUP_VARIANTS
from tests.unit.test_broker_groups import FOLLOWER, lead_offsets_partition, on_a_broker
from tests.unit.test_broker_txn import lead, produce, txn_batch, values
from tests.unit.test_txn_coordinator import TIMEOUT, TP1, TP2, T, write


def coordinator(*variants: str) -> TransactionCoordinator:
    ids = itertools.count(1000)
    c = TransactionCoordinator(lambda: next(ids), TxnConfig(txn_partitions=1, variants=frozenset(variants)))
    c.begin_loading(0, 3)
    c.load(0, [])
    return c


def init(c: TransactionCoordinator) -> tuple[int, int]:
    err, t = c.init_producer_id(T, TIMEOUT, -1, -1, 0)
    assert err == rpc.NONE and t is not None, err
    c.written(t)
    return t.new.producer_id, t.new.producer_epoch


def test_the_new_variants_are_broker_variants_off_by_default():
    assert set(TXN_GROUP_VARIANTS) <= set(FLAW_VARIANTS) and BROKER_VARIANTS[0] == "default"
    assert TxnConfig().variants == frozenset()


# --- txn-markers-no-epoch-bump (KIP-890's hanging transaction) -------------------------------------------
def late_produce_after_a_timeout_abort(*variants: str) -> tuple[int, int]:
    """A producer's transaction writes to TP1 and times out; the coordinator aborts it and writes the
    markers; the producer, not knowing, begins its next transaction with TP1; then a produce of the
    aborted transaction, delayed in the network, reaches TP1's leader. Returns (the leader's epoch
    check of that batch, the coordinator's KIP-890 part 1 verification of it)."""
    c, leader = coordinator(*variants), ProducerStateTable()
    pid, epoch = init(c)
    write(c, c.add_partitions(T, pid, epoch, [TP1], 0))
    first = build_batch([b"txn-1"], producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
    leader.record(validate_batches(first), 0, first)
    [abort] = c.expired(TIMEOUT)
    job = c.written(abort)
    marker = build_control_batch(pid, job.producer_epoch, False, job.coordinator_epoch)
    assert leader.check_marker(pid, job.producer_epoch, job.coordinator_epoch) == rpc.NONE
    leader.record(validate_batches(marker), 1, marker)
    c.written(c.markers_done(job))
    next_txn = c.add_partitions(T, pid, epoch, [TP1], TIMEOUT + 1)  # the producer's next transaction
    if next_txn[1] is not None:
        write(c, next_txn)
    late = build_batch([b"txn-1 late"], producer_id=pid, producer_epoch=epoch, base_sequence=1, transactional=True)
    [h] = validate_batches(late)
    assert leader.needs_verification(h)  # it would open a transaction at TP1
    return leader.check(h)[0], c.verify(T, pid, epoch, TP1)


def test_txn_markers_no_epoch_bump_lets_a_late_produce_of_an_aborted_transaction_into_the_next():
    # Default: the abort's markers carry epoch + 1, so the late batch is refused at the leader (and the
    # producer's next AddPartitionsToTxn is PRODUCER_FENCED, so there is no next transaction to join).
    assert late_produce_after_a_timeout_abort() == (rpc.INVALID_PRODUCER_EPOCH, rpc.INVALID_PRODUCER_EPOCH)
    # The variant: the epoch stays valid everywhere and the aborted transaction's record joins the next one.
    assert late_produce_after_a_timeout_abort("txn-markers-no-epoch-bump") == (rpc.NONE, rpc.NONE)


# --- zombie-not-fenced (KIP-98 producer fencing) -----------------------------------------------------------
def zombie_adds_a_partition(*variants: str) -> int:
    """Producer A inits the transactional.id; a new instance B inits the same id (A is now a zombie);
    A tries to begin a transaction. Returns the coordinator's answer to A."""
    c = coordinator(*variants)
    pid, epoch_a = init(c)
    _, epoch_b = init(c)
    assert (epoch_b > epoch_a) == (not variants)
    return c.add_partitions(T, pid, epoch_a, [TP2], 0)[0]


def test_zombie_not_fenced_lets_the_previous_producer_of_a_transactional_id_keep_writing():
    assert zombie_adds_a_partition() == rpc.PRODUCER_FENCED
    assert zombie_adds_a_partition("zombie-not-fenced") == rpc.NONE


def test_zombie_not_fenced_also_leaves_the_abort_of_an_ongoing_transaction_at_the_zombies_epoch():
    for variants, fenced in (((), True), (("zombie-not-fenced",), False)):
        c = coordinator(*variants)
        pid, epoch = init(c)
        write(c, c.add_partitions(T, pid, epoch, [TP1], 0))
        err, job = write(c, c.init_producer_id(T, TIMEOUT, -1, -1, 0))  # a new instance of the id
        assert err == rpc.CONCURRENT_TRANSACTIONS and (job.producer_epoch > epoch) == fenced
        assert (c.end_txn(T, pid, epoch, True, 0)[0] == rpc.PRODUCER_FENCED) == fenced


# --- read-committed-to-hwm (aborted and uncommitted reads) ---------------------------------------------------
def read_committed_of_an_open_transaction(tmp_path, *variants: str) -> list[bytes | None]:
    async def scenario(b: Broker) -> list[bytes | None]:
        lead(b, "t", 1, 0)
        assert await produce(b, build_batch([b"before"])) == rpc.NONE
        assert await produce(b, txn_batch(0, b"open")) == rpc.NONE  # not yet committed or aborted
        assert await produce(b, build_batch([b"after"])) == rpc.NONE
        got = b.consumer_read("t", 0, 0, -1, 1 << 20, read_committed=True)
        latest = b.list_offset("t", 0, kafka_api.LATEST_TIMESTAMP, -1, read_committed=True)[1]
        assert latest == got["lso"]  # the end a read_committed consumer is told agrees with what it reads
        return values(got["records"])

    return on_a_broker(tmp_path, scenario, variants)


def test_read_committed_to_hwm_serves_records_of_an_open_transaction(tmp_path):
    assert read_committed_of_an_open_transaction(tmp_path / "default") == [b"before"]
    assert read_committed_of_an_open_transaction(tmp_path / "variant", "read-committed-to-hwm") == \
        [b"before", b"open", b"after"]


# --- offsets-commit-acks-1 (a coordinator fail-over rewinds the group) -----------------------------------------
def commit_answered_before_replication(tmp_path, *variants: str) -> bool:
    """Commit an offset while the only follower of the group's __consumer_offsets partition fetches
    nothing: is the commit acknowledged while the HWM is below it (lost if that follower takes over)?"""
    async def scenario(b: Broker) -> bool:
        group = "g"
        p = b.groups.partition_for(group)
        lead_offsets_partition(b, p, leader_epoch=0, isr=[1, FOLLOWER])
        await asyncio.sleep(0.05)
        commit = asyncio.create_task(b.commit_offsets(group, -1, "", [("t", 0, 42, 3, "")], 5.0))
        await asyncio.sleep(0.05)
        answered = commit.done() and commit.result() == rpc.NONE
        assert b.replicas[("__consumer_offsets", p)].hwm == 0  # the follower has not got it
        commit.cancel()
        return answered

    return on_a_broker(tmp_path, scenario, variants)


def test_offsets_commit_acks_1_acknowledges_a_commit_the_isr_does_not_have(tmp_path):
    assert commit_answered_before_replication(tmp_path / "default") is False
    assert commit_answered_before_replication(tmp_path / "variant", "offsets-commit-acks-1") is True
