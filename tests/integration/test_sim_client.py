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


def test_a_send_to_a_topic_the_cluster_lacks_expires_as_kafka_pythons_does(cluster):
    import kafka.errors as Errors

    async def run():
        producer = Producer(_client(cluster.bootstrap, 5), acks=-1, delivery_timeout_s=0.5)
        await producer.send("sim-no-such-topic", 0, b"x")

    with pytest.raises(Errors.KafkaTimeoutError, match="Expiring 1 record"):
        asyncio.run(run())


def _run_queue(cluster, tmp_path, topic: str, time_limit_s: float, **options):
    from kafkaesque_harness.checkers.core import run_checkers
    from kafkaesque_harness.history import HistoryWriter, read_history
    from kafkaesque_harness.workloads.sim.driver import run_workload, virtual_clock_ns

    cluster.create_topic(topic, partitions=4)

    async def run():
        with HistoryWriter(tmp_path / "history.jsonl", clock_ns=virtual_clock_ns()) as history:
            return await run_workload("queue", {"topic": topic, "partitions": 4, **options}, asyncio.open_connection,
                                      random.Random(7), cluster.bootstrap, history, concurrency=4,
                                      time_limit_s=time_limit_s, rate=50)

    run = asyncio.run(run())
    history = read_history(tmp_path / "history.jsonl")
    return history, run_checkers(run.workload.checkers(run.test), run.test, history)


def test_queue_driver_in_assign_mode_writes_a_history_the_queue_checker_finds_valid(cluster, tmp_path):
    history, verdict = _run_queue(cluster, tmp_path, "sim-queue-assign", 4)
    assert verdict["checkers"]["queue"]["valid"] is True, verdict["checkers"]["queue"]
    assert verdict["valid"] is True
    stats = verdict["checkers"]["queue"]["stats"]
    assert stats["send-ok"] > 50 and stats["final-poll-ok"] == 4
    # every process's client names itself to the brokers by its process, and every event is the simulator's
    events = [e for op in history for e in (op.extra or {}).get("client_events", [])]
    assert events and {e["library"] for e in events} == {"sim-kafka-python"}


def test_queue_driver_in_subscribe_mode_joins_the_group_and_commits_what_it_read(cluster, tmp_path):
    history, verdict = _run_queue(cluster, tmp_path, "sim-queue-subscribe", 8, queue_mode="subscribe",
                                  group="sim-queue-group")
    assert verdict["checkers"]["queue"]["valid"] is True, verdict["checkers"]["queue"]
    polls = [op for op in history if op.f == "poll" and op.type == "ok"]
    # (a rebalance is told on the process's next completion, whatever its op)
    assigned = {k for op in history for r in (op.extra or {}).get("rebalance_log", []) if r["type"] == "assigned"
                for k in r["keys"]}
    assert assigned == {0, 1, 2, 3}  # the range assignor handed out every partition
    committed = [op.extra["committed"] for op in polls if op.value and "committed" in (op.extra or {})]
    assert committed and all(int(o) > 0 for c in committed for o in c.values())


def test_txn_driver_commits_and_aborts_transactions_the_txn_checker_finds_valid(cluster, tmp_path):
    from kafkaesque_harness.checkers.core import run_checkers
    from kafkaesque_harness.history import HistoryWriter, read_history
    from kafkaesque_harness.workloads.sim.driver import run_workload, virtual_clock_ns

    cluster.create_topic("sim-txn", partitions=4)

    async def run():
        with HistoryWriter(tmp_path / "history.jsonl", clock_ns=virtual_clock_ns()) as history:
            return await run_workload("txn", {"topic": "sim-txn", "partitions": 4, "group": "sim-txn-group",
                                              "txn_abort_p": 0.2, "reassign_p": 0.1},
                                      asyncio.open_connection, random.Random(11), cluster.bootstrap, history,
                                      concurrency=3, time_limit_s=5, rate=20)

    run = asyncio.run(run())
    history = read_history(tmp_path / "history.jsonl")
    verdict = run_checkers(run.workload.checkers(run.test), run.test, history)["checkers"]["txn"]
    assert_valid_but_for_aborted_polls(verdict, history)
    outcomes = [op for op in history if op.f == "txn" and op.type != "invoke"]
    committed = [op for op in outcomes if op.type == "ok"]
    aborted = [op for op in outcomes if op.error == "aborted-by-workload"]
    assert len(committed) > 10 and aborted
    # a committed transaction's sends carry the offsets their produce answers gave
    sends = [m for op in committed for m in op.value if m[0] == "send"]
    assert sends and all(isinstance(m[2], list) and m[2][0] >= 0 for m in sends)
    finals = [op for op in history if op.f == "poll" and (op.extra or {}).get("final") and op.type == "ok"]
    assert len(finals) == 4


def assert_valid_but_for_aborted_polls(verdict: dict, history) -> None:
    """The txn checker's verdict has no anomaly but the one the workload makes itself: an aborted transaction's
    polls move its consumer on (neither real adapter seeks back after an abort), so without a subscribe op the
    process's next read looks like a poll-skip of what the aborted one read. Any other anomaly fails, and so does
    a poll-skip whose skipped values no aborted transaction of the process read in between."""
    assert set(verdict["anomaly_types"]) <= {"poll-skip"}, verdict
    for anomaly in verdict["anomalies"]:
        for example in anomaly["examples"]:
            first, last = example["op_indexes"]
            read_by_aborted = {v for op in history[first:last]
                               if op.process == example["process"] and op.error == "aborted-by-workload"
                               for m in op.value if m[0] == "poll"
                               for recs in m[1].values() for _, v in recs}
            assert set(example["skipped"]) <= read_by_aborted, example
