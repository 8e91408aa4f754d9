"""The simulated consumer of one topic: kafka-python's Fetcher and SubscriptionState on asyncio, with the client
events (history/clients.py) its watch (workloads/kafka_python.py KafkaPythonWatch) records of the real one.

Positions: a partition assigned with no position is placed by the reset policy (`seek` why "no-position");
`seek_to_beginning` asks for a reset the workload wanted (`seek` why "workload", policy "earliest");
`seek(p, offset)` places it (`seek` why "workload"); a group member's committed offset places it (`seek` why
"committed", group.py). A reset is a ListOffsets to the partition's leader.

Fetches (kafka/consumer/fetcher.py `_parse_fetched_data`), one in flight per leader, kept across polls (a poll
with a short timeout returns what has come back; the broker may hold a fetch up to fetch_max_wait):

- no error: the records from the position on, control batches and, read_committed, the aborted transactions'
  batches skipped (the answer's aborted_transactions list, as the fetcher's CompletedFetch does); the position
  moves past what was returned.
- OFFSET_OUT_OF_RANGE: if the position is still the offset fetched (else the answer is stale: discarded), the
  reset policy asks for a reset (`should_reset_after`), recorded as a `reset` event once the ListOffsets answer
  places it (from, to, policy, error, the broker taken for the leader and its epoch, answered_by).
- a diverging epoch (KIP-320, Fetch v12's last_fetched_epoch): the position moves back to the end offset the
  leader gave (a `reset` with policy "truncation", error "LOG_TRUNCATION").
- NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a failed connection: fresh metadata is asked for; the
  position stays. FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH: the same, and the position is validated.
- A fetch that returns no record forgets the position's epoch (kafka-python's Fetcher._append; docs/FINDINGS.md
  kafka-python 3): its next Fetch says last_fetched_epoch -1.

Validation (KIP-320, SubscriptionState.maybe_validate_position and Fetcher._validate_offsets): when the leader
epoch in the metadata passes the epoch the position was reconciled with, a position that knows its record's
epoch is not fetched until an OffsetForLeaderEpoch answer from the leader validates it: an end offset below
the position moves it there (a `reset`, policy "truncation"); no end offset asks for a reset by the policy (a
`reset` with error "LOG_TRUNCATION" once placed); otherwise the position is kept with the epoch answered.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.record.memory_records import MemoryRecords

from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.sim.client import STALE_METADATA_ERRORS, ClusterClient

EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
POLICIES = {"earliest": EARLIEST, "latest": LATEST}
FETCH_MAX_WAIT_MS = 100    # fetch_max_wait_ms=100 of the real workloads' consumers
MAX_POLL_RECORDS = 500
PARTITION_MAX_BYTES = 1 << 20
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass
class Position:
    offset: int
    epoch: int = -1  # the leader epoch of the last record read before it (KIP-320's last fetched epoch)


def should_reset_after(error: BaseException, fetched_offset: int, position: Position | None,
                       policy: str | None) -> str:
    """What an OFFSET_OUT_OF_RANGE answer does (fetcher.py): "stale" when the position has moved since the
    fetch (the answer is discarded), "reset" with a reset policy, "raise" without one."""
    if position is None or position.offset != fetched_offset:
        return "stale"
    return "reset" if policy in POLICIES else "raise"


def after_validation(position: Position, end_offset: int, end_epoch: int) -> str:
    """What an OffsetForLeaderEpoch answer does to a position being validated (Fetcher's
    _handle_offset_for_leader_epoch_response): "reset" (no end offset or epoch: the reset policy), "truncate"
    (the epoch ends below the position: move back to its end), or "valid" (kept, with the epoch answered)."""
    if end_offset < 0 or end_epoch < 0:
        return "reset"
    if end_offset < position.offset:
        return "truncate"
    return "valid"


class Consumer:
    """Manual assignment of partitions of one topic; `poll` returns {partition: [(offset, value bytes)]}."""

    def __init__(self, cluster: ClusterClient, topic: str, events: ClientEventLog, read_committed: bool = False,
                 policy: str = "earliest", max_records: int = MAX_POLL_RECORDS):
        self.cluster, self.topic, self.events = cluster, topic, events
        self.isolation = READ_COMMITTED if read_committed else READ_UNCOMMITTED
        self.policy, self.max_records = policy, max_records
        self.assignment: list[int] = []
        self.positions: dict[int, Position | None] = {}
        self.highwater: dict[int, int] = {}
        self._resets: dict[int, dict[str, Any]] = {}  # partition -> the reset asked for, not yet placed
        self._fetches: dict[int, asyncio.Task] = {}   # leader -> its fetch in flight
        self._leaders_seen: dict[int, tuple[int, int]] = {}
        self._reconciled: dict[int, int] = {}  # partition -> the leader epoch its position was reconciled with
        self._validating: set[int] = set()     # partitions whose position awaits an OffsetForLeaderEpoch answer
        cluster.listeners.append(self._leader_changed)

    # --- positions -----------------------------------------------------------------------------------------
    def assign(self, partitions: list[int]) -> None:
        """kafka-python's assign(): kept positions of partitions still assigned, none for the new ones."""
        self.assignment = sorted(set(partitions))
        self.positions = {p: self.positions.get(p) for p in self.assignment}
        self._resets = {p: r for p, r in self._resets.items() if p in self.positions}
        self._validating &= set(self.positions)
        self._drop_fetches()

    def seek_to_beginning(self, partitions: list[int] | None = None) -> None:
        for p in partitions if partitions is not None else self.assignment:
            self.positions[p] = None
            self._resets[p] = {"why": "workload", "policy": "earliest"}

    def seek(self, partition: int, offset: int, why: str = "workload") -> None:
        self.positions[partition] = Position(offset)
        self._resets.pop(partition, None)
        self._validating.discard(partition)
        self.events.add("seek", topic=self.topic, key=partition, to=offset, why=why)
        self._drop_fetches()

    def position(self, partition: int) -> int | None:
        pos = self.positions.get(partition)
        return pos.offset if pos is not None else None

    def _drop_fetches(self) -> None:
        """Fetches in flight were asked for the old positions: their answers are not taken (kafka-python
        discards a completed fetch whose offset no longer matches the position)."""
        for task in self._fetches.values():
            task.cancel()
        self._fetches = {}

    def _leader_changed(self, topic: str, partition: int, before: tuple[int, int] | None,
                        now: tuple[int, int]) -> None:
        if topic != self.topic or now[0] < 0:
            return
        seen = self._leaders_seen.get(partition)
        if seen == now:
            return
        self._leaders_seen[partition] = now
        self.events.add("leader", topic=self.topic, key=partition, **{"from": seen[0] if seen else -1}, to=now[0],
                        from_epoch=seen[1] if seen else -1, leader_epoch=now[1])

    # --- poll ----------------------------------------------------------------------------------------------
    async def poll(self, timeout_s: float) -> dict[int, list[tuple[int, bytes]]]:
        """One poll: resets resolved, fetches sent to leaders with none in flight, and whatever fetches answer
        within `timeout_s` parsed. Connection and metadata errors end in an empty poll, as kafka-python's."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            await self.cluster.ensure_metadata([self.topic])
        except Errors.KafkaError:
            return {}
        for p in self.assignment:
            if self.positions.get(p) is None and p not in self._resets:
                self._resets[p] = {"why": "no-position", "policy": self.policy}
        self._mark_for_validation()
        if self._validating:
            try:
                await asyncio.wait_for(self._validate(), max(0.0, deadline - loop.time()) + 0.5)
            except (TimeoutError, Errors.KafkaError):
                pass
        if self._resets:
            try:
                await asyncio.wait_for(self._resolve_resets(), max(0.0, deadline - loop.time()) + 0.5)
            except (TimeoutError, Errors.KafkaError):
                pass
        self._send_fetches()
        pending = [t for t in self._fetches.values()]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
        out: dict[int, list[tuple[int, bytes]]] = {}
        for leader, task in list(self._fetches.items()):
            if not task.done():
                continue
            del self._fetches[leader]
            if task.cancelled():
                continue
            error = task.exception()
            if error is not None:
                if isinstance(error, STALE_METADATA_ERRORS):
                    self.cluster.request_update()
                continue
            fetched, answer = task.result()
            self._take_fetch(leader, fetched, answer, out)
        return out

    def _send_fetches(self) -> None:
        by_leader: dict[int, list[tuple[int, Position, int]]] = {}
        for p in self.assignment:
            pos = self.positions.get(p)
            found = self.cluster.leader(self.topic, p)
            if pos is None or p in self._resets or p in self._validating or found is None:
                continue
            by_leader.setdefault(found[0], []).append((p, Position(pos.offset, pos.epoch), found[1]))
        for leader, parts in sorted(by_leader.items()):
            if leader not in self._fetches:
                self._fetches[leader] = asyncio.ensure_future(self._fetch(leader, parts))

    async def _fetch(self, leader: int, parts: list[tuple[int, Position, int]]) -> tuple[list, Any]:
        R = FetchRequest
        answer = await self.cluster.send(
            leader, R, replica_id=-1, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1, max_bytes=50 << 20,
            isolation_level=self.isolation, session_id=0, session_epoch=-1,
            topics=[R.FetchTopic(topic=self.topic, partitions=[R.FetchTopic.FetchPartition(
                partition=p, current_leader_epoch=epoch, fetch_offset=pos.offset, last_fetched_epoch=pos.epoch,
                log_start_offset=-1, partition_max_bytes=PARTITION_MAX_BYTES) for p, pos, epoch in parts])],
            forgotten_topics_data=[], rack_id="")
        return parts, answer

    def _take_fetch(self, leader: int, fetched: list[tuple[int, Position, int]], answer: Any,
                    out: dict[int, list[tuple[int, bytes]]]) -> None:
        asked = {p: (pos, epoch) for p, pos, epoch in fetched}
        for t in answer.responses:
            for pd in t.partitions:
                p = pd.partition_index
                if p not in asked:
                    continue
                pos, epoch = asked[p]
                current = self.positions.get(p)
                if current is None or current.offset != pos.offset or p not in self.positions:
                    continue  # stale: the position moved since this fetch was sent
                if pd.error_code != 0:
                    self._fetch_error(p, pd.error_code, pos, leader, epoch)
                    continue
                div = getattr(pd, "diverging_epoch", None)
                if div is not None and div.epoch >= 0 and div.end_offset >= 0:
                    self._truncated(p, pos, div.end_offset, leader, epoch)
                    continue
                if pd.high_watermark >= 0:
                    self.highwater[p] = pd.high_watermark
                room = self.max_records - sum(len(v) for v in out.values())
                records, next_pos = read_batches(pd.records, pos, self.isolation == READ_COMMITTED,
                                                 pd.aborted_transactions or [], limit=max(room, 0) + 1)
                if len(records) > room:  # the rest is fetched again (kafka-python keeps it buffered)
                    records = records[:max(room, 0)]
                    next_pos = Position(records[-1][0] + 1, next_pos.epoch) if records else pos
                if not records:  # kafka-python's Fetcher._append: an empty fetch forgets the position's epoch
                    next_pos = Position(next_pos.offset, -1)
                self.positions[p] = next_pos
                if records:
                    out.setdefault(p, []).extend((o, v) for o, v, _ in records)

    def _fetch_error(self, p: int, code: int, pos: Position, leader: int, epoch: int) -> None:
        error = Errors.for_code(code)
        if error is Errors.OffsetOutOfRangeError:
            decision = should_reset_after(error(), pos.offset, self.positions.get(p), self.policy)
            if decision == "reset":
                self.positions[p] = None
                self._resets[p] = {"from": pos.offset, "from_epoch": pos.epoch, "policy": self.policy,
                                   "error": "OFFSET_OUT_OF_RANGE",
                                   "detail": f"Fetch offset {pos.offset} is out of range for topic-partition "
                                             f"TopicPartition(topic='{self.topic}', partition={p})",
                                   "broker": leader, "leader_epoch": epoch}
            elif decision == "raise":
                raise Errors.OffsetOutOfRangeError({p: pos.offset})
            return
        # NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, fenced/unknown leader epoch, storage errors and
        # any other retriable answer: the metadata is refreshed and the same position fetched again
        self.cluster.request_update()
        if error in (Errors.FencedLeaderEpochError, Errors.UnknownLeaderEpochError):
            # KIP-320: the broker's view of the epoch differs; the position is validated before the next fetch
            pos_now = self.positions.get(p)
            if pos_now is not None and pos_now.epoch >= 0:
                self._validating.add(p)

    def _truncated(self, p: int, pos: Position, end_offset: int, leader: int, epoch: int,
                   end_epoch: int = -1) -> None:
        to = min(pos.offset, end_offset)
        self.positions[p] = Position(to, end_epoch)
        self.events.add("reset", topic=self.topic, key=p, **{"from": pos.offset}, from_epoch=pos.epoch, to=to,
                        policy="truncation", error="LOG_TRUNCATION",
                        detail=f"Truncation detected at position {pos.offset}: seeking to the first diverging "
                               f"offset {to}", broker=leader, leader_epoch=epoch)

    def _mark_for_validation(self) -> None:
        """SubscriptionState.maybe_validate_position: a leader epoch past the one the position was reconciled
        with (or its record's epoch) marks a position that knows its epoch for validation."""
        for p in self.assignment:
            pos, found = self.positions.get(p), self.cluster.leader(self.topic, p)
            if pos is None or p in self._resets or found is None or found[1] < 0:
                continue
            if found[1] <= max(self._reconciled.get(p, -1), pos.epoch):
                continue
            self._reconciled[p] = found[1]
            if pos.epoch >= 0:
                self._validating.add(p)

    async def _validate(self) -> None:
        """OffsetForLeaderEpoch for each position awaiting validation, at its leader (Fetcher._validate_offsets)."""
        by_leader: dict[int, list[int]] = {}
        for p in sorted(self._validating):
            found = self.cluster.leader(self.topic, p)
            if found is None:
                self.cluster.request_update()
                continue
            by_leader.setdefault(found[0], []).append(p)
        await asyncio.gather(*(self._validate_at(leader, ps) for leader, ps in sorted(by_leader.items())),
                             return_exceptions=True)

    async def _validate_at(self, leader: int, partitions: list[int]) -> None:
        R = OffsetForLeaderEpochRequest
        asked = {p: self.positions[p] for p in partitions if self.positions.get(p) is not None}
        epochs = {p: (self.cluster.leader(self.topic, p) or (-1, -1))[1] for p in asked}
        try:
            answer = await self.cluster.send(leader, R, replica_id=-1, topics=[R.OffsetForLeaderTopic(
                topic=self.topic, partitions=[R.OffsetForLeaderTopic.OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=epochs[p], leader_epoch=pos.epoch)
                    for p, pos in sorted(asked.items())])])
        except Errors.KafkaError:
            self.cluster.request_update()
            return
        for t in answer.topics:
            for r in t.partitions:
                p = r.partition
                pos = asked.get(p)
                if pos is None or self.positions.get(p) != pos or p not in self._validating:
                    continue  # the position moved since the request was sent
                if r.error_code != 0:
                    self.cluster.request_update()  # validated again on a later poll
                    continue
                self._validating.discard(p)
                decision = after_validation(pos, r.end_offset, r.leader_epoch)
                if decision == "reset":
                    self.positions[p] = None
                    self._resets[p] = {"from": pos.offset, "from_epoch": pos.epoch, "policy": self.policy,
                                       "error": "LOG_TRUNCATION",
                                       "detail": "Truncation detected: OffsetForLeaderEpoch answered no end offset "
                                                 "for the position's epoch",
                                       "broker": leader, "leader_epoch": epochs[p]}
                elif decision == "truncate":
                    self._truncated(p, pos, r.end_offset, leader, epochs[p], r.leader_epoch)
                else:
                    self.positions[p] = Position(pos.offset, r.leader_epoch)

    async def _resolve_resets(self) -> None:
        """ListOffsets for each partition awaiting a reset, at its leader; places the positions."""
        by_leader: dict[int, list[int]] = {}
        for p in sorted(self._resets):
            found = self.cluster.leader(self.topic, p)
            if found is None:
                self.cluster.request_update()
                continue
            by_leader.setdefault(found[0], []).append(p)
        await asyncio.gather(*(self._reset_at(leader, ps) for leader, ps in sorted(by_leader.items())),
                             return_exceptions=True)

    async def _reset_at(self, leader: int, partitions: list[int]) -> None:
        R = ListOffsetsRequest
        topic = R.ListOffsetsTopic(name=self.topic, partitions=[R.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=p, current_leader_epoch=(self.cluster.leader(self.topic, p) or (-1, -1))[1],
            timestamp=POLICIES.get(self._resets[p]["policy"], EARLIEST), max_num_offsets=1) for p in partitions])
        answer = await self.cluster.send(leader, R, replica_id=-1, isolation_level=self.isolation, topics=[topic])
        for t in answer.topics:
            for pr in t.partitions:
                asked = self._resets.get(pr.partition_index)
                if asked is None:
                    continue
                if pr.error_code != 0:
                    self.cluster.request_update()
                    continue
                del self._resets[pr.partition_index]
                self.positions[pr.partition_index] = Position(pr.offset, -1)
                self._placed(pr.partition_index, asked, pr.offset, leader)

    def _placed(self, p: int, asked: dict[str, Any], to: int, answered_by: int) -> None:
        """The client event of a reset placed (KafkaPythonWatch._placed's, in the same words)."""
        if "error" in asked:
            self.events.add("reset", topic=self.topic, key=p, **asked, to=to, answered_by=answered_by)
        elif asked["why"] == "workload":
            self.events.add("seek", topic=self.topic, key=p, to=to, why="workload", policy=asked["policy"])
        else:
            self.events.add("seek", topic=self.topic, key=p, to=to, why="no-position", policy=asked["policy"])

    async def end_offsets(self, partitions: list[int]) -> dict[int, int]:
        """ListOffsets latest (the HWM; read_committed: the LSO) of each partition, at its leader."""
        out: dict[int, int] = {}
        R = ListOffsetsRequest
        await self.cluster.ensure_metadata([self.topic])
        for p in partitions:
            leader, epoch = await self.cluster.leader_for(self.topic, p)
            answer = await self.cluster.send(leader, R, replica_id=-1, isolation_level=self.isolation, topics=[
                R.ListOffsetsTopic(name=self.topic, partitions=[R.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=p, current_leader_epoch=epoch, timestamp=LATEST, max_num_offsets=1)])])
            pr = answer.topics[0].partitions[0]
            if pr.error_code != 0:
                self.cluster.request_update()
                raise Errors.for_code(pr.error_code)(f"ListOffsets {self.topic}-{p}")
            out[p] = pr.offset
        return out

    def close(self) -> None:
        self._drop_fetches()
        if self._leader_changed in self.cluster.listeners:
            self.cluster.listeners.remove(self._leader_changed)


