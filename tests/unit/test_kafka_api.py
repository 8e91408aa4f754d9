"""Kafka wire handlers (kafka_api.py): requests encoded by kafka-python, responses decoded by kafka-python.

The broker behind the handlers is a stub recording what it was asked (a mock of the shell
around the real codec code); the real broker is exercised end to end by
tests/integration/test_broker.py.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record import MemoryRecords

from kafkaesque_harness.clusters.broker import kafka_api, rpc
from kafkaesque_harness.clusters.broker.log import build_batch
from kafkaesque_harness.clusters.broker.metadata import MetadataImage


class StubBroker:
    node_id = 2

    def __init__(self) -> None:
        self.image = MetadataImage()
        recs = [
            {"type": "register_broker", "broker_id": 1, "broker_epoch": 0, "incarnation_id": "a", "host": "h1",
             "port": 1, "fenced": False},
            {"type": "register_broker", "broker_id": 2, "broker_epoch": 1, "incarnation_id": "b", "host": "h2",
             "port": 2, "fenced": False},
            {"type": "register_broker", "broker_id": 3, "broker_epoch": 2, "incarnation_id": "c", "host": "h3",
             "port": 3, "fenced": True},
            {"type": "topic", "topic": "t", "partitions": 1, "replication_factor": 3,
             "configs": {"min.insync.replicas": "2"}},
            {"type": "partition", "topic": "t", "partition": 0, "replicas": [1, 2, 3], "isr": [1, 2], "leader": 1,
             "leader_epoch": 4, "partition_epoch": 6},
        ]
        for i, r in enumerate(recs):
            self.image.apply(i, r)
        self.produced: list[tuple] = []
        self.fetched: list[tuple] = []
        self.answers: list[dict] = []

    async def produce(self, topic, partition, raw, headers, acks, timeout_s):
        self.produced.append((topic, partition, raw, acks))
        return rpc.NONE, 42, 0

    def consumer_read(self, topic, partition, offset, current_leader_epoch, max_bytes,
                      read_committed=False, last_fetched_epoch=-1) -> dict[str, Any]:
        self.fetched.append((offset, current_leader_epoch, last_fetched_epoch))
        if current_leader_epoch not in (-1, 4):
            return {"error": rpc.FENCED_LEADER_EPOCH, "hwm": -1, "log_start": -1, "records": b"", "lso": -1,
                    "aborted": None}
        if last_fetched_epoch == 5:  # a consumer that read records of an epoch this log ends before
            return {"error": rpc.NONE, "hwm": 3, "log_start": 0, "lso": 3, "aborted": None, "records": b"",
                    "diverging": {"epoch": 4, "end_offset": 2}}
        return {"error": rpc.NONE, "hwm": 3, "log_start": 0, "lso": 3, "aborted": [] if read_committed else None,
                "records": build_batch([b"a", b"b", b"c"], base_offset=0, leader_epoch=4)}

    def offset_for_leader_epoch(self, topic, partition, current_leader_epoch, epoch):
        if current_leader_epoch > 4:
            return rpc.UNKNOWN_LEADER_EPOCH, -1, -1
        return rpc.NONE, min(epoch, 4), 3 if epoch >= 4 else 1

    def answered(self, event) -> None:
        self.answers.append(event)

    def change_event(self, topic, partition) -> asyncio.Event:
        return asyncio.Event()

    async def wait_any(self, events, timeout) -> None:
        await asyncio.sleep(timeout)

    def list_offset(self, topic, partition, timestamp, current_leader_epoch, read_committed=False):
        return rpc.NONE, (3 if timestamp == kafka_api.LATEST_TIMESTAMP else 0), 4

    def next_producer_id(self) -> int:
        return 99


def roundtrip(broker: Any, req: Any, resp_cls: Any, version: int, cid: int = 7) -> Any:
    req.with_header(correlation_id=cid, client_id="test")
    out = asyncio.run(kafka_api.handle_kafka_request(broker, bytes(req.encode(header=True))))
    if out is None:
        return None
    (size,) = struct.unpack_from(">i", out)
    assert size == len(out) - 4
    resp = resp_cls[version].decode(out[4:], header=True)
    assert resp.header.correlation_id == cid
    return resp


def test_api_versions_advertises_our_caps():
    resp = roundtrip(StubBroker(), ApiVersionsRequest(version=3, client_software_name="x",
                                                      client_software_version="1"), ApiVersionsResponse, 3)
    caps = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert resp.error_code == 0
    assert caps[1][1] == 12 and caps[0][1] == 10  # Fetch/Produce capped below topic ids (PROTOCOL.md 10)


def test_api_versions_above_our_maximum_gets_error_35_in_a_v0_body():
    payload = struct.pack(">hhih", 18, 9, 5, 0)
    out = asyncio.run(kafka_api.handle_kafka_request(StubBroker(), payload))
    resp = ApiVersionsResponse[0].decode(out[4:], header=True)
    assert resp.error_code == kafka_api.UNSUPPORTED_VERSION and resp.api_keys


@pytest.mark.parametrize("payload", [
    b"\x00\x03\x00",                                             # shorter than a header
    struct.pack(">hhi", 0, 99, 1) + b"\xff" * 8,                 # Produce v99
    struct.pack(">hhi", 57, 0, 1) + b"\x00" * 8,                 # an API we do not speak
    struct.pack(">hhi", 3, 12, 1) + b"\xff" * 8,                 # Metadata v12 with garbage
])
def test_malformed_requests_raise_bad_request(payload):
    with pytest.raises(kafka_api.BadRequest):
        asyncio.run(kafka_api.handle_kafka_request(StubBroker(), payload))


def test_metadata_lists_unfenced_brokers_isr_epochs_and_self_as_controller():
    req = MetadataRequest(version=12, topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name="t"),
                                              MetadataRequest.MetadataRequestTopic(topic_id=None, name="nope")],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    resp = roundtrip(StubBroker(), req, MetadataResponse, 12)
    assert sorted(b.node_id for b in resp.brokers) == [1, 2]  # 3 is fenced
    assert resp.controller_id == 2  # this broker forwards CreateTopics
    t, missing = resp.topics
    p = t.partitions[0]
    assert (p.leader_id, p.leader_epoch, p.isr_nodes, p.offline_replicas) == (1, 4, [1, 2], [3])
    assert missing.error_code == rpc.UNKNOWN_TOPIC_OR_PARTITION


def produce_request(records: bytes, acks: int = -1, version: int = 9) -> Any:
    R = ProduceRequest
    return R(version=version, transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
        R.TopicProduceData(name="t", partition_data=[R.TopicProduceData.PartitionProduceData(index=0, records=records)])])


def test_produce_passes_the_batch_and_returns_the_base_offset():
    b = StubBroker()
    raw = build_batch([b"v1", b"v2"])
    resp = roundtrip(b, produce_request(raw), ProduceResponse, 9)
    pr = resp.responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset) == (0, 42)
    assert b.produced == [("t", 0, raw, -1)]


def test_produce_with_a_corrupt_batch_is_rejected_without_append():
    b = StubBroker()
    raw = bytearray(build_batch([b"v1"]))
    raw[-1] ^= 0xFF  # breaks the CRC
    resp = roundtrip(b, produce_request(bytes(raw)), ProduceResponse, 9)
    assert resp.responses[0].partition_responses[0].error_code == rpc.CORRUPT_MESSAGE
    assert b.produced == []


def test_produce_acks_0_gets_no_response():
    b = StubBroker()
    assert roundtrip(b, produce_request(build_batch([b"v"]), acks=0), ProduceResponse, 9) is None
    assert len(b.produced) == 1


def fetch_request(epoch: int) -> Any:
    R = FetchRequest
    return R(version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
             session_id=0, session_epoch=-1, topics=[R.FetchTopic(topic="t", partitions=[R.FetchTopic.FetchPartition(
                 partition=0, current_leader_epoch=epoch, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")


def test_fetch_returns_records_below_the_hwm_with_session_0():
    resp = roundtrip(StubBroker(), fetch_request(4), FetchResponse, 12)
    assert resp.session_id == 0
    p = resp.responses[0].partitions[0]
    assert (p.error_code, p.high_watermark) == (0, 3)
    values = []
    recs = MemoryRecords(bytes(p.records))
    while (batch := recs.next_batch()) is not None:
        values += [r.value for r in batch]
    assert values == [b"a", b"b", b"c"]


def test_fetch_with_an_old_leader_epoch_is_fenced():
    p = roundtrip(StubBroker(), fetch_request(3), FetchResponse, 12).responses[0].partitions[0]
    assert p.error_code == rpc.FENCED_LEADER_EPOCH


def test_list_offsets_and_init_producer_id():
    R = ListOffsetsRequest
    req = R(version=7, replica_id=-1, isolation_level=0, topics=[R.ListOffsetsTopic(name="t", partitions=[
        R.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=4, timestamp=-1)])])
    p = roundtrip(StubBroker(), req, ListOffsetsResponse, 7).topics[0].partitions[0]
    assert (p.error_code, p.offset, p.leader_epoch) == (0, 3, 4)
    resp = roundtrip(StubBroker(), InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=-1,
                                                         producer_id=-1, producer_epoch=-1),
                     InitProducerIdResponse, 4)
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, 99, 0)
