"""Partition reassignment, preferred-leader election and broker unregistration in the controller
(PROTOCOL.md 7), with a controllable clock and no sockets."""

from __future__ import annotations

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER, MetadataImage
from tests.unit.test_controller import heartbeat, register
from tests.unit.test_controller_elr import Sim


def sim(n: int = 4, min_isr: int = 2, **config) -> Sim:
    s = Sim(n=n, min_isr=min_isr, **config)
    assert (s.p.replicas, s.p.isr, s.p.leader) == ([1, 2, 3], [1, 2, 3], 1)
    return s


def reassign(s: Sim, replicas: list[int] | None, topic: str = "t", partition: int = 0) -> dict:
    r = s.c.handle("alter_partition_reassignments",
                   {"reassignments": [{"topic": topic, "partition": partition, "replicas": replicas}]}, s.now)
    assert r["error"] == rpc.NONE and len(r["results"]) == 1, r
    return r["results"][0]


def leader_alter(s: Sim, isr: list[int]) -> dict:
    """The leader's AlterPartition adding caught-up replicas (with their registered epochs)."""
    p = s.p
    return s.c.handle("alter_partition", {
        "broker_id": p.leader, "broker_epoch": s.epochs[p.leader], "topic": "t", "partition": 0,
        "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
        "new_isr": [{"broker_id": r, "broker_epoch": -1 if r in p.isr else s.epochs[r]} for r in isr]}, s.now)


def shape(s: Sim) -> tuple:
    p = s.p
    return p.replicas, p.isr, p.leader, p.adding, p.removing


def test_grow_catch_up_complete():
    s = sim()
    le, pe = s.p.leader_epoch, s.p.partition_epoch
    assert reassign(s, [2, 3, 4])["error"] == rpc.NONE
    # Grow: target first, then the replicas being removed; only the partition epoch moves.
    assert shape(s) == ([2, 3, 4, 1], [1, 2, 3], 1, [4], [1])
    assert (s.p.leader_epoch, s.p.partition_epoch) == (le, pe + 1)
    listed = s.c.handle("list_partition_reassignments", {}, s.now)["reassignments"]
    assert listed == [{"topic": "t", "partition": 0, "replicas": [2, 3, 4, 1], "target": [2, 3, 4],
                       "adding": [4], "removing": [1]}]
    assert s.c.dump()["reassignments"] == listed
    # Nothing completes while 4 is not in the ISR, however long we wait.
    s.advance(500)
    assert shape(s)[3:] == ([4], [1])
    # Catch-up: the leader adds 4; the same request completes the reassignment; leader 1 was removed.
    r = leader_alter(s, [1, 2, 3, 4])
    assert r["error"] == rpc.NONE
    assert shape(s) == ([2, 3, 4], [2, 3, 4], 2, [], [])
    assert s.p.leader_epoch == le + 1
    assert s.p.partition_epoch == pe + 3  # grow, ISR change, completion
    assert r["partition"]["leader"] == 2  # the answer shows the completed state
    assert s.c.handle("list_partition_reassignments", {}, s.now)["reassignments"] == []
    # Every state was a metadata record: a replay reaches the same partition.
    img = MetadataImage()
    for o, rec in enumerate(s.c.take_pending()):
        img.apply(o, rec)
    assert img.partitions[("t", 0)] == s.p


def test_completion_blocked_while_isr_minus_removing_is_below_min_isr():
    s = sim(min_isr=2)
    s.shrink([1, 2])                       # 3 fell behind
    assert reassign(s, [1, 4])["error"] == rpc.NONE   # drops 2 and 3, adds 4
    assert shape(s) == ([1, 4, 2, 3], [1, 2], 1, [4], [2, 3])
    s.crash(2)                             # ISR [1]: 4 alone cannot be added to reach 2 without 2
    assert s.p.isr == [1]
    assert leader_alter(s, [1, 4])["error"] == rpc.NONE
    # ISR [1, 4] minus removing [2, 3] = 2 >= min ISR 2: completes.
    assert shape(s) == ([1, 4], [1, 4], 1, [], [])