def read_batches(raw: Any, pos: Position, read_committed: bool, aborted: list[Any],
                 limit: int | None = None) -> tuple[list[tuple[int, bytes, int]], Position]:
    """(offset, value, leader epoch) of the records at or past the position, and the position after them:
    control batches skipped, and read_committed, the batches of aborted transactions (the fetcher's
    CompletedFetch: an aborted transaction's producer is skipped from its first offset to its abort marker).

    With `limit`, no record past the limit-th is decoded (a poll returns at most max_poll_records; the rest is
    fetched again): the position after them is still the one after the answer's last batch, as when every
    record is read, and the caller cuts the list where it cuts a longer one."""
    out: list[tuple[int, bytes, int]] = []
    if not raw:
        return out, pos
    raw = bytes(raw)
    pending_aborts = sorted(((a.first_offset, a.producer_id) for a in aborted), reverse=True)
    aborting: set[int] = set()
    next_pos = Position(pos.offset, pos.epoch)
    start, size = 0, len(raw)
    while (end := _batch_end(raw, start, size)) > 0:
        if limit is not None and len(out) >= limit:
            return out, _after_last_batch(raw, start, size)
        batch = _decoded_batch(raw[start:end])
        start = end
        if batch.next_offset <= pos.offset:
            continue
        if read_committed and batch.producer_id > NO_PRODUCER_ID:
            while pending_aborts and pending_aborts[-1][0] <= batch.last_offset:
                aborting.add(pending_aborts.pop()[1])
            if batch.is_control:
                if batch.is_abort_marker:
                    aborting.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in aborting:
                next_pos = Position(batch.next_offset, batch.leader_epoch)
                continue
        if batch.is_control:
            next_pos = Position(batch.next_offset, batch.leader_epoch)
            continue
        for offset, value in batch.records:
            if offset >= pos.offset:
                out.append((offset, value, batch.leader_epoch))
        next_pos = Position(batch.next_offset, batch.leader_epoch)
    return out, next_pos


