"""Raft for the controller quorum (clusters/broker/raft.py), in a seeded simulation: fake clock,
fake network, nodes crashed and restarted from their stores (002 1.2.1, 2.4.1).

Every safety check of the simulation's checker is also shown to fail: each test of a rule has
a twin that switches the rule off (RaftConfig.unsafe_variants) and asserts the checker reports
the violation that rule prevents.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from kafkaesque_harness.clusters.broker.raft import (
    LEADER,
    AppendEntries,
    AppendResponse,
    NotLeader,
    RaftConfig,
    RaftNode,
)
from kafkaesque_harness.clusters.broker.raft_sim import SimCluster
from kafkaesque_harness.clusters.broker.raft_store import (
    CorruptRaftStore,
    Entry,
    FileRaftStore,
    MemoryRaftStore,
    Snapshot,
    encode_frame,
)

# Staged scenarios: elections happen only when a test calls sim.elect (timeouts of 1000+ ticks,
# messages take exactly one tick), so each step of a scenario is under the test's control.
STAGED = {"heartbeat_interval": 10, "election_timeout_min": 1000, "election_timeout_max": 2000,
          "min_delay": 1, "max_delay": 1}


def staged(size: int, **kw) -> SimCluster:
    return SimCluster(size, seed=kw.pop("seed", 7), **{**STAGED, **kw})


def elected(sim: SimCluster, ticks: int = 500) -> RaftNode:
    assert sim.run(ticks, until=lambda: sim.leader() is not None), "no leader elected"
    leader = sim.leader()
    assert leader is not None
    return leader


# ---- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize("voters", [(1, 2), (1, 2, 3, 4)])
def test_quorum_size_must_be_odd(voters):
    with pytest.raises(ValueError, match="odd number of voters"):
        RaftConfig(node_id=1, voters=voters)


def test_unknown_unsafe_variant_is_refused():
    with pytest.raises(ValueError, match="unknown unsafe variants"):
        RaftConfig(node_id=1, voters=(1,), unsafe_variants=frozenset({"yolo"}))


@pytest.mark.parametrize("size", [1, 3, 5])
def test_quorum_of_each_size_elects_a_leader_and_commits(size):
    sim = SimCluster(size, seed=size)
    elected(sim)
    assert sim.commit_everywhere("r", 500)
    assert sim.final_check() == []


def test_followers_refuse_proposals_and_name_the_leader():
    sim = SimCluster(3, seed=1)
    leader = elected(sim)
    sim.run(20)
    follower = next(n for n in sim.nodes.values() if n.role != LEADER)
    with pytest.raises(NotLeader) as refused:
        follower.propose("r")
    assert refused.value.leader_id == leader.id


# ---- elections -------------------------------------------------------------------------------

def test_new_leader_after_the_leader_crashes_keeps_committed_entries():
    sim = SimCluster(3, seed=2)
    old = elected(sim)
    assert sim.commit_everywhere("before", 500)
    sim.crash(old.id)
    new = elected(sim)
    assert new.id != old.id and new.current_term > old.current_term
    assert sim.commit_everywhere("after", 500)
    for i in sim.nodes:
        assert sim.applied_records(i) == ["before", "after"]
    assert sim.final_check() == []


def test_leaders_crashed_again_and_again_never_share_a_term():
    sim = SimCluster(5, seed=3)
    for round_ in range(8):
        leader = elected(sim, 1000)
        assert sim.commit_everywhere(f"r{round_}", 1000)
        sim.crash(leader.id)
        sim.run(50)
        sim.restart(leader.id)
    assert sim.checker.leaders_by_term and all(len(ls) == 1 for ls in sim.checker.leaders_by_term.values())
    assert sim.final_check() == []


def vote_twice_scenario(variants: frozenset[str]) -> SimCluster:
    """Node 3 votes for node 1 in term 1, restarts, then node 2 asks it for a vote in term 1."""
    sim = staged(3, unsafe_variants=variants)
    sim.partition({1, 3}, {2})
    assert sim.elect(1, attempts=1)
    assert sim.nodes[1].current_term == 1
    sim.crash(3)
    sim.restart(3)
    sim.partition({2, 3}, {1})
    sim.elect(2, attempts=1)  # node 2 has heard of no term yet: it campaigns in term 1
    return sim


def test_a_restarted_node_remembers_its_term_and_vote_and_does_not_vote_twice():
    sim = vote_twice_scenario(frozenset())
    assert (sim.nodes[3].current_term, sim.nodes[3].voted_for) == (1, 1)
    assert sim.nodes[2].role != LEADER
    assert sim.checker.leaders_by_term[1] == {1}
    assert sim.final_check() == []


def test_election_safety_check_catches_a_node_that_forgets_its_vote():
    sim = vote_twice_scenario(frozenset({"forget-vote"}))
    assert sim.checker.leaders_by_term[1] == {1, 2}
    assert "election-safety" in sim.checker.kinds()


def stale_voter_scenario(variants: frozenset[str]) -> tuple[SimCluster, bool]:
    """"a" is committed on nodes 1 and 2; node 3, which missed it, asks node 2 for its vote."""
    sim = staged(3, unsafe_variants=variants)
    assert sim.elect(1)
    sim.run(5)
    sim.partition({1, 2}, {3})
    sim.propose("a")
    assert sim.run(10, until=lambda: "a" in sim.applied_records(1))
    sim.partition({2, 3}, {1})
    won = sim.elect(3, attempts=3)
    return sim, won


def test_a_candidate_missing_committed_entries_gets_no_vote():
    sim, won = stale_voter_scenario(frozenset())
    assert not won
    assert sim.elect(2)  # the up-to-date node can win, and "a" survives
    assert sim.run(20, until=lambda: "a" in sim.applied_records(3))
    assert sim.final_check() == []


def test_leader_completeness_check_catches_votes_without_the_log_check():
    sim, won = stale_voter_scenario(frozenset({"no-vote-log-check"}))
    assert won
    assert "leader-completeness" in sim.checker.kinds()


def test_pre_vote_keeps_a_returning_partitioned_node_from_deposing_the_leader():
    sim = SimCluster(3, seed=4, max_delay=1)
    leader = elected(sim)
    sim.run(20)
    term = leader.current_term
    outsider = next(i for i in sim.ids if i != leader.id)
    sim.isolate(outsider)
    sim.run(400)  # many election timeouts: pre-votes fail, the term stays
    assert sim.nodes[outsider].current_term == term
    sim.net.heal()
    sim.run(200)
    assert sim.leader() is leader and leader.current_term == term


def test_without_pre_vote_a_returning_partitioned_node_deposes_the_leader():
    sim = SimCluster(3, seed=4, max_delay=1, pre_vote=False)
    leader = elected(sim)
    sim.run(20)
    term = leader.current_term
    outsider = next(i for i in sim.ids if i != leader.id)
    sim.isolate(outsider)
    sim.run(400)
    assert sim.nodes[outsider].current_term > term
    sim.net.heal()
    sim.run(200)
    assert elected(sim).current_term > term


# ---- a partitioned leader --------------------------------------------------------------------

def test_a_leader_cut_off_from_the_majority_steps_down_and_cannot_commit():
    sim = SimCluster(5, seed=5, max_delay=1)
    old = elected(sim)
    assert sim.commit_everywhere("before", 500)
    companion = next(i for i in sim.ids if i != old.id)
    majority = set(sim.ids) - {old.id, companion}
    sim.partition({old.id, companion}, majority)
    lost_index = old.propose("lost")
    # Check-quorum: within one election timeout (30 ticks here) of losing the majority.
    assert sim.run(2 * 30, until=lambda: old.role != LEADER)
    assert old.commit_index < lost_index
    new = elected(sim)
    assert new.id in majority
    new.propose("kept")
    assert sim.run(100, until=lambda: all("kept" in sim.applied_records(i) for i in majority))
    sim.net.heal()
    assert sim.commit_everywhere("healed", 500)
    for i in sim.ids:
        assert sim.applied_records(i) == ["before", "kept", "healed"]
    assert all(e.record != "lost" for e in old.log)
    assert sim.final_check() == []


def test_without_check_quorum_a_cut_off_leader_stays_leader():
    sim = SimCluster(5, seed=5, max_delay=1, check_quorum=False)
    old = elected(sim)
    sim.partition({old.id}, set(sim.ids) - {old.id})
    sim.run(300)
    assert old.role == LEADER  # what check-quorum exists to prevent: a stale active controller
    assert sim.final_check() == []


# ---- log repair --------------------------------------------------------------------------------

@pytest.mark.parametrize("max_entries", [256, 1])
def test_log_repair_replaces_a_followers_conflicting_uncommitted_entries(max_entries):
    # With one entry per message the leader's commit index runs ahead of what each message
    # proves, so a follower that committed past the verified prefix would apply stale entries.
    sim = staged(3, max_entries_per_append=max_entries)
    assert sim.elect(1)
    assert sim.commit_everywhere("base", 50)
    sim.partition({1}, {2, 3})
    for i in range(50):
        sim.nodes[1].propose(f"stale-{i}")  # term 1, never committed
    sim.run(5)
    assert sim.elect(2)
    for i in range(10):
        sim.propose(f"new-{i}")
    assert sim.run(20, until=lambda: "new-9" in sim.applied_records(3))
    # Node 3 leads term 3 with a log longer than the stale node's matching prefix, so it must
    # search backwards through node 1's 50 conflicting entries of term 1.
    sim.partition({1, 3}, {2})
    assert sim.elect(3)
    refusals_before = sim.stats.append_refusals
    assert sim.run(100, until=lambda: sim.nodes[1].last_index == sim.nodes[3].last_index
                   and sim.nodes[1].term_at(sim.nodes[1].last_index) == sim.nodes[3].current_term)
    # The conflict-term hint skips a whole term per refusal, not one entry.
    assert sim.stats.append_refusals - refusals_before <= 2
    sim.net.heal()
    assert sim.commit_everywhere("done", 100)
    assert sim.nodes[1].log == sim.nodes[3].log == sim.nodes[2].log
    assert sim.applied_records(1) == ["base"] + [f"new-{i}" for i in range(10)] + ["done"]
    assert sim.final_check() == []


def follower_with(entries: list[tuple[int, str]], term: int) -> RaftNode:
    """Node 2 of (1, 2, 3) whose store holds `entries` as (term, record) at indexes 1.."""
    store = MemoryRaftStore()
    store.save_term_vote(term, None)
    store.append([Entry(i, t, r) for i, (t, r) in enumerate(entries, start=1)])
    return RaftNode(RaftConfig(node_id=2, voters=(1, 2, 3)), store, random.Random(0))


def append(term: int, prev: int, prev_term: int, entries: list[tuple[int, int, str]], commit: int):
    return AppendEntries(src=1, dst=2, term=term, prev_index=prev, prev_term=prev_term,
                         entries=tuple(Entry(*e) for e in entries), leader_commit=commit)


def test_a_follower_commits_only_what_the_message_proved_to_match():
    node = follower_with([(1, "a"), (1, "b"), (1, "stale")], term=1)
    node.receive(append(2, 1, 1, [(2, 1, "b")], commit=3))  # the leader's 3 may differ from ours
    assert node.commit_index == 2
    assert [e.record for e in node.ready().committed] == ["a", "b"]


def test_a_delayed_shorter_append_does_not_truncate_matching_entries():
    node = follower_with([(1, "a"), (1, "b"), (1, "c")], term=1)
    node.receive(append(1, 0, 0, [(1, 1, "a")], commit=0))
    assert [e.record for e in node.log] == ["a", "b", "c"]
    reply = node.ready().messages[0]
    assert isinstance(reply, AppendResponse) and reply.success and reply.match_index == 1


def test_a_refusal_names_the_conflicting_term_and_its_first_index():
    node = follower_with([(1, "a"), (2, "b"), (2, "c"), (2, "d")], term=2)
    node.receive(append(3, 4, 3, [], commit=0))
    reply = node.ready().messages[0]
    assert isinstance(reply, AppendResponse) and not reply.success
    assert (reply.conflict_term, reply.conflict_index, reply.rejected_prev) == (2, 2, 4)


def skipped_prev_check_scenario(variants: frozenset[str]) -> SimCluster:
    """Node 1 holds an uncommitted (2, term 1); a later leader sends it entries after index 2."""
    sim = staged(3, unsafe_variants=variants)
    assert sim.elect(1)
    assert sim.commit_everywhere("base", 50)
    sim.partition({1}, {2, 3})
    sim.nodes[1].propose("x")
    assert sim.elect(2)
    sim.propose("y")
    assert sim.run(20, until=lambda: "y" in sim.applied_records(3))
    sim.partition({1, 3}, {2})
    assert sim.elect(3)
    sim.run(20)
    return sim


def test_a_follower_refuses_entries_that_do_not_follow_its_log():
    sim = skipped_prev_check_scenario(frozenset())
    assert sim.nodes[1].log == sim.nodes[3].log
    assert sim.final_check() == []


def test_log_matching_check_catches_appends_without_the_previous_entry_check():
    sim = skipped_prev_check_scenario(frozenset({"skip-prev-check"}))
    assert "log-matching" in {v.kind for v in sim.final_check()}


# ---- the Figure 8 commit rule ----------------------------------------------------------------

def figure_8_scenario(variants: frozenset[str]) -> SimCluster:
    """Raft paper, Figure 8, with one entry per AppendEntries so the old entry can reach a
    majority before the new leader's no-op does."""
    sim = staged(5, max_entries_per_append=1, unsafe_variants=variants)
    assert sim.elect(1)
    sim.run(10)
    # (a) S1 (term 1) writes "a" at index 2 to S2 only.
    sim.partition({1, 2}, {3}, {4}, {5})
    sim.propose("a")
    sim.run(5)
    assert sim.nodes[2].term_at(2) == 1
    # (b) S1 crashes; S5 wins term 2 with S3 and S4, and is cut off before its no-op leaves it.
    sim.crash(1)
    sim.partition({3, 4, 5}, {2})
    assert sim.elect(5)
    sim.isolate(5)
    sim.crash(5)
    assert sim.nodes[3].last_index == sim.nodes[4].last_index == 1
    # (c) S1 restarts and wins term 3 with S2 and S3, and copies index 2 ("a", term 1) to S3:
    # "a" is now on a majority. S3 hears nothing after it (its replies still reach S1).
    sim.restart(1)
    sim.partition({1, 2, 3}, {4}, {5})
    assert sim.elect(1)
    assert sim.run(10, until=lambda: sim.nodes[3].last_index == 2)
    sim.net.blocked.add((1, 3))
    sim.run(3)
    # (d) S1 crashes; S5 restarts and wins (term 4) with S3 and S4: its index 2 is term 2.
    sim.crash(1)
    sim.restart(5)
    sim.partition({3, 4, 5}, {2})
    assert sim.elect(5)
    assert sim.run(20, until=lambda: sim.nodes[3].commit_index >= 3)
    return sim


