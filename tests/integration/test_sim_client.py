"""The simulator's clients (workloads/sim/) against the real reference broker on loopback, in a normal asyncio
loop with asyncio.open_connection: the same code the simulator runs over its in-memory network. One small
cluster (a controller and three brokers) serves every test of the module."""

from __future__ import annotations

import asyncio
import random

import pytest

from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.sim.client import ClusterClient
from kafkaesque_harness.workloads.sim.consumer import Consumer
from kafkaesque_harness.workloads.sim.producer import Producer
from tests.integration.conftest import start_local_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_local_cluster(tmp_path_factory.mktemp("sim-client"))
    try:
        yield c
    finally:
        c.down()


def _client(bootstrap: str, process: int, seed: int = 1) -> ClusterClient:
    return ClusterClient(asyncio.open_connection, bootstrap, f"kafkaesque-p{process}", random.Random(seed))


async def _drain(consumer: Consumer, rounds: int = 40) -> dict[int, list[tuple[int, bytes]]]:
    got: dict[int, list[tuple[int, bytes]]] = {}
    for _ in range(rounds):
        for k, recs in (await consumer.poll(0.05)).items():
            got.setdefault(k, []).extend(recs)
    return got


def test_acks_all_producer_and_assign_consumer_round_trip(cluster):
    cluster.create_topic("sim-rt", partitions=2)

    async def run():
        producer = Producer(_client(cluster.bootstrap, 0), acks=-1)
        offsets = [await producer.send("sim-rt", i % 2, str(i).encode()) for i in range(10)]
        events = ClientEventLog("sim-kafka-python", asyncio.get_running_loop().time)
        consumer = Consumer(_client(cluster.bootstrap, 1), "sim-rt", events)
        consumer.assign([0, 1])
        consumer.seek_to_beginning()
        got = await _drain(consumer)
        ends = await consumer.end_offsets([0, 1])
        return offsets, got, events.take(), ends

    offsets, got, events, ends = asyncio.run(run())
    assert offsets == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert got == {0: [(o, str(2 * o).encode()) for o in range(5)], 1: [(o, str(2 * o + 1).encode()) for o in range(5)]}
    assert ends == {0: 5, 1: 5}
    seeks = sorted((e["key"], e["why"], e["to"]) for e in events if e["type"] == "seek")
    assert seeks == [(0, "workload", 0), (1, "workload", 0)]
    assert {e["key"] for e in events if e["type"] == "leader"} == {0, 1}


def test_idempotent_producer_gets_an_id_and_numbers_its_batches(cluster):
    cluster.create_topic("sim-idem", partitions=1)

    async def run():
        producer = Producer(_client(cluster.bootstrap, 2), acks=-1, retries=5, idempotent=True)
        offsets = [await producer.send("sim-idem", 0, b"%d" % i) for i in range(5)]
        return producer, offsets

    producer, offsets = asyncio.run(run())
    assert producer.producer_id >= 0 and producer.producer_epoch == 0
    assert offsets == [0, 1, 2, 3, 4]
    assert producer.sequences == {("sim-idem", 0): 5}


def test_out_of_range_position_is_reset_to_earliest_and_recorded(cluster):
    cluster.create_topic("sim-oor", partitions=1)

    async def run():
        producer = Producer(_client(cluster.bootstrap, 3), acks=-1)
        for i in range(3):
            await producer.send("sim-oor", 0, b"%d" % i)
        events = ClientEventLog("sim-kafka-python", asyncio.get_running_loop().time)
        consumer = Consumer(_client(cluster.bootstrap, 4), "sim-oor", events)
        consumer.assign([0])
        consumer.seek(0, 1000)  # past the end: the broker answers OFFSET_OUT_OF_RANGE
        got = await _drain(consumer)
        return got, events.take()

    got, events = asyncio.run(run())
    assert got == {0: [(0, b"0"), (1, b"1"), (2, b"2")]}
    resets = [e for e in events if e["type"] == "reset"]
    assert len(resets) == 1
    assert resets[0]["from"] == 1000 and resets[0]["to"] == 0 and resets[0]["error"] == "OFFSET_OUT_OF_RANGE"
    assert resets[0]["policy"] == "earliest" and resets[0]["broker"] == resets[0]["answered_by"]


def test_a_send_to_a_topic_the_cluster_lacks_fails_with_kafka_pythons_error(cluster):
    import kafka.errors as Errors

    async def run():
        producer = Producer(_client(cluster.bootstrap, 5), acks=-1)
        await producer.send("sim-no-such-topic", 0, b"x")

    with pytest.raises(Errors.LeaderNotAvailableError):
        asyncio.run(run())
