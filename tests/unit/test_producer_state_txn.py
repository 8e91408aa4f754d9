"""Transactions at a partition leader (producer_state.py, KIP-98 / KIP-890): ongoing transactions, markers,
the last stable offset, the aborted-transactions index, epoch and coordinator fencing, and the rebuild
from the log after a leader change."""

from __future__ import annotations

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.log import PartitionLog, build_batch, validate_batches
from kafkaesque_harness.clusters.broker.log.batch import build_control_batch, parse_control
from kafkaesque_harness.clusters.broker.producer_state import ProducerStateTable

PID = 7


def txn_batch(seq: int, n: int = 2, pid: int = PID, epoch: int = 0) -> bytes:
    return build_batch([b"v"] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def append(t: ProducerStateTable, raw: bytes, offset: int) -> None:
    t.record(validate_batches(raw), offset, raw)


def marker(commit: bool, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 1) -> bytes:
    return build_control_batch(pid, epoch, commit, coordinator_epoch)


def test_a_control_batch_is_transactional_control_and_carries_its_outcome():
    for commit in (True, False):
        raw = marker(commit, coordinator_epoch=9)
        [h] = validate_batches(raw)  # the CRC still matches after setting the control bit
        assert h.is_control and h.is_transactional and (h.producer_id, h.base_sequence) == (PID, -1)
        assert parse_control(raw) == (commit, 9)


def test_the_lso_stops_at_the_first_offset_of_the_earliest_ongoing_transaction():
    t = ProducerStateTable()
    assert t.last_stable_offset(10) == 10
    append(t, build_batch([b"plain"]), 0)
    append(t, txn_batch(0), 1)  # offsets 1-2
    append(t, txn_batch(0, pid=8), 3)
    append(t, txn_batch(2), 5)  # the same transaction: its first offset stays 1
    assert t.last_stable_offset(10) == 1
    assert t.last_stable_offset(0) == 0  # never above the HWM


def test_a_commit_marker_ends_the_transaction_and_moves_the_lso():
    t = ProducerStateTable()
    append(t, txn_batch(0), 1)
    append(t, txn_batch(0, pid=8), 3)
    append(t, marker(True), 5)
    assert t.last_stable_offset(10) == 3 and t.aborted == []


def test_an_abort_marker_is_indexed_with_the_first_and_marker_offsets():
    t = ProducerStateTable()
    append(t, txn_batch(0), 1)
    append(t, marker(False), 3)
    assert t.last_stable_offset(10) == 10
    assert t.aborted_between(0, 10) == [(PID, 1)]
    assert t.aborted_between(3, 10) == [(PID, 1)]  # the range still reaches the marker
    assert t.aborted_between(4, 10) == []  # fetched past it
    assert t.aborted_between(0, 1) == []  # stops before its first record


def test_a_marker_without_records_here_indexes_nothing():
    t = ProducerStateTable()
    append(t, marker(False), 0)
    assert t.aborted == [] and t.last_stable_offset(5) == 5


def test_the_next_transaction_of_the_producer_continues_its_sequences():
    t = ProducerStateTable()
    append(t, txn_batch(0), 0)
    append(t, marker(True), 2)
    assert t.check(validate_batches(txn_batch(2))[0]) == (rpc.NONE, None)


def test_a_marker_with_a_bumped_epoch_fences_the_old_producer():
    t = ProducerStateTable()
    append(t, txn_batch(0), 0)
    append(t, marker(False, epoch=1), 2)  # the coordinator aborted it and fenced the producer
    assert t.check(validate_batches(txn_batch(2, epoch=0))[0])[0] == rpc.INVALID_PRODUCER_EPOCH
    assert t.check(validate_batches(txn_batch(0, epoch=1))[0]) == (rpc.NONE, None)


def test_markers_of_an_older_producer_epoch_or_coordinator_are_refused():
    t = ProducerStateTable()
    assert t.check_marker(PID, 0, 1) == rpc.NONE  # a producer never seen here
    append(t, txn_batch(0, epoch=2), 0)
    append(t, marker(True, epoch=2, coordinator_epoch=5), 2)
    assert t.check_marker(PID, 1, 5) == rpc.INVALID_PRODUCER_EPOCH
    assert t.check_marker(PID, 2, 4) == rpc.TRANSACTION_COORDINATOR_FENCED
    assert t.check_marker(PID, 3, 5) == rpc.NONE


def test_kip890_only_the_first_transactional_batch_of_a_transaction_needs_verification():
    t = ProducerStateTable()
    first = validate_batches(txn_batch(0))[0]
    assert t.needs_verification(first)
    append(t, txn_batch(0), 0)
    assert not t.needs_verification(validate_batches(txn_batch(2))[0])
    assert not t.needs_verification(validate_batches(build_batch([b"v"], producer_id=PID, producer_epoch=0,
                                                                  base_sequence=2))[0])  # idempotent only
    append(t, marker(True), 2)
    assert t.needs_verification(validate_batches(txn_batch(2))[0])  # the next transaction


@pytest.fixture
def log(tmp_path):
    pl = PartitionLog(tmp_path / "t-0")
    yield pl
    pl.close()


def test_a_new_leader_rebuilds_ongoing_and_aborted_transactions_from_its_log(log):
    for raw in (txn_batch(0), marker(False), txn_batch(2, n=1), txn_batch(0, pid=8), marker(True, pid=8)):
        log.append_as_leader(raw, 1, validate_batches(raw))

    def read(h):
        return log.read(h.base_offset, h.size)[:h.size]
    t = ProducerStateTable.from_headers(log.batch_headers(), read)
    assert t.aborted_between(0, 100) == [(PID, 0)]
    assert t.ongoing == {PID: 3}  # the producer's second transaction, still open
    assert t.last_stable_offset(100) == 3