def test_figure_8_an_old_terms_entry_on_a_majority_is_not_committed():
    sim = figure_8_scenario(frozenset())
    assert all("a" not in sim.applied_records(i) for i in sim.ids if i in sim.nodes)
    sim.restart(1)
    sim.net.heal()
    assert sim.commit_everywhere("after", 200)
    assert all("a" not in sim.applied_records(i) for i in sim.ids)
    assert sim.final_check() == []


def test_state_machine_safety_check_catches_committing_an_old_term_by_counting():
    sim = figure_8_scenario(frozenset({"commit-any-term"}))
    # S1 applied "a" at index 2 before crashing; S3, S4 and S5 then applied S5's entry there.
    assert "state-machine-safety" in sim.checker.kinds()


# ---- snapshots -------------------------------------------------------------------------------

def test_install_snapshot_catches_up_a_far_behind_follower():
    sim = SimCluster(3, seed=6, snapshot_every=20)
    leader = elected(sim)
    behind = next(i for i in sim.ids if i != leader.id)
    sim.crash(behind)
    for i in range(200):
        sim.propose(i)
        sim.step()
    assert sim.run(100, until=lambda: 199 in sim.applied_records(leader.id))
    assert leader.snapshot.index > 150 and leader.log[0].index == leader.snapshot.index + 1
    snapshots_before = sim.stats.sent["InstallSnapshot"]
    sim.restart(behind)
    assert sim.run(200, until=lambda: sim.applied_records(behind) == sim.applied_records(leader.id))
    assert sim.stats.sent["InstallSnapshot"] > snapshots_before
    assert sim.nodes[behind].snapshot.index > 150
    assert sim.final_check() == []


