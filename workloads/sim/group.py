"""A consumer group member of the simulated consumer (subscribe mode): kafka-python's ConsumerCoordinator
(kafka/coordinator/base.py and consumer.py) reduced to the eager protocol with the range assignor, on asyncio.

- The coordinator is found with FindCoordinator (key type 0); NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a
  failed connection forget it (found again on the next call).
- Joining (`ensure_active`, at each poll): the member first tells its listener every partition it holds is
  revoked (eager: also an empty set, as kafka-python calls on_partitions_revoked), then JoinGroup (a
  MEMBER_ID_REQUIRED answer gives the member id to join with, KIP-394), the leader assigns with kafka-python's
  own RangePartitionAssignor, SyncGroup hands out the assignment, the listener is told what is assigned, and
  each assigned partition is placed at the group's committed offset (OffsetFetch: a `seek` why "committed") or,
  with none, by the reset policy.
- A heartbeat task (every `heartbeat_s`) keeps the membership: REBALANCE_IN_PROGRESS asks to rejoin;
  ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and FENCED_INSTANCE_ID mean the membership is lost (the partitions are
  lost: the listener hears them revoked, kafka-python's default on_partitions_lost) and the member rejoins with
  a fresh member id for UNKNOWN_MEMBER_ID (`after_group_error`).
- Commits (`commit`) are synchronous OffsetCommits with the generation and member id; ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID and REBALANCE_IN_PROGRESS raise CommitFailedError and ask for a rejoin (kafka-python).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import kafka.errors as Errors
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.sim.client import ClusterClient
from kafkaesque_harness.workloads.sim.consumer import READ_COMMITTED, Consumer, Position
from kafkaesque_harness.workloads.sim.wire import error_for

GROUP_KEY_TYPE = 0
SESSION_TIMEOUT_MS = 6000   # session_timeout_ms=6000 of the real workloads' consumers
HEARTBEAT_S = 1.0           # heartbeat_interval_ms=1000
REBALANCE_TIMEOUT_MS = 300000  # max_poll_interval_ms (kafka-python's default), its rebalance timeout
PROTOCOL = "range"

COORDINATOR_ERRORS = (Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError, Errors.KafkaConnectionError,
                      Errors.CoordinatorLoadInProgressError)
LOST_MEMBERSHIP_ERRORS = (Errors.IllegalGenerationError, Errors.UnknownMemberIdError, Errors.FencedInstanceIdError)


class CommitFailedError(Errors.CommitFailedError):
    """kafka-python's CommitFailedError (the group rebalanced; the offsets were not committed)."""


def after_group_error(error: BaseException) -> str:
    """What a heartbeat's or commit's error does to the membership (kafka-python's coordinator):
    "find-coordinator" (forget it, find it again), "rejoin" (same member id), "reset-and-rejoin" (the
    membership is lost: a new member id, the partitions lost), or "retry"."""
    if isinstance(error, COORDINATOR_ERRORS):
        return "find-coordinator"
    if isinstance(error, Errors.RebalanceInProgressError):
        return "rejoin"
    if isinstance(error, LOST_MEMBERSHIP_ERRORS):
        return "reset-and-rejoin"
    return "retry"


def range_assignment(partitions: list[int], topic: str, members: dict[str, list[str]]) -> dict[str, list[int]]:
    """member id -> its partitions of `topic`, by kafka-python's RangePartitionAssignor (members: id -> topics)."""
    cluster = SimpleNamespace(partitions_for_topic=lambda t: set(partitions) if t == topic else None)
    subs = [SimpleNamespace(member_id=m, group_instance_id=None, metadata=SimpleNamespace(topics=ts))
            for m, ts in sorted(members.items())]
    out = RangePartitionAssignor.assign(cluster, subs)
    return {m: sorted(p for t, ps in a.assigned_partitions for p in ps if t == topic) for m, a in out.items()}


