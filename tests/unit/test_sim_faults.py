"""SimCluster's faults, each shown to have happened in what the nodes did (clusters/sim/cluster.py)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.sim.cluster import EPOCH_S, SimCluster
from kafkaesque_harness.clusters.sim.probe import connect_to, create_topic, fetch, fetch_request, produce

TOPIC = "t"


def boot(tmp_path, **kw) -> SimCluster:
    sim = SimCluster(seed=kw.pop("seed", 3), run_dir=str(tmp_path), **kw)
    sim.start_all()
    assert sim.wait_ready(30)
    return sim


@pytest.fixture
def sim(tmp_path):
    cluster = boot(tmp_path)
    cluster.client = cluster.add_client("client-1")
    cluster.run_as(cluster.client, create_topic(cluster, TOPIC, rf=3, min_isr=2))
    yield cluster
    cluster.close()


def log_events(tmp_path: Path, node: str, event: str) -> list[dict]:
    role = "controller" if node.startswith("controller") else "broker"
    lines = (tmp_path / "data" / node / f"{role}.log").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") == event]


def leo(sim: SimCluster, node: str) -> int:
    """The node's log end offset of the topic's partition 0; -1 while it has no replica (or is down)."""
    if not sim.running(node):
        return -1
    return next((p["leo"] for p in sim.dump(node)["partitions"] if p["topic"] == TOPIC), -1)


def segment_bytes(sim: SimCluster, node: str) -> int:
    root = Path(sim.node_dir(node)) / "data" / "logs"
    return sum(p.stat().st_size for p in root.rglob("*.log") if p.parent != root)


def test_kill_of_the_leader_gets_a_new_one_elected_and_its_port_refuses(sim):
    old = sim.leader(TOPIC)
    sim.kill(old)
    assert sim.run_until(lambda: sim.leader(TOPIC) not in (None, old), timeout_s=15)

    async def connect_to_the_dead():
        await connect_to(sim, old)

    with pytest.raises(ConnectionRefusedError):
        sim.run_as(sim.client, connect_to_the_dead())


def test_restart_registers_a_new_incarnation_that_catches_up(sim, tmp_path):
    leader = sim.leader(TOPIC)
    follower = next(b for b in sim.brokers if b != leader)
    sim.kill(follower)
    sim.run_as(sim.client, produce(sim, leader, TOPIC, [b"a", b"b", b"c"], acks=1))
    sim.restart(follower)

    def epochs():
        return [e["broker_epoch"] for e in log_events(tmp_path, "controller-0", "broker_registered")
                if e["broker"] == sim.node_id(follower)]

    assert sim.run_until(lambda: len(epochs()) == 2, timeout_s=15)  # after the old session expired
    assert epochs()[1] > epochs()[0]
    assert sim.run_until(lambda: leo(sim, follower) == 3, timeout_s=10)


def test_power_cut_loses_what_was_not_fsynced_and_the_follower_refetches_it(sim):
    leader = sim.leader(TOPIC)
    follower = next(b for b in sim.brokers if b != leader)
    acked = sim.run_as(sim.client, produce(sim, leader, TOPIC, [b"x" * 100] * 10, acks=-1))
    assert acked.error_code == 0
    sim.run_for(0.5)
    before = segment_bytes(sim, follower)
    assert before > 1000  # the follower has the records, in the page cache only (flush policy never)
    report = sim.power_cut(follower)
    assert report.bytes_lost >= before
    assert segment_bytes(sim, follower) == 0
    sim.start(follower)
    assert sim.run_until(lambda: leo(sim, follower) == 10, timeout_s=15)
    sim.run_for(1)  # the trace's buffer flushed by the broker's housekeeping
    # the node's log and trace are not on the lossy disk (as in real runs): both incarnations' starts are there
    assert len(log_events(Path(sim.run_dir), follower, "broker_started")) == 2
    trace = (Path(sim.node_dir(follower)) / "trace.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in trace].count("trace_started") == 2
    # the restarted broker counted the power cut, as a real one reads its lossy file system's reports
    loads = [json.loads(line) for line in trace if '"logs_loaded"' in line]
    assert [e["lossy_drops"] for e in loads] == [0, 1]


def test_a_torn_power_cut_keeps_part_of_the_unsynced_tail(tmp_path):
    sim = boot(tmp_path, seed=11, flush_policy="never")
    client = sim.add_client("client-1")
    leader = sim.run_as(client, create_topic(sim, TOPIC))
    kept = []
    for round_ in range(4):  # a torn tail keeps a seeded prefix: some rounds keep something
        sim.run_as(client, produce(sim, f"broker-{leader}", TOPIC, [b"y" * 200] * 20, acks=1))
        before = segment_bytes(sim, f"broker-{leader}")
        report = sim.power_cut(f"broker-{leader}", torn=True)
        kept.append((report.torn, segment_bytes(sim, f"broker-{leader}"), before))
        sim.start(f"broker-{leader}")
        assert sim.wait_ready(20), round_
        leader = int(sim.leader(TOPIC).split("-")[1])
    assert any(torn and 0 < after < before for torn, after, before in kept), kept
    sim.close()


def test_a_paused_leader_stops_answering_and_answers_again_on_resume(sim):
    leader = sim.leader(TOPIC)

    async def fetch_within(seconds):
        client = await connect_to(sim, leader)
        try:
            return await asyncio.wait_for(client.call(fetch_request(TOPIC, 0, 0)), seconds)
        except TimeoutError:
            return "timeout"

    sim.pause(leader)
    assert sim.run_as(sim.client, fetch_within(1.0)) == "timeout"
    sim.resume(leader)
    assert sim.run_as(sim.client, fetch_within(1.0)).responses[0].partitions[0].error_code == 0


def test_a_paused_broker_is_fenced_by_the_controller(sim, tmp_path):
    victim = sim.brokers[1]
    sim.pause(victim)
    sim.run_for(6)  # beyond the session timeout (3 s)
    fenced = [e for e in log_events(tmp_path, "controller-0", "broker_fenced") if e.get("broker") == sim.node_id(victim)]
    assert fenced
    sim.resume(victim)
    assert sim.wait_ready(15)


def test_isolating_the_leader_moves_leadership(sim):
    old = sim.leader(TOPIC)
    sim.isolate(old)
    assert sim.run_until(lambda: sim.leader(TOPIC) not in (None, old), timeout_s=15)
    sim.heal()
    assert sim.wait_ready(20)


def test_a_one_way_cut_of_a_brokers_heartbeats_fences_it(sim, tmp_path):
    victim = next(b for b in sim.brokers if b != sim.leader(TOPIC))
    sim.block(victim, "controller-0")  # its requests are lost; the controller's bytes still reach it
    sim.run_for(8)
    assert any(e.get("broker") == sim.node_id(victim)
               for e in log_events(tmp_path, "controller-0", "broker_fenced"))
    assert sim.running(victim)


def test_a_clock_skew_moves_the_nodes_wall_clock_and_not_its_monotonic_one(sim, tmp_path):
    node = "broker-2"
    sim.skew_clock(node, 3600.0)
    sim.restart(node)  # its new incarnation logs at once, with the skewed clock
    sim.run_for(1)
    sim.jump_clock(node, -60.0)
    sim.restart(node)
    sim.run_for(1)
    started = log_events(tmp_path, node, "broker_started")
    offsets = [round(e["ts"] - EPOCH_S - e["mono"]) for e in started]
    assert offsets == [0, 3600, 3540]


def test_a_stopped_broker_shuts_down_cleanly(sim, tmp_path):
    assert sim.stop("broker-3")
    sim.run_for(12)
    assert log_events(tmp_path, "broker-3", "controlled_shutdown_done")
    assert sim.nodes["broker-3"].exits == [0]
    assert not sim.running("broker-3")  # its process exited
    assert os.path.exists(Path(sim.node_dir("broker-3")) / "data" / "logs" / "clean-shutdown")
    sim.start("broker-3")
    assert sim.run_until(lambda: len(log_events(tmp_path, "controller-0", "broker_registered")) == 4, timeout_s=15)
    again = log_events(tmp_path, "controller-0", "broker_registered")[-1]
    assert again["broker"] == 3 and again["clean"] is True  # the marker vouched for its log


def test_killing_the_active_controller_of_a_quorum_activates_another(tmp_path):
    sim = boot(tmp_path, n_controllers=3)
    first = sim.active_controller()
    assert first is not None
    sim.kill(first)
    assert sim.run_until(lambda: sim.active_controller() not in (None, first), timeout_s=20)
    client = sim.add_client("client-1")
    leader = sim.run_as(client, create_topic(sim, TOPIC))
    assert sim.run_as(client, produce(sim, f"broker-{leader}", TOPIC, [b"after"], acks=-1)).error_code == 0
    assert sim.run_as(client, fetch(sim, f"broker-{leader}", TOPIC))[2] == [b"after"]
    sim.close()