def test_compaction_needs_applied_state():
    node = RaftNode(RaftConfig(node_id=1, voters=(1,)), MemoryRaftStore(), random.Random(0))
    with pytest.raises(ValueError, match="only 0 is applied"):
        node.compact(1, [])


# ---- the file store --------------------------------------------------------------------------

def write_some(path) -> FileRaftStore:
    store = FileRaftStore(str(path))
    store.load()
    store.save_term_vote(3, 2)
    store.append([Entry(1, 1, {"type": "a"}), Entry(2, 1, None), Entry(3, 2, "c")])
    store.truncate_from(3)
    store.append([Entry(3, 3, "d")])
    store.close()
    return store


def test_file_store_round_trip(tmp_path):
    write_some(tmp_path / "raft.log")
    state = FileRaftStore(str(tmp_path / "raft.log")).load()
    assert (state.term, state.voted_for) == (3, 2)
    assert state.entries == [Entry(1, 1, {"type": "a"}), Entry(2, 1, None), Entry(3, 3, "d")]


NEXT_FRAME = encode_frame({"k": "entry", "i": 4, "t": 3, "r": "e"})


@pytest.mark.parametrize("tail", [NEXT_FRAME[:5], NEXT_FRAME[:-3], b"\0" * 40, NEXT_FRAME[:-3] + b"\0" * 40],
                         ids=["torn-header", "torn-payload", "zeros", "torn-payload-then-zeros"])
