"""Swarm settings (harness/sim_swarm.py) and BUGGIFY points (clusters/broker/hostenv.py): a seed draws the same
settings every time, settings vary across seeds, only settings whose promise the checkers know are drawn, and a
BUGGIFY point fires only where the simulator switched it on."""

from __future__ import annotations

import re
from pathlib import Path

from kafkaesque_harness.clusters.broker import hostenv
from kafkaesque_harness.clusters.sim.cluster import SimCluster, SimHost
from kafkaesque_harness.harness.sim_swarm import draw_swarm, swarm_spec
from kafkaesque_harness.harness.simulate import SIM_FAULTS
from kafkaesque_harness.harness.spec import TestSpec

SEEDS = range(1, 301)


def test_a_seed_draws_the_same_settings_every_time_and_seeds_draw_many():
    assert draw_swarm(7, "queue") == draw_swarm(7, "queue")
    drawn = [draw_swarm(s, "queue") for s in SEEDS]
    for key in ("brokers", "controllers", "partitions", "replication_factor", "min_isr", "flush_policy",
                "nemesis_schedule"):
        assert len({str(d[key]) for d in drawn}) >= 2, key
    assert len({tuple(d["nemesis"]) for d in drawn}) >= 20
    assert {p for d in drawn for p in d["buggify"]} == set(hostenv.BUGGIFY_POINTS)
    assert any(not d["buggify"] for d in drawn) and any(d["workload_options"].get("idempotent") for d in drawn)


def test_only_settings_whose_promise_the_checkers_know_are_drawn():
    for seed in SEEDS:
        d = draw_swarm(seed, "queue")
        assert d["acks"] == "all" and 2 <= d["min_isr"] <= d["replication_factor"] <= d["brokers"], d
        assert d["nemesis"] and set(d["nemesis"]) <= set(SIM_FAULTS) - {"lossy-crash"}, d
        spec, _ = swarm_spec(TestSpec.make(seed=seed, workload="queue"))
        assert spec.problems("flag", only=["brokers", "replication_factor", "min_isr", "partitions", "acks",
                                           "flush_policy", "controllers", "workload_options"]) == [], d


def test_the_spec_carries_the_draw_and_keeps_the_callers_own_workload_options():
    spec, drawn = swarm_spec(TestSpec.make(seed=11, workload="queue", workload_options={"send_ratio": 0.5}))
    assert spec.nemesis == drawn["nemesis"] and spec.brokers == drawn["brokers"] and spec.min_isr == drawn["min_isr"]
    assert spec.workload_options["send_ratio"] == 0.5
    assert all(spec.workload_options[k] == v for k, v in drawn["workload_options"].items())
    assert swarm_spec(TestSpec.make(seed=11, workload="txn"))[1]["workload_options"] == {}  # no queue options
    for seed in SEEDS:  # every drawn fault has room for its turn in the run
        spec, drawn = swarm_spec(TestSpec.make(seed=seed, workload="queue", time_limit=40))
        assert spec.nemesis_interval == drawn["nemesis_interval"] <= max(1.0, 40 / (3 * len(drawn["nemesis"])) + 0.01)


def test_a_buggify_point_never_fires_on_a_real_host_or_where_the_simulator_left_it_off():
    for point in hostenv.BUGGIFY_POINTS:
        assert hostenv.buggify(point) is False and hostenv.REAL_HOST.buggify(point) is False
        assert hostenv.buggify_stretch(point, 2.0, 3.0) == 2.0
    sim = SimCluster(1, run_dir="/nonexistent")
    host = SimHost(sim, "broker-1", 1)
    assert not any(host.buggify(p) for p in hostenv.BUGGIFY_POINTS for _ in range(100))
    assert host._buggify_rng is None and sim.buggify_fired == {}  # a run without points draws nothing more
    sim.close()


def test_a_point_switched_on_fires_at_its_chance_and_is_counted():
    sim = SimCluster(1, run_dir="/nonexistent", buggify={"heartbeat-skipped": 0.2, "fetch-answered-late": 1.0})
    host = SimHost(sim, "broker-1", 1)
    fired = sum(host.buggify("heartbeat-skipped") for _ in range(1000))
    assert 120 < fired < 280 and sim.buggify_fired["heartbeat-skipped"] == fired
    assert host.buggify("fetch-answered-late") and not host.buggify("purgatory-timer-stretched")
    again = SimHost(SimCluster(1, run_dir="/nonexistent", buggify={"heartbeat-skipped": 0.2}), "broker-1", 1)
    assert sum(again.buggify("heartbeat-skipped") for _ in range(1000)) == fired  # from the seed: the same draws
    sim.close()


def test_each_listed_point_is_one_line_of_the_broker_shell_and_every_point_there_is_listed():
    shell = (Path(hostenv.__file__).parent / "server.py").read_text()
    used = re.findall(r'hostenv\.buggify\w*\("([a-z-]+)"', shell)
    assert sorted(used) == sorted(hostenv.BUGGIFY_POINTS)
