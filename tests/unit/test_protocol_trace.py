"""The broker's protocol trace (clusters/broker/trace.py): the state machines' decisions carry their facts, the
sink keeps the hot-path events out of the state-change log, and a correct replica's trace passes the checker."""

from __future__ import annotations

import json

from checkers.trace import check_traces
from clusters.broker.log import PartitionLog, build_batch, validate_batches
from clusters.broker.metadata import BrokerInfo, PartitionState
from clusters.broker.replica import Replica, ReplicaConfig
from clusters.broker.trace import EventSink, TraceWriter, open_sink
from clusters.trace_files import read_trace


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
    assert r.wanted_isr_change(2, brokers) is not None
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