class GroupMember:
    """The group membership of one Consumer (its assignment comes from the group)."""

    def __init__(self, cluster: ClusterClient, group: str, topic: str, consumer: Consumer, events: ClientEventLog,
                 on_rebalance: Callable[[str, list[int]], None], heartbeat_s: float = HEARTBEAT_S,
                 session_timeout_ms: int = SESSION_TIMEOUT_MS):
        self.cluster, self.group, self.topic, self.consumer, self.events = cluster, group, topic, consumer, events
        self.on_rebalance, self.heartbeat_s, self.session_timeout_ms = on_rebalance, heartbeat_s, session_timeout_ms
        self.member_id, self.generation = "", -1
        self.coordinator: int | None = None
        self.assigned: list[int] = []
        self.need_rejoin = True
        self._unplaced: list[int] = []  # assigned partitions whose committed offsets are still to be fetched
        self._heartbeat: asyncio.Task | None = None
        self._joining: asyncio.Task | None = None

    async def _coordinator(self) -> int:
        if self.coordinator is None:
            self.coordinator = await self.cluster.find_coordinator(self.group, GROUP_KEY_TYPE)
        return self.coordinator

    def handle_error(self, error: BaseException) -> None:
        what = after_group_error(error)
        if what == "find-coordinator":
            self.coordinator = None
        elif what == "rejoin":
            self.need_rejoin = True
        elif what == "reset-and-rejoin":
            if isinstance(error, Errors.UnknownMemberIdError):
                self.member_id = ""
            self.generation = -1
            self.need_rejoin = True
            if self.assigned:  # lost: kafka-python's default on_partitions_lost tells the listener revoked
                self.on_rebalance("revoked", self.assigned)
                self.assigned = []
                self.consumer.assign([])

    async def ensure_active(self, timeout_s: float) -> bool:
        """Join (or rejoin) the group if needed, waiting at most `timeout_s` (kafka-python's poll bounds its
        ensure_active_group by the poll's timeout: a join that takes longer goes on, and the poll returns
        nothing); whether the member is active with its committed offsets placed. A join that failed is
        handled (the coordinator forgotten, a rejoin asked) and tried again on the next call."""
        if not self.need_rejoin and not self._unplaced:
            return True
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.ensure_future(self._heartbeat_loop())
        if self._joining is None or self._joining.done():
            self._joining = asyncio.ensure_future(self._join_and_place())
        await asyncio.wait([self._joining], timeout=timeout_s)
        if not self._joining.done():
            return False
        error = self._joining.exception()
        self._joining = None
        if error is not None:
            if not isinstance(error, Errors.KafkaError):
                raise error
            self.handle_error(error)
            return False
        return True

    async def _join_and_place(self) -> None:
        if self.need_rejoin:
            await self._join()
        # the committed offsets before any fetch: a partition is never placed by the reset policy because its
        # OffsetFetch failed (kafka-python refreshes committed offsets first)
        await self.place_committed(self._unplaced)
        self._unplaced = []

    async def _join(self) -> None:
        # eager: every partition held is revoked before the join (also none: kafka-python calls the listener)
        self.on_rebalance("revoked", self.assigned)
        self.assigned = []
        self.consumer.assign([])
        node = await self._coordinator()
        metadata = ConsumerProtocolSubscription(topics=[self.topic], user_data=b"").encode(version=0)
        R = JoinGroupRequest
        while True:
            answer = await self.cluster.send(node, R, timeout_s=REBALANCE_TIMEOUT_MS / 1000 + 5, group_id=self.group,
                                             session_timeout_ms=self.session_timeout_ms,
                                             rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, member_id=self.member_id,
                                             group_instance_id=None, protocol_type="consumer",
                                             protocols=[R.JoinGroupRequestProtocol(name=PROTOCOL, metadata=metadata)],
                                             reason=None)
            if answer.error_code == Errors.MemberIdRequiredError.errno:  # KIP-394: join again with this id
                self.member_id = answer.member_id
                continue
            if answer.error_code != 0:
                raise error_for(answer.error_code, "JoinGroup")
            break
        self.member_id, self.generation = answer.member_id, answer.generation_id
        assignments = []
        if answer.leader == answer.member_id:
            await self.cluster.ensure_metadata([self.topic])
            members = {m.member_id: list(ConsumerProtocolSubscription.decode(bytes(m.metadata)).topics)
                       for m in answer.members}
            plan = range_assignment(self.cluster.partitions.get(self.topic, []), self.topic, members)
            assignments = [SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=m, assignment=ConsumerProtocolAssignment(
                    assigned_partitions=[(self.topic, ps)], user_data=b"").encode(version=0))
                for m, ps in sorted(plan.items())]
        synced = await self.cluster.send(node, SyncGroupRequest, group_id=self.group, generation_id=self.generation,
                                         member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
                                         protocol_name=PROTOCOL, assignments=assignments)
        if synced.error_code != 0:
            raise error_for(synced.error_code, "SyncGroup")
        got = ConsumerProtocolAssignment.decode(bytes(synced.assignment)) if synced.assignment else None
        partitions = sorted(p for t, ps in (got.assigned_partitions if got else []) for p in ps if t == self.topic)
        self.need_rejoin = False
        self.assigned = partitions
        self.consumer.assign(partitions)
        self.on_rebalance("assigned", partitions)
        self._unplaced = partitions

    async def place_committed(self, partitions: list[int]) -> None:
        """OffsetFetch the group's committed offsets; each found one places its partition (a `seek` why
        "committed"); the others are left to the reset policy."""
        if not partitions:
            return
        node = await self._coordinator()
        R = OffsetFetchRequest
        conn = await self.cluster.connection(node)
        if conn.versions.get(R.API_KEY, 0) >= 8:
            answer = await self.cluster.send(node, R, groups=[R.OffsetFetchRequestGroup(
                group_id=self.group, topics=[R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                    name=self.topic, partition_indexes=partitions)])], require_stable=self._require_stable)
            group = answer.groups[0]
            error, topics = group.error_code, group.topics
        else:
            answer = await self.cluster.send(node, R, group_id=self.group, topics=[R.OffsetFetchRequestTopic(
                name=self.topic, partition_indexes=partitions)], require_stable=self._require_stable)
            error, topics = answer.error_code, answer.topics
        if error != 0:
            raise error_for(error, "OffsetFetch")
        for t in topics:
            for p in t.partitions:
                if p.error_code != 0:
                    raise error_for(p.error_code, "OffsetFetch")  # UNSTABLE_OFFSET_COMMIT: asked again next poll
                if p.committed_offset >= 0 and p.partition_index in partitions:
                    self.consumer.positions[p.partition_index] = Position(p.committed_offset)
                    self.events.add("seek", topic=self.topic, key=p.partition_index, to=p.committed_offset,
                                    why="committed")

    @property
    def _require_stable(self) -> bool:
        """KIP-447: a read_committed consumer asks for stable offsets (an offset of a transaction still open is
        answered UNSTABLE_OFFSET_COMMIT, asked again later), as the Java client and kafka-python do."""
        return self.consumer.isolation == READ_COMMITTED

    async def commit(self, offsets: dict[int, int]) -> None:
        """A synchronous OffsetCommit of {partition: next offset}; CommitFailedError after a rebalance."""
        if self.need_rejoin or self.generation < 0:
            raise CommitFailedError("the group is rebalancing: the offsets were not committed")
        R = OffsetCommitRequest
        try:
            node = await self._coordinator()
            answer = await self.cluster.send(node, R, group_id=self.group, generation_id_or_member_epoch=self.generation,
                                             member_id=self.member_id, group_instance_id=None,
                                             topics=[R.OffsetCommitRequestTopic(name=self.topic, partitions=[
                                                 R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                                     partition_index=p, committed_offset=o, committed_metadata="")
                                                 for p, o in sorted(offsets.items())])])
            codes = [p.error_code for t in answer.topics for p in t.partitions if p.error_code]
            if codes:
                raise error_for(codes[0], "OffsetCommit")
        except Errors.KafkaError as e:
            self.handle_error(e)
            if isinstance(e, (Errors.RebalanceInProgressError, *LOST_MEMBERSHIP_ERRORS)):
                raise CommitFailedError(f"{type(e).__name__}: the group rebalanced; the commit cannot be completed") \
                    from None
            raise

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if self.need_rejoin or self.generation < 0:
                continue
            try:
                node = await self._coordinator()
                answer = await self.cluster.send(node, HeartbeatRequest, group_id=self.group,
                                                 generation_id=self.generation, member_id=self.member_id,
                                                 group_instance_id=None)
                if answer.error_code != 0:
                    raise error_for(answer.error_code, "Heartbeat")
            except Errors.KafkaError as e:
                self.handle_error(e)

    def stop(self) -> None:
        """Stop heartbeating and joining (a crash: the coordinator finds out when the session times out)."""
        for task in (self._heartbeat, self._joining):
            if task is not None:
                task.cancel()
        self._heartbeat = self._joining = None

    async def leave(self, timeout_s: float = 1.0) -> None:
        """A clean close: stop heartbeating and send LeaveGroup (its failure changes nothing)."""
        self.stop()
        if self.coordinator is None or not self.member_id or self.generation < 0:
            return
        R = LeaveGroupRequest
        try:
            await self.cluster.send(self.coordinator, R, timeout_s=timeout_s, group_id=self.group, members=[
                R.MemberIdentity(member_id=self.member_id, group_instance_id=None, reason=None)])
        except Errors.KafkaError:
            pass
