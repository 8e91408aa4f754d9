"""The transaction coordinator's state machine (clusters/broker/txn_coordinator.py) with a fake clock and
fake writes: every transition and every error of InitProducerId, AddPartitionsToTxn, EndTxn and the
timeout, and the state rebuilt from its records after a fail-over."""

from __future__ import annotations

import itertools

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.group_coordinator import java_string_hash
from kafkaesque_harness.clusters.broker.txn_coordinator import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    MAX_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TransactionCoordinator,
    TxnConfig,
    TxnState,
    txn_record,
)

T = "txn-a"
TP1, TP2 = ("t", 0), ("t", 1)
TIMEOUT = 60_000


def loaded(partitions: int = 1, coordinator_epoch: int = 3) -> TransactionCoordinator:
    ids = itertools.count(1000)
    c = TransactionCoordinator(lambda: next(ids), TxnConfig(txn_partitions=partitions))
    for p in range(partitions):
        c.begin_loading(p, coordinator_epoch)
        c.load(p, [])
    return c


def write(c, outcome):
    """Acknowledge the transition of a request (as the shell does once the HWM passes its record)."""
    err, t = outcome
    assert t is not None, err
    return err, c.written(t)


def init(c, now=0, pid=-1, epoch=-1, timeout=TIMEOUT):
    err, t = c.init_producer_id(T, timeout, pid, epoch, now)
    assert err == rpc.NONE and t is not None, err
    c.written(t)
    return t.new.producer_id, t.new.producer_epoch


def ongoing(c, now=0):
    pid, epoch = init(c, now)
    write(c, c.add_partitions(T, pid, epoch, [TP1], now))
    return pid, epoch


def finish(c, job):
    """Write the markers (nothing to do here) and the Complete record."""
    t = c.markers_done(job)
    assert t is not None
    assert c.written(t) is None
    return t.new


def logged_records(c) -> list[tuple[bytes, bytes]]:
    """The coordinator's log as the shell writes it, for a new coordinator to load: from now on the record
    of each transition acknowledged to `c` is appended to the list returned."""
    records = []
    acknowledge = c.written

    def written(t):
        records.append(txn_record(t.txn_id, t.new))
        return acknowledge(t)
    c.written = written
    return records


# --- InitProducerId -----------------------------------------------------------------------------------
def test_first_init_allocates_a_producer_id_with_epoch_zero():
    c = loaded()
    assert init(c) == (1000, 0)
    assert c.txns[T].state == EMPTY


def test_init_again_bumps_the_epoch_and_keeps_the_id():
    c = loaded()
    init(c)
    assert init(c) == (1000, 1)


def test_init_when_the_epoch_is_exhausted_allocates_a_new_producer_id():
    c = loaded()
    init(c)
    c.txns[T] = TxnState(1000, MAX_EPOCH - 1, TIMEOUT, COMPLETE_COMMIT)
    assert init(c) == (1001, 0)


def test_init_is_answered_only_once_written_and_a_second_meanwhile_is_concurrent():
    c = loaded()
    err, t = c.init_producer_id(T, TIMEOUT, -1, -1, 0)
    assert err == rpc.NONE and T not in c.txns  # nothing applied before the record is acknowledged
    assert c.init_producer_id(T, TIMEOUT, -1, -1, 0) == (rpc.CONCURRENT_TRANSACTIONS, None)
    c.written(t)
    assert c.txns[T].producer_epoch == 0


def test_a_failed_write_leaves_the_state_as_it_was():
    c = loaded()
    init(c)
    err, t = c.init_producer_id(T, TIMEOUT, -1, -1, 0)
    c.write_failed(t)
    assert c.txns[T].producer_epoch == 0 and T not in c.pending
    assert init(c) == (1000, 1)


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_init_with_a_timeout_out_of_bounds_is_refused(timeout):
    assert loaded().init_producer_id(T, timeout, -1, -1, 0) == (rpc.INVALID_TRANSACTION_TIMEOUT, None)


