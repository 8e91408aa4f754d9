"""KIP-320 on the consumer side of the reference broker: the leader epoch a consumer's Fetch and
OffsetForLeaderEpoch carry, judged as a Kafka leader judges them (Partition.fetchRecords/readRecords,
lastOffsetForLeaderEpoch, LeaderEpochFileCache.endOffsetFor), and the trace lines that say what a broker
answered a client (issue 38: a deposed leader's answers are what a consumer reset on).

Offsets and epochs follow the issue's run in small: a leader of epoch 0 deposed while paused, its log
ending at 12 with its HWM at 10, while the consumer read records of epoch 1 from the new leader.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from kafkaesque_harness.clusters.broker import kafka_api, rpc
from kafkaesque_harness.clusters.broker.log import PartitionLog, build_batch, validate_batches
from kafkaesque_harness.clusters.broker.log.epoch_cache import (
    EpochEntry,
    client_end_offset_for_entries,
    end_offset_for_entries,
)
from kafkaesque_harness.clusters.broker.metadata import PartitionState
from kafkaesque_harness.clusters.broker.replica import Replica, ReplicaConfig
from tests.unit.test_broker_groups import make_broker
from tests.unit.test_broker_txn import NODE, lead

CACHE = [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(3, 15)]


# --- the end offset a leader answers a client with ---------------------------------------------------------
@pytest.mark.parametrize("epoch, expected", [
    (3, (3, 20)),    # the latest epoch ends at the LEO
    (2, (2, 15)),    # an older one where the next begins
    (1, (0, 10)),    # an epoch this log never had: the largest below it, up to the next one's start
    (4, (-1, -1)),   # above every epoch it knows: undefined (a deposed leader asked about its successor's)
    (-1, (-1, -1)),  # no epoch asked
])
def test_a_leader_answers_a_client_the_end_of_an_epoch_as_kafka_does(epoch, expected):
    assert client_end_offset_for_entries(CACHE, epoch, 20) == expected


def test_the_client_rule_differs_from_the_follower_rule_only_where_that_one_has_no_answer():
    assert end_offset_for_entries(CACHE, 4, 20) == (3, 20)  # PROTOCOL.md 2.2: the largest epoch <= 4
    assert client_end_offset_for_entries(CACHE, 4, 20) == (-1, -1)
    assert client_end_offset_for_entries([], 0, 0) == (-1, -1)
    for e in (0, 1, 2, 3):
        assert client_end_offset_for_entries(CACHE, e, 20) == end_offset_for_entries(CACHE, e, 20)


# --- the replica's decisions ---------------------------------------------------------------------------------
def leader_of(tmp_path: Path, epochs_and_counts: list[tuple[int, int]], hwm: int) -> Replica:
    """A replica of broker 1 that leads in the last epoch given, its log holding `count` records of each."""
    d = tmp_path / "n1" / "t-0"
    d.parent.mkdir(parents=True, exist_ok=True)
    log = PartitionLog(str(d), logger=lambda e: None, topic="t", partition=0)
    r = Replica(1, "t", 0, log, 0, 2, ReplicaConfig())
    for epoch, count in epochs_and_counts:
        r.apply_partition_state(PartitionState("t", 0, [1, 2, 3], [1, 2, 3], 1, epoch, epoch), now_ms=0)
        raw = build_batch([b"v"] * count)
        r.append(raw, validate_batches(raw))
    r.hwm = hwm
    return r


def test_a_deposed_leader_refuses_a_consumer_that_read_a_newer_epoch_even_below_its_own_log_end(tmp_path):
    # Deposed in epoch 0 without hearing of epoch 1: LEO 12, HWM 10. The consumer's metadata (from this very
    # broker) says epoch 0, so the fence passes; its position 11 is inside this log, but it last read a record
    # of epoch 1, which this log cannot place: Kafka answers OFFSET_OUT_OF_RANGE ("could not determine the end
    # offset of the last fetched epoch"), not an empty read at 11.
    r = leader_of(tmp_path, [(0, 12)], hwm=10)
    assert r.check_consumer_fetch(0, 11, 1) == (rpc.OFFSET_OUT_OF_RANGE, None)
    assert r.check_consumer_fetch(0, 197, 1) == (rpc.OFFSET_OUT_OF_RANGE, None)
    # a consumer whose metadata knows epoch 1 is told this broker has not heard of it (KIP-320)
    assert r.check_consumer_fetch(1, 11, 1) == (rpc.UNKNOWN_LEADER_EPOCH, None)


def test_a_consumer_that_read_records_this_log_no_longer_holds_is_told_where_its_epoch_diverges(tmp_path):
    r = leader_of(tmp_path, [(0, 10), (2, 5), (3, 5)], hwm=20)
    # read records of epoch 1 up to offset 11 somewhere else (an unclean history): here epoch 0 ends at 10
    assert r.check_consumer_fetch(3, 12, 1) == (rpc.NONE, {"epoch": 0, "end_offset": 10})
    # read up to 12 in epoch 2, which here ends at 15: consistent
    assert r.check_consumer_fetch(3, 13, 2) == (rpc.NONE, None)
    # read in the current epoch: consistent up to the LEO, and beyond it out of range
    assert r.check_consumer_fetch(3, 20, 3) == (rpc.NONE, None)
    assert r.check_consumer_fetch(3, 21, 3) == (rpc.NONE, {"epoch": 3, "end_offset": 20})
    assert r.check_consumer_fetch(3, 21, -1) == (rpc.OFFSET_OUT_OF_RANGE, None)


def test_the_epoch_fence_comes_before_any_look_at_the_log(tmp_path):
    r = leader_of(tmp_path, [(0, 10), (2, 5)], hwm=15)
    assert r.check_consumer_fetch(1, 5, 0) == (rpc.FENCED_LEADER_EPOCH, None)
    assert r.check_consumer_fetch(3, 5, 0) == (rpc.UNKNOWN_LEADER_EPOCH, None)
    assert r.check_consumer_fetch(-1, 5, 0) == (rpc.NONE, None)  # no epoch in the request: no fence


def test_offset_for_leader_epoch_is_the_leaders_answer_behind_the_fence(tmp_path):
    r = leader_of(tmp_path, [(0, 10), (2, 5)], hwm=15)
    assert r.offset_for_leader_epoch(2, 0) == (rpc.NONE, 0, 10)
    assert r.offset_for_leader_epoch(2, 2) == (rpc.NONE, 2, 15)
    assert r.offset_for_leader_epoch(2, 1) == (rpc.NONE, 0, 10)
    assert r.offset_for_leader_epoch(2, 5) == (rpc.NONE, -1, -1)  # unknown to it: the client treats it as truncated
    assert r.offset_for_leader_epoch(1, 0) == (rpc.FENCED_LEADER_EPOCH, -1, -1)
    assert r.offset_for_leader_epoch(3, 0) == (rpc.UNKNOWN_LEADER_EPOCH, -1, -1)
    r.apply_partition_state(PartitionState("t", 0, [1, 2, 3], [2, 3], 2, 3, 3), now_ms=0)  # now a follower
    assert r.offset_for_leader_epoch(3, 0) == (rpc.NOT_LEADER_OR_FOLLOWER, -1, -1)


# --- the shell: what it answers and what its trace says ---------------------------------------------------------
def test_the_broker_traces_a_refused_consumer_fetch_with_what_was_asked_and_what_it_held(tmp_path):
    b, traced = wire_broker(tmp_path)  # a leader of epoch 0 holding offsets 0-2
    token = kafka_api.CLIENT_ID.set("kafka-python-consumer-7")
    try:
        out = b.consumer_read("t", 0, 2, 0, 1 << 20, last_fetched_epoch=1)
        assert b.offset_for_leader_epoch("t", 0, 1, 0) == (rpc.UNKNOWN_LEADER_EPOCH, -1, -1)
        b.list_offset("t", 0, kafka_api.EARLIEST_TIMESTAMP, 0)
    finally:
        kafka_api.CLIENT_ID.reset(token)
    assert out["error"] == rpc.OFFSET_OUT_OF_RANGE and out["records"] == b""
    refused = next(e for e in traced if e["event"] == "consumer_fetch_refused")
    assert refused == {"event": "consumer_fetch_refused", "topic": "t", "partition": 0, "role": "leader",
                       "leader_epoch": 0, "leo": 3, "hwm": 3, "log_start": 0, "offset": 2, "current_leader_epoch": 0,
                       "last_fetched_epoch": 1, "error": rpc.OFFSET_OUT_OF_RANGE, "diverging_epoch": None,
                       "client": "kafka-python-consumer-7"}
    ofle = next(e for e in traced if e["event"] == "offset_for_leader_epoch_answered")
    assert (ofle["epoch"], ofle["current_leader_epoch"], ofle["error"], ofle["leader_epoch"]) == (
        0, 1, rpc.UNKNOWN_LEADER_EPOCH, 0)
    listed = next(e for e in traced if e["event"] == "list_offsets_answered")
    assert (listed["timestamp"], listed["offset"], listed["epoch"], listed["client"]) == (
        "earliest", 0, 0, "kafka-python-consumer-7")


def test_a_broker_that_holds_no_replica_says_so_and_traces_it(tmp_path):
    b = make_broker(tmp_path)
    traced: list[dict] = []
    b.events = traced.append
    lead(b, "t", 2, 0)
    # partition 1 is led by broker 9: this broker knows of it, holds no replica of it
    b.image.apply(b.image.offset + 1, {"type": "partition", "topic": "t", "partition": 1, "replicas": [9], "isr": [9],
                                       "leader": 9, "leader_epoch": 0, "partition_epoch": 0})
    out = b.consumer_read("t", 1, 0, 0, 1 << 20)
    assert out["error"] == rpc.NOT_LEADER_OR_FOLLOWER
    assert [(e["event"], e["role"], e["partition"]) for e in traced if "refused" in e["event"]] == [
        ("consumer_fetch_refused", "none", 1)]
    assert b.offset_for_leader_epoch("t", 1, 0, 0)[0] == rpc.NOT_LEADER_OR_FOLLOWER
    assert b.offset_for_leader_epoch("nope", 0, 0, 0)[0] == rpc.UNKNOWN_TOPIC_OR_PARTITION


# --- the wire: requests encoded by kafka-python, answers decoded by it ----------------------------------------
def call(broker, req, resp_cls, version: int, client_id: str = "probe-client"):
    req.with_header(correlation_id=3, client_id=client_id)
    out = asyncio.run(kafka_api.handle_kafka_request(broker, bytes(req.encode(header=True))))
    (size,) = struct.unpack_from(">i", out)
    assert size == len(out) - 4
    return resp_cls[version].decode(out[4:], header=True)


def wire_broker(tmp_path):
    b = make_broker(tmp_path)
    traced: list[dict] = []
    b.events = traced.append
    lead(b, "t", 1, 0, leader_epoch=0)
    raw = build_batch([b"a", b"b", b"c"])
    asyncio.run(b.produce("t", 0, raw, validate_batches(raw), 1, 1.0))
    return b, traced


def test_api_versions_advertises_offset_for_leader_epoch_from_the_version_with_the_current_epoch(tmp_path):
    resp = call(make_broker(tmp_path), ApiVersionsRequest(version=3, client_software_name="x",
                                                          client_software_version="1"), ApiVersionsResponse, 3)
    caps = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert caps[23] == (2, 4)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_answers_each_version_kafka_python_speaks(tmp_path, version):
    b, traced = wire_broker(tmp_path)
    R = OffsetForLeaderEpochRequest
    P = R.OffsetForLeaderTopic.OffsetForLeaderPartition
    req = R(version=version, replica_id=-1, topics=[R.OffsetForLeaderTopic(topic="t", partitions=[
        P(partition=0, current_leader_epoch=0, leader_epoch=0), P(partition=1, current_leader_epoch=0, leader_epoch=0)])])
    resp = call(b, req, OffsetForLeaderEpochResponse, version)
    got = {p.partition: (p.error_code, p.leader_epoch, p.end_offset) for t in resp.topics for p in t.partitions}
    assert got == {0: (rpc.NONE, 0, 3), 1: (rpc.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}
    assert [e["client"] for e in traced if e["event"] == "offset_for_leader_epoch_answered"] == ["probe-client"] * 2


def fetch_req(offset: int, current_epoch: int, last_epoch: int) -> FetchRequest:
    R = FetchRequest
    return R(version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
             session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
             topics=[R.FetchTopic(topic="t", partitions=[R.FetchTopic.FetchPartition(
                 partition=0, current_leader_epoch=current_epoch, fetch_offset=offset, last_fetched_epoch=last_epoch,
                 log_start_offset=-1, partition_max_bytes=1 << 20)])])


def test_a_fetch_v12_is_judged_by_its_last_fetched_epoch_and_a_divergence_goes_back_on_the_wire(tmp_path):
    b, traced = wire_broker(tmp_path)
    r = b.replicas[("t", 0)]
    r.apply_partition_state(PartitionState("t", 0, [NODE], [NODE], NODE, 2, 2), now_ms=0)  # re-elected, epoch 2
    raw = build_batch([b"d"])
    asyncio.run(b.produce("t", 0, raw, validate_batches(raw), 1, 1.0))
    # a consumer that read offset 3 in epoch 1 (which this log never had: epoch 0 ends at 3 here)
    part = call(b, fetch_req(4, 2, 1), FetchResponse, 12).responses[0].partitions[0]
    assert part.error_code == rpc.NONE and not part.records
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 3)
    # a consumer whose last record is of epoch 0, at offset 3: records from there
    part = call(b, fetch_req(3, 2, 0), FetchResponse, 12).responses[0].partitions[0]
    assert part.error_code == rpc.NONE and part.records and part.diverging_epoch is None
    assert [e["diverging_epoch"] for e in traced if e["event"] == "consumer_fetch_refused"] == [
        {"epoch": 0, "end_offset": 3}]


def test_a_metadata_answer_is_traced_with_the_leaders_and_epochs_it_gave_and_the_client(tmp_path):
    b, traced = wire_broker(tmp_path)
    req = MetadataRequest(version=12, topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name="t")],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    call(b, req, MetadataResponse, 12, client_id="kafka-python-consumer-3")
    answered = [e for e in traced if e["event"] == "metadata_answered"]
    assert answered == [{"event": "metadata_answered", "brokers": [NODE], "leaders": {"t": [[0, NODE, 0]]},
                         "client": "kafka-python-consumer-3"}]
