"""Raft for the controller quorum, as a state machine without I/O (002 1.2.1: "a replicated
state machine based on Raft ... at least three nodes where one is the leader - known as the
active controller"; 002 2.4.1: majority replication and election quorums).

A `RaftNode` is driven by three events and one question:

- `tick(now)`: time passed (election and heartbeat timers, the leader's quorum check);
- `receive(message)`: a message from a peer arrived;
- `propose(record)`: the leader appends a record (raises NotLeader elsewhere);
- `ready()`: what to do now: the messages to send and the committed entries to apply (after
  restoring a snapshot if one came with it).

Durable state goes through an injected `RaftStore` whose writes are fsynced when they return,
so every message `ready()` hands out already rests on durable state. Clock and randomness are
injected too (`now` values, a `random.Random`), so a seeded simulation (raft_sim.py) or the
controller's asyncio shell can drive the very same code. Time is in whatever unit the driver
counts (milliseconds in a server, ticks in a simulation).

The rules, with the Raft paper's names:

- Election: randomized election timeouts; a candidate needs votes from a majority in one term;
  a vote goes at most once per term (persisted before it is sent) and only to a candidate
  whose log is at least as up-to-date (last term, then last index). Optional pre-vote: a node
  first asks whether it could win without raising its term, so a node that was partitioned
  does not depose a healthy leader when it returns.
- Check-quorum: a leader that has not heard from a majority within an election timeout steps
  down, so a leader cut off by a partition stops acting as the active controller.
- Replication: AppendEntries carries the previous entry's (index, term); the follower accepts
  only if its log matches there (log matching), truncates a conflicting suffix, and on refusal
  hints where to resume (the conflicting term and its first index), so the leader backs up a
  term at a time rather than an entry at a time.
- Commit: the leader commits index N once a majority stores it *and* the entry at N has the
  leader's current term (the Figure 8 rule); earlier entries commit with it. A new leader
  appends a no-op entry so that happens without waiting for a client.
- Compaction: the application snapshots its state at an applied index (`compact`); the log
  before it is dropped, and a follower that needs dropped entries gets InstallSnapshot.

`RaftConfig.unsafe_variants` switches single rules off so the tests can show that the safety
checks catch each violation; they are never for use outside tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkaesque_harness.clusters.broker.raft_store import Entry, RaftStore, Snapshot, entries_after_snapshot

INFLIGHT_MESSAGES = 4  # AppendEntries a leader keeps unacknowledged per follower, beyond heartbeats

FOLLOWER = "follower"
PRE_CANDIDATE = "pre-candidate"
CANDIDATE = "candidate"
LEADER = "leader"

UNSAFE_VARIANTS = {
    "forget-vote": "a restarted node forgets whom it voted for (two votes in one term)",
    "no-vote-log-check": "votes go to candidates whose log is behind (leader completeness)",
    "commit-any-term": "a leader commits earlier terms' entries by counting replicas (Figure 8)",
    "skip-prev-check": "followers append without checking the previous entry's term (log matching)",
}


@dataclass(frozen=True)
class RaftConfig:
    node_id: int
    voters: tuple[int, ...]  # the whole quorum, this node included; an odd number (1, 3, 5, ...)
    heartbeat_interval: int = 50
    election_timeout_min: int = 500
    election_timeout_max: int = 1000  # exclusive
    pre_vote: bool = True
    check_quorum: bool = True
    max_entries_per_append: int = 256
    unsafe_variants: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if len(set(self.voters)) != len(self.voters) or self.node_id not in self.voters:
            raise ValueError(f"voters {self.voters} must be distinct and include node {self.node_id}")
        if len(self.voters) % 2 == 0:
            # An even quorum tolerates no more failures than the odd one below it and splits votes.
            raise ValueError(f"the controller quorum needs an odd number of voters, not {len(self.voters)}")
        if not 0 < self.heartbeat_interval < self.election_timeout_min < self.election_timeout_max:
            raise ValueError("need 0 < heartbeat_interval < election_timeout_min < election_timeout_max")
        unknown = set(self.unsafe_variants) - set(UNSAFE_VARIANTS)
        if unknown:
            raise ValueError(f"unknown unsafe variants {sorted(unknown)}; known: {sorted(UNSAFE_VARIANTS)}")

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1


# Messages. `term` is the sender's current term, except in a pre-vote request (the term the
# sender would campaign in) and a granted pre-vote response (that same term, echoed).

@dataclass(frozen=True, kw_only=True)
class Message:
    src: int
    dst: int
    term: int


@dataclass(frozen=True, kw_only=True)
class RequestVote(Message):
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False


@dataclass(frozen=True, kw_only=True)
class VoteResponse(Message):
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, kw_only=True)
class AppendEntries(Message):
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    leader_commit: int


@dataclass(frozen=True, kw_only=True)
class AppendResponse(Message):
    success: bool
    match_index: int = 0  # on success: the follower's log matches the leader's up to here
    rejected_prev: int = 0  # on refusal: the prev_index that did not match
    conflict_term: int | None = None  # on refusal: the follower's term at rejected_prev (None: too short)
    conflict_index: int = 0  # on refusal: first index of conflict_term there, or its last index + 1


@dataclass(frozen=True, kw_only=True)
class InstallSnapshot(Message):
    snapshot: Snapshot


@dataclass(frozen=True, kw_only=True)
class SnapshotResponse(Message):
    match_index: int


@dataclass
class Ready:
    """What the driver must do: send `messages`; restore `snapshot` (if any), then apply `committed`
    in order (entries whose record is None are leaders' no-ops)."""

    messages: list[Message] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None


class NotLeader(Exception):
    def __init__(self, leader_id: int | None):
        super().__init__("no leader known" if leader_id is None else f"not the leader; the leader is {leader_id}")
        self.leader_id = leader_id


@dataclass
class _Progress:
    """The leader's view of one follower."""

    next_index: int  # first entry to send when (re)starting from a known point
    match_index: int = 0  # highest index known to be on the follower
    sent_upto: int = 0  # highest index already sent (pipelining: new entries go after it)
    snapshot_sent_at: int | None = None


class RaftNode:
    def __init__(self, config: RaftConfig, store: RaftStore, rng: random.Random, now: int = 0,
                 logger: Callable[[dict[str, Any]], None] | None = None):
        self.config = config
        self.id = config.node_id
        self.peers = tuple(v for v in config.voters if v != self.id)
        self.store = store
        self.rng = rng
        self.now = now
        self._logger = logger
        state = store.load()
        self.current_term = state.term
        self.voted_for = None if "forget-vote" in config.unsafe_variants else state.voted_for
        self.snapshot = state.snapshot
        self.log: list[Entry] = state.entries  # the entries after snapshot.index
        # Commit index is volatile: a restarted node knows only that its snapshot is committed.
        self.commit_index = self.last_applied = self.snapshot.index
        self.role = FOLLOWER
        self.leader_id: int | None = None
        self._votes: set[int] = set()
        self._progress: dict[int, _Progress] = {}
        self._heartbeat_due = 0
        self._quorum_check_due = 0
        self._recently_active: set[int] = set()
        self._last_leader_contact: int | None = None
        self._new_entries = False
        self._messages: list[Message] = []
        self._to_apply: list[Entry] = []
        self._restore: Snapshot | None = self.snapshot if self.snapshot.index > 0 else None
        self._reset_election_timer()

    # ---- the log ---------------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self.log[-1].index if self.log else self.snapshot.index

    @property
    def last_term(self) -> int:
        return self.log[-1].term if self.log else self.snapshot.term

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index`; None if it is past the end or compacted away."""
        if index == self.snapshot.index:
            return self.snapshot.term
        if index < self.snapshot.index or index > self.last_index:
            return None
        return self.log[index - self.snapshot.index - 1].term

    def entry_at(self, index: int) -> Entry | None:
        if index <= self.snapshot.index or index > self.last_index:
            return None
        return self.log[index - self.snapshot.index - 1]

    def _entries(self, first: int, last: int) -> list[Entry]:
        base = self.snapshot.index + 1
        return self.log[first - base:last - base + 1]

    def _append_local(self, entries: list[Entry]) -> None:
        self.store.append(entries)  # durable before anyone hears of it
        self.log.extend(entries)

    def _truncate_from(self, index: int) -> None:
        self._event("truncate", from_index=index, dropped=self.last_index - index + 1)
        self.store.truncate_from(index)
        del self.log[index - self.snapshot.index - 1:]

    # ---- events ----------------------------------------------------------------------------

    def tick(self, now: int) -> None:
        self.now = now
        if self.role == LEADER:
            if self.config.check_quorum and now >= self._quorum_check_due:
                # +1: the leader counts itself.
                if len(self._recently_active) + 1 < self.config.majority:
                    self._event("step-down", reason="check-quorum: no majority heard within an election timeout")
                    self._become_follower(self.current_term, None)
                    return
                self._recently_active = set()
                self._quorum_check_due = now + self.config.election_timeout_min
            if now >= self._heartbeat_due:
                for peer in self.peers:
                    self._send_append(peer, self._progress[peer].next_index)
                self._heartbeat_due = now + self.config.heartbeat_interval
        elif now >= self._election_deadline:
            self._start_election(pre_vote=self.config.pre_vote)

    def campaign(self) -> None:
        """Start a real election now, as if the election timer fired, skipping pre-vote (what a
        leadership transfer does; tests use it to stage elections)."""
        self._start_election(pre_vote=False)

    def propose(self, record: Any) -> int:
        """Append `record` to the leader's log; returns its index. It is committed once it comes
        out of `ready().committed` (at that index, with this term)."""
        return self.propose_batch([record])[0]

    def propose_batch(self, records: list[Any]) -> list[int]:
        if self.role != LEADER:
            raise NotLeader(self.leader_id)
        first = self.last_index + 1
        self._append_local([Entry(first + i, self.current_term, r) for i, r in enumerate(records)])
        self._new_entries = True
        self._maybe_commit()  # a single-node quorum commits at once
        return list(range(first, first + len(records)))

    def compact(self, index: int, data: Any) -> None:
        """The application's state after applying up to `index` is `data`: keep it as the
        snapshot and drop the log up to `index`."""
        if index <= self.snapshot.index:
            return
        if index > self.last_applied:
            raise ValueError(f"cannot snapshot at {index}: only {self.last_applied} is applied")
        snapshot = Snapshot(index, self.term_at(index) or 0, data)
        kept = self.log[index - self.snapshot.index:]
        self.store.save_snapshot(snapshot, kept)
        self.snapshot, self.log = snapshot, kept
        self._event("compact", index=index)

    def ready(self) -> Ready:
        if self._new_entries and self.role == LEADER:
            for peer in self.peers:
                self._send_new_entries(peer)
        self._new_entries = False
        out = Ready(self._messages, self._to_apply, self._restore)
        self._messages, self._to_apply, self._restore = [], [], None
        return out

    def receive(self, m: Message) -> None:
        if m.term > self.current_term and not self._is_pre_vote_traffic(m):
            # Figure 2, all servers: a newer term makes this node a follower in that term.
            leader = m.src if isinstance(m, AppendEntries | InstallSnapshot) else None
            self._become_follower(m.term, leader)
        if isinstance(m, RequestVote):
            self._on_request_vote(m)
        elif isinstance(m, VoteResponse):
            self._on_vote_response(m)
        elif isinstance(m, AppendEntries):
            self._on_append_entries(m)
        elif isinstance(m, AppendResponse):
            self._on_append_response(m)
        elif isinstance(m, InstallSnapshot):
            self._on_install_snapshot(m)
        elif isinstance(m, SnapshotResponse):
            self._on_snapshot_response(m)
        else:
            raise TypeError(f"not a Raft message: {m!r}")

    @staticmethod
    def _is_pre_vote_traffic(m: Message) -> bool:
        # A pre-vote carries a term nobody is in yet; it must not move anyone's term.
        # A refused pre-vote carries the refuser's real term, which does count.
        return (isinstance(m, RequestVote) and m.pre_vote) or (
            isinstance(m, VoteResponse) and m.pre_vote and m.granted)

    # ---- roles -----------------------------------------------------------------------------

    def _set_term(self, term: int, voted_for: int | None) -> None:
        self.store.save_term_vote(term, voted_for)  # durable before any message depends on it
        self.current_term, self.voted_for = term, voted_for

    def _reset_election_timer(self) -> None:
        self._election_deadline = self.now + self.rng.randrange(
            self.config.election_timeout_min, self.config.election_timeout_max)

    def _become_follower(self, term: int, leader: int | None) -> None:
        if term > self.current_term:
            self._set_term(term, None)
        if self.role != FOLLOWER:
            self._event("follower", leader=leader)
        self.role, self.leader_id = FOLLOWER, leader
        self._progress = {}
        self._reset_election_timer()

    def _start_election(self, pre_vote: bool) -> None:
        self._reset_election_timer()
        self.leader_id = None
        self._progress = {}
        self._votes = {self.id}
        if pre_vote:
            self.role = PRE_CANDIDATE
            term = self.current_term + 1
        else:
            self._set_term(self.current_term + 1, self.id)
            self.role = CANDIDATE
            term = self.current_term
        self._event("pre-candidate" if pre_vote else "candidate", election_term=term)
        if len(self._votes) >= self.config.majority:  # a quorum of one
            self._won_election(pre_vote)
            return
        for peer in self.peers:
            self._send(RequestVote(src=self.id, dst=peer, term=term, last_log_index=self.last_index,
                                   last_log_term=self.last_term, pre_vote=pre_vote))

    def _won_election(self, pre_vote: bool) -> None:
        if pre_vote:
            self._start_election(pre_vote=False)
        else:
            self._become_leader()

    def _become_leader(self) -> None:
        self.role, self.leader_id = LEADER, self.id
        self._event("leader")
        self._progress = {p: _Progress(next_index=self.last_index + 1, sent_upto=self.last_index)
                          for p in self.peers}
        self._recently_active = set()
        self._quorum_check_due = self.now + self.config.election_timeout_min
        self._heartbeat_due = self.now + self.config.heartbeat_interval
        # The no-op: entries of earlier terms commit only under an entry of this term (Figure 8).
        self._append_local([Entry(self.last_index + 1, self.current_term, None)])
        for peer in self.peers:
            self._send_append(peer, self._progress[peer].next_index)
        self._maybe_commit()

    # ---- elections -------------------------------------------------------------------------

    def _log_up_to_date(self, m: RequestVote) -> bool:
        # 5.4.1: the candidate's log must be at least as up-to-date as the voter's.
        if "no-vote-log-check" in self.config.unsafe_variants:
            return True
        return (m.last_log_term, m.last_log_index) >= (self.last_term, self.last_index)

    def _on_request_vote(self, m: RequestVote) -> None:
        if m.pre_vote:
            # Grant only what the real vote would get, and not while a leader is known to be alive
            # (a node that was merely cut off must not disturb a working quorum).
            leader_alive = self.role == LEADER or (
                self.leader_id is not None and self._last_leader_contact is not None
                and self.now - self._last_leader_contact < self.config.election_timeout_min)
            granted = m.term > self.current_term and self._log_up_to_date(m) and not leader_alive
            self._send(VoteResponse(src=self.id, dst=m.src, term=m.term if granted else self.current_term,
                                    granted=granted, pre_vote=True))
            return
        granted = (m.term == self.current_term and self.voted_for in (None, m.src)
                   and self._log_up_to_date(m))
        if granted:
            if self.voted_for is None:
                self._set_term(self.current_term, m.src)
            self._reset_election_timer()
        self._send(VoteResponse(src=self.id, dst=m.src, term=self.current_term, granted=granted))

    def _on_vote_response(self, m: VoteResponse) -> None:
        if m.pre_vote:
            if self.role != PRE_CANDIDATE or m.term != self.current_term + 1 or not m.granted:
                return
        elif self.role != CANDIDATE or m.term != self.current_term or not m.granted:
            return
        self._votes.add(m.src)
        if len(self._votes) >= self.config.majority:
            self._won_election(m.pre_vote)

    # ---- replication: leader ---------------------------------------------------------------

    def _send_append(self, peer: int, first: int) -> None:
        """Send entries from `first` (at most max_entries_per_append), or the snapshot if the
        log no longer holds `first - 1`."""
        pr = self._progress[peer]
        if first <= self.snapshot.index:
            # Once per heartbeat at most: a snapshot can be large and refusals arrive in bursts.
            if pr.snapshot_sent_at is None or self.now - pr.snapshot_sent_at >= self.config.heartbeat_interval:
                pr.snapshot_sent_at = self.now
                self._send(InstallSnapshot(src=self.id, dst=peer, term=self.current_term, snapshot=self.snapshot))
            pr.sent_upto = max(pr.sent_upto, self.snapshot.index)
            return
        last = min(self.last_index, first + self.config.max_entries_per_append - 1)
        entries = tuple(self._entries(first, last))
        self._send(AppendEntries(src=self.id, dst=peer, term=self.current_term, prev_index=first - 1,
                                 prev_term=self.term_at(first - 1) or 0, entries=entries,
                                 leader_commit=self.commit_index))
        pr.sent_upto = max(pr.sent_upto, first - 1 + len(entries))

    def _send_new_entries(self, peer: int) -> None:
        # Pipelining: send what has not been sent yet, up to a window of unacknowledged entries
        # (each acknowledgement sends more, so a lagging follower catches up at network speed).
        # Lost messages are resent by the heartbeat (from next_index) or after a refusal.
        pr = self._progress[peer]
        if pr.next_index <= self.snapshot.index:
            return  # waiting for the snapshot to land
        window = INFLIGHT_MESSAGES * self.config.max_entries_per_append
        while pr.sent_upto < self.last_index and pr.sent_upto - pr.match_index < window:
            self._send_append(peer, max(pr.sent_upto + 1, pr.next_index))

    def _on_append_response(self, m: AppendResponse) -> None:
        if self.role != LEADER or m.term != self.current_term:
            return  # stale: from an earlier term or a term this node no longer leads
        pr = self._progress[m.src]
        self._recently_active.add(m.src)
        if m.success:
            if m.match_index > pr.match_index:
                pr.match_index = m.match_index
                self._maybe_commit()
            pr.next_index = max(pr.next_index, pr.match_index + 1)
            self._send_new_entries(m.src)
            return
        pr.next_index = max(pr.match_index + 1, min(self._next_from_hint(m), m.rejected_prev))
        pr.sent_upto = pr.next_index - 1
        self._send_append(m.src, pr.next_index)

    def _next_from_hint(self, m: AppendResponse) -> int:
        # Skip the follower's whole conflicting term: resume after the leader's last entry of that
        # term if it has one, else at the first index the follower has of it.
        if m.conflict_term is not None:
            for index in range(min(m.rejected_prev, self.last_index), self.snapshot.index, -1):
                t = self.term_at(index)
                if t == m.conflict_term:
                    return index + 1
                if t is not None and t < m.conflict_term:
                    break
        return m.conflict_index

    def _on_snapshot_response(self, m: SnapshotResponse) -> None:
        if self.role != LEADER or m.term != self.current_term:
            return
        pr = self._progress[m.src]
        self._recently_active.add(m.src)
        if m.match_index > pr.match_index:
            pr.match_index = m.match_index
            self._maybe_commit()
        pr.next_index = max(pr.next_index, pr.match_index + 1)
        pr.sent_upto = max(pr.sent_upto, pr.match_index)
        self._send_new_entries(m.src)

    def _maybe_commit(self) -> None:
        matched = sorted([self.last_index] + [pr.match_index for pr in self._progress.values()], reverse=True)
        n = matched[self.config.majority - 1]  # the highest index a majority stores
        if n <= self.commit_index:
            return
        # Figure 8: counting replicas proves nothing for an entry of an earlier term; it commits
        # only under an entry of the current term.
        if self.term_at(n) == self.current_term or "commit-any-term" in self.config.unsafe_variants:
            self._advance_commit(n)

    def _advance_commit(self, index: int) -> None:
        if index > self.commit_index:
            self.commit_index = index
            self._to_apply.extend(self._entries(self.last_applied + 1, index))
            self.last_applied = index

    # ---- replication: follower -------------------------------------------------------------

    def _heard_from_leader(self, m: Message) -> None:
        if self.role != FOLLOWER or self.leader_id != m.src:
            self._become_follower(m.term, m.src)  # a candidate of this term yields to its leader
        self._last_leader_contact = self.now
        self._reset_election_timer()

    def _on_append_entries(self, m: AppendEntries) -> None:
        if m.term < self.current_term:
            # Tell the stale leader about the newer term so it steps down.
            self._send(AppendResponse(src=self.id, dst=m.src, term=self.current_term, success=False,
                                      rejected_prev=m.prev_index, conflict_index=m.prev_index))
            return
        self._heard_from_leader(m)
        prev, entries = m.prev_index, list(m.entries)
        if prev < self.snapshot.index:
            # The start lies inside this node's snapshot, which holds only committed (so matching)
            # entries: skip to the snapshot's end.
            entries = entries[self.snapshot.index - prev:]
            prev = self.snapshot.index
        elif prev > self.last_index:
            self._refuse(m, conflict_term=None, conflict_index=self.last_index + 1)
            return
        elif self.term_at(prev) != m.prev_term and "skip-prev-check" not in self.config.unsafe_variants:
            term = self.term_at(prev)
            first = prev
            while first - 1 > self.snapshot.index and self.term_at(first - 1) == term:
                first -= 1
            self._refuse(m, conflict_term=term, conflict_index=first)
            return
        self._merge(entries)
        last_new = prev + len(entries)
        # Only up to what this message proved to match: a longer stale suffix is not committed.
        self._advance_commit(min(m.leader_commit, last_new))
        self._send(AppendResponse(src=self.id, dst=m.src, term=self.current_term, success=True,
                                  match_index=last_new))

    def _refuse(self, m: AppendEntries, conflict_term: int | None, conflict_index: int) -> None:
        self._send(AppendResponse(src=self.id, dst=m.src, term=self.current_term, success=False,
                                  rejected_prev=m.prev_index, conflict_term=conflict_term,
                                  conflict_index=conflict_index))

    def _merge(self, entries: list[Entry]) -> None:
        """Append the leader's entries: skip those already here, truncate at the first conflict.
        A matching entry is never truncated: a delayed, shorter AppendEntries must not cut off
        entries a later one added."""
        for pos, e in enumerate(entries):
            have = self.term_at(e.index)
            if have == e.term:
                continue
            if have is not None:
                self._truncate_from(e.index)
            self._append_local(entries[pos:])
            return

    def _on_install_snapshot(self, m: InstallSnapshot) -> None:
        if m.term < self.current_term:
            self._send(SnapshotResponse(src=self.id, dst=m.src, term=self.current_term, match_index=0))
            return
        self._heard_from_leader(m)
        s = m.snapshot
        if s.index > self.commit_index:
            kept = entries_after_snapshot(s, self.log)
            self.store.save_snapshot(s, kept)
            self.snapshot, self.log = s, kept
            self.commit_index = self.last_applied = s.index
            self._restore, self._to_apply = s, []  # the snapshot supersedes anything not yet applied
            self._event("install-snapshot", index=s.index, kept_entries=len(kept))
        self._send(SnapshotResponse(src=self.id, dst=m.src, term=self.current_term, match_index=s.index))

    # ---- output ----------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        self._messages.append(m)

    def _event(self, event: str, **fields: Any) -> None:
        if self._logger is not None:
            self._logger({"event": f"raft-{event}", "node": self.id, "term": self.current_term, **fields})