def test_init_with_an_empty_id_is_an_invalid_request():
    assert loaded().init_producer_id("", TIMEOUT, -1, -1, 0) == (rpc.INVALID_REQUEST, None)


def test_init_of_an_ongoing_transaction_aborts_it_with_a_fencing_epoch():
    c = loaded()
    pid, epoch = ongoing(c)
    err, job = write(c, c.init_producer_id(T, TIMEOUT, -1, -1, 0))
    assert err == rpc.CONCURRENT_TRANSACTIONS  # the new producer retries once the abort is complete
    assert c.txns[T].state == PREPARE_ABORT and c.txns[T].producer_epoch == epoch + 1
    assert job.commit is False and job.partitions == {TP1} and job.producer_epoch == epoch + 1
    # the old producer is fenced from now on
    assert c.end_txn(T, pid, epoch, True, 0) == (rpc.PRODUCER_FENCED, None)
    assert c.init_producer_id(T, TIMEOUT, -1, -1, 0) == (rpc.CONCURRENT_TRANSACTIONS, None)  # markers in flight
    finish(c, job)
    assert init(c) == (pid, epoch + 2)


def test_kip360_init_with_the_current_id_and_epoch_bumps_it():
    c = loaded()
    pid, epoch = init(c)
    assert init(c, pid=pid, epoch=epoch) == (pid, epoch + 1)


def test_kip360_retry_of_an_answered_bump_gets_the_same_pair():
    c = loaded()
    pid, epoch = init(c)
    init(c, pid=pid, epoch=epoch)
    assert init(c, pid=pid, epoch=epoch) == (pid, epoch + 1)


def test_kip360_init_with_a_stale_epoch_is_fenced():
    c = loaded()
    pid, epoch = init(c)
    init(c)
    init(c)
    assert c.init_producer_id(T, TIMEOUT, pid, epoch, 0) == (rpc.PRODUCER_FENCED, None)


# --- AddPartitionsToTxn ---------------------------------------------------------------------------------
def test_add_partitions_begins_a_transaction():
    c = loaded()
    pid, epoch = init(c)
    write(c, c.add_partitions(T, pid, epoch, [TP1], 5))
    s = c.txns[T]
    assert (s.state, s.partitions, s.start_ms) == (ONGOING, {TP1}, 5)


def test_adding_more_partitions_extends_the_transaction_and_keeps_its_start():
    c = loaded()
    pid, epoch = ongoing(c, now=5)
    write(c, c.add_partitions(T, pid, epoch, [TP2], 9))
    assert c.txns[T].partitions == {TP1, TP2} and c.txns[T].start_ms == 5


def test_adding_a_partition_already_in_the_transaction_writes_nothing():
    c = loaded()
    pid, epoch = ongoing(c)
    assert c.add_partitions(T, pid, epoch, [TP1], 0) == (rpc.NONE, None)
    assert T not in c.pending


def test_add_partitions_of_an_unknown_id_or_producer_is_a_mapping_error():
    c = loaded()
    assert c.add_partitions(T, 1000, 0, [TP1], 0) == (rpc.INVALID_PRODUCER_ID_MAPPING, None)
    pid, epoch = init(c)
    assert c.add_partitions(T, pid + 1, epoch, [TP1], 0) == (rpc.INVALID_PRODUCER_ID_MAPPING, None)


def test_add_partitions_with_an_old_epoch_is_fenced():
    c = loaded()
    pid, epoch = init(c)
    init(c)
    assert c.add_partitions(T, pid, epoch, [TP1], 0) == (rpc.PRODUCER_FENCED, None)


def test_add_partitions_while_the_transaction_ends_is_concurrent():
    c = loaded()
    pid, epoch = ongoing(c)
    write(c, c.end_txn(T, pid, epoch, True, 0))
    assert c.add_partitions(T, pid, epoch, [TP2], 0) == (rpc.CONCURRENT_TRANSACTIONS, None)