NO_PRODUCER_ID = -1
LOG_OVERHEAD = 12  # a batch's base offset (int64) and length (int32): its size is the length plus these
DECODED_CACHE_BATCHES = 4096


@dataclass(frozen=True)
class DecodedBatch:
    """What the fetcher reads of one record batch (kafka-python's DefaultRecordBatch), decoded once."""
    next_offset: int
    last_offset: int
    leader_epoch: int
    producer_id: int
    is_transactional: bool
    is_control: bool
    is_abort_marker: bool  # a control batch's record: abort (else commit)
    records: tuple[tuple[int, bytes], ...]  # (offset, value); none for a control batch


# Every simulated consumer of a run reads the same batches (the queue workload's processes each read every
# partition): each batch's bytes are decoded once, and a batch fetched again, by this consumer or another,
# is looked up by its bytes. The answer is the decoding of exactly those bytes, so the history is the same.
_decoded: dict[bytes, DecodedBatch] = {}


def _batch_end(raw: bytes, start: int, size: int) -> int:
    """Where the whole batch at `start` ends; 0 when none begins there (the end, or a partial batch at the
    end, which kafka-python's MemoryRecords leaves too)."""
    if start + LOG_OVERHEAD > size:
        return 0
    (length,) = struct.unpack_from(">i", raw, start + LOG_OVERHEAD - 4)
    end = start + LOG_OVERHEAD + length
    return end if end <= size else 0


