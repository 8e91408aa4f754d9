"""clusters/sim/cluster.py: the reference cluster's own node programs, every node in one process under
virtual time, reached through their real Kafka listeners over the simulated network."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.sim.cluster import SimCluster
from kafkaesque_harness.clusters.sim.probe import create_topic, fetch, produce


@pytest.fixture
def sim(tmp_path):
    cluster = SimCluster(seed=7, run_dir=str(tmp_path))
    cluster.start_all()
    assert cluster.wait_ready(30), "the brokers did not register within 30 virtual seconds"
    yield cluster
    cluster.close()


def test_a_cluster_boots_in_virtual_time_without_waiting_for_it(tmp_path):
    cpu0 = time.process_time()
    cluster = SimCluster(seed=1, run_dir=str(tmp_path))
    cluster.start_all()
    assert cluster.wait_ready(30)
    cluster.run_for(60)
    assert cluster.now() >= 60
    assert time.process_time() - cpu0 < 20  # a minute of heartbeats and long polls, not a minute of waiting
    cluster.close()
    log = [json.loads(line) for line in (tmp_path / "data" / "controller-0" / "controller.log").read_text().splitlines()]
    assert {e["broker"] for e in log if e.get("event") == "broker_registered"} == {1, 2, 3}


def test_a_record_produced_with_acks_all_is_fetched_back_through_the_kafka_listener(sim):
    client = sim.add_client("client-1")

    async def scenario():
        leader = await create_topic(sim, "t", rf=3, min_isr=2)
        acked = await produce(sim, f"broker-{leader}", "t", [b"hello", b"world"], acks=-1)
        return leader, acked, await fetch(sim, f"broker-{leader}", "t")

    leader, acked, (error, hwm, values) = sim.run_as(client, scenario())
    assert (acked.error_code, acked.base_offset) == (0, 0)
    assert (error, hwm, values) == (0, 2, [b"hello", b"world"])
    # acks=all: every ISR member had the records before the answer; the followers' logs show them too
    sim.run_for(1)
    for b in sim.brokers:
        part = next(p for p in sim.dump(b, include_log=True)["partitions"] if p["topic"] == "t")
        assert part["leo"] == 2, (b, part)


def test_create_topic_gives_the_leader_the_controller_names(sim):
    leader = sim.create_topic("u", partitions=2, rf=3, min_isr=2)
    assert leader == sim.leader("u", 0)
    state = sim.partition_state("u", 1)
    assert state is not None and sorted(state["isr"]) == [1, 2, 3]


def test_each_node_writes_its_log_and_trace_where_a_local_run_does(sim, tmp_path):
    sim.run_for(2)
    sim.close()
    for node in ["controller-0", "broker-1", "broker-2", "broker-3"]:
        trace = (tmp_path / "data" / node / "trace.jsonl").read_text().splitlines()
        first = json.loads(trace[0])
        assert first["event"] == "trace_started" and first["ts"] >= 1_767_225_600
    assert Path(tmp_path / "data" / "broker-1" / "broker.log").exists()


def test_a_run_dir_the_cluster_made_itself_is_removed_when_it_closes_and_a_given_one_is_kept(tmp_path):
    made = SimCluster(seed=2)  # no run dir given: one of its own, on /dev/shm when there is one
    made.start_all()
    made.run_for(1)
    own = Path(made.run_dir)
    assert (own / "data" / "broker-1").is_dir()
    made.close()
    assert not own.exists()

    given = SimCluster(seed=2, run_dir=str(tmp_path))
    given.start_all()
    given.run_for(1)
    given.close()
    assert (tmp_path / "data" / "broker-1").is_dir()