def test_add_partitions_after_a_completed_transaction_begins_the_next_one():
    c = loaded()
    pid, epoch = ongoing(c)
    _, job = write(c, c.end_txn(T, pid, epoch, True, 0))
    finish(c, job)
    write(c, c.add_partitions(T, pid, epoch, [TP2], 7))
    s = c.txns[T]
    assert (s.state, s.partitions, s.start_ms) == (ONGOING, {TP2}, 7)


# --- EndTxn ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("commit,prepared,complete", [(True, PREPARE_COMMIT, COMPLETE_COMMIT),
                                                      (False, PREPARE_ABORT, COMPLETE_ABORT)])
def test_end_txn_prepares_then_markers_then_completes(commit, prepared, complete):
    c = loaded(coordinator_epoch=7)
    pid, epoch = ongoing(c)
    err, job = write(c, c.end_txn(T, pid, epoch, commit, 0))
    assert err == rpc.NONE and c.txns[T].state == prepared
    assert (job.producer_id, job.producer_epoch, job.commit, job.partitions, job.coordinator_epoch) == \
        (pid, epoch, commit, {TP1}, 7)
    new = finish(c, job)
    assert (new.state, new.partitions, new.producer_epoch) == (complete, frozenset(), epoch)


@pytest.mark.parametrize("first, second, in_flight, finished", [
    (True, True, rpc.CONCURRENT_TRANSACTIONS, rpc.NONE),  # a retry: concurrent while the markers are in flight
    (True, False, rpc.INVALID_TXN_STATE, rpc.INVALID_TXN_STATE),  # the opposite outcome, at any time
    (False, True, rpc.INVALID_TXN_STATE, rpc.INVALID_TXN_STATE),
], ids=["retried-is-concurrent-then-none", "commit-then-abort-is-invalid", "abort-then-commit-is-invalid"])
def test_end_txn_sent_again_while_the_markers_are_in_flight_and_after(first, second, in_flight, finished):
    c = loaded()
    pid, epoch = ongoing(c)
    _, job = write(c, c.end_txn(T, pid, epoch, first, 0))
    assert c.end_txn(T, pid, epoch, second, 0) == (in_flight, None)
    finish(c, job)
    assert c.end_txn(T, pid, epoch, second, 0) == (finished, None)


def test_end_txn_without_a_transaction_is_an_invalid_state():
    c = loaded()
    pid, epoch = init(c)
    assert c.end_txn(T, pid, epoch, True, 0) == (rpc.INVALID_TXN_STATE, None)


def test_end_txn_of_a_fenced_producer_is_refused():
    c = loaded()
    pid, epoch = init(c)
    init(c)
    assert c.end_txn(T, pid, epoch, True, 0) == (rpc.PRODUCER_FENCED, None)
    assert c.end_txn(T, pid + 5, epoch + 1, True, 0) == (rpc.INVALID_PRODUCER_ID_MAPPING, None)


def test_markers_of_a_superseded_job_complete_nothing():
    c = loaded()
    pid, epoch = ongoing(c)
    _, job = write(c, c.end_txn(T, pid, epoch, True, 0))
    finish(c, job)
    assert c.markers_done(job) is None


# --- timeouts -------------------------------------------------------------------------------------------
def test_a_transaction_past_its_timeout_is_aborted_with_a_fencing_epoch():
    c = loaded()
    pid, epoch = ongoing(c, now=100)
    assert c.expired(100 + TIMEOUT - 1) == []
    [t] = c.expired(100 + TIMEOUT)
    assert (t.new.state, t.new.producer_epoch) == (PREPARE_ABORT, epoch + 1)
    assert c.expired(100 + TIMEOUT) == []  # pending: not aborted twice
    job = c.written(t)
    assert job.commit is False and job.producer_epoch == epoch + 1
    finish(c, job)
    # the producer finds out: its epoch is stale
    assert c.end_txn(T, pid, epoch, True, 0) == (rpc.PRODUCER_FENCED, None)