def _after_last_batch(raw: bytes, start: int, size: int) -> Position:
    """The position after the answer's last whole batch (its next offset and leader epoch), from the headers
    of the batches from `start` on: their records are not decoded."""
    last = start
    while (end := _batch_end(raw, start, size)) > 0:
        last, start = start, end
    base, epoch = struct.unpack_from(">qxxxxi", raw, last)
    (last_offset_delta,) = struct.unpack_from(">i", raw, last + 23)
    return Position(base + last_offset_delta + 1, epoch)


def _decoded_batch(data: bytes) -> DecodedBatch:
    batch = _decoded.get(data)
    if batch is None:
        batch = _decode_batch(data)
        if len(_decoded) >= DECODED_CACHE_BATCHES:
            del _decoded[next(iter(_decoded))]  # the oldest: its readers have moved on
        _decoded[data] = batch
    return batch


def _decode_batch(data: bytes) -> DecodedBatch:
    batch = MemoryRecords(data).next_batch()
    records = tuple((r.offset, r.value) for r in batch) if not batch.is_control_batch else ()
    return DecodedBatch(batch.next_offset, batch.last_offset, batch.leader_epoch, batch.producer_id,
                        batch.is_transactional, batch.is_control_batch,
                        batch.is_control_batch and _is_abort_marker(batch), records)


def _is_abort_marker(batch: Any) -> bool:
    """A control batch's record is kafka-python's ControlRecord: abort or commit."""
    return any(getattr(record, "abort", False) for record in batch)
