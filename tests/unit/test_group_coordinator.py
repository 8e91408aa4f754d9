"""The group coordinator's state machine (clusters/broker/group_coordinator.py) with a fake clock: every
state transition and every error of the classic protocol, and the offsets rebuilt from records."""

from __future__ import annotations

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.group_coordinator import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    CoordinatorConfig,
    GroupCoordinator,
    JoinResult,
    SyncResult,
    java_string_hash,
    offset_record,
)

G = "g"
RANGE = [("range", b"r-meta")]
SESSION, REBALANCE = 10_000, 30_000


def loaded(delay_ms: int = 0) -> GroupCoordinator:
    c = GroupCoordinator(CoordinatorConfig(offsets_partitions=1, initial_rebalance_delay_ms=delay_ms))
    c.begin_loading(0)
    c.load(0, [])
    return c


def join(c, waiter, member_id="", now=0, protocols=RANGE, v4=False, session=SESSION, ptype="consumer"):
    return c.join(waiter, G, member_id, ptype, protocols, session, REBALANCE, v4, now)


def only(replies, waiter):
    got = [r for w, r in replies if w == waiter]
    assert len(got) == 1, replies
    return got[0]


def stable_group_of_two(c):
    """Members a (leader) and b in generation 1, assignments synced."""
    a = only(join(c, "a1"), "a1")
    assert a.error == rpc.NONE and a.generation_id == 1
    # b joins: a new rebalance; it completes once a joins again.
    c.sync("as", G, 1, a.member_id, None, None, {a.member_id: b"A"}, 0)
    assert join(c, "b1") == []
    replies = join(c, "a2", a.member_id)
    ja, jb = only(replies, "a2"), only(replies, "b1")
    assert ja.generation_id == jb.generation_id == 2 and ja.leader == a.member_id
    sync_b = c.sync("bs", G, 2, jb.member_id, None, None, {}, 0)
    assert sync_b == []  # parked until the leader's assignment
    replies = c.sync("as2", G, 2, a.member_id, None, None, {a.member_id: b"A", jb.member_id: b"B"}, 0)
    assert only(replies, "bs").assignment == b"B" and only(replies, "as2").assignment == b"A"
    assert c.groups[G].state == STABLE
    return a.member_id, jb.member_id


# --- coordinator ownership -------------------------------------------------------------------------
def test_a_partition_not_led_here_answers_not_coordinator():
    c = GroupCoordinator(CoordinatorConfig(offsets_partitions=1))
    assert only(join(c, "w"), "w").error == rpc.NOT_COORDINATOR
    assert c.heartbeat(G, 1, "m", 0) == rpc.NOT_COORDINATOR
    assert c.check_commit(G, -1, "", 0) == rpc.NOT_COORDINATOR


def test_a_loading_partition_answers_load_in_progress_until_loaded():
    c = GroupCoordinator(CoordinatorConfig(offsets_partitions=1, initial_rebalance_delay_ms=0))
    c.begin_loading(0)
    assert only(join(c, "w"), "w").error == rpc.COORDINATOR_LOAD_IN_PROGRESS
    assert c.committed_offsets(G, None)[0] == rpc.COORDINATOR_LOAD_IN_PROGRESS
    assert c.check_commit(G, -1, "", 0) == rpc.COORDINATOR_LOAD_IN_PROGRESS
    assert c.heartbeat(G, 1, "m", 0) == rpc.NONE  # Kafka answers a loading group's heartbeats blindly
    c.load(0, [])
    assert only(join(c, "w"), "w").error == rpc.NONE


def test_group_partition_is_kafkas_java_hash():
    assert java_string_hash("group") == 98629247
    assert java_string_hash("") == 0
    # The well-known Java string whose hashCode is Integer.MIN_VALUE; Kafka's Utils.abs maps it to 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    c = GroupCoordinator(CoordinatorConfig(offsets_partitions=5))
    assert c.partition_for("group") == 98629247 % 5
    assert c.partition_for("polygenelubricants") == 0