def test_empty_and_completed_transactions_never_time_out():
    c = loaded()
    init(c)
    assert c.expired(10 * TIMEOUT) == []


# --- ownership and fail-over ----------------------------------------------------------------------------
def test_partition_for_is_kafkas_rule():
    c = loaded(partitions=50)
    assert c.partition_for(T) == abs(java_string_hash(T)) % 50


def test_ids_of_partitions_not_led_here_are_not_coordinator():
    c = TransactionCoordinator(lambda: 1)
    assert c.init_producer_id(T, TIMEOUT, -1, -1, 0) == (rpc.NOT_COORDINATOR, None)
    c.begin_loading(c.partition_for(T), 1)
    assert c.init_producer_id(T, TIMEOUT, -1, -1, 0) == (rpc.COORDINATOR_LOAD_IN_PROGRESS, None)
    assert c.add_partitions(T, 1, 0, [TP1], 0) == (rpc.COORDINATOR_LOAD_IN_PROGRESS, None)


def test_a_write_acknowledged_after_losing_the_partition_is_not_applied():
    c = loaded()
    pid, epoch = init(c)
    err, t = c.add_partitions(T, pid, epoch, [TP1], 0)
    c.unload(0)
    assert c.written(t) is None and T not in c.txns


def test_a_new_coordinator_rebuilds_the_state_and_finishes_prepared_transactions():
    old = loaded()
    records = logged_records(old)
    pid, epoch = init(old)
    write(old, old.add_partitions(T, pid, epoch, [TP1, TP2], 3))
    write(old, old.end_txn(T, pid, epoch, False, 4))  # PrepareAbort written, markers never sent: old dies

    new = TransactionCoordinator(lambda: 9999, TxnConfig(txn_partitions=1))
    new.begin_loading(0, 4)
    assert new.add_partitions(T, pid, epoch, [TP1], 5) == (rpc.COORDINATOR_LOAD_IN_PROGRESS, None)
    [job] = new.load(0, records)
    assert (job.commit, job.partitions, job.coordinator_epoch) == (False, {TP1, TP2}, 4)
    assert finish(new, job).state == COMPLETE_ABORT
    assert init(new) == (pid, epoch + 1)  # the same producer id: the fence holds across coordinators


def test_an_abort_after_a_fail_over_finished_the_previous_commit_is_an_invalid_state():
    """The sequence of a stored run (txn 20261126T032351, process 4): EndTxn(commit) answered once PrepareCommit
    was written, the coordinator dies before the Complete record; the producer's next AddPartitionsToTxn is
    refused (CONCURRENT_TRANSACTIONS, then the dead coordinator, then the new one loading and finishing the
    commit), its record times out unsent, and librdkafka, which counts an AddPartitionsToTxn that failed as
    possibly received (rdkafka_txnmgr.c), sends EndTxn(abort). Kafka answers INVALID_TXN_STATE for ABORT in
    CompleteCommit to a client below transactions V2 (TransactionCoordinator.endTransaction), and so do we."""
    old = loaded()
    records = logged_records(old)
    pid, epoch = init(old)
    write(old, old.add_partitions(T, pid, epoch, [TP1], 1))
    write(old, old.end_txn(T, pid, epoch, True, 2))  # answered NONE: the commit is decided
    assert old.add_partitions(T, pid, epoch, [TP1], 3) == (rpc.CONCURRENT_TRANSACTIONS, None)  # markers in flight

    new = TransactionCoordinator(lambda: 9999, TxnConfig(txn_partitions=1))
    new.begin_loading(0, 1)
    assert new.add_partitions(T, pid, epoch, [TP1], 4) == (rpc.COORDINATOR_LOAD_IN_PROGRESS, None)
    [job] = new.load(0, records)
    assert new.add_partitions(T, pid, epoch, [TP1], 5) == (rpc.CONCURRENT_TRANSACTIONS, None)
    assert finish(new, job).state == COMPLETE_COMMIT
    assert new.end_txn(T, pid, epoch, False, 6) == (rpc.INVALID_TXN_STATE, None)  # librdkafka: fatal
    assert new.end_txn(T, pid, epoch, True, 6) == (rpc.NONE, None)  # a retry of the commit it finished
    assert init(new) == (pid, epoch + 1)  # the next producer of the id starts over


