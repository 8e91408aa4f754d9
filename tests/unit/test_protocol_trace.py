"""The broker's protocol trace (clusters/broker/trace.py): the state machines' decisions carry their facts, the
sink keeps the hot-path events out of the state-change log, and a correct replica's trace passes the checker.
The transaction and group facts: the default broker's trace passes, each flaw variant's breaks its rule."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from kafkaesque_harness.checkers.trace import check_traces
from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.log import PartitionLog, build_batch, validate_batches
from kafkaesque_harness.clusters.broker.metadata import BrokerInfo, PartitionState
from kafkaesque_harness.clusters.broker.replica import Replica, ReplicaConfig
from kafkaesque_harness.clusters.broker.trace import EventSink, TraceWriter, default_trace_path, open_sink
from kafkaesque_harness.clusters.broker.txn_coordinator import TransactionCoordinator
from kafkaesque_harness.clusters.trace_files import read_trace
from tests.unit.test_broker_groups import (
    commit_replicated,
    make_broker,
)
from tests.unit.test_broker_txn import PID, lead, marker, produce, txn_batch
from tests.unit.test_txn_coordinator import TIMEOUT, TP1, T, write
from tests.unit.test_txn_group_variants import coordinator, init


def replica(tmp_path, node, events):
    d = tmp_path / f"n{node}" / "t-0"
    d.parent.mkdir(parents=True, exist_ok=True)
    log = PartitionLog(str(d), logger=lambda e: None, topic="t", partition=0)
    return Replica(node, "t", 0, log, 0, 2, ReplicaConfig(replica_lag_time_max_ms=10_000), event_log=events.append)


def test_hwm_advance_and_isr_expansion_carry_the_facts_they_were_decided_on(tmp_path):
    events: list[dict] = []
    r = replica(tmp_path, 1, events)
    r.apply_partition_state(PartitionState("t", 0, [1, 2, 3], [1, 2], 1, 3, 3), now_ms=0)
    raw = build_batch([b"a", b"b", b"c"])
    r.append(raw, validate_batches(raw))
    for rid in (2, 3):
        r.record_follower_fetch({"replica_id": rid, "broker_epoch": 10, "topic": "t", "partition": 0,
                                 "fetch_offset": 3, "last_fetched_epoch": 3, "current_leader_epoch": 3}, 1)
    brokers = {b: BrokerInfo(b, 10, "inc", "127.0.0.1", 9000 + b, fenced=False) for b in (1, 2, 3)}
    assert r.wanted_isr_change(1, brokers, fetched_by=3) is not None  # on 3's fetch
    advanced = next(e for e in events if e["event"] == "hwm_advanced")
    assert advanced["to"] == 3 and advanced["leader_epoch"] == 3 and advanced["maximal_isr"] == [1, 2]
    assert advanced["members"] == {"1": {"leo": 3, "fetch_epoch": 3}, "2": {"leo": 3, "fetch_epoch": 3}}
    sent = next(e for e in events if e["event"] == "alter_partition_sent")
    assert sent["added"] == {"3": {"leo": 3, "fetch_epoch": 3, "broker_epoch": 10, "registered_broker_epoch": 10}}
    assert sent["hwm"] == 3
    leader = next(e for e in events if e["event"] == "become_leader")
    assert leader["epoch_cache"] == [[3, 0]] and leader["leso"] == 0
    assert check_traces({"broker-1": [dict(e, line=i + 1) for i, e in enumerate(events)]}).valid is True


def test_the_sink_keeps_hot_events_out_of_the_state_change_log_and_buffers_the_trace(tmp_path):
    logged: list[dict] = []
    path = tmp_path / "trace.jsonl"
    sink = open_sink(logged.append, str(path), 1, "broker", variants=[])
    sink({"event": "hwm_advanced", "to": 1})
    sink({"event": "become_leader", "leader_epoch": 1})
    sink({"event": "connection_closed"})  # not a protocol decision: the log only
    assert [e["event"] for e in logged] == ["become_leader", "connection_closed"]
    assert [json.loads(x)["event"] for x in path.read_text().splitlines()] == ["trace_started"]  # not yet flushed
    sink.flush()
    doc = read_trace(path)
    assert [e["event"] for e in doc["lines"]] == ["trace_started", "hwm_advanced", "become_leader"]
    assert [e["line"] for e in doc["lines"]] == [1, 2, 3] and doc["lines"][1]["node"] == 1


def test_without_a_trace_file_the_sink_is_the_log_alone(tmp_path):
    logged: list[dict] = []
    sink = EventSink(logged.append, None)
    sink({"event": "produce_acked"})
    sink({"event": "registered"})
    sink.flush()
    assert [e["event"] for e in logged] == ["registered"]


def test_the_writer_flushes_by_itself_when_its_buffer_fills(tmp_path):
    w = TraceWriter(str(tmp_path / "t.jsonl"), 2, "broker")
    for i in range(600):
        w.write({"event": "consumer_fetch", "i": i})
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) >= 512


def test_a_follower_records_its_epoch_cache_when_it_copies_a_new_leader_epoch(tmp_path):
    leader_events: list[dict] = []
    follower_events: list[dict] = []
    leader, follower = replica(tmp_path, 1, leader_events), replica(tmp_path, 2, follower_events)
    state = PartitionState("t", 0, [1, 2, 3], [1, 2, 3], 1, 4, 4)
    leader.apply_partition_state(state, now_ms=0)
    follower.apply_partition_state(state, now_ms=0)
    raw = build_batch([b"a", b"b"])
    leader.append(raw, validate_batches(raw))
    for _ in range(2):  # the second round trip copies nothing new: no second event
        req = follower.fetch_request(10, 1 << 20)
        resp = leader.record_follower_fetch(req, 1) or leader.read_for_follower(req["fetch_offset"], 1 << 20)
        follower.on_fetch_response(req, resp)
    appended = [e for e in follower_events if e["event"] == "follower_epoch_appended"]
    assert len(appended) == 1 and appended[0]["epoch_cache"] == [[4, 0]] and appended[0]["leo"] == 2
    lines = {"broker-1": [dict(e, line=i + 1) for i, e in enumerate(leader_events)],
             "broker-2": [dict(e, line=i + 1) for i, e in enumerate(follower_events)]}
    assert check_traces(lines).valid is True


# --- transactions and groups (issue 25) -----------------------------------------------------------------------
def rules_broken(events: list[dict]) -> list[str]:
    """The trace checker's verdict on one node's events, numbered as the trace file numbers them."""
    return [a.name for a in check_traces({"broker-1": [dict(e, line=i + 1, mono=float(i + 1))
                                                        for i, e in enumerate(events)]}).anomalies]


def traced_coordinator(*variants: str) -> tuple[TransactionCoordinator, list[dict]]:
    events: list[dict] = []
    c = coordinator(*variants)
    c.event_log = events.append
    return c, events


def test_the_transaction_coordinator_traces_a_timeout_abort_with_the_epoch_its_markers_carry():
    for variants, broken in (((), []), (("txn-markers-no-epoch-bump",), ["txn-abort-not-fenced"])):
        c, events = traced_coordinator(*variants)
        pid, epoch = init(c)
        write(c, c.add_partitions(T, pid, epoch, [TP1], 0))
        [timed_out] = c.expired(TIMEOUT)
        c.written(timed_out)
        [ended] = [e for e in events if e["event"] == "txn_end_started"]
        assert (ended["started_by"], ended["result"], ended["txn_epoch"], ended["coordinator_epoch"]) == \
            ("timeout", "abort", epoch, 3)
        assert ended["marker_epoch"] == (epoch if variants else epoch + 1)
        assert rules_broken(events) == broken


def test_the_transaction_coordinator_traces_each_init_with_the_producer_the_id_had():
    for variants, broken in (((), []), (("zombie-not-fenced",), ["init-not-fenced"])):
        c, events = traced_coordinator(*variants)
        pid, _ = init(c)
        init(c)  # a new instance of the same transactional id
        answers = [(e["producer_id_before"], e["epoch_before"], e["producer_id"], e["producer_epoch"])
                   for e in events if e["event"] == "txn_init_producer_id"]
        assert answers == [(-1, -1, pid, 0), (pid, 0, pid, 0 if variants else 1)]
        assert rules_broken(events) == broken


def node_trace(b) -> list[dict]:
    """What the broker's sink wrote to its trace file (beside its log in the test's directory)."""
    b.events.flush()
    b.logs.close_all()
    return read_trace(Path(default_trace_path(b.args.log_file)))["lines"]


def test_a_read_committed_fetch_is_traced_with_the_lso_and_the_bound_it_was_cut_at(tmp_path):
    async def scenario(*variants: str) -> list[dict]:
        b = make_broker(tmp_path / (variants[0] if variants else "default"), variants)
        lead(b, "t", 1, 0)
        for raw in (build_batch([b"before"]), txn_batch(0, b"open"), build_batch([b"after"])):
            assert await produce(b, raw) == rpc.NONE
        b.consumer_read("t", 0, 0, -1, 1 << 20, read_committed=True)
        return node_trace(b)

    default = asyncio.run(scenario())
    [fetch] = [e for e in default if e["event"] == "consumer_fetch"]
    assert (fetch["isolation"], fetch["bound"], fetch["lso"], fetch["hwm"], fetch["last"]) == \
        ("read_committed", "lso", 1, 3, 0)
    assert [(e["producer_id"], e["transactional"]) for e in default if e["event"] == "produce_acked"] == \
        [(-1, False), (PID, True), (-1, False)]
    assert rules_broken(default) == []
    variant = asyncio.run(scenario("read-committed-to-hwm"))
    [fetch] = [e for e in variant if e["event"] == "consumer_fetch"]
    assert (fetch["bound"], fetch["lso"], fetch["last"]) == ("hwm", 1, 2)
    assert rules_broken(variant) == ["read-committed-above-lso"]


def test_a_marker_is_traced_where_it_was_written_and_a_late_produce_below_its_epoch_is_refused(tmp_path):
    async def scenario() -> list[dict]:
        b = make_broker(tmp_path)
        lead(b, "t", 1, 0)
        assert await produce(b, txn_batch(0, b"aborted")) == rpc.NONE
        assert (await b.txn.write_marker(marker(commit=False, epoch=1)))["error"] == rpc.NONE  # a fencing abort
        assert await produce(b, txn_batch(1, b"late")) == rpc.INVALID_PRODUCER_EPOCH
        assert await produce(b, txn_batch(0, b"next", epoch=2)) == rpc.NONE
        return node_trace(b)

    trace = asyncio.run(scenario())
    [written] = [e for e in trace if e["event"] == "txn_marker_written"]
    assert (written["producer_id"], written["producer_epoch"], written["result"], written["offset"]) == \
        (PID, 1, "abort", 1)
    acked = [(e["first"], e["producer_epoch"], e["control"]) for e in trace if e["event"] == "produce_acked"]
    assert acked == [(0, 0, False), (1, 1, True), (2, 2, False)]
    assert rules_broken(trace) == []


def test_a_batch_acknowledged_as_a_retry_is_traced_as_a_duplicate_with_its_sequence(tmp_path):
    # Kafka's duplicate check (ProducerStateEntry.findDuplicateBatch) matches producer epoch and sequence range
    # only: a producer that sends new data under the sequence of a batch of its aborted transaction (no epoch
    # bump between) is answered with that batch's offsets. A txn run's op #1142 was acknowledged so at offset
    # 317, which held a value of its aborted transaction: the trace now says so.
    async def scenario() -> list[dict]:
        b = make_broker(tmp_path)
        lead(b, "t", 1, 0)
        assert await produce(b, txn_batch(0, b"aborted")) == rpc.NONE
        assert (await b.txn.write_marker(marker(commit=False)))["error"] == rpc.NONE
        err, first, _ = await b.produce("t", 0, txn_batch(0, b"new"), validate_batches(txn_batch(0, b"new")), -1, 1.0)
        assert (err, first) == (rpc.NONE, 0)
        return node_trace(b)

    acked = [(e["first"], e["base_sequence"], e["control"], e.get("duplicate", False))
             for e in asyncio.run(scenario()) if e["event"] == "produce_acked"]
    assert acked == [(0, 0, False, False), (1, -1, True, False), (0, 0, False, True)]


def test_an_offset_commit_is_traced_with_the_hwm_it_was_answered_at(tmp_path):
    async def scenario(*variants: str) -> list[dict]:
        b = make_broker(tmp_path / (variants[0] if variants else "default"), variants)
        await commit_replicated(b)
        return node_trace(b)

    [answered] = [e for e in asyncio.run(scenario()) if e["event"] == "offset_commit_acked"]
    assert (answered["first"], answered["last"], answered["hwm"], answered["acks"]) == (0, 0, 1, -1)
    variant = asyncio.run(scenario("offsets-commit-acks-1"))
    [answered] = [e for e in variant if e["event"] == "offset_commit_acked"]
    assert (answered["hwm"], answered["acks"]) == (0, 1)
    assert rules_broken(variant) == ["offset-commit-unreplicated"]