def test_unload_forgets_groups_and_answers_parked_requests_not_coordinator():
    c = loaded(delay_ms=1000)
    replies = join(c, "w")
    assert replies == []  # parked in the initial delay
    assert only(c.unload(0), "w").error == rpc.NOT_COORDINATOR
    assert G not in c.groups and c.status(G) == rpc.NOT_COORDINATOR


# --- JoinGroup -------------------------------------------------------------------------------------
def test_first_member_becomes_leader_of_generation_one():
    c = loaded()
    r = only(join(c, "w"), "w")
    assert (r.error, r.generation_id, r.leader, r.protocol_name) == (rpc.NONE, 1, r.member_id, "range")
    assert r.members == [(r.member_id, b"r-meta")]
    assert c.groups[G].state == COMPLETING_REBALANCE


def test_join_v4_without_member_id_requires_one_then_accepts_it():
    c = loaded()
    r = only(join(c, "w", v4=True), "w")
    assert r.error == rpc.MEMBER_ID_REQUIRED and r.member_id
    assert c.groups[G].state == EMPTY and r.member_id in c.groups[G].pending_members
    r2 = only(join(c, "w2", r.member_id, v4=True), "w2")
    assert r2.error == rpc.NONE and r2.member_id == r.member_id and r2.generation_id == 1


def test_pending_member_id_expires_after_its_session():
    c = loaded()
    r = only(join(c, "w", v4=True), "w")
    c.tick(SESSION + 1)
    assert only(join(c, "w2", r.member_id, now=SESSION + 1, v4=True), "w2").error == rpc.UNKNOWN_MEMBER_ID


def test_unknown_member_id_is_refused():
    c = loaded()
    assert only(join(c, "w", "nobody"), "w").error == rpc.UNKNOWN_MEMBER_ID
    stable_group_of_two(c)
    assert only(join(c, "w", "nobody"), "w").error == rpc.UNKNOWN_MEMBER_ID


def test_session_timeout_out_of_bounds_is_refused():
    c = loaded()
    assert only(join(c, "w", session=1000), "w").error == rpc.INVALID_SESSION_TIMEOUT
    assert only(join(c, "w", session=10**9), "w").error == rpc.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_refused():
    c = loaded()
    assert only(c.join("w", "", "", "consumer", RANGE, SESSION, REBALANCE, False, 0), "w").error == rpc.INVALID_GROUP_ID


def test_a_member_without_a_common_protocol_is_refused():
    c = loaded()
    join(c, "w")
    assert only(join(c, "x", protocols=[("roundrobin", b"")]), "x").error == rpc.INCONSISTENT_GROUP_PROTOCOL
    assert only(join(c, "y", ptype="connect"), "y").error == rpc.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_is_one_every_member_supports_by_votes():
    c = loaded(delay_ms=100)
    both = [("roundrobin", b"rr"), ("range", b"r")]
    join(c, "a", protocols=[("cooperative-sticky", b"cs"), ("range", b"r"), ("roundrobin", b"rr")])
    join(c, "b", protocols=both)
    replies = join(c, "c", protocols=both) + c.tick(200)
    results = [r for _, r in replies]
    assert len(results) == 3 and {r.protocol_name for r in results} == {"roundrobin"}
    leader = next(r for r in results if r.members)
    assert sorted(meta for _, meta in leader.members) == [b"rr", b"rr", b"rr"]  # the chosen protocol's bytes, opaque


def test_initial_delay_gathers_members_into_one_generation():
    c = loaded(delay_ms=3000)
    assert join(c, "a", now=0) == []
    assert join(c, "b", now=1000) == []
    assert c.tick(3500) == []  # b extended the delay to 4000
    replies = c.tick(4000)
    assert {r.generation_id for _, r in replies} == {1} and len(replies) == 2