def test_file_store_drops_a_torn_tail_and_appends_after_it(tmp_path, tail):
    path = tmp_path / "raft.log"
    write_some(path)
    good_size = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(tail)
    store = FileRaftStore(str(path))
    state = store.load()
    assert [e.index for e in state.entries] == [1, 2, 3]
    assert store.dropped_tail_bytes == len(tail) and path.stat().st_size == good_size
    store.append([Entry(4, 3, "e")])
    store.close()
    assert FileRaftStore(str(path)).load().entries[-1] == Entry(4, 3, "e")


def test_file_store_drops_a_last_frame_with_a_bad_checksum(tmp_path):
    path = tmp_path / "raft.log"
    write_some(path)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF  # inside the last frame's payload: half-written sectors look like this
    path.write_bytes(bytes(data))
    state = FileRaftStore(str(path)).load()
    assert [e.index for e in state.entries] == [1, 2]


@pytest.mark.parametrize("offset", [2, 10, 14], ids=["length", "header-crc", "payload"])
def test_file_store_refuses_damage_before_the_tail(tmp_path, offset):
    # A damaged length must not pass for a payload cut short: that would drop good frames.
    path = tmp_path / "raft.log"
    write_some(path)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF  # inside the first frame, with good frames after it
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRaftStore, match="disk corruption, not a torn write"):
        FileRaftStore(str(path)).load()


