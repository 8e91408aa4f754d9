"""A deterministic simulation of a Raft quorum (raft.py) and the checker of Raft's safety
properties, for the unit tests and the benchmark.

One seed drives everything: a simulated clock advanced one tick per `step`, a network that
delays (and so reorders), drops, duplicates and partitions messages, and nodes that crash and
restart from their persisted store. Each node's application is the list of (term, record) it
applied, which is also its snapshot data, so the checker can compare what every node applied.

The checker (`RaftSafetyChecker`) asserts the four properties of the Raft paper's Figure 3:

- election safety: at most one leader per term;
- log matching: two logs holding an entry with the same index and term agree up to it;
- leader completeness: an entry committed before a leader was elected is in that leader's log;
- state-machine safety: no two nodes apply different entries at one index.

It records violations rather than raising, so a test can assert that a deliberately broken
variant (RaftConfig.unsafe_variants) is caught.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkaesque_harness.clusters.broker.raft import (
    LEADER,
    AppendResponse,
    Message,
    NotLeader,
    RaftConfig,
    RaftNode,
)
from kafkaesque_harness.clusters.broker.raft_store import MemoryRaftStore, RaftStore


@dataclass(frozen=True)
class Violation:
    kind: str  # election-safety, log-matching, leader-completeness, state-machine-safety
    time: int
    detail: str


class SimNetwork:
    """Messages in flight, each delivered after a random delay unless dropped or cut off.

    A partition is checked at delivery time: a link cut while a message is in flight loses it.
    """

    def __init__(self, rng: random.Random, min_delay: int = 1, max_delay: int = 3):
        self.rng = rng
        self.min_delay, self.max_delay = min_delay, max_delay
        self.drop_rate = 0.0
        self.duplicate_rate = 0.0
        self.blocked: set[tuple[int, int]] = set()  # (src, dst) links that lose everything
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = itertools.count()  # ties in delivery time keep send order (determinism)

    def send(self, m: Message, now: int) -> None:
        if self.rng.random() < self.drop_rate:
            return
        copies = 2 if self.rng.random() < self.duplicate_rate else 1
        for _ in range(copies):
            at = now + self.rng.randint(self.min_delay, self.max_delay)
            heapq.heappush(self._queue, (at, next(self._seq), m))

    def due(self, now: int) -> list[Message]:
        out = []
        while self._queue and self._queue[0][0] <= now:
            m = heapq.heappop(self._queue)[2]
            if (m.src, m.dst) not in self.blocked:
                out.append(m)
        return out

    def partition(self, groups: list[set[int]], nodes: tuple[int, ...]) -> None:
        """Only nodes in the same group talk; nodes in no group are cut off from everyone."""
        group_of = {n: i for i, g in enumerate(groups) for n in g}
        self.blocked = {(a, b) for a in nodes for b in nodes
                        if a != b and group_of.get(a, -1 - a) != group_of.get(b, -1 - b)}

    def cut(self, a: int, b: int) -> None:
        self.blocked |= {(a, b), (b, a)}

    def heal(self) -> None:
        self.blocked = set()

    def in_flight(self) -> int:
        return len(self._queue)


class RaftSafetyChecker:
    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.leaders_by_term: dict[int, set[int]] = {}
        self.committed: dict[int, tuple[int, Any]] = {}  # index -> (term, record), as first applied
        self._committed_at: dict[int, int] = {}  # index -> time it was first applied anywhere
        self._completeness_checked: set[tuple[int, int]] = set()  # (term, leader)

    def _violate(self, kind: str, time: int, detail: str) -> None:
        self.violations.append(Violation(kind, time, detail))

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def on_apply(self, time: int, node: int, index: int, term: int, record: Any) -> None:
        known = self.committed.get(index)
        if known is None:
            self.committed[index] = (term, record)
            self._committed_at[index] = time
        elif known != (term, record):
            self._violate("state-machine-safety", time,
                          f"node {node} applied {(term, record)!r} at index {index}, another node {known!r}")

    def observe(self, time: int, nodes: dict[int, RaftNode]) -> None:
        """Checks that are cheap enough for every step: election safety, leader completeness."""
        for node in nodes.values():
            if node.role != LEADER:
                continue
            leaders = self.leaders_by_term.setdefault(node.current_term, set())
            if node.id not in leaders:
                leaders.add(node.id)
                if len(leaders) == 2:
                    self._violate("election-safety", time,
                                  f"term {node.current_term} has leaders {sorted(leaders)}")
            if (node.current_term, node.id) not in self._completeness_checked:
                self._completeness_checked.add((node.current_term, node.id))
                self._check_completeness(time, node)

    def _check_completeness(self, time: int, leader: RaftNode) -> None:
        # Entries first applied in an earlier step were committed before this leader's election
        # finished (it was not a leader at the previous observation), so it must hold them.
        for index, (term, record) in self.committed.items():
            if self._committed_at[index] >= time or index <= leader.snapshot.index:
                continue  # the snapshot's content is checked as applied state (state-machine safety)
            entry = leader.entry_at(index)
            if entry is None or (entry.term, entry.record) != (term, record):
                have = None if entry is None else (entry.term, entry.record)
                self._violate("leader-completeness", time,
                              f"leader {leader.id} of term {leader.current_term} lacks committed entry "
                              f"{index} {(term, record)!r}; it has {have!r}")
                return

    def check_log_matching(self, time: int, nodes: dict[int, RaftNode]) -> None:
        """Pairwise: find the highest index where both logs have the same term; everything from
        the later snapshot up to it must be identical. O(log length) per pair."""
        live = sorted(nodes.values(), key=lambda n: n.id)
        for a, b in itertools.combinations(live, 2):
            lo = max(a.snapshot.index, b.snapshot.index) + 1
            hi = min(a.last_index, b.last_index)
            same = next((i for i in range(hi, lo - 1, -1) if a.term_at(i) == b.term_at(i)), None)
            if same is None:
                continue
            for i in range(lo, same + 1):
                ea, eb = a.entry_at(i), b.entry_at(i)
                if ea != eb:
                    self._violate("log-matching", time,
                                  f"nodes {a.id} and {b.id} agree on (index {same}, term {a.term_at(same)}) "
                                  f"but differ at index {i}: {ea} vs {eb}")
                    return


@dataclass
class SimStats:
    sent: Counter[str] = field(default_factory=Counter)
    delivered: int = 0
    append_refusals: int = 0  # AppendResponse(success=False): how hard log repair had to search


class SimCluster:
    """`size` Raft nodes (ids 1..size) on a SimNetwork, stepped one tick at a time."""

    def __init__(self, size: int = 3, seed: int = 0, snapshot_every: int = 0,
                 store_factory: Callable[[int], RaftStore] | None = None,
                 min_delay: int = 1, max_delay: int = 3, log_matching_every: int = 10,
                 **raft_options: Any):
        self.rng = random.Random(seed)
        self.now = 0
        self.ids = tuple(range(1, size + 1))
        self.raft_options = {"heartbeat_interval": 5, "election_timeout_min": 30,
                             "election_timeout_max": 60, **raft_options}
        self.snapshot_every = snapshot_every
        self.log_matching_every = log_matching_every
        self.net = SimNetwork(random.Random(self.rng.random()), min_delay, max_delay)
        self.stores: dict[int, RaftStore] = {
            i: store_factory(i) if store_factory else MemoryRaftStore() for i in self.ids}
        self.nodes: dict[int, RaftNode] = {}  # the live ones
        self.applied: dict[int, list[tuple[int, Any]]] = {}  # node -> (term, record) at index 1..
        self.checker = RaftSafetyChecker()
        self.stats = SimStats()
        for i in self.ids:
            self.restart(i)

    def config(self, node_id: int) -> RaftConfig:
        return RaftConfig(node_id=node_id, voters=self.ids, **self.raft_options)

    # ---- faults ----------------------------------------------------------------------------

    def partition(self, *groups: set[int]) -> None:
        self.net.partition(list(groups), self.ids)

    def isolate(self, node_id: int) -> None:
        self.partition({node_id}, set(self.ids) - {node_id})

    def crash(self, node_id: int) -> None:
        """Lose all volatile state; the store keeps what was durable."""
        self.nodes.pop(node_id, None)
        self.applied.pop(node_id, None)

    def restart(self, node_id: int) -> None:
        self.crash(node_id)
        node = RaftNode(self.config(node_id), self.stores[node_id], random.Random(self.rng.random()), self.now)
        self.nodes[node_id] = node
        self.applied[node_id] = []
        self._process_ready(node)

    # ---- driving ---------------------------------------------------------------------------

    def step(self) -> None:
        self.now += 1
        for m in self.net.due(self.now):
            node = self.nodes.get(m.dst)
            if node is not None:
                self.stats.delivered += 1
                node.receive(m)
        for node in list(self.nodes.values()):
            node.tick(self.now)
            self._process_ready(node)
        self.checker.observe(self.now, self.nodes)
        if self.log_matching_every and self.now % self.log_matching_every == 0:
            self.checker.check_log_matching(self.now, self.nodes)

    def run(self, ticks: int, until: Callable[[], bool] | None = None) -> bool:
        """Step up to `ticks` times; stop early (returning True) once `until()` holds."""
        for _ in range(ticks):
            if until is not None and until():
                return True
            self.step()
        return until is not None and until()

    def elect(self, node_id: int, attempts: int = 5, ticks: int = 10) -> bool:
        """Stage an election: `node_id` campaigns (again, in a higher term, if it has not won
        within `ticks`). Returns whether it became leader."""
        for _ in range(attempts):
            self.nodes[node_id].campaign()
            if self.run(ticks, until=lambda: self.nodes[node_id].role == LEADER):
                return True
        return False

    def _process_ready(self, node: RaftNode) -> None:
        r = node.ready()
        for m in r.messages:
            self.stats.sent[type(m).__name__] += 1
            if isinstance(m, AppendResponse) and not m.success:
                self.stats.append_refusals += 1
            self.net.send(m, self.now)
        applied = self.applied[node.id]
        if r.snapshot is not None:
            applied[:] = [(t, rec) for t, rec in r.snapshot.data]
            for index, (t, rec) in enumerate(applied, start=1):
                self.checker.on_apply(self.now, node.id, index, t, rec)
        for e in r.committed:
            if e.index != len(applied) + 1:
                raise AssertionError(f"node {node.id} applies index {e.index} after {len(applied)}")
            applied.append((e.term, e.record))
            self.checker.on_apply(self.now, node.id, e.index, e.term, e.record)
        if self.snapshot_every and node.last_applied - node.snapshot.index >= self.snapshot_every:
            node.compact(node.last_applied, [[t, rec] for t, rec in applied])

    # ---- questions -------------------------------------------------------------------------

    def leader(self) -> RaftNode | None:
        """The live leader of the highest term, if any."""
        leaders = [n for n in self.nodes.values() if n.role == LEADER]
        return max(leaders, key=lambda n: n.current_term) if leaders else None

    def propose(self, record: Any) -> int | None:
        leader = self.leader()
        if leader is None:
            return None
        try:
            index = leader.propose(record)
        except NotLeader:
            return None
        self._process_ready(leader)
        return index

    def applied_records(self, node_id: int) -> list[Any]:
        """What the node's application applied, without leaders' no-ops."""
        return [rec for _, rec in self.applied.get(node_id, []) if rec is not None]

    def commit_everywhere(self, record: Any, ticks: int) -> bool:
        """Propose `record` (again, whenever there is a new leader) until every node applied it."""
        proposed_in: tuple[int, int] | None = None

        def done() -> bool:
            nonlocal proposed_in
            leader = self.leader()
            if leader is not None and proposed_in != (leader.id, leader.current_term):
                if self.propose(record) is not None:
                    proposed_in = (leader.id, leader.current_term)
            return all(record in self.applied_records(i) for i in self.ids if i in self.nodes)

        return self.run(ticks, until=done)

    def final_check(self) -> list[Violation]:
        self.checker.check_log_matching(self.now, self.nodes)
        return self.checker.violations