def test_members_that_do_not_rejoin_by_the_rebalance_deadline_are_dropped():
    c = loaded()
    a, b = stable_group_of_two(c)
    assert join(c, "a3", a) == []  # the leader rejoins: a rebalance; b has not joined yet
    for now in range(100, REBALANCE, SESSION // 2):  # b stays alive but never rejoins
        assert c.heartbeat(G, 2, b, now) == rpc.REBALANCE_IN_PROGRESS
        assert c.tick(now) == []
    r = only(c.tick(REBALANCE + 100), "a3")
    assert r.generation_id == 3 and [m for m, _ in r.members] == [a]


def test_follower_rejoining_unchanged_in_stable_gets_current_generation():
    c = loaded()
    a, b = stable_group_of_two(c)
    r = only(join(c, "b2", b), "b2")
    assert r.error == rpc.NONE and r.generation_id == 2 and r.members == [] and c.groups[G].state == STABLE


def test_member_changing_protocols_triggers_a_rebalance():
    c = loaded()
    a, b = stable_group_of_two(c)
    assert join(c, "b2", b, protocols=[("range", b"new")]) == []
    assert c.groups[G].state == PREPARING_REBALANCE
    r = only(join(c, "a3", a), "a3")
    assert r.generation_id == 3 and dict(r.members)[b] == b"new"


def test_leader_leaving_hands_leadership_to_a_remaining_member():
    c = loaded()
    a, b = stable_group_of_two(c)
    err, per_member, _ = c.leave(G, [a], 0)
    assert (err, per_member) == (rpc.NONE, [rpc.NONE])
    r = only(join(c, "b2", b), "b2")
    assert r.leader == b and r.generation_id == 3


def test_a_superseded_parked_join_is_answered():
    c = loaded(delay_ms=1000)
    assert join(c, "a") == []
    mid = next(iter(c.groups[G].members))
    replies = join(c, "a-retry", mid)
    assert only(replies, "a").error == rpc.REBALANCE_IN_PROGRESS


# --- SyncGroup -------------------------------------------------------------------------------------
def test_sync_errors_unknown_member_illegal_generation_inconsistent_protocol():
    c = loaded()
    a, b = stable_group_of_two(c)
    assert only(c.sync("w", G, 2, "nobody", None, None, {}, 0), "w").error == rpc.UNKNOWN_MEMBER_ID
    assert only(c.sync("w", G, 1, b, None, None, {}, 0), "w").error == rpc.ILLEGAL_GENERATION
    assert only(c.sync("w", G, 2, b, "consumer", "roundrobin", {}, 0), "w").error == rpc.INCONSISTENT_GROUP_PROTOCOL
    assert only(c.sync("w", "other", 2, b, None, None, {}, 0), "w").error == rpc.UNKNOWN_MEMBER_ID


def test_sync_during_preparing_rebalance_is_refused():
    c = loaded()
    a, b = stable_group_of_two(c)
    join(c, "a3", a)
    assert only(c.sync("w", G, 2, b, None, None, {}, 0), "w").error == rpc.REBALANCE_IN_PROGRESS


def test_parked_sync_is_told_rebalance_in_progress_when_a_rebalance_starts():
    c = loaded()
    a, b = stable_group_of_two(c)
    join(c, "a3", a)
    replies = join(c, "b3", b)
    assert {only(replies, w).generation_id for w in ("a3", "b3")} == {3}
    assert c.sync("bs", G, 3, b, None, None, {}, 0) == []
    replies = join(c, "x", "")  # a new member: the abandoned generation's parked sync is answered
    assert only(replies, "bs").error == rpc.REBALANCE_IN_PROGRESS


def test_leader_that_never_syncs_is_dropped_at_the_sync_deadline():
    c = loaded()
    a, b = stable_group_of_two(c)
    join(c, "a3", a)
    join(c, "b3", b)
    assert c.sync("bs", G, 3, b, None, None, {}, 0) == []
    replies = c.tick(REBALANCE + 1)
    # a (the leader) is gone; b's parked sync is told to rejoin, and its join then leads generation 4.
    assert only(replies, "bs").error == rpc.REBALANCE_IN_PROGRESS
    r = only(join(c, "b4", b, now=REBALANCE + 2), "b4")
    assert (r.generation_id, r.leader) == (4, b) and a not in c.groups[G].members


# --- Heartbeat, sessions, LeaveGroup ----------------------------------------------------------------
def test_heartbeat_errors_and_success():
    c = loaded()
    a, b = stable_group_of_two(c)
    assert c.heartbeat(G, 2, a, 0) == rpc.NONE
    assert c.heartbeat(G, 1, a, 0) == rpc.ILLEGAL_GENERATION
    assert c.heartbeat(G, 2, "nobody", 0) == rpc.UNKNOWN_MEMBER_ID
    assert c.heartbeat("other", 2, a, 0) == rpc.UNKNOWN_MEMBER_ID


def test_heartbeat_in_completing_rebalance_is_accepted():
    c = loaded()
    r = only(join(c, "a"), "a")
    assert c.groups[G].state == COMPLETING_REBALANCE
    assert c.heartbeat(G, 1, r.member_id, 0) == rpc.NONE


def test_a_silent_member_expires_and_the_group_rebalances_without_it():
    c = loaded()
    a, b = stable_group_of_two(c)
    c.heartbeat(G, 2, a, SESSION - 1)  # a stays alive; b is silent
    c.tick(SESSION + 1)
    g = c.groups[G]
    assert b not in g.members and g.state == PREPARING_REBALANCE
    r = only(join(c, "a3", a, now=SESSION + 2), "a3")
    assert r.generation_id == 3 and [m for m, _ in r.members] == [a]
    c.sync("as", G, 3, a, None, None, {a: b"A"}, SESSION + 2)
    # b, expired, is fenced everywhere.
    assert c.heartbeat(G, 2, b, SESSION + 3) == rpc.UNKNOWN_MEMBER_ID
    assert c.check_commit(G, 2, b, SESSION + 3) == rpc.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group_and_bumps_the_generation():
    c = loaded()
    r = only(join(c, "a"), "a")
    c.sync("s", G, 1, r.member_id, None, None, {r.member_id: b"x"}, 0)
    err, per_member, _ = c.leave(G, [r.member_id, "nobody"], 0)
    assert (err, per_member) == (rpc.NONE, [rpc.NONE, rpc.UNKNOWN_MEMBER_ID])
    g = c.groups[G]
    assert (g.state, g.generation_id, g.members) == (EMPTY, 2, {})


def test_leave_of_an_unknown_group():
    c = loaded()
    assert c.leave("nope", ["m"], 0)[0] == rpc.UNKNOWN_MEMBER_ID


# --- OffsetCommit / OffsetFetch ------------------------------------------------------------------
def test_commit_fencing():
    c = loaded()
    assert c.check_commit(G, -1, "", 0) == rpc.NONE  # no group: a consumer assigning partitions itself
    assert c.check_commit(G, 3, "m", 0) == rpc.ILLEGAL_GENERATION  # no group but a generation: stale
    a, b = stable_group_of_two(c)
    assert c.check_commit(G, 2, b, 0) == rpc.NONE
    assert c.check_commit(G, 1, b, 0) == rpc.ILLEGAL_GENERATION
    assert c.check_commit(G, 2, "nobody", 0) == rpc.UNKNOWN_MEMBER_ID
    assert c.check_commit(G, -1, "", 0) == rpc.UNKNOWN_MEMBER_ID  # a group with members: no anonymous commits
    join(c, "a3", a)
    assert c.check_commit(G, 2, b, 0) == rpc.NONE  # Kafka lets members commit while a rebalance prepares
    join(c, "b3", b)
    assert c.groups[G].state == COMPLETING_REBALANCE
    assert c.check_commit(G, 3, b, 0) == rpc.REBALANCE_IN_PROGRESS


def test_offsets_are_rebuilt_from_records_newest_record_wins():
    c = GroupCoordinator(CoordinatorConfig(offsets_partitions=1))
    c.begin_loading(0)
    records = [(0, *offset_record(G, "t", 0, (5, 1, ""))),
               (1, *offset_record(G, "t", 1, (7, 1, "m"))),
               (2, *offset_record(G, "t", 0, (9, 2, ""))),
               (3, None, None)]
    c.load(0, records)
    err, got = c.committed_offsets(G, None)
    assert err == rpc.NONE and {tp: o.offset for tp, o in got.items()} == {("t", 0): 9, ("t", 1): 7}
    c.apply_record(1, *offset_record(G, "t", 0, (3, 1, "")))  # an older record never overrides a newer one
    assert c.committed_offsets(G, [("t", 0), ("t", 9)])[1][("t", 0)].offset == 9
    assert ("t", 9) not in c.committed_offsets(G, [("t", 9)])[1]


def test_load_after_unload_is_ignored():
    c = GroupCoordinator(CoordinatorConfig(offsets_partitions=1))
    c.begin_loading(0)
    c.unload(0)
    c.load(0, [(0, *offset_record(G, "t", 0, (5, 1, "")))])
    assert c.status(G) == rpc.NOT_COORDINATOR and G not in c.groups


def test_results_are_the_declared_types():
    c = loaded()
    assert isinstance(only(join(c, "a"), "a"), JoinResult)
    assert isinstance(only(c.sync("s", G, 9, "x", None, None, {}, 0), "s"), SyncResult)


# --- offsets committed in transactions (TxnOffsetCommit, KIP-98) -------------------------------------------
def txn_offset(c, pid, record_offset, offset, topic="t", partition=0):
    c.apply_txn_record(pid, record_offset, *offset_record(G, topic, partition, (offset, -1, "")))


def test_transactional_offsets_are_invisible_until_the_commit_marker():
    c = loaded()
    txn_offset(c, 7, 10, 42)
    assert c.committed_offsets(G, [("t", 0)]) == (rpc.NONE, {})
    c.end_txn(0, 7, True)
    assert c.committed_offsets(G, [("t", 0)])[1][("t", 0)].offset == 42
    assert c.pending_txn == {}


def test_transactional_offsets_are_dropped_by_an_abort_marker():
    c = loaded()
    c.apply_record(5, *offset_record(G, "t", 0, (3, -1, "")))
    txn_offset(c, 7, 10, 42)
    c.end_txn(0, 7, False)
    assert c.committed_offsets(G, [("t", 0)])[1][("t", 0)].offset == 3


def test_a_newer_plain_commit_wins_over_an_older_transactional_one():
    c = loaded()
    txn_offset(c, 7, 10, 42)
    c.apply_record(11, *offset_record(G, "t", 0, (50, -1, "")))
    c.end_txn(0, 7, True)
    assert c.committed_offsets(G, [("t", 0)])[1][("t", 0)].offset == 50


def test_load_replays_transactional_offsets_and_their_markers_in_log_order():
    c = GroupCoordinator(CoordinatorConfig(offsets_partitions=1))
    c.begin_loading(0)
    k1, v1 = offset_record(G, "t", 0, (42, -1, ""))
    k2, v2 = offset_record(G, "t", 1, (9, -1, ""))
    c.load(0, [(0, k1, v1, (7, "data")), (1, b"\0\0\0\1", b"", (7, "commit")),
               (2, k2, v2, (8, "data")), (3, b"\0\0\0\0", b"", (8, "abort")),
               (4, k2, v2, (9, "data"))])  # producer 9's transaction still open
    offsets = c.committed_offsets(G, None)[1]
    assert {tp: o.offset for tp, o in offsets.items()} == {("t", 0): 42}
    assert list(c.pending_txn) == [9]


def test_a_partition_is_unstable_while_a_transaction_holds_an_offset_for_it():
    c = loaded()
    txn_offset(c, 7, 10, 42)
    assert c.txn_pending(G, ("t", 0)) and not c.txn_pending(G, ("t", 1)) and not c.txn_pending("other", ("t", 0))
    c.end_txn(0, 7, True)
    assert not c.txn_pending(G, ("t", 0))


def test_a_group_emptied_takes_commits_of_generation_minus_one_only():
    # Issue 40: the members of the last generation left; a zombie of it commits with its old generation and id.
    c = loaded()
    a, b = stable_group_of_two(c)
    assert c.leave(G, [a, b], 0)[0] == rpc.NONE
    assert c.groups[G].state == EMPTY
    assert c.check_commit(G, 2, a, 0) == rpc.UNKNOWN_MEMBER_ID
    assert c.check_commit(G, -1, "", 0) == rpc.NONE  # a consumer assigning partitions itself
