"""Idempotent producers: per-partition sequence checks (KIP-98), so retries never duplicate.

Both kafka-python and librdkafka enable idempotence by default: every batch carries a
producer id, epoch and base sequence. The leader appends a batch only if its sequence
follows the producer's last one; a batch it already has (a retry after a lost response)
is acknowledged with its original offset and not written again; a gap is rejected with
OUT_OF_ORDER_SEQUENCE_NUMBER. The table is rebuilt from the log's batch headers whenever a
replica becomes leader, so it survives failover and restarts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from clusters.broker import rpc
from clusters.broker.log import BatchHeader

RECENT_BATCHES = 5  # max.in.flight.requests.per.connection for idempotent producers


@dataclass
class ProducerEntry:
    epoch: int
    last_sequence: int
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))  # (first_seq, last_seq, first_offset, last_offset)


class ProducerStateTable:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    @classmethod
    def from_headers(cls, headers: list[BatchHeader]) -> ProducerStateTable:
        t = cls()
        for h in headers:
            t.record([h], h.base_offset)
        return t

    def check(self, h: BatchHeader) -> tuple[int, tuple[int, int] | None]:
        """(error, duplicate_offsets): NONE and None to append; NONE and offsets for a duplicate."""
        if h.producer_id < 0 or h.base_sequence < 0:
            return rpc.NONE, None
        e = self.producers.get(h.producer_id)
        if e is None:
            return rpc.NONE, None  # a producer this log has never seen: its first batch
        if h.producer_epoch < e.epoch:
            return rpc.INVALID_PRODUCER_EPOCH, None
        if h.producer_epoch > e.epoch:
            return (rpc.NONE, None) if h.base_sequence == 0 else (rpc.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        for first_seq, last_seq, first_off, last_off in e.recent:
            if first_seq == h.base_sequence and last_seq == h.last_sequence:
                return rpc.NONE, (first_off, last_off)
        if h.base_sequence != (e.last_sequence + 1) % (2**31):
            return rpc.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return rpc.NONE, None

    def record(self, headers: list[BatchHeader], first_offset: int) -> None:
        """Remember appended batches (offsets as assigned: batch i starts after batch i-1)."""
        offset = first_offset
        for h in headers:
            last = offset + h.last_offset_delta
            if h.producer_id >= 0 and h.base_sequence >= 0:
                e = self.producers.get(h.producer_id)
                if e is None or h.producer_epoch != e.epoch:
                    e = self.producers[h.producer_id] = ProducerEntry(epoch=h.producer_epoch, last_sequence=-1)
                e.last_sequence = h.last_sequence
                e.recent.append((h.base_sequence, h.last_sequence, offset, last))
            offset = last + 1