def test_completion_waits_until_enough_target_replicas_are_in_sync():
    s = sim(min_isr=3)
    assert reassign(s, [1, 2, 4])["error"] == rpc.NONE
    s.crash(2)                              # ISR [1, 3] (3 is being removed)
    assert s.p.isr == [1, 3]
    assert leader_alter(s, [1, 3, 4])["error"] == rpc.NONE
    # adding [4] is in the ISR but ISR−removing = [1, 4] < 3: not complete.
    assert shape(s) == ([1, 2, 4, 3], [1, 4, 3], 1, [4], [3])
    s.come_back(2)
    assert leader_alter(s, [1, 2, 3, 4])["error"] == rpc.NONE
    assert shape(s) == ([1, 2, 4], [1, 2, 4], 1, [], [])


def test_tick_completes_a_reassignment_that_became_possible():
    s = sim(min_isr=2)
    assert reassign(s, [2, 3])["error"] == rpc.NONE   # removal only, completes at once
    assert shape(s) == ([2, 3], [2, 3], 2, [], [])
    s2 = sim(min_isr=2)
    s2.shrink([1, 2])
    assert reassign(s2, [2, 3])["error"] == rpc.NONE  # ISR−removing = [2] < 2: waits
    assert shape(s2)[3:] == ([], [1])
    # The leader adds 3 back: the AlterPartition completes it.
    assert leader_alter(s2, [1, 2, 3])["error"] == rpc.NONE
    assert shape(s2) == ([2, 3], [2, 3], 2, [], [])
    # A pending one is completed by tick too (the ISR grew by another path: an ELR election).
    s3 = sim(min_isr=2)
    s3.shrink([1, 2])
    reassign(s3, [2, 3])
    p = s3.c.image.partitions[("t", 0)]
    p.isr = [1, 2, 3]   # as if a record had said so; tick must notice
    s3.c.tick(s3.now)
    assert shape(s3) == ([2, 3], [2, 3], 2, [], [])


def test_removing_the_leader_reelects_in_target_order_and_bumps_both_epochs():
    s = sim()
    le, pe = s.p.leader_epoch, s.p.partition_epoch
    assert reassign(s, [3, 2])["error"] == rpc.NONE   # removal only, leader 1 removed
    assert shape(s) == ([3, 2], [3, 2], 3, [], [])
    assert (s.p.leader_epoch, s.p.partition_epoch) == (le + 1, pe + 2)
    # Keeping the leader still bumps the leader epoch at completion.
    s = sim()
    le = s.p.leader_epoch
    assert reassign(s, [1, 2])["error"] == rpc.NONE
    assert shape(s) == ([1, 2], [1, 2], 1, [], [])
    assert s.p.leader_epoch == le + 1


def test_removed_members_leave_elr_and_last_known_elr():
    s = sim(n=4, min_isr=3)
    s.shrink([1, 2])            # below min ISR 3: the replica the ISR lost joins the ELR
    assert s.p.elr == [3]       # KIP-966: the replica the ISR lost while below min ISR
    reassign(s, [1, 2, 4])
    leader_alter(s, [1, 2, 4])
    assert shape(s) == ([1, 2, 4], [1, 2, 4], 1, [], [])
    assert s.p.elr == [] and s.p.last_known_elr == []


def test_cancel_reverts_to_the_original_replicas():
    s = sim()
    reassign(s, [2, 3, 4])
    leader_alter(s, [1, 2, 3])  # no change: 4 still catching up
    le = s.p.leader_epoch
    r = reassign(s, None)
    assert r["error"] == rpc.NONE, r
    # Kafka's revert: the grown list without the adding replicas (the target's order first).
    assert shape(s) == ([2, 3, 1], [2, 3, 1], 1, [], [])
    assert s.p.leader_epoch == le + 1
    assert s.c.handle("list_partition_reassignments", {}, s.now)["reassignments"] == []
    # Nothing left to cancel.
    assert reassign(s, None)["error"] == rpc.NO_REASSIGNMENT_IN_PROGRESS


