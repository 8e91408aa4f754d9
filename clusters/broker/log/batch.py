"""Kafka RecordBatch v2 helpers: header parsing, CRC checks, offset/epoch stamping, record iteration.

The log stores batches exactly as clients sent them, so Fetch can return them byte for byte.
Parsing and building use kafka-python's `kafka.record` (its header struct, `DefaultRecordBatch`,
`DefaultRecordBatchBuilder`); this module only adds what a broker needs on top.

Layout of the 61-byte v2 header (big endian):

    0  baseOffset int64        12 partitionLeaderEpoch int32   17 crc uint32 (CRC-32C)
    8  length int32            16 magic int8                   21 attributes .. end

The CRC covers attributes..end of batch, so the leader may patch baseOffset and
partitionLeaderEpoch at append without recomputing it (002 2.2.2: "each record (batch) has
an associated offset and the leader epoch at the time it was written to the leader's log").
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

HEADER = DefaultRecordBatch.HEADER_STRUCT
HEADER_SIZE = HEADER.size  # 61
LENGTH_FIELD_END = DefaultRecordBatch.AFTER_LEN_OFFSET  # 12: baseOffset + length
ATTRIBUTES_OFFSET = DefaultRecordBatch.ATTRIBUTES_OFFSET  # 21: the CRC starts here
MIN_LENGTH = HEADER_SIZE - LENGTH_FIELD_END  # smallest legal value of the length field
MAX_BATCH_BYTES = 64 * 1024 * 1024  # a larger length field is corruption, not data
NO_EPOCH = -1

_OFFSET_AND_EPOCH = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_EPOCH_POS = 12


class InvalidBatchError(ValueError):
    """Bytes that are not a well-formed, CRC-valid RecordBatch v2 (Kafka error CORRUPT_MESSAGE)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed header of one RecordBatch v2, plus whether its CRC matched."""

    base_offset: int
    size: int  # whole batch in bytes, header included
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    crc_ok: bool

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence number of the batch's last record (-1 when the batch carries none)."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & DefaultRecordBatch.TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & DefaultRecordBatch.CONTROL_MASK)


def parse_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0, check_crc: bool = True) -> BatchHeader:
    """Parse the batch header at `buf[pos:]`; raise InvalidBatchError if it is torn or malformed.

    With check_crc the CRC-32C of the batch body is computed and reported in `crc_ok`
    (the caller decides whether a mismatch is fatal).
    """
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        raise InvalidBatchError(f"short header: {avail} of {HEADER_SIZE} bytes")
    (base, length, ple, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count) = HEADER.unpack_from(
        buf, pos
    )
    if length < MIN_LENGTH or length > MAX_BATCH_BYTES:
        raise InvalidBatchError(f"bad length field {length}")
    size = length + LENGTH_FIELD_END
    if size > avail:
        raise InvalidBatchError(f"short read: batch of {size} bytes, {avail} available")
    if magic != 2:
        raise InvalidBatchError(f"unsupported magic {magic} (only RecordBatch v2)")
    if lod < 0 or count < 0:
        raise InvalidBatchError(f"bad last offset delta {lod} or record count {count}")
    crc_ok = True
    if check_crc:
        crc_ok = calc_crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]) == crc
    return BatchHeader(base, size, ple, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count, crc_ok)


def unpack_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header at `buf[pos:]` without looking at the body (for batches already validated)."""
    (base, length, ple, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count) = HEADER.unpack_from(
        buf, pos
    )
    size = length + LENGTH_FIELD_END
    return BatchHeader(base, size, ple, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count, True)


