"""The consumer-group wire handlers (kafka_api.py): requests encoded by kafka-python, responses decoded by
kafka-python, with the real group coordinator behind a stub of the broker shell (its replication path
is a stub that applies a commit at once; the real one is exercised by tests/integration/test_groups.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kafka.protocol.consumer import group as group_api
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.group_coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    offset_record,
)
from kafkaesque_harness.clusters.broker.server import Broker
from tests.unit.test_kafka_api import roundtrip

G = "grp"


class GroupStubBroker:
    node_id = 2

    def __init__(self, loaded: bool = True) -> None:
        self.groups = GroupCoordinator(CoordinatorConfig(offsets_partitions=1, initial_rebalance_delay_ms=0))
        if loaded:
            self.groups.begin_loading(0)
            self.groups.load(0, [])
        self.commits: list[tuple] = []

    def deliver(self, replies) -> None:
        for waiter, result in replies:
            if not waiter.done():
                waiter.set_result(result)

    group_wait = Broker.group_wait  # the shell's own: a join or sync answered by a later event

    async def find_coordinator(self, group_id):
        return rpc.NONE, SimpleNamespace(broker_id=3, host="h3", port=9093)

    async def commit_offsets(self, group_id, generation_id, member_id, offsets, timeout_s):
        self.commits.append((group_id, generation_id, member_id, offsets))
        err = self.groups.check_commit(group_id, generation_id, member_id, 0)
        if err == rpc.NONE:
            for i, (t, p, o, e, m) in enumerate(offsets):
                self.groups.apply_record(len(self.commits) * 100 + i, *offset_record(group_id, t, p, (o, e, m)))
        return err


def join(b: GroupStubBroker, member_id: str = "", version: int = 7) -> Any:
    req = group_api.JoinGroupRequest(version=version, group_id=G, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                           member_id=member_id, group_instance_id=None, protocol_type="consumer",
                           protocols=[group_api.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"meta")],
                           reason=None)
    return roundtrip(b, req, group_api.JoinGroupResponse, version)


def joined_leader(b: GroupStubBroker) -> Any:
    first = join(b)
    assert first.error_code == rpc.MEMBER_ID_REQUIRED
    r = join(b, first.member_id)
    assert r.error_code == rpc.NONE
    return r


def test_api_versions_advertises_the_group_apis():
    resp = roundtrip(GroupStubBroker(), ApiVersionsRequest(version=3, client_software_name="x",
                                                           client_software_version="1"), ApiVersionsResponse, 3)
    caps = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert caps[8] == (2, 8) and caps[9] == (2, 8) and caps[10] == (0, 4)
    assert caps[11] == (0, 9) and caps[12] == (0, 4) and caps[13] == (0, 5) and caps[14] == (0, 5)


def test_find_coordinator_old_and_batched_shapes():
    old = roundtrip(GroupStubBroker(), FindCoordinatorRequest(version=2, key=G, key_type=0), FindCoordinatorResponse, 2)
    assert (old.error_code, old.node_id, old.host, old.port) == (0, 3, "h3", 9093)
    new = roundtrip(GroupStubBroker(), FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=[G, "h"]),
                    FindCoordinatorResponse, 4)
    assert [(c.key, c.node_id, c.error_code) for c in new.coordinators] == [(G, 3, 0), ("h", 3, 0)]


def test_join_sync_heartbeat_leave_on_the_wire():
    b = GroupStubBroker()
    r = joined_leader(b)
    assert (r.generation_id, r.leader, r.protocol_name) == (1, r.member_id, "range")
    assert [(m.member_id, bytes(m.metadata)) for m in r.members] == [(r.member_id, b"meta")]
    S = group_api.SyncGroupRequest
    sync = roundtrip(b, S(version=5, group_id=G, generation_id=1, member_id=r.member_id, group_instance_id=None,
                          protocol_type="consumer", protocol_name="range",
                          assignments=[S.SyncGroupRequestAssignment(member_id=r.member_id, assignment=b"parts")]),
                     group_api.SyncGroupResponse, 5)
    assert (sync.error_code, bytes(sync.assignment), sync.protocol_name) == (0, b"parts", "range")
    hb = roundtrip(b, group_api.HeartbeatRequest(version=4, group_id=G, generation_id=1, member_id=r.member_id,
                                       group_instance_id=None), group_api.HeartbeatResponse, 4)
    assert hb.error_code == rpc.NONE
    stale = roundtrip(b, group_api.HeartbeatRequest(version=4, group_id=G, generation_id=0, member_id=r.member_id,
                                          group_instance_id=None), group_api.HeartbeatResponse, 4)
    assert stale.error_code == rpc.ILLEGAL_GENERATION
    L = group_api.LeaveGroupRequest
    leave = roundtrip(b, L(version=5, group_id=G, members=[
        L.MemberIdentity(member_id=r.member_id, group_instance_id=None, reason=None),
        L.MemberIdentity(member_id="ghost", group_instance_id=None, reason=None)]), group_api.LeaveGroupResponse, 5)
    assert leave.error_code == 0 and [m.error_code for m in leave.members] == [0, rpc.UNKNOWN_MEMBER_ID]


def test_join_v0_takes_a_member_without_the_member_id_dance():
    r = join(GroupStubBroker(), version=0)
    assert r.error_code == rpc.NONE and r.member_id and r.generation_id == 1


def test_leave_v0_reports_an_unknown_member():
    r = roundtrip(GroupStubBroker(), group_api.LeaveGroupRequest(version=0, group_id=G, member_id="ghost"), group_api.LeaveGroupResponse, 0)
    assert r.error_code == rpc.UNKNOWN_MEMBER_ID


def test_group_requests_while_loading_say_so():
    b = GroupStubBroker(loaded=False)
    b.groups.begin_loading(0)
    assert join(b).error_code == rpc.COORDINATOR_LOAD_IN_PROGRESS
    r = roundtrip(b, group_api.OffsetFetchRequest(version=7, group_id=G, topics=None, require_stable=False),
                  group_api.OffsetFetchResponse, 7)
    assert r.error_code == rpc.COORDINATOR_LOAD_IN_PROGRESS


def commit_request(member_id: str, generation: int, offsets: dict[int, int], metadata: str = "") -> Any:
    R = group_api.OffsetCommitRequest
    return R(version=8, group_id=G, generation_id_or_member_epoch=generation, member_id=member_id,
             group_instance_id=None, topics=[R.OffsetCommitRequestTopic(name="t", partitions=[
                 R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                     partition_index=p, committed_offset=o, committed_leader_epoch=4, committed_metadata=metadata)
                 for p, o in offsets.items()])])


def stable_leader(b: GroupStubBroker) -> Any:
    r = joined_leader(b)
    S = group_api.SyncGroupRequest
    roundtrip(b, S(version=3, group_id=G, generation_id=1, member_id=r.member_id, group_instance_id=None,
                   assignments=[]), group_api.SyncGroupResponse, 3)
    return r


def test_offset_commit_while_the_group_awaits_its_assignment_is_refused():
    b = GroupStubBroker()
    r = joined_leader(b)
    resp = roundtrip(b, commit_request(r.member_id, 1, {0: 5}), group_api.OffsetCommitResponse, 8)
    assert resp.topics[0].partitions[0].error_code == rpc.REBALANCE_IN_PROGRESS


def test_offset_commit_then_fetch_v7_and_v8():
    b = GroupStubBroker()
    r = stable_leader(b)
    resp = roundtrip(b, commit_request(r.member_id, 1, {0: 5, 1: 9}), group_api.OffsetCommitResponse, 8)
    assert [p.error_code for p in resp.topics[0].partitions] == [0, 0]
    assert b.commits[0][3] == [("t", 0, 5, 4, ""), ("t", 1, 9, 4, "")]
    F = group_api.OffsetFetchRequest
    v7 = roundtrip(b, F(version=7, group_id=G, topics=[F.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 2])],
                        require_stable=False), group_api.OffsetFetchResponse, 7)
    assert v7.error_code == 0
    assert [(p.partition_index, p.committed_offset) for p in v7.topics[0].partitions] == [(0, 5), (2, -1)]
    v8 = roundtrip(b, F(version=8, groups=[F.OffsetFetchRequestGroup(group_id=G, topics=None)], require_stable=False),
                   group_api.OffsetFetchResponse, 8)
    g = v8.groups[0]
    assert g.error_code == 0 and [(p.partition_index, p.committed_offset, p.committed_leader_epoch)
                                  for p in g.topics[0].partitions] == [(0, 5, 4), (1, 9, 4)]


def test_offset_commit_of_a_stale_generation_is_refused_for_every_partition():
    b = GroupStubBroker()
    r = stable_leader(b)
    resp = roundtrip(b, commit_request(r.member_id, 7, {0: 5, 1: 9}), group_api.OffsetCommitResponse, 8)
    assert [p.error_code for p in resp.topics[0].partitions] == [rpc.ILLEGAL_GENERATION] * 2
    assert b.groups.committed_offsets(G, None)[1] == {}


def test_offset_commit_with_too_large_metadata_is_refused():
    b = GroupStubBroker()
    resp = roundtrip(b, commit_request("", -1, {0: 5}, metadata="x" * 5000), group_api.OffsetCommitResponse, 8)
    assert resp.topics[0].partitions[0].error_code == rpc.OFFSET_METADATA_TOO_LARGE
    assert b.commits == [(G, -1, "", [])]
