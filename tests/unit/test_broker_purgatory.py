"""The acks=all purgatory across a leader-epoch change (server.py apply_metadata, 002 2.5 and 2.10): a real Broker
object on a temporary directory, with no sockets; the follower that would move the HWM is played by calling the
leader's own fetch handling.

Kafka completes a waiting produce (DelayedProduce.tryComplete, Partition.checkEnoughReplicasReachOffset) with
NOT_LEADER_OR_FOLLOWER only once this broker no longer leads the partition. A broker re-elected in a new epoch keeps
its log, and the waiting produce is answered when the HWM passes its records. A detection run's default broker
answered NOT_LEADER_OR_FOLLOWER there instead: the controller, paused and resumed, fenced every broker and re-elected
the same leader in a new epoch. librdkafka re-sends a batch answered NOT_LEADER_OR_FOLLOWER even with retries=0 (it
takes the answer as "not persisted"), and the record the broker had already appended committed too. The result was
one value at two offsets, and a `duplicate` verdict against a broker that had answered wrongly.
"""

from __future__ import annotations

import asyncio

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.group_coordinator import OFFSETS_TOPIC
from kafkaesque_harness.clusters.broker.log import build_batch, validate_batches
from tests.unit.test_broker_groups import FOLLOWER, NODE, make_broker

TOPIC = "queue"


def set_partition(b, leader: int, leader_epoch: int, isr: list[int], topic: str = TOPIC, partitions: int = 1,
                  partition: int = 0, first: bool = False) -> None:
    """Apply the controller's record of the partition (replicas NODE and FOLLOWER, min ISR 2), as the metadata
    log would."""
    records = []
    if first:
        records += [
            {"type": "register_broker", "broker_id": NODE, "broker_epoch": 5, "incarnation_id": "a", "host": "h",
             "port": 1, "fenced": False},
            {"type": "register_broker", "broker_id": FOLLOWER, "broker_epoch": 6, "incarnation_id": "b", "host": "h",
             "port": 2, "fenced": False},
            {"type": "topic", "topic": topic, "partitions": partitions, "replication_factor": 2,
             "configs": {"min.insync.replicas": "2"}}]
    records.append({"type": "partition", "topic": topic, "partition": partition, "replicas": [NODE, FOLLOWER],
                    "isr": isr, "leader": leader, "leader_epoch": leader_epoch, "partition_epoch": leader_epoch})
    for r in records:
        b.image.apply(b.image.offset + 1, r)
    b.apply_metadata({(topic, partition)})


def follower_fetches_up_to(b, offset: int, last_fetched_epoch: int, topic: str = TOPIC, partition: int = 0) -> None:
    r = b.replicas[(topic, partition)]
    assert r.record_follower_fetch({"replica_id": FOLLOWER, "broker_epoch": 6, "topic": topic, "partition": partition,
                                    "fetch_offset": offset, "last_fetched_epoch": last_fetched_epoch,
                                    "current_leader_epoch": r.leader_epoch}, 0) is None
    b._hwm_may_have_moved(r)


async def waiting_produce(b, value: bytes, topic: str = TOPIC, partition: int = 0) -> asyncio.Task:
    """An acks=all produce that the leader appended and that now waits for the HWM."""
    raw = build_batch([value])
    task = asyncio.create_task(b.produce(topic, partition, raw, validate_batches(raw), -1, 5.0))
    await asyncio.sleep(0.01)
    assert not task.done() and b.replicas[(topic, partition)].leo == 1
    return task


def test_a_leader_reelected_in_a_new_epoch_answers_its_waiting_produce_once_committed(tmp_path):
    async def scenario() -> None:
        b = make_broker(tmp_path)
        set_partition(b, NODE, 11, [NODE, FOLLOWER], first=True)
        produce = await waiting_produce(b, b"7463")
        set_partition(b, NODE, 13, [NODE, FOLLOWER])  # the same broker leads again, in a new epoch
        await asyncio.sleep(0.01)
        assert not produce.done()  # still leader, log intact: the record may yet commit, so wait for the HWM
        follower_fetches_up_to(b, 1, last_fetched_epoch=11)
        assert await asyncio.wait_for(produce, 1.0) == (rpc.NONE, 0, 0)
        b.logs.close_all()

    asyncio.run(scenario())


def test_reelected_below_min_isr_the_waiting_produce_fails_as_not_enough_replicas_after_append(tmp_path):
    """The detection run's shape: re-elected with the ISR down to the leader alone. The answer is indefinite
    either way, but NOT_LEADER_OR_FOLLOWER makes librdkafka re-send the batch; NOT_ENOUGH_REPLICAS_AFTER_APPEND
    (002 2.6: appended, not yet replicated) is reported to the application with retries=0."""
    async def scenario() -> None:
        b = make_broker(tmp_path)
        set_partition(b, NODE, 11, [NODE, FOLLOWER], first=True)
        produce = await waiting_produce(b, b"7463")
        set_partition(b, NODE, 13, [NODE])
        assert await asyncio.wait_for(produce, 1.0) == (rpc.NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1, 0)
        b.logs.close_all()

    asyncio.run(scenario())


def test_a_leader_that_steps_down_fails_its_waiting_produce_as_not_leader(tmp_path):
    async def scenario() -> None:
        b = make_broker(tmp_path)
        set_partition(b, NODE, 11, [NODE, FOLLOWER], first=True)
        produce = await waiting_produce(b, b"7463")
        set_partition(b, FOLLOWER, 12, [NODE, FOLLOWER])
        b.fetchers.pop((TOPIC, 0)).cancel()  # no peer to fetch from here
        assert await asyncio.wait_for(produce, 1.0) == (rpc.NOT_LEADER_OR_FOLLOWER, -1, 0)
        b.logs.close_all()

    asyncio.run(scenario())


def test_a_coordinators_write_still_fails_when_its_partition_moves_to_a_new_epoch(tmp_path):
    """A __consumer_offsets (or __transaction_state) leader of a new epoch reloads its coordinator from the log:
    a write of the older coordinator epoch is answered as another coordinator's (NOT_COORDINATOR, as Kafka's
    coordinators answer when the coordinator epoch moved), not applied to the reloaded state."""
    async def scenario() -> None:
        b = make_broker(tmp_path)
        set_partition(b, NODE, 11, [NODE, FOLLOWER], topic=OFFSETS_TOPIC, partitions=5, first=True)
        produce = await waiting_produce(b, b"offsets", topic=OFFSETS_TOPIC)
        set_partition(b, NODE, 13, [NODE, FOLLOWER], topic=OFFSETS_TOPIC, partitions=5)
        assert await asyncio.wait_for(produce, 1.0) == (rpc.NOT_LEADER_OR_FOLLOWER, -1, 0)
        b.logs.close_all()

    asyncio.run(scenario())