def test_cancel_after_the_new_replicas_took_over_reelects_among_the_originals():
    s = sim(n=5, min_isr=2)
    reassign(s, [4, 5])
    leader_alter(s, [1, 2, 3, 4])           # 5 not yet: still reassigning
    assert shape(s)[3:] == ([4, 5], [1, 2, 3])
    s.crash(1)                              # the leader moves to 4 (replicas 4, 5, 1, 2, 3)
    assert s.p.leader == 4
    r = reassign(s, None)
    assert r["error"] == rpc.NONE, r
    assert shape(s) == ([1, 2, 3], [2, 3], 2, [], [])


def test_cancel_refused_when_no_original_replica_is_in_the_isr():
    s = sim(n=5, min_isr=1)
    reassign(s, [4, 5])
    leader_alter(s, [1, 2, 3, 4])
    s.crash(1, 2, 3)
    assert s.p.isr == [4] and s.p.elr == []
    r = reassign(s, None)
    assert r["error"] == rpc.INVALID_REPLICA_ASSIGNMENT
    assert "unclean" in r["message"]
    assert shape(s)[3:] == ([4, 5], [1, 2, 3])  # unchanged
    # With unclean election the same cancel goes through (a live original replica leads).
    s = sim(n=5, min_isr=1, unclean_leader_election=True)
    reassign(s, [4, 5])
    leader_alter(s, [1, 2, 3, 4])
    s.crash(1, 2)
    s.c.handle("alter_partition", {"broker_id": s.p.leader, "broker_epoch": s.epochs[s.p.leader],
                                    "topic": "t", "partition": 0, "leader_epoch": s.p.leader_epoch,
                                    "partition_epoch": s.p.partition_epoch,
                                    "new_isr": [{"broker_id": 4, "broker_epoch": -1}]}, s.now)
    assert s.p.isr == [4]
    assert reassign(s, None)["error"] == rpc.NONE
    assert s.p.replicas == [1, 2, 3] or sorted(s.p.replicas) == [1, 2, 3]
    assert s.p.leader == 3 and s.p.isr == [3]


def test_second_reassignment_is_refused_while_one_is_in_progress():
    s = sim()
    reassign(s, [2, 3, 4])
    r = reassign(s, [1, 2, 4])
    assert r["error"] == rpc.REASSIGNMENT_IN_PROGRESS
    assert "cancel" in r["message"]
    assert shape(s)[3:] == ([4], [1])


def test_bad_input_one_clear_error_each():
    s = sim()
    before = s.c.end_offset
    r = reassign(s, [2, 3, 4], topic="nope")
    assert r["error"] == rpc.UNKNOWN_TOPIC_OR_PARTITION and "does not exist" in r["message"]
    r = reassign(s, [2, 3, 4], partition=7)
    assert r["error"] == rpc.UNKNOWN_TOPIC_OR_PARTITION
    r = reassign(s, [2, 2, 4])
    assert r["error"] == rpc.INVALID_REPLICA_ASSIGNMENT and "duplicates" in r["message"]
    r = reassign(s, [2, 3, 9])
    assert r["error"] == rpc.INVALID_REPLICA_ASSIGNMENT and "[9]" in r["message"] and "not registered" in r["message"]
    r = reassign(s, [])
    assert r["error"] == rpc.INVALID_REPLICA_ASSIGNMENT and "empty" in r["message"]
    r = reassign(s, [4])
    assert r["error"] == rpc.INVALID_REPLICA_ASSIGNMENT and "min.insync.replicas" in r["message"]
    assert s.c.end_offset == before  # no record written
    bad = s.c.handle("alter_partition_reassignments", {"reassignments": None}, s.now)
    assert bad["error"] == rpc.INVALID_REQUEST


def test_new_replica_joins_isr_only_when_live():
    s = sim()
    reassign(s, [2, 3, 4])
    s.crash(4)
    r = leader_alter(s, [1, 2, 3, 4])
    assert r["error"] == rpc.INELIGIBLE_REPLICA
    assert shape(s)[3:] == ([4], [1])