def test_the_complete_record_is_asked_for_again_after_its_write_failed():
    """The shell retries a Complete write that failed (txn_shell._complete, as Kafka's marker channel manager
    does): the state machine gives the same transition again, and nothing else meanwhile."""
    c = loaded()
    pid, epoch = ongoing(c)
    _, job = write(c, c.end_txn(T, pid, epoch, True, 0))
    t = c.markers_done(job)
    assert c.markers_done(job) is None  # in flight
    c.write_failed(t)
    assert c.txns[T].state == PREPARE_COMMIT
    assert c.add_partitions(T, pid, epoch, [TP1], 1) == (rpc.CONCURRENT_TRANSACTIONS, None)
    again = c.markers_done(job)
    assert again is not None and again.new == t.new
    c.written(again)
    assert c.txns[T].state == COMPLETE_COMMIT


def test_load_after_losing_the_partition_again_does_nothing():
    c = TransactionCoordinator(lambda: 1, TxnConfig(txn_partitions=1))
    c.begin_loading(0, 1)
    c.unload(0)
    assert c.load(0, [txn_record(T, TxnState(1, 0, TIMEOUT, PREPARE_COMMIT, frozenset({TP1})))]) == []
    assert c.txns == {}


def test_an_ongoing_transaction_loaded_keeps_its_timeout():
    c = TransactionCoordinator(lambda: 1, TxnConfig(txn_partitions=1))
    c.begin_loading(0, 1)
    c.load(0, [txn_record(T, TxnState(1, 0, TIMEOUT, ONGOING, frozenset({TP1}), 50))])
    assert c.expired(50 + TIMEOUT - 1) == []
    assert len(c.expired(50 + TIMEOUT)) == 1


# --- KIP-890 part 1: verification for partition leaders --------------------------------------------------
def test_verify_accepts_only_partitions_of_the_producers_ongoing_transaction():
    c = loaded()
    pid, epoch = init(c)
    assert c.verify(T, pid, epoch, TP1) == rpc.INVALID_TXN_STATE  # no transaction yet
    write(c, c.add_partitions(T, pid, epoch, [TP1], 0))
    assert c.verify(T, pid, epoch, TP1) == rpc.NONE
    assert c.verify(T, pid, epoch, TP2) == rpc.INVALID_TXN_STATE  # not added
    assert c.verify(T, pid, epoch - 1, TP1) == rpc.INVALID_PRODUCER_EPOCH
    assert c.verify(T, pid + 1, epoch, TP1) == rpc.INVALID_PRODUCER_ID_MAPPING
    _, job = write(c, c.end_txn(T, pid, epoch, False, 0))
    assert c.verify(T, pid, epoch, TP1) == rpc.INVALID_TXN_STATE  # a late produce of the ended transaction


def test_a_job_of_an_earlier_leadership_is_not_ours_any_more():
    c = loaded(coordinator_epoch=3)
    pid, epoch = ongoing(c)
    _, job = write(c, c.end_txn(T, pid, epoch, True, 0))
    assert c.owns(job)
    records = [txn_record(T, c.txns[T])]
    c.begin_loading(0, 5)  # we lead the partition again, in a later epoch: the load makes a new job
    [new_job] = c.load(0, records)
    assert not c.owns(job) and c.markers_done(job) is None
    assert new_job.coordinator_epoch == 5 and finish(c, new_job).state == COMPLETE_COMMIT
