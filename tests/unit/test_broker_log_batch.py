"""RecordBatch v2 helpers on batches built by kafka-python's DefaultRecordBatchBuilder."""

from __future__ import annotations

import struct

import pytest
from kafka.record import MemoryRecords
from kafka.record.util import calc_crc32c

from kafkaesque_harness.clusters.broker.log import (
    InvalidBatchError,
    build_batch,
    iter_all_records,
    iter_records,
    parse_batch_header,
    validate_batches,
    value_digest,
)
from kafkaesque_harness.clusters.broker.log.batch import stamp_batch


def test_header_fields_of_a_built_batch():
    raw = build_batch([b"a", b"b", b"c"], keys=[b"k", None, b"k"], producer_id=7, producer_epoch=1,
                      base_sequence=40, timestamp_ms=1_700_000_000_000)
    h = parse_batch_header(raw)
    assert (h.base_offset, h.size, h.magic, h.record_count, h.last_offset_delta) == (0, len(raw), 2, 3, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 1, 40, 42)
    assert h.crc_ok and h.first_timestamp == h.max_timestamp == 1_700_000_000_000


def test_stamping_offset_and_epoch_keeps_the_crc_valid():
    buf = bytearray(build_batch([b"v"]))
    stamp_batch(buf, 0, 123456789, 42)
    h = parse_batch_header(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.crc_ok) == (123456789, 42, True)
    # kafka-python's own reader agrees (it validates the CRC it reads).
    batch = MemoryRecords(bytes(buf)).next_batch()
    assert batch.validate_crc() and batch.base_offset == 123456789


def test_a_flipped_body_byte_fails_the_crc():
    buf = bytearray(build_batch([b"value"]))
    buf[-2] ^= 1
    assert not parse_batch_header(buf).crc_ok
    with pytest.raises(InvalidBatchError, match="CRC mismatch"):
        validate_batches(bytes(buf))


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda b: b[:30], "short header"),
        (lambda b: b[:-1], "short read"),
        (lambda b: b[:8] + struct.pack(">i", 3) + b[12:], "bad length"),
        (lambda b: b[:16] + b"\x01" + b[17:], "magic"),
        (lambda b: b"", "no record batches"),
    ],
)
def test_malformed_input_is_rejected_with_a_reason(mutate, message):
    with pytest.raises(InvalidBatchError, match=message):
        validate_batches(mutate(build_batch([b"x", b"y"])))


def test_empty_batch_is_rejected():
    raw = bytearray(build_batch([b"x"]))
    # A builder cannot make an empty batch: zero the count field and recompute the CRC.
    struct.pack_into(">i", raw, 57, 0)
    struct.pack_into(">I", raw, 17, calc_crc32c(memoryview(raw)[21:]))
    with pytest.raises(InvalidBatchError, match="empty batch"):
        validate_batches(bytes(raw))


def test_records_iterate_with_absolute_offsets_and_null_values():
    raw = build_batch([b"a", None], keys=[b"k1", b"k2"], base_offset=10, leader_epoch=3)
    recs = list(iter_records(raw))
    assert [(r.offset, r.key, r.value) for r in recs] == [(10, b"k1", b"a"), (11, b"k2", None)]
    two = raw + build_batch([b"z"], base_offset=12, leader_epoch=4)
    assert [(h.partition_leader_epoch, r.offset) for h, r in iter_all_records(two)] == [(3, 10), (3, 11), (4, 12)]


def test_gzip_batches_are_stored_and_read_back():
    raw = build_batch([b"x" * 200] * 5, compression_type=1)
    (h,) = validate_batches(raw)
    assert h.attributes & 0x07 == 1 and h.size < 5 * 200
    assert [r.value for r in iter_records(raw)] == [b"x" * 200] * 5


def test_value_digest_is_sha256_prefix_or_none():
    assert value_digest(None) is None
    assert value_digest(b"") == "e3b0c44298fc1c14"