def test_preferred_leader_election():
    s = sim()
    s.crash(1)
    assert s.p.leader == 2
    s.restart(1, clean=True)
    # 1 is not in the ISR yet: not available.
    r = s.c.handle("elect_preferred_leaders", {"partitions": [{"topic": "t", "partition": 0}]}, s.now)
    assert r["results"][0]["error"] == rpc.PREFERRED_LEADER_NOT_AVAILABLE
    assert s.p.leader == 2
    leader_alter(s, [1, 2, 3])
    le, pe = s.p.leader_epoch, s.p.partition_epoch
    r = s.c.handle("elect_preferred_leaders", {"partitions": None}, s.now)
    assert r["results"] == [{"topic": "t", "partition": 0, "error": rpc.NONE, "message": None, "leader": 1}]
    assert (s.p.leader, s.p.leader_epoch, s.p.partition_epoch) == (1, le + 1, pe + 1)
    r = s.c.handle("elect_preferred_leaders", {"partitions": [{"topic": "t", "partition": 0},
                                                               {"topic": "x", "partition": 0}]}, s.now)
    assert [x["error"] for x in r["results"]] == [rpc.ELECTION_NOT_NEEDED, rpc.UNKNOWN_TOPIC_OR_PARTITION]
    assert s.p.leader_epoch == le + 1


def test_preferred_leader_after_reassignment_is_the_targets_first():
    s = sim()
    reassign(s, [4, 1, 2])
    leader_alter(s, [1, 2, 3, 4])
    assert shape(s) == ([4, 1, 2], [4, 1, 2], 1, [], [])  # leader 1 stays
    s.c.handle("elect_preferred_leaders", {"partitions": None}, s.now)
    assert s.p.leader == 4


def test_unregister_broker():
    s = sim()
    r = s.c.handle("unregister_broker", {"broker_id": 1}, s.now)
    assert r["error"] != rpc.NONE and "replica of 1 partitions" in r["message"]
    r = s.c.handle("unregister_broker", {"broker_id": 4}, s.now)
    assert r["error"] != rpc.NONE and "unfenced" in r["message"]
    assert 4 in s.c.image.brokers
    s.crash(4)
    r = s.c.handle("unregister_broker", {"broker_id": 4}, s.now)
    assert r["error"] == rpc.NONE, r
    assert 4 not in s.c.image.brokers and 4 not in s.c.sessions
    assert s.c.handle("unregister_broker", {"broker_id": 4}, s.now)["error"] == rpc.BROKER_ID_NOT_REGISTERED
    # Its heartbeat is refused; it registers anew with a fresh, higher epoch and is clean.
    old_epoch = s.epochs[4]
    assert heartbeat(s.c, 4, old_epoch, s.now)["error"] == rpc.BROKER_ID_NOT_REGISTERED
    s.dead.discard(4)
    s.epochs[4] = register(s.c, 4, now=s.now, incarnation="back")
    assert s.epochs[4] > old_epoch
    assert heartbeat(s.c, 4, s.epochs[4], s.now)["is_fenced"] is False
    assert s.c.image.brokers[4].clean
    # Reassigning to it works again.
    assert reassign(s, [1, 2, 4])["error"] == rpc.NONE


def test_leaderless_partition_with_removed_leader_gets_a_target_leader_at_completion():
    s = sim(min_isr=1)
    reassign(s, [2, 3, 4])
    leader_alter(s, [1, 4])
    # The ISR-change record and completion: ISR [1, 4] − [1] = [4] >= 1.
    assert shape(s) == ([2, 3, 4], [4], 4, [], [])
    assert s.p.leader != NO_LEADER


# --- the leader's side (replica.py): replicas added within a leader epoch -----------------------