def test_file_store_snapshot_rewrites_the_file_atomically(tmp_path):
    path = tmp_path / "raft.log"
    store = write_some(path)
    size_before = path.stat().st_size
    store = FileRaftStore(str(path))
    state = store.load()
    store.save_snapshot(Snapshot(2, 1, {"applied": 2}), [e for e in state.entries if e.index > 2])
    store.append([Entry(4, 3, "e")])
    store.close()
    state = FileRaftStore(str(path)).load()
    assert state.snapshot == Snapshot(2, 1, {"applied": 2})
    assert (state.term, state.voted_for) == (3, 2)
    assert state.entries == [Entry(3, 3, "d"), Entry(4, 3, "e")]
    assert not os.path.exists(str(path) + ".tmp") and path.stat().st_size < size_before + 80


def test_a_whole_cluster_restarts_from_its_files(tmp_path):
    sim = SimCluster(3, seed=9, snapshot_every=7,
                     store_factory=lambda i: FileRaftStore(str(tmp_path / f"node-{i}.raft")))
    elected(sim)
    for i in range(25):
        assert sim.commit_everywhere(f"r{i}", 200)
    terms = {i: n.current_term for i, n in sim.nodes.items()}
    for i in sim.ids:
        sim.stores[i].close()
        sim.crash(i)
    for i in sim.ids:
        sim.stores[i] = FileRaftStore(str(tmp_path / f"node-{i}.raft"))
        sim.restart(i)
        assert sim.nodes[i].current_term == terms[i]
        assert sim.nodes[i].snapshot.index > 0  # restored from the snapshot frame
    assert sim.commit_everywhere("after-restart", 500)
    for i in sim.ids:
        assert sim.applied_records(i) == [f"r{k}" for k in range(25)] + ["after-restart"]
    assert sim.final_check() == []


# ---- random fault schedules ------------------------------------------------------------------

