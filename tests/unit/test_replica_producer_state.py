"""Idempotent producer sequence checks (producer_state.py, KIP-98): duplicates, gaps, epochs, rebuild."""

from __future__ import annotations

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.log import build_batch, validate_batches
from kafkaesque_harness.clusters.broker.producer_state import ProducerStateTable


def header(seq: int, n: int = 2, pid: int = 5, epoch: int = 0):
    # a fixed timestamp: build_batch stamps the clock otherwise, and two calls astride a millisecond differ in CRC
    batch = build_batch([b"v"] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=1_700_000_000_000)
    return validate_batches(batch)[0]


def test_first_batch_in_order_batches_and_a_duplicate():
    t = ProducerStateTable()
    assert t.check(header(0)) == (rpc.NONE, None)
    t.record([header(0)], 10)         # offsets 10-11, sequences 0-1
    assert t.check(header(2)) == (rpc.NONE, None)
    t.record([header(2)], 12)         # offsets 12-13
    assert t.check(header(0)) == (rpc.NONE, (10, 11, header(0).crc))  # a retry: acknowledged with its original offsets
    assert t.check(header(2)) == (rpc.NONE, (12, 13, header(2).crc))


def test_gap_and_old_epoch_are_rejected_new_epoch_restarts_at_zero():
    t = ProducerStateTable()
    t.record([header(0)], 0)
    assert t.check(header(5))[0] == rpc.OUT_OF_ORDER_SEQUENCE_NUMBER
    t.record([header(0, epoch=1)], 2)
    assert t.check(header(2, epoch=0))[0] == rpc.INVALID_PRODUCER_EPOCH
    assert t.check(header(3, epoch=2))[0] == rpc.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert t.check(header(0, epoch=2)) == (rpc.NONE, None)


def test_non_idempotent_batches_are_never_checked():
    t = ProducerStateTable()
    plain = validate_batches(build_batch([b"v"]))[0]
    t.record([plain], 0)
    assert t.check(plain) == (rpc.NONE, None) and t.producers == {}


def test_rebuilt_from_log_headers_as_after_failover():
    raw = build_batch([b"a", b"b"], producer_id=5, producer_epoch=0, base_sequence=0, base_offset=7)
    t = ProducerStateTable.from_headers(validate_batches(raw))
    # header(0) holds other records than the log's batch: the same offsets, told apart by the log batch's CRC
    assert t.check(header(0)) == (rpc.NONE, (7, 8, validate_batches(raw)[0].crc)) != (rpc.NONE, (7, 8, header(0).crc))
    assert t.check(header(2)) == (rpc.NONE, None)
    assert t.check(header(4))[0] == rpc.OUT_OF_ORDER_SEQUENCE_NUMBER
