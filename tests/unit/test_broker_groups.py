"""The broker shell's group glue (server.py): a new leader of a __consumer_offsets partition loads its
groups only once its HWM has reached the LESO (PROTOCOL.md 3), and a commit is answered only once the
HWM has passed its record (002 2.5). A real Broker object on a temporary directory, with no sockets:
the follower that would move the HWM is played by calling the leader's own fetch handling."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.group_coordinator import OFFSETS_TOPIC, offset_record
from kafkaesque_harness.clusters.broker.log import build_batch, validate_batches
from kafkaesque_harness.clusters.broker.server import Broker

NODE, FOLLOWER = 1, 2


def make_broker(tmp_path, variant: tuple[str, ...] = ()) -> Broker:
    args = SimpleNamespace(node_id=NODE, listen="127.0.0.1:1", advertise=None, data_dir=str(tmp_path),
                           log_file=str(tmp_path / "broker.log"), trace_file=None, variant=list(variant),
                           flush_policy="never",
                           segment_bytes=1 << 20, controller="127.0.0.1:2", replica_lag_time_max_ms=10_000,
                           heartbeat_interval_ms=500, replica_fetch_wait_max_ms=100,
                           hwm_checkpoint_interval_ms=1000, group_initial_rebalance_delay_ms=0)
    b = Broker(args, secret="x" * 32)
    b.broker_epoch = 5
    return b


def on_a_broker(tmp_path, scenario, variant: tuple[str, ...] = ()):
    """Run `scenario(b)` in an event loop of its own on a fresh broker (make_broker), whose logs are closed
    afterwards; what the scenario returns."""
    async def run():
        b = make_broker(tmp_path, variant)
        try:
            return await scenario(b)
        finally:
            b.logs.close_all()

    return asyncio.run(run())


def lead_offsets_partition(b: Broker, partition: int, leader_epoch: int, isr: list[int]) -> None:
    records = [
        {"type": "register_broker", "broker_id": NODE, "broker_epoch": 5, "incarnation_id": "a", "host": "h",
         "port": 1, "fenced": False},
        {"type": "register_broker", "broker_id": FOLLOWER, "broker_epoch": 6, "incarnation_id": "b", "host": "h",
         "port": 2, "fenced": False},
        {"type": "topic", "topic": OFFSETS_TOPIC, "partitions": 5, "replication_factor": 2,
         "configs": {"min.insync.replicas": "2"}},
        {"type": "partition", "topic": OFFSETS_TOPIC, "partition": partition, "replicas": [NODE, FOLLOWER],
         "isr": isr, "leader": NODE, "leader_epoch": leader_epoch, "partition_epoch": leader_epoch},
    ]
    for r in records:
        b.image.apply(b.image.offset + 1, r)
    b.apply_metadata({(OFFSETS_TOPIC, partition)})


def follower_fetches_up_to(b: Broker, partition: int, offset: int) -> None:
    r = b.replicas[(OFFSETS_TOPIC, partition)]
    r.record_follower_fetch({"replica_id": FOLLOWER, "broker_epoch": 6, "topic": OFFSETS_TOPIC,
                             "partition": partition, "fetch_offset": offset, "last_fetched_epoch": r.leader_epoch,
                             "current_leader_epoch": r.leader_epoch}, 0)
    b._hwm_may_have_moved(r)


async def commit_replicated(b: Broker) -> None:
    """Group g commits offset 42 of t-0 (no generation, no member) on a leader of its offsets partition whose one
    follower fetches the commit: answered once replicated."""
    p = b.groups.partition_for("g")
    lead_offsets_partition(b, p, leader_epoch=0, isr=[1, 2])
    await asyncio.sleep(0.05)
    commit = asyncio.create_task(b.commit_offsets("g", -1, "", [("t", 0, 42, 3, "")], 5.0))
    await asyncio.sleep(0.05)
    follower_fetches_up_to(b, p, 1)
    assert await asyncio.wait_for(commit, 1.0) == rpc.NONE


def test_a_new_leader_loads_the_groups_only_once_its_hwm_reaches_the_leso(tmp_path):
    async def scenario(b: Broker) -> None:
        group = "g"
        p = b.groups.partition_for(group)
        # Commits of an earlier epoch in the log (a former leader wrote them), the local HWM still 0.
        log = b.logs.get_or_create(OFFSETS_TOPIC, p)
        for offset in (10, 20, 30):
            key, value = offset_record(group, "t", 0, (offset, 0, ""))
            raw = build_batch([value], keys=[key])
            log.append_as_leader(raw, 0, validate_batches(raw))
        lead_offsets_partition(b, p, leader_epoch=1, isr=[NODE, FOLLOWER])
        r = b.replicas[(OFFSETS_TOPIC, p)]
        assert (r.leso, r.hwm) == (3, 0)
        await asyncio.sleep(0.05)
        # Loading now would find no commit below the HWM and answer offset -1: a rewound group.
        assert b.groups.status(group) == rpc.COORDINATOR_LOAD_IN_PROGRESS
        assert b.groups.committed_offsets(group, None) == (rpc.COORDINATOR_LOAD_IN_PROGRESS, {})
        follower_fetches_up_to(b, p, 3)
        assert r.hwm == 3
        await asyncio.sleep(0.05)
        err, offsets = b.groups.committed_offsets(group, None)
        assert err == rpc.NONE and offsets[("t", 0)].offset == 30

    on_a_broker(tmp_path, scenario)


def test_a_commit_is_answered_only_once_the_hwm_passes_it(tmp_path):
    async def scenario(b: Broker) -> None:
        group = "g"
        p = b.groups.partition_for(group)
        lead_offsets_partition(b, p, leader_epoch=0, isr=[NODE, FOLLOWER])
        await asyncio.sleep(0.05)
        assert b.groups.status(group) == rpc.NONE
        commit = asyncio.create_task(b.commit_offsets(group, -1, "", [("t", 0, 42, 3, "")], 5.0))
        await asyncio.sleep(0.05)
        assert not commit.done()  # appended, not yet replicated to the ISR
        assert b.groups.committed_offsets(group, None)[1] == {}
        follower_fetches_up_to(b, p, 1)
        assert await asyncio.wait_for(commit, 1.0) == rpc.NONE
        assert b.groups.committed_offsets(group, None)[1][("t", 0)].offset == 42

    on_a_broker(tmp_path, scenario)


def test_a_commit_that_cannot_reach_min_isr_is_refused_as_coordinator_not_available(tmp_path):
    async def scenario(b: Broker) -> None:
        group = "g"
        p = b.groups.partition_for(group)
        lead_offsets_partition(b, p, leader_epoch=0, isr=[NODE])  # below min ISR 2
        await asyncio.sleep(0.05)
        assert await b.commit_offsets(group, -1, "", [("t", 0, 42, 3, "")], 1.0) == rpc.COORDINATOR_NOT_AVAILABLE
        assert b.groups.committed_offsets(group, None)[1] == {}

    on_a_broker(tmp_path, scenario)
