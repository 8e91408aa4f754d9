"""PartitionLog: one topic-partition's segmented log of RecordBatch v2 bytes on disk.

A partition directory `<topic>-<partition>/` holds segment files named by their base offset
(`00000000000000000000.log`) and the `leader-epoch-checkpoint`. Batches are stored exactly as
received, with baseOffset and partitionLeaderEpoch stamped by the leader (002 2.2.2), so a
Fetch returns raw file bytes. Offsets are contiguous: each batch starts at the previous
batch's last offset + 1, so the in-memory index needs only (base offset, file position) per
batch; it is rebuilt at open by scanning, which is also the recovery pass (issue 2 item 4:
drop torn or corrupt tails).

The append path does per-batch work only (header unpack, CRC-32C over the bytes, two
struct patches), never per-record work. All public methods take the partition's lock, so
the server may call flush() from an executor thread.
"""

from __future__ import annotations

import bisect
import json
import os
import sys
import threading
from array import array
from collections.abc import Callable
from typing import NamedTuple

from kafkaesque_harness.clusters.broker import hostenv
from kafkaesque_harness.clusters.broker.log.batch import (
    HEADER_SIZE,
    BatchHeader,
    InvalidBatchError,
    iter_batch_headers,
    iter_records,
    parse_batch_header,
    stamp_batch,
    unpack_header,
    validate_batches,
    value_digest,
)
from kafkaesque_harness.clusters.broker.log.checkpoints import (
    CheckpointError,
    fsync_dir,
    remove_stale_tmp_files,
)
from kafkaesque_harness.clusters.broker.log.epoch_cache import CHECKPOINT_NAME as EPOCH_CHECKPOINT_NAME
from kafkaesque_harness.clusters.broker.log.epoch_cache import NO_EPOCH, LeaderEpochCache
from kafkaesque_harness.clusters.broker.log.flush import FlushLog, FlushMode, FlushPolicy

SEGMENT_SUFFIX = ".log"
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024

EventLogger = Callable[[dict], None]


def stderr_event_logger(event: dict) -> None:
    """Default logger: one JSON line on stderr."""
    sys.stderr.write(json.dumps(event, sort_keys=True) + "\n")
    sys.stderr.flush()


class OffsetOutOfRangeError(ValueError):
    """A read outside [log_start_offset, log_end_offset] (Kafka error OFFSET_OUT_OF_RANGE)."""


class NonContiguousAppendError(ValueError):
    """A follower append whose batches do not start at the log end offset, one after another."""


class PhysicalRecord(NamedTuple):
    """One record as stored: its offset, the leader epoch of its batch, and sha256(value)[:16]."""

    offset: int
    leader_epoch: int
    value_digest: str | None


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