def iter_batch_headers(buf: bytes | bytearray | memoryview, check_crc: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each batch in `buf`; raise InvalidBatchError at the first bad one."""
    pos = 0
    end = len(buf)
    while pos < end:
        h = parse_batch_header(buf, pos, check_crc)
        yield pos, h
        pos += h.size


def validate_batches(raw: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Headers of all batches in `raw` (as sent by a client or a leader); raise on any defect.

    Defects: torn or malformed header, CRC mismatch, a batch without records.
    """
    if len(raw) == 0:
        raise InvalidBatchError("no record batches")
    headers = []
    for pos, h in iter_batch_headers(raw, check_crc=True):
        if not h.crc_ok:
            raise InvalidBatchError(f"CRC mismatch in the batch at byte {pos}")
        if h.record_count == 0:
            raise InvalidBatchError(f"empty batch at byte {pos}")
        headers.append(h)
    return headers


def stamp_batch(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Overwrite baseOffset and partitionLeaderEpoch of the batch at `pos` (outside the CRC)."""
    _OFFSET_AND_EPOCH.pack_into(buf, pos, base_offset)
    _EPOCH.pack_into(buf, pos + _EPOCH_POS, leader_epoch)


@dataclass(frozen=True, slots=True)
class RecordView:
    """One record of a batch, with its absolute offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


def iter_records(raw_batch: bytes | bytearray | memoryview) -> Iterator[RecordView]:
    """Records of one batch (decompressing if needed). Per-record Python work: not for the hot path."""
    batch = DefaultRecordBatch(bytes(raw_batch))
    for r in batch:
        yield RecordView(r.offset, r.timestamp, r.key, r.value, list(r.headers))


def iter_all_records(raw: bytes | bytearray | memoryview) -> Iterator[tuple[BatchHeader, RecordView]]:
    """(header, record) for every record of every batch in `raw`."""
    mv = memoryview(raw)
    for pos, h in iter_batch_headers(mv, check_crc=False):
        for rec in iter_records(mv[pos : pos + h.size]):
            yield h, rec


def value_digest(value: bytes | None) -> str | None:
    """The physical-log digest of a record value: sha256 hex, first 16 chars; None for a null value."""
    if value is None:
        return None
    return hashlib.sha256(value).hexdigest()[:16]


# A control record (https://kafka.apache.org/documentation/#controlbatch): key = version int16, type
# int16 (0 abort, 1 commit); value = version int16, coordinator epoch int32.
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_CRC = struct.Struct(">I")
_CRC_POS = 17


def build_control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                        timestamp_ms: int | None = None) -> bytes:
    """One transaction marker (KIP-98): a transactional control batch of one record, as a partition
    leader appends it on WriteTxnMarkers. kafka-python's builder cannot set the control bit, so it is
    set here and the CRC (which covers the attributes) recomputed."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=-1, batch_size=2**30)
    builder.append(0, timestamp=timestamp_ms, key=_CONTROL_KEY.pack(0, 1 if commit else 0),
                   value=_CONTROL_VALUE.pack(0, coordinator_epoch), headers=[])
    buf = bytearray(builder.build())
    attrs_pos = ATTRIBUTES_OFFSET
    attrs = struct.unpack_from(">h", buf, attrs_pos)[0] | DefaultRecordBatch.CONTROL_MASK
    struct.pack_into(">h", buf, attrs_pos, attrs)
    _CRC.pack_into(buf, _CRC_POS, calc_crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def control_key_commits(key: bytes | None) -> bool:
    """Does a control record's key say commit (type 1) rather than abort (type 0)?"""
    return key is not None and len(key) >= _CONTROL_KEY.size and _CONTROL_KEY.unpack_from(key)[1] == 1


def parse_control(raw_batch: bytes | bytearray | memoryview) -> tuple[bool, int]:
    """(commit, coordinator epoch) of a control batch's marker."""
    batch = DefaultRecordBatch(bytes(raw_batch))
    rec = next(iter(batch))
    commit = control_key_commits(rec.key)
    epoch = _CONTROL_VALUE.unpack(rec.value)[1] if rec.value and len(rec.value) >= _CONTROL_VALUE.size else -1
    return commit, epoch


def build_batch(
    values: list[bytes | None],
    keys: list[bytes | None] | None = None,
    base_offset: int = 0,
    leader_epoch: int = NO_EPOCH,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int | None = None,
    compression_type: int = 0,
    transactional: bool = False,
) -> bytes:
    """Build one RecordBatch v2 with kafka-python's builder (tests, benchmarks, broker-made batches)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression_type,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=2**30,
    )
    keys = keys if keys is not None else [None] * len(values)
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        builder.append(i, timestamp=timestamp_ms, key=k, value=v, headers=[])
    buf = builder.build()
    if not isinstance(buf, bytearray):
        buf = bytearray(buf)
    stamp_batch(buf, 0, base_offset, leader_epoch)
    return bytes(buf)