def test_leader_serves_a_replica_being_added_and_proposes_it_for_the_isr(tmp_path):
    from kafkaesque_harness.clusters.broker.metadata import BrokerInfo, PartitionState
    from tests.unit.test_replica import make_replica, produce, replicate

    leader, new = make_replica(tmp_path, 1), make_replica(tmp_path, 4)
    leader.apply_partition_state(PartitionState("t", 0, [1, 2, 3], [1, 2, 3], 1, 1, 1), 0)
    produce(leader, 5)
    # Grow within leader epoch 1: the partition epoch alone moves (PROTOCOL.md 7.1).
    grown = PartitionState("t", 0, [2, 3, 4, 1], [1, 2, 3], 1, 1, 2, adding=[4], removing=[1])
    assert leader.apply_partition_state(grown, 10) is None
    assert leader.leader_epoch == 1 and 4 in leader.followers
    new.apply_partition_state(grown, 10)
    replicate(leader, new, 20, broker_epoch=40)
    replicate(leader, new, 30, broker_epoch=40)
    assert new.leo == 5
    infos = {b: BrokerInfo(b, 40 if b == 4 else 10, "inc", "127.0.0.1", 9000 + b, fenced=False) for b in (1, 2, 3, 4)}
    # Decided on 4's fetch. 2 and 3 have not fetched in this epoch, but they are ISR members
    # within the lag time.
    body = leader.wanted_isr_change(30, infos, fetched_by=4)
    assert body is not None
    assert [m["broker_id"] for m in body["new_isr"]] == [2, 3, 4, 1]
    assert {m["broker_id"]: m["broker_epoch"] for m in body["new_isr"]}[4] == 40
    # Cancelled: 4 is no replica any more and its fetches are refused.
    leader.on_alter_partition_response({"error": rpc.INVALID_UPDATE_VERSION})
    reverted = PartitionState("t", 0, [2, 3, 1], [2, 3, 1], 1, 2, 3)
    leader.apply_partition_state(reverted, 50)
    req = new.fetch_request(40, 1 << 20)
    req["current_leader_epoch"] = 2
    assert leader.record_follower_fetch(req, 60)["error"] == rpc.NOT_LEADER_OR_FOLLOWER
    # Removed within the same leader epoch too (no epoch bump): refused as well.
    leader2 = make_replica(tmp_path / "b", 1)
    leader2.apply_partition_state(PartitionState("t", 0, [1, 2, 4], [1, 2, 4], 1, 1, 1), 0)
    leader2.apply_partition_state(PartitionState("t", 0, [1, 2], [1, 2], 1, 1, 2), 0)
    assert 4 not in leader2.followers


# --- the client (reassign.py): following NOT_CONTROLLER -----------------------------------------

def test_controller_call_follows_the_not_controller_hint_and_skips_dead_addresses():
    import json
    import socket
    import struct
    import threading

    from kafkaesque_harness.clusters.broker.reassign import ReassignError, controller_call

    def serve(answer):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        seen = []

        def loop():
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                with conn:
                    n = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
                    msg = json.loads(conn.recv(n, socket.MSG_WAITALL)[:-rpc.TAG_BYTES])  # the tag: rpc.py
                    seen.append(msg["api"])
                    data = json.dumps({"id": msg["id"], "body": answer()}).encode()
                    conn.sendall(struct.pack(">i", len(data)) + data)

        threading.Thread(target=loop, daemon=True).start()
        return srv, seen

    active, active_seen = serve(lambda: {"error": rpc.NONE, "reassignments": []})
    active_addr = f"127.0.0.1:{active.getsockname()[1]}"
    follower, follower_seen = serve(lambda: {"error": rpc.NOT_CONTROLLER, "leader": active_addr})
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_addr = f"127.0.0.1:{dead.getsockname()[1]}"
    dead.close()
    try:
        resp = controller_call(f"{dead_addr},127.0.0.1:{follower.getsockname()[1]}",
                               "list_partition_reassignments", {}, secret=rpc.new_secret())
        assert resp == {"error": rpc.NONE, "reassignments": []}
        assert follower_seen == ["list_partition_reassignments"]
        assert active_seen == ["list_partition_reassignments"]
        try:
            controller_call(dead_addr, "list_partition_reassignments", {}, retry_s=0, secret=rpc.new_secret())
        except ReassignError as e:
            assert "no active controller" in str(e)
        else:
            raise AssertionError("a dead controller must raise ReassignError")
    finally:
        active.close()
        follower.close()