def fault(size: int):
    node = st.integers(1, size)
    return st.one_of(
        st.tuples(st.just("crash"), node),
        st.tuples(st.just("restart"), node),
        st.tuples(st.just("reboot"), node),  # kill -9 and start again at once
        st.tuples(st.just("isolate"), node),
        st.tuples(st.just("crash-leader")),  # roles, as the harness's nemeses target them
        st.tuples(st.just("isolate-leader")),
        st.tuples(st.just("partition"), st.lists(st.integers(0, 2), min_size=size, max_size=size)),
        st.tuples(st.just("heal")),
        st.tuples(st.just("drop"), st.sampled_from([0.0, 0.1, 0.3])),
        st.tuples(st.just("duplicate"), st.sampled_from([0.0, 0.2])),
        st.tuples(st.just("delay"), st.integers(1, 25)),  # past the election timeout at the top
    )


def schedule(size: int):
    return st.lists(st.tuples(fault(size), st.integers(1, 80)), max_size=10)


def apply_fault(sim: SimCluster, f: tuple) -> None:
    kind = f[0]
    if kind == "crash":
        sim.crash(f[1])
    elif kind in ("restart", "reboot"):
        sim.restart(f[1])  # restart() crashes a running node first
    elif kind == "isolate":
        sim.isolate(f[1])
    elif kind in ("crash-leader", "isolate-leader"):
        leader = sim.leader()
        if leader is not None:
            (sim.crash if kind == "crash-leader" else sim.isolate)(leader.id)
    elif kind == "partition":
        groups: dict[int, set[int]] = {}
        for node, g in zip(sim.ids, f[1], strict=True):
            groups.setdefault(g, set()).add(node)
        sim.partition(*groups.values())
    elif kind == "heal":
        sim.net.heal()
    elif kind == "drop":
        sim.net.drop_rate = f[1]
    elif kind == "duplicate":
        sim.net.duplicate_rate = f[1]
    elif kind == "delay":
        sim.net.max_delay = f[1]


def run_schedule(size: int, seed: int, phases: list, snapshot_every: int = 0, **raft) -> tuple[SimCluster, bool]:
    """Run the fault phases (proposing every third tick), then stop the faults; returns the
    simulation and whether the quorum committed a last record on every node afterwards."""
    sim = SimCluster(size, seed=seed, snapshot_every=snapshot_every, **raft)
    n = 0
    for f, ticks in phases:
        apply_fault(sim, f)
        for t in range(ticks):
            if t % 3 == 0:
                sim.propose(f"v{n}")
                n += 1
            sim.step()
    # Faults stop: everything heals and restarts, and the quorum must make progress again.
    sim.net.heal()
    sim.net.drop_rate = sim.net.duplicate_rate = 0.0
    sim.net.max_delay = 3
    for i in sim.ids:
        if i not in sim.nodes:
            sim.restart(i)
    return sim, sim.commit_everywhere("final", 2000)


PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("size", [3, 5])
def test_random_fault_schedules_keep_raft_safe_and_live(size):
    @PROPERTY
    @given(seed=st.integers(0, 2**32), phases=schedule(size), snapshot_every=st.sampled_from([0, 10]),
           pre_vote=st.booleans(), max_entries=st.sampled_from([1, 256]))
    def check(seed, phases, snapshot_every, pre_vote, max_entries):
        sim, progressed = run_schedule(size, seed, phases, snapshot_every, pre_vote=pre_vote,
                                       max_entries_per_append=max_entries)
        assert sim.final_check() == []
        assert progressed, f"no progress after faults stopped (t={sim.now})"
        logs = [sim.applied[i] for i in sim.ids]
        shortest = min(len(a) for a in logs)
        assert all(a[:shortest] == logs[0][:shortest] for a in logs)

    check()


@pytest.mark.parametrize("variant, kind", [
    ("no-vote-log-check", "leader-completeness"),
    ("skip-prev-check", "log-matching"),
])
def test_random_fault_schedules_find_a_broken_rule(variant, kind):
    """Not only the staged scenarios: the random search itself finds these broken rules within
    a few hundred schedules. (forget-vote and commit-any-term need interleavings random
    schedules hit rarely, ~1 in 2000 or fewer, so only their staged scenarios above show them.)"""
    def violates(example) -> bool:
        seed, phases = example
        sim, _ = run_schedule(3, seed, phases, unsafe_variants=frozenset({variant}))
        return kind in {v.kind for v in sim.final_check()}

    find(st.tuples(st.integers(0, 2**32), schedule(3)), violates,
         settings=settings(max_examples=500, deadline=None, derandomize=True, database=None,
                           phases=[Phase.generate],  # the first hit is enough: no shrinking
                           suppress_health_check=list(HealthCheck)))
