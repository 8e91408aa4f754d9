"""A tiny Kafka client for the simulator's own checks, demo driver and benchmark: kafka-python's protocol
classes over the simulated network's asyncio streams (one connection, one request at a time). It is not
the simulated client of the workloads (workloads/sim, branch sim-client), which follows the real
libraries' behaviour; this one only creates a topic, produces and fetches through a broker's real Kafka
listener, with no retries of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest
from kafka.record import MemoryRecords, MemoryRecordsBuilder

FIXED_TIMESTAMP_MS = 1_767_225_600_000  # records carry no wall clock of the test's host


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.protocol = KafkaProtocol(client_id="sim-test")

    @classmethod
    async def connect(cls, open_connection: Any, host: str, port: int) -> WireClient:
        return cls(*await open_connection(host, port))

    async def call(self, request: Any) -> Any:
        self.protocol.send_request(request)
        self.writer.write(self.protocol.send_bytes())
        await self.writer.drain()
        while True:
            data = await self.reader.read(1 << 16)
            if not data:
                raise ConnectionError("the broker closed the connection")
            responses = self.protocol.receive_bytes(data)
            if responses:
                return responses[0][1]

    def close(self) -> None:
        self.writer.close()


def create_topic_request(topic: str, partitions: int, rf: int, min_isr: int) -> Any:
    R = CreateTopicsRequest
    return R(version=5, timeout_ms=10_000, validate_only=False, topics=[R.CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=rf, assignments=[],
        configs=[R.CreatableTopic.CreatableTopicConfig(name="min.insync.replicas", value=str(min_isr))])])


def metadata_request(topic: str) -> Any:
    return MetadataRequest(version=9, topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                           allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)


def produce_request(topic: str, partition: int, values: list[bytes], acks: int = -1, timeout_ms: int = 5000) -> Any:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for v in values:
        builder.append(FIXED_TIMESTAMP_MS, None, v)
    builder.close()
    R = ProduceRequest
    return R(version=9, transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[R.TopicProduceData(
        name=topic, partition_data=[R.TopicProduceData.PartitionProduceData(index=partition,
                                                                           records=builder.buffer())])])


def fetch_request(topic: str, partition: int, offset: int, max_wait_ms: int = 0) -> Any:
    R = FetchRequest
    return R(version=12, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
             session_id=0, session_epoch=-1, topics=[R.FetchTopic(topic=topic, partitions=[R.FetchTopic.FetchPartition(
                 partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                 log_start_offset=-1, partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")


def fetched_values(partition_response: Any) -> list[bytes]:
    values: list[bytes] = []
    records = MemoryRecords(bytes(partition_response.records or b""))
    while (batch := records.next_batch()) is not None:
        values += [r.value for r in batch]
    return values


def leader_of(metadata_response: Any, topic: str, partition: int) -> int:
    for t in metadata_response.topics:
        if t.name == topic:
            for p in t.partitions:
                if p.partition_index == partition:
                    return p.leader_id
    return -1


async def connect_to(sim: Any, node: str) -> WireClient:
    host, port = sim.address(node).rsplit(":", 1)
    return await WireClient.connect(sim.net.open_connection, host, int(port))


async def create_topic(sim: Any, topic: str, partitions: int = 1, rf: int = 3, min_isr: int = 2,
                       timeout_s: float = 10.0) -> int:
    """Create the topic through a broker's Kafka listener and wait until partition 0 has a leader; its id."""
    client = await connect_to(sim, sim.brokers[0])
    try:
        resp = await client.call(create_topic_request(topic, partitions, rf, min_isr))
        assert resp.topics[0].error_code == 0, resp
        deadline = sim.now() + timeout_s
        while sim.now() < deadline:
            leader = leader_of(await client.call(metadata_request(topic)), topic, 0)
            if leader >= 0:
                return leader
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{topic} has no leader after {timeout_s}s")
    finally:
        client.close()


async def produce(sim: Any, broker: str, topic: str, values: list[bytes], acks: int = -1,
                  timeout_ms: int = 5000) -> Any:
    """One produce request to `broker`; its partition response (error_code, base_offset)."""
    client = await connect_to(sim, broker)
    try:
        resp = await client.call(produce_request(topic, 0, values, acks=acks, timeout_ms=timeout_ms))
        return resp.responses[0].partition_responses[0]
    finally:
        client.close()


async def fetch(sim: Any, broker: str, topic: str, offset: int = 0) -> tuple[int, int, list[bytes]]:
    """(error_code, high watermark, values) of one fetch of partition 0 from `broker`."""
    client = await connect_to(sim, broker)
    try:
        p = (await client.call(fetch_request(topic, 0, offset))).responses[0].partitions[0]
        return p.error_code, p.high_watermark, fetched_values(p)
    finally:
        client.close()
