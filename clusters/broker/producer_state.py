"""Idempotent producers: per-partition sequence checks (KIP-98), so retries never duplicate.

Both kafka-python and librdkafka enable idempotence by default: every batch carries a
producer id, epoch and base sequence. The leader appends a batch only if its sequence
follows the producer's last one; a batch it already has (a retry after a lost response)
is acknowledged with its original offset and not written again; a gap is rejected with
OUT_OF_ORDER_SEQUENCE_NUMBER. The table is rebuilt from the log's batch headers whenever a
replica becomes leader, so it survives failover and restarts.

Transactions (KIP-98) add, per partition: the first offset of each producer's ongoing transaction
(from its first transactional batch to the control batch, the marker, that ends it), so the last
stable offset (LSO) is min(HWM, earliest ongoing first offset); and the index of aborted
transactions (producer id, first offset, marker offset) that read_committed fetches return, so a
consumer can drop the aborted records it receives below the LSO. A marker may carry a higher
producer epoch (the coordinator fenced the producer): from then on the old epoch is refused here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.log import BatchHeader
from kafkaesque_harness.clusters.broker.log.batch import parse_control

RECENT_BATCHES = 5  # max.in.flight.requests.per.connection for idempotent producers


@dataclass
class ProducerEntry:
    epoch: int
    last_sequence: int
    # (first_seq, last_seq, first_offset, last_offset, crc): the batch's CRC tells a retry (the same bytes) from
    # different records a client sent under a sequence it had used already (the trace says which)
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))
    coordinator_epoch: int = -1  # of the last marker: markers of an older coordinator are refused


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class ProducerStateTable:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction here
        self.aborted: list[AbortedTxn] = []  # in the order of their markers

    @classmethod
    def from_headers(cls, headers: list[BatchHeader],
                     read_batch: Callable[[BatchHeader], bytes] | None = None) -> ProducerStateTable:
        """Rebuild from the log's batch headers; read_batch gives a control batch's bytes (whether a
        marker commits or aborts is in its record, not its header)."""
        t = cls()
        for h in headers:
            t.record([h], h.base_offset, read_batch(h) if h.is_control and read_batch else None)
        return t

    # --- transactions --------------------------------------------------------------------------------
    def last_stable_offset(self, hwm: int) -> int:
        """KIP-98: read_committed consumers read below the LSO, the first offset not yet decided."""
        return min([hwm, *self.ongoing.values()])

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a fetch of [start, end) must list:
        those with records in the range (Kafka's collectAbortedTxns: last offset >= start, first < end)."""
        return [(a.producer_id, a.first_offset) for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def needs_verification(self, h: BatchHeader) -> bool:
        """KIP-890 part 1: the first transactional batch of a producer at this partition may begin a
        transaction here only if its coordinator says the partition is part of the producer's
        ongoing transaction (a late produce of an ended transaction would otherwise open a hanging one)."""
        return h.is_transactional and not h.is_control and h.producer_id not in self.ongoing

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> int:
        """Kafka's ProducerAppendInfo.checkProducerEpoch / checkCoordinatorEpoch for a marker."""
        e = self.producers.get(producer_id)
        if e is None:
            return rpc.NONE
        if producer_epoch < e.epoch:
            return rpc.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < e.coordinator_epoch:
            return rpc.TRANSACTION_COORDINATOR_FENCED
        return rpc.NONE

    def _record_marker(self, h: BatchHeader, offset: int, commit: bool, coordinator_epoch: int) -> None:
        e = self.producers.get(h.producer_id)
        if e is None or h.producer_epoch > e.epoch:
            e = self.producers[h.producer_id] = ProducerEntry(epoch=h.producer_epoch, last_sequence=-1)
        e.coordinator_epoch = max(e.coordinator_epoch, coordinator_epoch)
        first = self.ongoing.pop(h.producer_id, None)
        if first is not None and not commit:
            self.aborted.append(AbortedTxn(h.producer_id, first, offset))

    def check(self, h: BatchHeader) -> tuple[int, tuple[int, int] | None]:
        """(error, duplicate): NONE and None to append; NONE and (first offset, last offset, CRC) of the batch
        written before for a duplicate."""
        if h.producer_id < 0 or h.base_sequence < 0:
            return rpc.NONE, None
        e = self.producers.get(h.producer_id)
        if e is None:
            return rpc.NONE, None  # a producer this log has never seen: its first batch
        if h.producer_epoch < e.epoch:
            return rpc.INVALID_PRODUCER_EPOCH, None
        if h.producer_epoch > e.epoch:
            return (rpc.NONE, None) if h.base_sequence == 0 else (rpc.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        for first_seq, last_seq, first_off, last_off, crc in e.recent:
            if first_seq == h.base_sequence and last_seq == h.last_sequence:
                return rpc.NONE, (first_off, last_off, crc)
        if h.base_sequence != (e.last_sequence + 1) % (2**31):
            return rpc.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return rpc.NONE, None

    def record(self, headers: list[BatchHeader], first_offset: int, raw: bytes | None = None) -> None:
        """Remember appended batches (offsets as assigned: batch i starts after batch i-1); raw, the
        batches' bytes, is needed only for control batches."""
        offset, pos = first_offset, 0
        for h in headers:
            last = offset + h.last_offset_delta
            if h.is_control and raw is not None:
                self._record_marker(h, offset, *parse_control(raw[pos:pos + h.size]))
            elif h.is_transactional and h.producer_id >= 0:
                self.ongoing.setdefault(h.producer_id, offset)
            pos += h.size
            if h.producer_id >= 0 and h.base_sequence >= 0:
                e = self.producers.get(h.producer_id)
                if e is None or h.producer_epoch != e.epoch:
                    e = self.producers[h.producer_id] = ProducerEntry(epoch=h.producer_epoch, last_sequence=-1)
                e.last_sequence = h.last_sequence
                e.recent.append((h.base_sequence, h.last_sequence, offset, last, h.crc))
            offset = last + 1
