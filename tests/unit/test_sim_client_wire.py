"""workloads/sim/wire.py over an in-memory connector (asyncio streams fed by hand): the versions negotiated with
ApiVersions, an answered request decoded, an unanswered one timing out as kafka-python's does (the connection
closed, every request on it failed), and a closed stream failing what waits on it."""

from __future__ import annotations

import asyncio
import struct

import kafka.errors as Errors
import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from kafkaesque_harness.workloads.sim.wire import BrokerConnection, negotiated_versions


class SilentAfterVersions:
    """A broker that answers ApiVersions (Metadata up to v12) and, when `answer_metadata`, Metadata; nothing else."""

    def __init__(self, answer_metadata: bool):
        self.answer_metadata = answer_metadata
        self.reader: asyncio.StreamReader | None = None

    async def open_connection(self, host: str, port: int):
        self.reader = asyncio.StreamReader()
        return self.reader, self

    def write(self, data: bytes) -> None:
        payload = bytes(data[4:])
        api_key, version, correlation_id = struct.unpack_from(">hhi", payload, 0)
        if api_key == ApiVersionsRequest.API_KEY:
            answer = ApiVersionsResponse(version=version, error_code=0, throttle_time_ms=0, api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4),
                ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=12)])
        elif api_key == MetadataRequest.API_KEY and self.answer_metadata:
            answer = MetadataResponse(version=version, throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1,
                                      topics=[], authorized_operations=None, error_code=0)
        else:
            return
        answer.with_header(correlation_id=correlation_id)
        self.reader.feed_data(bytes(answer.encode(header=True, framed=True)))

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


async def connected_with_a_request_waiting(broker: SilentAfterVersions) -> tuple[BrokerConnection, asyncio.Future]:
    """A connection to broker, versions negotiated, with one Metadata request sent (5 s timeout) and waiting."""
    conn = BrokerConnection(broker.open_connection, "b", 1, "kafkaesque-p0")
    await conn.connect(1.0)
    waiting = asyncio.ensure_future(conn.request(MetadataRequest, 5.0, topics=[], allow_auto_topic_creation=False))
    await asyncio.sleep(0)
    return conn, waiting


def test_versions_are_the_highest_both_sides_have_and_unknown_apis_are_left_out():
    assert negotiated_versions({3: (0, 12), 0: (3, 10), 999: (0, 1)}) == {3: 12, 0: 10}
    assert negotiated_versions({3: (0, 99)})[3] == MetadataRequest.max_version  # kafka-python's classes cap it


def test_an_answered_request_is_decoded_at_the_negotiated_version():
    broker = SilentAfterVersions(answer_metadata=True)

    async def ask():
        conn = BrokerConnection(broker.open_connection, "b", 1, "kafkaesque-p0")
        await conn.connect(1.0)
        return conn.versions, await conn.request(MetadataRequest, 1.0, topics=[], allow_auto_topic_creation=False)

    versions, answer = asyncio.run(ask())
    assert versions == {18: 4, 3: 12} and answer.cluster_id == "c"


def test_an_unanswered_request_times_out_closes_the_connection_and_fails_the_others_on_it():
    broker = SilentAfterVersions(answer_metadata=False)

    async def ask():
        conn, other = await connected_with_a_request_waiting(broker)
        with pytest.raises(Errors.RequestTimedOutError, match="Request timed out after 50 ms"):
            await conn.request(MetadataRequest, 0.05, topics=[], allow_auto_topic_creation=False)
        with pytest.raises(Errors.RequestTimedOutError):
            await other
        assert conn.closed
        with pytest.raises(Errors.KafkaConnectionError):
            await conn.request(MetadataRequest, 1.0, topics=[], allow_auto_topic_creation=False)

    asyncio.run(ask())


def test_a_stream_the_broker_closes_fails_the_request_waiting_on_it():
    broker = SilentAfterVersions(answer_metadata=False)

    async def ask():
        conn, waiting = await connected_with_a_request_waiting(broker)
        broker.reader.feed_eof()
        with pytest.raises(Errors.KafkaConnectionError):
            await waiting

    asyncio.run(ask())
