"""The group coordinator: Kafka's classic consumer-group protocol (eager rebalance) and committed
offsets, as a sans-IO state machine.

The seeds (../shared/seeds/) say nothing about consumer groups; this module follows Kafka's public
protocol instead: the JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit / OffsetFetch
request schemas and error codes, the group states of Kafka's GroupCoordinator (Empty,
PreparingRebalance, CompletingRebalance, Stable), KIP-394 (a member joining without an id is given
one and must join again with it: MEMBER_ID_REQUIRED) and KIP-134 (group.initial.rebalance.delay.ms).

What the seeds do govern is where the offsets live: in the replicated internal topic
`__consumer_offsets`, whose partition `java_hash(group) % partitions` holds the group
(Kafka's rule, so any client finds the same coordinator). The coordinator of a group is the leader
of that partition, and its committed offsets are records written with acks=all through the normal
replication path (002 2.5: acknowledged once the HWM passes them), so a coordinator fail-over is a
leader change (002 2.8) and the new leader rebuilds the offsets from its log (load()).

Static membership (KIP-345) is not implemented: a group.instance.id is ignored, and such a member
is treated as a dynamic one. Only offsets are stored, not group membership: a new coordinator knows a group's offsets but not
its members, so after a fail-over every member is told UNKNOWN_MEMBER_ID and joins again (a
rebalance). Member ids are random, so a member of the old coordinator's generations can never be
taken for one of the new coordinator's.

No sockets and no clock: every method that needs time takes `now_ms`. JoinGroup and SyncGroup
requests may have to wait for other members; the caller passes an opaque `waiter` (the shell's
future) and gets back a list of Replies, (waiter, result) pairs, for every request the event
completed, its own or ones parked earlier. `tick(now_ms)` ends rebalances and sessions whose time
is up and returns the Replies that completes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv, rpc

OFFSETS_TOPIC = "__consumer_offsets"

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"

LOADING = "loading"
LOADED = "loaded"

MAX_METADATA_CHARS = 4096  # Kafka's offset.metadata.max.bytes

# How a record of __consumer_offsets took part in a transaction (load()).
TXN_DATA, TXN_COMMIT, TXN_ABORT = "data", "commit", "abort"


@dataclass
class CoordinatorConfig:
    offsets_partitions: int = 5
    # Kafka's group.min.session.timeout.ms / group.max.session.timeout.ms
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    # KIP-134: an Empty group waits this long for more members before its first generation, so
    # consumers started together share one rebalance instead of one each.
    initial_rebalance_delay_ms: int = 3000


@dataclass
class JoinResult:
    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, bytes]] = field(default_factory=list)  # the leader's only


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


Reply = tuple[Any, JoinResult | SyncResult]


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    record_offset: int  # where in __consumer_offsets it was written: the newest record wins


@dataclass
class Member:
    member_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    session_timeout_ms: int
    rebalance_timeout_ms: int
    session_deadline_ms: int
    join_waiter: Any = None  # a parked JoinGroup
    sync_waiter: Any = None  # a parked SyncGroup
    assignment: bytes = b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in order of joining
    pending_members: dict[str, int] = field(default_factory=dict)  # KIP-394: id -> deadline to rejoin
    rebalance_deadline_ms: int = 0  # PreparingRebalance: the join phase ends; CompletingRebalance: the sync phase
    join_not_before_ms: int = 0  # KIP-134's initial delay
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports: what a joining member must have one of."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of __consumer_offsets (a group id) or __transaction_state (a transactional id) that
    holds the key's state; its leader is the key's coordinator. Kafka's rule for both:
    Utils.abs(key.hashCode) % partitions (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as Kafka computes a group's partition
    (GroupMetadataManager.partitionFor: Utils.abs(groupId.hashCode) % partitions)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offset_record(group_id: str, topic: str, partition: int, committed: tuple[int, int, str]) -> tuple[bytes, bytes]:
    """The (key, value) of one committed offset in __consumer_offsets. JSON rather than Kafka's
    binary OffsetCommitKey/Value schemas (an internal format, not part of the public protocol):
    the records stay legible in state dumps."""
    offset, leader_epoch, metadata = committed
    key = json.dumps({"group": group_id, "topic": topic, "partition": partition}, separators=(",", ":"))
    value = json.dumps({"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata}, separators=(",", ":"))
    return key.encode(), value.encode()


class GroupCoordinator:
    def __init__(self, config: CoordinatorConfig | None = None,
                 event_log: Callable[[dict[str, Any]], None] = lambda event: None):
        self.config = config or CoordinatorConfig()
        # What it decided, with the facts (the protocol trace, trace.py): each generation a rebalance completes,
        # each offset commit it accepts (before the write: the generation it was judged against), each
        # OffsetFetch it answers, and each (re)load of a partition, which forgets that partition's groups.
        self.event_log = event_log
        self.partitions: dict[int, str] = {}  # the __consumer_offsets partitions this broker leads -> LOADING/LOADED
        self.groups: dict[str, Group] = {}
        # Offsets committed in transactions not yet ended (TxnOffsetCommit, KIP-98): producer id ->
        # (group, topic, partition) -> offset. Visible to OffsetFetch only once a commit marker ends the
        # producer's transaction at the group's partition; an abort marker drops them.
        self.pending_txn: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}

    # --- where a group lives, and the partitions' load / unload ------------------------------------
    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.config.offsets_partitions)

    def status(self, group_id: str) -> int:
        """NONE if this coordinator serves the group now; else the error every group request gets."""
        state = self.partitions.get(self.partition_for(group_id))
        if state is None:
            return rpc.NOT_COORDINATOR
        if state == LOADING:
            return rpc.COORDINATOR_LOAD_IN_PROGRESS
        return rpc.NONE

    def begin_loading(self, partition: int) -> list[Reply]:
        """This broker became the partition's leader: its groups are served once load() has read the log
        up to the HWM (until then COORDINATOR_LOAD_IN_PROGRESS). A new epoch forgets what an older
        leadership of ours knew: the log is the only truth."""
        replies = self.unload(partition)
        self.partitions[partition] = LOADING
        self.event_log({"event": "groups_loading", "coordinator_partition": partition})
        return replies

    def load(self, partition: int, records: Iterable[tuple[int, bytes | None, bytes | None]]) -> None:
        """Rebuild the partition's groups from its committed records (record offset, key, value), read
        by the shell from the log start to the HWM once the HWM has reached the leader epoch's start
        (PROTOCOL.md 3: a new leader's local HWM may be stale until then)."""
        if self.partitions.get(partition) != LOADING:
            return  # unloaded (leadership lost) while the shell was reading
        for record_offset, key, value, *txn in records:
            # txn: for a record of a transactional batch, (producer id, TXN_DATA / TXN_COMMIT / TXN_ABORT)
            if not txn:
                self.apply_record(record_offset, key, value)
            elif txn[0][1] == TXN_DATA:
                self.apply_txn_record(txn[0][0], record_offset, key, value)
            else:
                self.end_txn(partition, txn[0][0], txn[0][1] == TXN_COMMIT)
        self.partitions[partition] = LOADED

    def unload(self, partition: int) -> list[Reply]:
        """This broker no longer leads the partition: forget its groups and answer their parked requests
        NOT_COORDINATOR (the clients look the coordinator up again)."""
        self.partitions.pop(partition, None)
        for pending in self.pending_txn.values():
            for k in [k for k in pending if self.partition_for(k[0]) == partition]:
                del pending[k]
        replies: list[Reply] = []
        for gid in [g for g in self.groups if self.partition_for(g) == partition]:
            for m in self.groups.pop(gid).members.values():
                replies += _answer_parked(m, rpc.NOT_COORDINATOR)
        return replies

    def apply_record(self, record_offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply one committed __consumer_offsets record (at load, and when a commit is acknowledged)."""
        if key is None or value is None:
            return
        k, v = json.loads(key), json.loads(value)
        g = self.groups.get(k["group"]) or self.groups.setdefault(k["group"], Group(k["group"]))
        tp = (k["topic"], int(k["partition"]))
        old = g.offsets.get(tp)
        if old is None or record_offset > old.record_offset:
            g.offsets[tp] = CommittedOffset(int(v["offset"]), int(v["leader_epoch"]), v["metadata"], record_offset)

    def apply_txn_record(self, producer_id: int, record_offset: int, key: bytes | None, value: bytes | None) -> None:
        """An offset committed in a transaction (TxnOffsetCommit), acknowledged: pending until its marker."""
        if key is None or value is None:
            return
        k, v = json.loads(key), json.loads(value)
        self.pending_txn.setdefault(producer_id, {})[(k["group"], k["topic"], int(k["partition"]))] = CommittedOffset(
            int(v["offset"]), int(v["leader_epoch"]), v["metadata"], record_offset)

    def txn_pending(self, group_id: str, tp: tuple[str, int]) -> bool:
        """Has a transaction not yet ended committed an offset of this partition for the group?"""
        return any((group_id, *tp) in pending for pending in self.pending_txn.values())

    def end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker at one of our __consumer_offsets partitions: its offsets for groups of that
        partition become committed (unless a newer plain commit already superseded one, Kafka's rule)
        or are dropped."""
        pending = self.pending_txn.get(producer_id, {})
        for k in [k for k in pending if self.partition_for(k[0]) == partition]:
            c = pending.pop(k)
            if not commit:
                continue
            g = self.groups.get(k[0]) or self.groups.setdefault(k[0], Group(k[0]))
            old = g.offsets.get((k[1], k[2]))
            if old is None or c.record_offset > old.record_offset:
                g.offsets[(k[1], k[2])] = c
        if not pending:
            self.pending_txn.pop(producer_id, None)

    # --- JoinGroup -------------------------------------------------------------------------------------
    def join(self, waiter: Any, group_id: str, member_id: str, protocol_type: str, protocols: list[tuple[str, bytes]],
             session_timeout_ms: int, rebalance_timeout_ms: int, require_known_member_id: bool, now_ms: int,
             client_id: str = "consumer") -> list[Reply]:
        def fail(error: int) -> list[Reply]:
            return [(waiter, JoinResult(error, member_id=member_id))]

        err = self.status(group_id)
        if err != rpc.NONE:
            return fail(err)
        if not group_id:
            return fail(rpc.INVALID_GROUP_ID)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return fail(rpc.INVALID_SESSION_TIMEOUT)
        g = self.groups.get(group_id)
        if g is None:
            if member_id:
                return fail(rpc.UNKNOWN_MEMBER_ID)  # a member of a group this coordinator does not know
            g = self.groups[group_id] = Group(group_id)
        if g.members and (protocol_type != g.protocol_type
                          or not g.candidate_protocols() & {name for name, _ in protocols}):
            return fail(rpc.INCONSISTENT_GROUP_PROTOCOL)
        if not member_id:
            new_id = f"{client_id}-{hostenv.new_uuid()}"
            if require_known_member_id:
                # KIP-394 (JoinGroup v4+): hand out the id and wait for the member to join with it, so a
                # client whose first join timed out does not leave a ghost member behind.
                g.pending_members[new_id] = now_ms + session_timeout_ms
                return [(waiter, JoinResult(rpc.MEMBER_ID_REQUIRED, member_id=new_id))]
            return self._add_member(g, waiter, new_id, protocol_type, protocols, session_timeout_ms,
                                    rebalance_timeout_ms, now_ms)
        if member_id in g.pending_members:
            del g.pending_members[member_id]
            return self._add_member(g, waiter, member_id, protocol_type, protocols, session_timeout_ms,
                                    rebalance_timeout_ms, now_ms)
        m = g.members.get(member_id)
        if m is None:
            return fail(rpc.UNKNOWN_MEMBER_ID)
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        m.session_deadline_ms = now_ms + session_timeout_ms
        replies: list[Reply] = []
        if m.join_waiter is not None:
            replies.append((m.join_waiter, JoinResult(rpc.REBALANCE_IN_PROGRESS, member_id=member_id)))  # superseded
            m.join_waiter = None
        unchanged = m.protocols == list(protocols)
        if g.state == PREPARING_REBALANCE:
            m.protocols, m.join_waiter = list(protocols), waiter
            return replies + self._maybe_complete_join(g, now_ms)
        if unchanged and (g.state == COMPLETING_REBALANCE or (g.state == STABLE and member_id != g.leader)):
            # Kafka answers a follower that joins again unchanged with the current generation.
            return replies + [(waiter, self._join_result(g, m))]
        # A changed member, or the leader joining again (it may want to reassign): a new generation.
        m.protocols, m.join_waiter = list(protocols), waiter
        return replies + self._prepare_rebalance(g, now_ms) + self._maybe_complete_join(g, now_ms)

    def _add_member(self, g: Group, waiter: Any, member_id: str, protocol_type: str, protocols: list[tuple[str, bytes]],
                    session_timeout_ms: int, rebalance_timeout_ms: int, now_ms: int) -> list[Reply]:
        g.members[member_id] = Member(member_id, protocol_type, list(protocols), session_timeout_ms,
                                      rebalance_timeout_ms, now_ms + session_timeout_ms, join_waiter=waiter)
        g.protocol_type = protocol_type
        replies: list[Reply] = []
        if g.state == PREPARING_REBALANCE:
            g.rebalance_deadline_ms = max(g.rebalance_deadline_ms, now_ms + rebalance_timeout_ms)
            if g.join_not_before_ms > now_ms:
                # KIP-134: each new member during the initial delay extends it, within the rebalance timeout.
                g.join_not_before_ms = min(now_ms + self.config.initial_rebalance_delay_ms, g.rebalance_deadline_ms)
        else:
            replies += self._prepare_rebalance(g, now_ms)
        return replies + self._maybe_complete_join(g, now_ms)

    def _prepare_rebalance(self, g: Group, now_ms: int) -> list[Reply]:
        """Start a join phase: every member must join (again) within the rebalance timeout. Parked
        SyncGroups of the generation being abandoned are told REBALANCE_IN_PROGRESS."""
        replies: list[Reply] = []
        for m in g.members.values():
            if m.sync_waiter is not None:
                replies.append((m.sync_waiter, SyncResult(rpc.REBALANCE_IN_PROGRESS)))
                m.sync_waiter = None
        from_empty = g.state == EMPTY
        g.state = PREPARING_REBALANCE
        g.rebalance_deadline_ms = now_ms + max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.join_not_before_ms = (min(now_ms + self.config.initial_rebalance_delay_ms, g.rebalance_deadline_ms)
                                if from_empty else 0)
        return replies

    def _maybe_complete_join(self, g: Group, now_ms: int) -> list[Reply]:
        """End the join phase when every member (and every KIP-394 pending one) has joined and the initial
        delay is over, or at the rebalance deadline, dropping the members that did not join."""
        if g.state != PREPARING_REBALANCE:
            return []
        all_joined = not g.pending_members and all(m.join_waiter is not None for m in g.members.values())
        if not (now_ms >= g.rebalance_deadline_ms or (all_joined and now_ms >= g.join_not_before_ms)):
            return []
        for mid in [mid for mid, m in g.members.items() if m.join_waiter is None]:
            del g.members[mid]
        g.pending_members.clear()
        g.generation_id += 1
        if not g.members:
            g.state, g.protocol_type, g.protocol_name, g.leader = EMPTY, None, None, None
            self._report_generation(g)
            return []
        g.protocol_name = _select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))  # Kafka: the first member to have joined
        self._report_generation(g)
        g.state = COMPLETING_REBALANCE
        g.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in g.members.values())
        replies: list[Reply] = []
        for m in g.members.values():
            m.assignment = b""
            m.session_deadline_ms = now_ms + m.session_timeout_ms
            replies.append((m.join_waiter, self._join_result(g, m)))
            m.join_waiter = None
        return replies

    def _join_result(self, g: Group, m: Member) -> JoinResult:
        members = ([(mid, x.metadata_for(g.protocol_name)) for mid, x in g.members.items()]
                   if m.member_id == g.leader and g.protocol_name is not None else [])
        return JoinResult(rpc.NONE, m.member_id, g.generation_id, g.protocol_type, g.protocol_name, g.leader or "",
                          members)

    # --- SyncGroup -------------------------------------------------------------------------------------
    def sync(self, waiter: Any, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes], now_ms: int) -> list[Reply]:
        def fail(error: int) -> list[Reply]:
            return [(waiter, SyncResult(error))]

        err = self.status(group_id)
        if err != rpc.NONE:
            return fail(err)
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if m is None:
            return fail(rpc.UNKNOWN_MEMBER_ID)
        if generation_id != g.generation_id:
            return fail(rpc.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
                protocol_name is not None and protocol_name != g.protocol_name):
            return fail(rpc.INCONSISTENT_GROUP_PROTOCOL)  # SyncGroup v5
        m.session_deadline_ms = now_ms + m.session_timeout_ms
        if g.state == PREPARING_REBALANCE:
            return fail(rpc.REBALANCE_IN_PROGRESS)
        if g.state == STABLE:
            return [(waiter, SyncResult(rpc.NONE, g.protocol_type, g.protocol_name, m.assignment))]
        # CompletingRebalance: wait for the leader's assignment, which answers everyone waiting.
        replies: list[Reply] = []
        if m.sync_waiter is not None:
            replies.append((m.sync_waiter, SyncResult(rpc.REBALANCE_IN_PROGRESS)))  # superseded
        m.sync_waiter = waiter
        if member_id != g.leader:
            return replies
        g.state = STABLE
        for x in g.members.values():
            x.assignment = assignments.get(x.member_id, b"")
            if x.sync_waiter is not None:
                replies.append((x.sync_waiter, SyncResult(rpc.NONE, g.protocol_type, g.protocol_name, x.assignment)))
                x.sync_waiter = None
        return replies

    # --- Heartbeat and LeaveGroup -------------------------------------------------------------------
    def heartbeat(self, group_id: str, generation_id: int, member_id: str, now_ms: int) -> int:
        err = self.status(group_id)
        if err == rpc.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka's handleHeartbeat answers a loading group's heartbeats blindly with NONE: the member
            # learns of the new coordinator's verdict on its next heartbeat, not by an error now.
            return rpc.NONE
        if err != rpc.NONE:
            return err
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if m is None:
            return rpc.UNKNOWN_MEMBER_ID
        if generation_id != g.generation_id:
            return rpc.ILLEGAL_GENERATION
        m.session_deadline_ms = now_ms + m.session_timeout_ms
        # Kafka: a member that already has the new generation's join answer heartbeats normally while
        # it syncs; one of a group preparing a rebalance is told to join again.
        return rpc.REBALANCE_IN_PROGRESS if g.state == PREPARING_REBALANCE else rpc.NONE

    def leave(self, group_id: str, member_ids: list[str], now_ms: int) -> tuple[int, list[int], list[Reply]]:
        """(group error, an error per member, replies to parked requests)."""
        err = self.status(group_id)
        if err != rpc.NONE:
            return err, [err] * len(member_ids), []
        g = self.groups.get(group_id)
        if g is None:
            return rpc.UNKNOWN_MEMBER_ID, [rpc.UNKNOWN_MEMBER_ID] * len(member_ids), []
        errors, replies = [], []
        for mid in member_ids:
            if g.pending_members.pop(mid, None) is not None:
                errors.append(rpc.NONE)
                replies += self._maybe_complete_join(g, now_ms)
            elif mid in g.members:
                errors.append(rpc.NONE)
                replies += self._remove_member(g, mid, now_ms)
            else:
                errors.append(rpc.UNKNOWN_MEMBER_ID)
        return rpc.NONE, errors, replies

    def _remove_member(self, g: Group, member_id: str, now_ms: int) -> list[Reply]:
        replies = _answer_parked(g.members.pop(member_id), rpc.UNKNOWN_MEMBER_ID)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            replies += self._prepare_rebalance(g, now_ms)
        return replies + self._maybe_complete_join(g, now_ms)

    # --- time ----------------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> list[Reply]:
        """Expire sessions (members heard from neither by heartbeat nor by any request within their session
        timeout; a member with a parked request is waiting on the group, not gone), KIP-394 pending ids,
        join phases at their deadline, and sync phases whose leader never sent the assignment."""
        replies: list[Reply] = []
        for g in list(self.groups.values()):
            for mid in [mid for mid, deadline in g.pending_members.items() if deadline <= now_ms]:
                del g.pending_members[mid]
            for mid in [mid for mid, m in g.members.items()
                        if m.session_deadline_ms <= now_ms and m.join_waiter is None and m.sync_waiter is None]:
                if mid in g.members:
                    replies += self._remove_member(g, mid, now_ms)
            if g.state == COMPLETING_REBALANCE and now_ms >= g.rebalance_deadline_ms:
                for mid in [mid for mid, m in g.members.items() if m.sync_waiter is None]:
                    replies += _answer_parked(g.members.pop(mid), rpc.UNKNOWN_MEMBER_ID)
                replies += self._prepare_rebalance(g, now_ms)
            replies += self._maybe_complete_join(g, now_ms)
        return replies

    # --- offsets -----------------------------------------------------------------------------------------
    def check_commit(self, group_id: str, generation_id: int, member_id: str, now_ms: int) -> int:
        """May this member commit offsets now? (Kafka's GroupCoordinator.handleCommitOffsets.) A commit
        with generation -1 to a group without members is a consumer that assigns partitions itself."""
        err = self.status(group_id)
        if err != rpc.NONE:
            return err
        g = self.groups.get(group_id)
        if g is None or (generation_id < 0 and g.state == EMPTY):
            if generation_id >= 0:
                return rpc.ILLEGAL_GENERATION
            self._report_commit(group_id, generation_id, member_id)
            return rpc.NONE
        if g.state == COMPLETING_REBALANCE:
            return rpc.REBALANCE_IN_PROGRESS
        m = g.members.get(member_id)
        if m is None:
            return rpc.UNKNOWN_MEMBER_ID
        if generation_id != g.generation_id:
            return rpc.ILLEGAL_GENERATION
        m.session_deadline_ms = now_ms + m.session_timeout_ms
        self._report_commit(group_id, generation_id, member_id)
        return rpc.NONE

    def committed_offsets(self, group_id: str,
                          partitions: list[tuple[str, int]] | None) -> tuple[int, dict[tuple[str, int], CommittedOffset]]:
        """(error, committed offsets) of the partitions asked for (None: every partition the group has)."""
        err = self.status(group_id)
        if err != rpc.NONE:
            return err, {}
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        answer = dict(offsets) if partitions is None else {tp: offsets[tp] for tp in partitions if tp in offsets}
        self.event_log({"event": "offset_fetch_answered", "group": group_id,
                        "coordinator_partition": self.partition_for(group_id),
                        "offsets": [[t, p, c.offset, c.record_offset] for (t, p), c in sorted(answer.items())],
                        "none": sorted([t, p] for t, p in partitions or () if (t, p) not in answer)})
        return rpc.NONE, answer

    def _report_generation(self, g: Group) -> None:
        self.event_log({"event": "group_generation", "group": g.group_id,
                        "coordinator_partition": self.partition_for(g.group_id), "generation": g.generation_id,
                        "members": list(g.members), "leader": g.leader, "protocol": g.protocol_name})

    def _report_commit(self, group_id: str, generation_id: int, member_id: str) -> None:
        """The commit is accepted (its records are written next): judged against the group as it is now, so
        the trace's rule sees the generation it was accepted in, not one a rebalance began during the write."""
        g = self.groups.get(group_id)
        self.event_log({"event": "offset_commit_accepted", "group": group_id,
                        "coordinator_partition": self.partition_for(group_id), "generation": generation_id,
                        "member": member_id, "state": g.state if g is not None else None,
                        "group_generation": g.generation_id if g is not None else None})

    def dump(self) -> dict[str, Any]:
        return {"partitions": {str(p): s for p, s in sorted(self.partitions.items())},
                "groups": [{"group": g.group_id, "state": g.state, "generation": g.generation_id,
                            "protocol": g.protocol_name, "leader": g.leader, "members": list(g.members),
                            "offsets": [[t, p, c.offset] for (t, p), c in sorted(g.offsets.items())]}
                           for _, g in sorted(self.groups.items())]}


def _select_protocol(g: Group) -> str:
    """Kafka's GroupMetadata.selectProtocol: each member votes for its most preferred protocol among those
    every member supports; the most votes win (a tie goes to the leader's preference order)."""
    candidates = g.candidate_protocols()
    votes: dict[str, int] = {}
    for m in g.members.values():
        choice = next(name for name in m.protocol_names() if name in candidates)
        votes[choice] = votes.get(choice, 0) + 1
    first = g.members.get(g.leader) if g.leader in g.members else next(iter(g.members.values()))
    order = [name for name in first.protocol_names() if name in candidates]
    return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))


def _answer_parked(m: Member, error: int) -> list[Reply]:
    replies: list[Reply] = []
    if m.join_waiter is not None:
        replies.append((m.join_waiter, JoinResult(error, member_id=m.member_id)))
        m.join_waiter = None
    if m.sync_waiter is not None:
        replies.append((m.sync_waiter, SyncResult(error)))
        m.sync_waiter = None
    return replies