class _Segment:
    """One segment file and its batch index (base offsets and positions, parallel arrays)."""

    __slots__ = ("base_offset", "path", "fd", "size", "next_offset", "bases", "positions", "synced_size")

    def __init__(self, path: str, base_offset: int):
        self.base_offset = base_offset
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = 0
        self.next_offset = base_offset
        self.bases = array("q")
        self.positions = array("q")
        self.synced_size = -1  # unknown until the first fsync of this run

    def batch_index(self, offset: int) -> int:
        """Index of the batch containing `offset` (which must lie in this segment)."""
        return bisect.bisect_right(self.bases, offset) - 1

    def batch_end(self, i: int) -> tuple[int, int]:
        """(next offset, end position) of batch i."""
        if i + 1 < len(self.bases):
            return self.bases[i + 1], self.positions[i + 1]
        return self.next_offset, self.size

    def truncate_batches(self, i: int) -> None:
        """Keep batches [0, i)."""
        pos = self.positions[i] if i < len(self.positions) else self.size
        nxt = self.bases[i] if i < len(self.bases) else self.next_offset
        os.ftruncate(self.fd, pos)
        del self.bases[i:]
        del self.positions[i:]
        self.size = pos
        self.next_offset = nxt

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PartitionLog:
    """The on-disk log of one topic-partition. See the module docstring for the layout.

    Use:
        log = PartitionLog(dir, flush_policy=parse_flush_policy("every-write"))
        first, last = log.append_as_leader(produce_bytes, leader_epoch)   # leader
        log.append_as_follower(fetched_bytes)                             # follower
        raw = log.read(offset, max_bytes, max_offset=hwm)                 # Fetch
        log.truncate_to(offset)                                           # divergence
    """

    def __init__(
        self,
        directory: str,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        flush_policy: FlushPolicy | None = None,
        flush_log: FlushLog | None = None,
        logger: EventLogger | None = None,
        topic: str | None = None,
        partition: int | None = None,
    ):
        """Open (recovering) or create the partition log in `directory`.

        flush_log defaults to `<parent of directory>/flush.log`; logger receives one dict per
        recovery action (default: a JSON line on stderr).
        """
        if segment_bytes <= 0:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        self.directory = os.path.abspath(directory)
        self.segment_bytes = segment_bytes
        self.flush_policy = flush_policy or FlushPolicy(FlushMode.NEVER)
        created = not os.path.isdir(self.directory)
        os.makedirs(self.directory, exist_ok=True)
        if created:
            fsync_dir(os.path.dirname(self.directory))
        self._owns_flush_log = flush_log is None
        self._flush_log = flush_log or FlushLog(os.path.dirname(self.directory))
        self._log = logger or stderr_event_logger
        name = os.path.basename(self.directory)
        self.topic = topic if topic is not None else name.rsplit("-", 1)[0]
        self.partition = partition if partition is not None else _partition_of(name)
        self._lock = threading.RLock()
        self._segments: list[_Segment] = []
        self._segment_bases: list[int] = []
        self._unflushed_records = 0
        self._last_flush_ms: int | None = None
        self._closed = False

        remove_stale_tmp_files(self.directory)
        try:
            self.epoch_cache = LeaderEpochCache(self.directory)
        except CheckpointError as exc:
            # The epochs are also in the batches: rebuild the cache from the recovery scan.
            self._log({"event": "log-recovery-epoch-checkpoint-rebuilt", "partition": self._name(),
                       "reason": str(exc)})
            os.unlink(os.path.join(self.directory, EPOCH_CHECKPOINT_NAME))
            self.epoch_cache = LeaderEpochCache(self.directory)
        self._recover()
        self.flushed_offset = 0
        self._flush_locked(all_segments=True)  # a durable baseline for this run (see flush.py)

    # ------------------------------------------------------------------ properties

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def last_epoch(self) -> int:
        """Latest epoch in the epoch cache (the follower's lastFetchedEpoch), -1 if none."""
        return self.epoch_cache.last_epoch

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def segment_paths(self) -> list[str]:
        return [s.path for s in self._segments]

    # ------------------------------------------------------------------ appends

    def append_as_leader(
        self,
        raw_batches: bytes | bytearray | memoryview,
        leader_epoch: int,
        headers: list[BatchHeader] | None = None,
    ) -> tuple[int, int]:
        """Validate client batches, assign offsets from the LEO, stamp `leader_epoch`, append.

        Returns (first offset, last offset). Raises InvalidBatchError (Kafka CORRUPT_MESSAGE)
        without writing anything if any batch is malformed or fails its CRC. Pass `headers`
        (from validate_batches on these same bytes, e.g. after a producer-sequence check) to
        skip validating twice. Batch i gets offsets first + sum of earlier batches' counts.
        """
        buf = bytearray(raw_batches)
        if headers is None:
            headers = validate_batches(buf)
        with self._lock:
            self._check_open()
            first = next_offset = self.log_end_offset
            bases = []
            pos = 0
            for h in headers:
                stamp_batch(buf, pos, next_offset, leader_epoch)
                bases.append(next_offset)
                next_offset += h.last_offset_delta + 1
                pos += h.size
            if leader_epoch < self.epoch_cache.last_epoch:
                # Stamping an older epoch after a newer one would break the cache's order.
                raise ValueError(
                    f"{self._name()}: append in leader epoch {leader_epoch} after epoch {self.epoch_cache.last_epoch}"
                )
            # 004 "Epoch concept": the cache learns a new epoch at its first offset (a no-op when
            # the leader already called assign_epoch on election, KAFKA-7415).
            self.epoch_cache.assign(leader_epoch, first)
            self._write(buf, headers, bases)
            return first, next_offset - 1

    def append_as_follower(self, raw_batches: bytes | bytearray | memoryview,
                           headers: list[BatchHeader] | None = None) -> tuple[int, int]:
        """Append batches fetched from the leader (offsets and epochs already set).

        They must start at the LEO and follow one another; else NonContiguousAppendError.
        CRCs are checked too (InvalidBatchError). Returns (first offset, last offset);
        empty input returns (LEO, LEO - 1) and writes nothing. Pass `headers` (from
        validate_batches on these same bytes: the caller reads them too) to skip validating twice.
        """
        if len(raw_batches) == 0:
            with self._lock:
                return self.log_end_offset, self.log_end_offset - 1
        if headers is None:
            headers = validate_batches(raw_batches)
        with self._lock:
            self._check_open()
            expected = first = self.log_end_offset
            bases = []
            for h in headers:
                if h.base_offset != expected:
                    raise NonContiguousAppendError(
                        f"{self._name()}: batch at offset {h.base_offset} does not follow offset {expected - 1}"
                    )
                bases.append(expected)
                expected = h.next_offset
            for h in headers:
                if h.partition_leader_epoch > self.epoch_cache.last_epoch:
                    self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            self._write(raw_batches, headers, bases)
            return first, expected - 1

    def assign_epoch(self, epoch: int) -> int:
        """Start leader epoch `epoch` at the current LEO in the epoch cache; returns that LEO.

        A new leader calls this at once (PROTOCOL.md 2, trap KAFKA-7415).
        """
        with self._lock:
            leo = self.log_end_offset
            self.epoch_cache.assign(epoch, leo)
            return leo

    def _write(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader], bases: list[int]) -> None:
        seg = self._segments[-1]
        if seg.size > 0 and seg.size + len(data) > self.segment_bytes:
            seg = self._roll(bases[0])
        start = seg.size
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.write(seg.fd, view[written:])
        except OSError:
            # Leave the file as the index says (no half-written tail), then report.
            os.ftruncate(seg.fd, start)
            raise
        pos = start
        for h, base in zip(headers, bases, strict=True):
            seg.bases.append(base)
            seg.positions.append(pos)
            pos += h.size
        seg.size = pos
        seg.next_offset = bases[-1] + headers[-1].last_offset_delta + 1
        self._unflushed_records += sum(h.record_count for h in headers)
        mode = self.flush_policy.mode
        if mode is FlushMode.EVERY_WRITE or (
            mode is FlushMode.EVERY_N_RECORDS and self._unflushed_records >= self.flush_policy.n
        ):
            self._flush_locked()

    def _roll(self, base_offset: int) -> _Segment:
        # 001 5: a segment roll is a flush point even under "never" (as Kafka flushes on roll).
        self._flush_locked()
        seg = _Segment(os.path.join(self.directory, segment_file_name(base_offset)), base_offset)
        seg.next_offset = base_offset
        self._segments.append(seg)
        self._segment_bases.append(base_offset)
        fsync_dir(self.directory)
        seg.synced_size = 0
        self._flush_log.record(seg.path, 0, base_offset)
        return seg

    # ------------------------------------------------------------------ reads

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one containing `start_offset`, up to about `max_bytes`.

        The first batch is returned even if larger than max_bytes (so a fetch makes progress,
        KIP-74). With max_offset (exclusive cap, e.g. the HWM for consumers, 002 2.7) only
        batches whose last offset < max_offset are returned. Reading at the LEO returns b"";
        outside [log_start_offset, log_end_offset] raises OffsetOutOfRangeError.
        """
        return self.read_span(start_offset, max_bytes, max_offset)[0]

    def read_span(self, start_offset: int, max_bytes: int, max_offset: int | None = None) -> tuple[bytes, int, int]:
        """`read`'s batches, and the base offset of the first and the next offset after the last (both -1
        when none): from the batch index, so a caller that needs the span (a consumer fetch's trace line,
        read_committed's aborted transactions) does not parse the headers of what it serves."""
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            if start_offset < self.log_start_offset or start_offset > leo:
                raise OffsetOutOfRangeError(
                    f"{self._name()}: offset {start_offset} outside [{self.log_start_offset}, {leo}]"
                )
            cap = leo if max_offset is None else min(max_offset, leo)
            if start_offset >= cap:
                return b"", -1, -1
            chunks: list[bytes] = []
            total = 0
            first_offset = next_offset = -1
            si = bisect.bisect_right(self._segment_bases, start_offset) - 1
            bi = self._segments[si].batch_index(start_offset)
            while si < len(self._segments):
                seg = self._segments[si]
                first_pos = end_pos = seg.positions[bi] if bi < len(seg.positions) else seg.size
                while bi < len(seg.bases):
                    nxt, bend = seg.batch_end(bi)
                    if nxt > cap or (total + (bend - first_pos) > max_bytes and (total or end_pos > first_pos)):
                        break
                    if first_offset < 0:
                        first_offset = seg.bases[bi]
                    end_pos, next_offset = bend, nxt
                    bi += 1
                if end_pos > first_pos:
                    chunks.append(os.pread(seg.fd, end_pos - first_pos, first_pos))
                    total += end_pos - first_pos
                if bi < len(seg.bases) or total >= max_bytes:
                    break
                si, bi = si + 1, 0
            return b"".join(chunks), first_offset, next_offset

    def batch_headers(self) -> list[BatchHeader]:
        """Headers of every batch in the log, oldest first (CRCs were checked at append/recovery)."""
        with self._lock:
            self._check_open()
            out = []
            for seg in self._segments:
                for pos in seg.positions:
                    out.append(unpack_header(os.pread(seg.fd, HEADER_SIZE, pos)))
            return out

    def physical_log(self) -> list[PhysicalRecord]:
        """Every record as (offset, leader epoch, value digest): the admin dump (issue 2 item 6). A batch
        whose CRC does not match is left out (its records cannot be trusted to decode): crc_failures()
        names it."""
        with self._lock:
            self._check_open()
            out = []
            for seg in self._segments:
                if seg.size == 0:
                    continue
                raw = memoryview(os.pread(seg.fd, seg.size, 0))
                for pos, h in iter_batch_headers(raw, check_crc=True):
                    trusted = iter_records(raw[pos:pos + h.size]) if h.crc_ok else ()
                    out += [PhysicalRecord(rec.offset, h.partition_leader_epoch, value_digest(rec.value))
                            for rec in trusted]
            return out

    def crc_failures(self) -> list[list[int]]:
        """[base offset, last offset] of every batch in the log whose CRC does not match its bytes: what
        the start-up recovery cuts (001 5), so a broker holds one only when its files were damaged after
        it started (the admin dump; checkers/replicas.py corrupt-batch-kept)."""
        with self._lock:
            self._check_open()
            out = []
            for seg in self._segments:
                if seg.size:
                    raw = memoryview(os.pread(seg.fd, seg.size, 0))
                    out += [[h.base_offset, h.last_offset] for _, h in iter_batch_headers(raw, check_crc=True)
                            if not h.crc_ok]
            return out

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= timestamp_ms, or None.

        For ListOffsets with a timestamp (KIP-79); batches are skipped by their max timestamp,
        so only one batch's records are decoded.
        """
        with self._lock:
            self._check_open()
            for seg in self._segments:
                for i, pos in enumerate(seg.positions):
                    h = unpack_header(os.pread(seg.fd, HEADER_SIZE, pos))
                    if h.max_timestamp < timestamp_ms:
                        continue
                    raw = os.pread(seg.fd, seg.batch_end(i)[1] - pos, pos)
                    for rec in iter_records(raw):
                        if rec.timestamp >= timestamp_ms:
                            return rec.offset, rec.timestamp
            return None

    def end_offset_for_epoch(self, epoch: int, is_leader_current_epoch: bool = False) -> tuple[int, int]:
        """EndOffsetForEpoch(epoch) on this log (PROTOCOL.md 2 item 2)."""
        with self._lock:
            return self.epoch_cache.end_offset_for_epoch(epoch, self.log_end_offset, is_leader_current_epoch)

    def client_end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """EndOffsetForEpoch(epoch) as a leader answers a consumer (epoch_cache.client_end_offset_for_entries)."""
        with self._lock:
            return self.epoch_cache.client_end_offset_for_epoch(epoch, self.log_end_offset)

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> int:
        """Drop every record at or after `offset`; returns the new LEO.

        A batch straddling `offset` is dropped whole (batches are never split), so the new LEO
        may be below `offset`. Epoch-cache entries at or past the new LEO go too (PROTOCOL.md 2,
        "Follower, on divergence"). The cut is fsynced, so a later crash cannot resurrect the
        dropped suffix.
        """
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                # Nothing to cut, but an epoch that starts at the LEO goes all the same: this replica
                # led that epoch and appended nothing before another leader was elected (KAFKA-7415
                # put the entry in at once). Kept, it is the lastFetchedEpoch of every fetch, the new
                # leader, which never had that epoch, answers each with the same divergence, and the
                # follower never fetches a record (Kafka's UnifiedLog.truncateTo does the same).
                self.epoch_cache.truncate_from_end(self.log_end_offset)
                return self.log_end_offset
            offset = max(offset, self.log_start_offset)
            si = bisect.bisect_right(self._segment_bases, offset) - 1
            while len(self._segments) > si + 1:
                self._delete_segment(self._segments.pop())
                self._segment_bases.pop()
            seg = self._segments[-1]
            # Keep the batches before the one containing `offset` (never split a batch).
            seg.truncate_batches(seg.batch_index(offset))
            if len(self._segments) > 1 and seg.size == 0:
                # An emptied non-first segment goes; the previous one is the active one again.
                self._delete_segment(self._segments.pop())
                self._segment_bases.pop()
            leo = self.log_end_offset
            self.epoch_cache.truncate_from_end(leo)
            self._flush_locked()  # earlier segments were synced at roll: all of [start, leo) is now
            return leo

    def _delete_segment(self, seg: _Segment) -> None:
        seg.close()
        os.unlink(seg.path)
        fsync_dir(self.directory)
        self._flush_log.record(seg.path, 0, seg.base_offset, deleted=True)

    # ------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """fsync unsynced segments now (controlled shutdown, explicit calls)."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def maybe_flush(self, now_ms: int) -> bool:
        """Apply an every-ms policy: fsync if N ms passed since the last flush; True if it did."""
        with self._lock:
            if self._closed or self.flush_policy.mode is not FlushMode.EVERY_MS:
                return False
            if self._last_flush_ms is None:
                self._last_flush_ms = now_ms
            if now_ms - self._last_flush_ms < self.flush_policy.n:
                return False
            self._last_flush_ms = now_ms
            if self.flushed_offset == self.log_end_offset and self._segments[-1].synced_size == self._segments[-1].size:
                return False
            self._flush_locked()
            return True

    def _flush_locked(self, all_segments: bool = False) -> None:
        segs = self._segments if all_segments else [s for s in self._segments if s.synced_size != s.size]
        for seg in segs:
            self._fsync_segment(seg, force=all_segments)
        self.flushed_offset = self.log_end_offset
        self._unflushed_records = 0

    def _fsync_segment(self, seg: _Segment, force: bool = False) -> None:
        if not force and seg.synced_size == seg.size:
            return
        hostenv.fsync(seg.fd)
        seg.synced_size = seg.size
        self._flush_log.record(seg.path, seg.size, seg.next_offset)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close file handles (no flush: call flush() first for a controlled shutdown)."""
        with self._lock:
            if self._closed:
                return
            for seg in self._segments:
                seg.close()
            if self._owns_flush_log:
                self._flush_log.close()
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self._name()} is closed")

    def _name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        """Scan every segment, rebuild the index, cut a torn or corrupt tail (issue 2 item 4).

        After the first damaged segment, or a gap between segments, later segments cannot be
        trusted to follow on: they are deleted (each with its own log line).
        """
        found = []
        for n in os.listdir(self.directory):
            if n.endswith(SEGMENT_SUFFIX) and n[: -len(SEGMENT_SUFFIX)].isdigit():
                found.append((int(n[: -len(SEGMENT_SUFFIX)]), os.path.join(self.directory, n)))
        found.sort()
        expected: int | None = None
        broken = False
        # Epoch changes seen while scanning (epoch, first offset): they complete a checkpoint
        # that missed an epoch (the checkpoint is written before data, so normally a no-op).
        self._scan_epochs: list[tuple[int, int]] = []
        self._scan_last_epoch = NO_EPOCH
        for base, path in found:
            if broken or (expected is not None and base != expected):
                reason = "segment after a corrupt tail" if broken else f"gap: segment starts at {base}, log ends at {expected}"
                self._log_recovery(path, base, 0, reason)
                self._unlink_recovered(path, base)
                broken = True
                continue
            seg = _Segment(path, base)
            broken = self._scan_segment(seg)
            self._segments.append(seg)
            self._segment_bases.append(base)
            expected = seg.next_offset
        if not self._segments:
            seg = _Segment(os.path.join(self.directory, segment_file_name(0)), 0)
            self._segments.append(seg)
            self._segment_bases.append(0)
        elif len(self._segments) > 1 and self._segments[-1].size == 0:
            # An empty trailing segment (e.g. cut to nothing by a lossy crash) adds nothing.
            seg = self._segments.pop()
            self._segment_bases.pop()
            seg.close()
            self._unlink_recovered(seg.path, seg.base_offset)
        fsync_dir(self.directory)
        self._rebuild_epoch_cache()

    def _unlink_recovered(self, path: str, base_offset: int) -> None:
        os.unlink(path)
        self._flush_log.record(path, 0, base_offset, deleted=True)

    def _scan_segment(self, seg: _Segment) -> bool:
        """Index seg's batches; truncate at the first bad one. True if the file was cut."""
        size = os.fstat(seg.fd).st_size
        raw = memoryview(os.pread(seg.fd, size, 0)) if size else memoryview(b"")
        pos = 0
        expected = seg.base_offset
        reason = None
        while pos < size:
            try:
                h = parse_batch_header(raw, pos, check_crc=True)
            except InvalidBatchError as exc:
                reason = str(exc)
                break
            if not h.crc_ok:
                reason = "CRC mismatch"
                break
            if h.base_offset != expected:
                reason = f"non-monotonic offset: batch base {h.base_offset}, expected {expected}"
                break
            seg.bases.append(h.base_offset)
            seg.positions.append(pos)
            if h.partition_leader_epoch > self._scan_last_epoch:
                self._scan_epochs.append((h.partition_leader_epoch, h.base_offset))
                self._scan_last_epoch = h.partition_leader_epoch
            pos += h.size
            expected = h.next_offset
        seg.size = pos
        seg.next_offset = expected
        if reason is None:
            return False
        self._log_recovery(seg.path, expected, pos, reason)
        os.ftruncate(seg.fd, pos)
        hostenv.fsync(seg.fd)
        return True

    def _rebuild_epoch_cache(self) -> None:
        """Drop cache entries past the recovered LEO, then add epochs seen in the log but missing."""
        leo = self.log_end_offset
        if self.epoch_cache.truncate_from_end(leo):
            self._log({"event": "log-recovery-epoch-cache", "partition": self._name(), "log_end_offset": leo,
                       "entries": [[e.epoch, e.start_offset] for e in self.epoch_cache.entries]})
        for epoch, base in self._scan_epochs:
            if base < leo and epoch > self.epoch_cache.last_epoch:
                self.epoch_cache.assign(epoch, base)
        self._scan_epochs = []

    def _log_recovery(self, path: str, offset: int, position: int, reason: str) -> None:
        self._log({"event": "log-recovery-truncated", "partition": self._name(), "file": path,
                   "offset": offset, "position": position, "reason": reason})


def _partition_of(dir_name: str) -> int:
    try:
        return int(dir_name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1
