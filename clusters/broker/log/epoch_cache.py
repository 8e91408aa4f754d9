"""The leader-epoch cache (epoch -> start offset) and the divergence/truncation rules built on it.

PROTOCOL.md section 2 (KIP-101, KIP-279): a replica keeps, per partition, the first offset
written in each leader epoch, strictly increasing in both epoch and offset (004 "Epoch
concept"). The leader answers a follower's `lastFetchedEpoch` with `end_offset_for_epoch`,
and a follower told it diverged truncates with `follower_truncation_offset`. The cache is
persisted in the partition directory as `leader-epoch-checkpoint`, in Kafka's text format:

    0            (format version)
    N            (number of entries)
    EPOCH START  (N lines)

Every change is written atomically (checkpoints.atomic_write).
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from kafkaesque_harness.clusters.broker.log.checkpoints import (
    CheckpointError,
    read_versioned,
    write_versioned,
)

CHECKPOINT_NAME = "leader-epoch-checkpoint"
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def end_offset_for_entries(
    entries: list[EpochEntry], requested_epoch: int, log_end_offset: int, is_leader_current_epoch: bool = False
) -> tuple[int, int]:
    """EndOffsetForEpoch over a list of entries, exactly as PROTOCOL.md section 2 item 2.

    - (req, LEO) if the log is empty (no entries), if req is the latest epoch, or (on the
      leader only: is_leader_current_epoch) if req is the leader's current epoch;
    - else (e*, end): e* the largest epoch <= req, end the start of the next higher epoch
      (the LEO if none);
    - if no epoch <= req exists: (req, start offset of the lowest epoch).
    """
    if not entries or is_leader_current_epoch or requested_epoch == entries[-1].epoch:
        return requested_epoch, log_end_offset
    epochs = [e.epoch for e in entries]
    i = bisect.bisect_right(epochs, requested_epoch)  # entries[:i] have epoch <= req
    if i == 0:
        return requested_epoch, entries[0].start_offset
    end = entries[i].start_offset if i < len(entries) else log_end_offset
    return entries[i - 1].epoch, end


def client_end_offset_for_entries(
    entries: list[EpochEntry], requested_epoch: int, log_end_offset: int
) -> tuple[int, int]:
    """EndOffsetForEpoch as a Kafka leader answers clients: a consumer's OffsetForLeaderEpoch and the
    LastFetchedEpoch of its Fetch (KIP-320; Kafka's LeaderEpochFileCache.endOffsetFor).

    It is the rule of PROTOCOL.md section 2 item 2 except where that rule has no answer: an epoch above
    every cached one (a consumer that read a newer leader's records asking a deposed leader that never
    heard of that epoch), an empty cache, and an undefined epoch (-1) give (UNDEFINED, UNDEFINED),
    (-1, -1), which a Fetch turns into OFFSET_OUT_OF_RANGE ("could not determine the end offset of the
    last fetched epoch") and OffsetForLeaderEpoch returns as it is. The follower path keeps
    end_offset_for_entries: a follower's fetch never carries an epoch its leader does not know past the
    epoch fence (KIP-320), and the `no-epoch-fencing` variant relies on its answer.
    """
    if requested_epoch < 0 or not entries or requested_epoch > entries[-1].epoch:
        return NO_EPOCH, -1
    return end_offset_for_entries(entries, requested_epoch, log_end_offset)


class LeaderEpochCache:
    """Epoch -> start offset for one partition, persisted in `<partition dir>/leader-epoch-checkpoint`.

    Not thread-safe by itself: PartitionLog serialises access under its lock.
    """

    def __init__(self, partition_dir: str | None):
        """Load the checkpoint of `partition_dir` (None: in memory only, for pure computations)."""
        self._path = os.path.join(partition_dir, CHECKPOINT_NAME) if partition_dir is not None else None
        self._entries: list[EpochEntry] = []
        if self._path is not None and os.path.exists(self._path):
            self._entries = _read_checkpoint(self._path)

    @classmethod
    def from_entries(cls, entries: list[tuple[int, int]]) -> LeaderEpochCache:
        """An in-memory cache holding `[(epoch, start_offset), ...]` (tests and pure decisions)."""
        for (e1, s1), (e2, s2) in zip(entries, entries[1:], strict=False):
            if not (e1 < e2 and s1 < s2):
                raise ValueError(f"entries must be strictly increasing in epoch and offset, got {entries}")
        cache = cls(None)
        for epoch, start in entries:
            cache.assign(epoch, start)
        return cache

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def last_epoch(self) -> int:
        """The latest epoch in the cache, or -1 (NO_EPOCH) when empty."""
        return self._entries[-1].epoch if self._entries else NO_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at `offset` was written in, or -1 if before every entry."""
        i = bisect.bisect_right([e.start_offset for e in self._entries], offset)
        return self._entries[i - 1].epoch if i else NO_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        for e in self._entries:
            if e.epoch == epoch:
                return e.start_offset
        return None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; return True if the cache changed.

        As Kafka's LeaderEpochFileCache: an epoch not newer than the latest is ignored; a newer
        epoch removes entries starting at or after `start_offset` (e.g. an epoch that was
        assigned at the LEO but never got a record), keeping both columns strictly increasing.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch and start offset must be >= 0, got ({epoch}, {start_offset})")
        if self._entries and epoch <= self._entries[-1].epoch:
            return False
        while self._entries and self._entries[-1].start_offset >= start_offset:
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        self._persist()
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or past `end_offset` (after truncating the log to it)."""
        n = len(self._entries)
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        if len(self._entries) != n:
            self._persist()
            return True
        return False

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._persist()

    def end_offset_for_epoch(
        self, epoch: int, log_end_offset: int, is_leader_current_epoch: bool = False
    ) -> tuple[int, int]:
        """(epoch*, end offset) for a requested epoch: PROTOCOL.md section 2 item 2."""
        return end_offset_for_entries(self._entries, epoch, log_end_offset, is_leader_current_epoch)

    def client_end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch*, end offset) as a leader answers a client (client_end_offset_for_entries)."""
        return client_end_offset_for_entries(self._entries, epoch, log_end_offset)

    def _persist(self) -> None:
        if self._path is None:
            return
        write_versioned(self._path, [f"{e.epoch} {e.start_offset}" for e in self._entries])


def _read_checkpoint(path: str) -> list[EpochEntry]:
    try:
        entries = [EpochEntry(int(epoch), int(start)) for epoch, start in read_versioned(path, 2)]
    except ValueError as exc:
        raise CheckpointError(
            f"leader-epoch checkpoint {path} is malformed ({exc}); delete it to rebuild it from the log"
        ) from exc
    for a, b in zip(entries, entries[1:], strict=False):
        if not (a.epoch < b.epoch and a.start_offset < b.start_offset):
            raise CheckpointError(
                f"leader-epoch checkpoint {path} is not strictly increasing; delete it to rebuild it from the log"
            )
    return entries


def leader_divergence(
    leader_cache: LeaderEpochCache,
    leader_log_end_offset: int,
    leader_current_epoch: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> tuple[int, int] | None:
    """The leader's divergence test for a follower fetch: PROTOCOL.md section 2 items 2-3.

    Returns the `divergingEpoch` (epoch, end offset) to reply with, or None when the fetch
    is consistent and records may be returned. A follower with no epoch yet (-1) cannot
    diverge (it has fetched nothing).
    """
    if last_fetched_epoch < 0:
        return None
    epoch, end = leader_cache.end_offset_for_epoch(
        last_fetched_epoch, leader_log_end_offset, is_leader_current_epoch=last_fetched_epoch == leader_current_epoch
    )
    if epoch < last_fetched_epoch or end < fetch_offset:
        return epoch, end
    return None


def follower_truncation_offset(
    own_cache: LeaderEpochCache, own_leo: int, diverging_epoch: int, diverging_end_offset: int
) -> int:
    """Where a follower truncates on a divergingEpoch reply: PROTOCOL.md "Follower, on divergence".

    (fe, fo) = EndOffsetForEpoch(divergingEpoch.epoch) on the follower's own log; if fe equals
    the diverging epoch, truncate to min(fo, end), else to fo as an intermediate step (the
    next fetch repeats the check: KIP-279's iterative walk).
    """
    fe, fo = own_cache.end_offset_for_epoch(diverging_epoch, own_leo)
    offset = min(fo, diverging_end_offset) if fe == diverging_epoch else fo
    return min(offset, own_leo)
