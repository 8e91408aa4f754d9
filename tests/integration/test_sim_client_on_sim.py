"""The simulator's clients (workloads/sim/) on the simulated cluster (clusters/sim/, issue 41 item 1): a seed's
run gives a byte-identical history twice, the real checkers judge it valid, and a client node cut off from the
cluster ends its ops as a real client would. Runs once clusters/sim/ is in the tree (the sim-core branch)."""

from __future__ import annotations

import asyncio
import random

import pytest

from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.history import HistoryWriter, read_history
from kafkaesque_harness.workloads.sim.driver import SimWorkloadRun, virtual_clock_ns
from tests.integration.test_sim_client import assert_valid_but_for_aborted_polls

sim_cluster = pytest.importorskip("kafkaesque_harness.clusters.sim.cluster")
probe = pytest.importorskip("kafkaesque_harness.clusters.sim.probe")

pytestmark = pytest.mark.integration


def simulated_run(tmp_path, seed: int, workload: str, time_limit_s: float, options: dict | None = None,
                  cut_client: str | None = None):
    """One seeded run: the cluster, the topic, the workload's processes (each worker a client node of its own),
    the final reads; (history bytes, history, verdict)."""
    run_dir = tmp_path / f"{workload}-{seed}-{len(list(tmp_path.iterdir()))}"
    run_dir.mkdir()
    sim = sim_cluster.SimCluster(seed, run_dir=str(run_dir))
    try:
        sim.start_all()
        assert sim.wait_ready(30)
        admin = sim.add_client("admin")
        sim.run_as(admin, probe.create_topic(sim, "queue", partitions=4))

        def spawn(name, coro):
            proc = sim.clients.get(name) or sim.add_client(name)
            return sim.spawn(proc, coro)

        async def clients():
            with HistoryWriter(run_dir / "history.jsonl", clock_ns=virtual_clock_ns()) as history:
                run = SimWorkloadRun(workload, {"topic": "queue", "partitions": 4, **(options or {})},
                                     sim.net.open_connection, random.Random(seed),
                                     ",".join(f"{h}:{p}" for h, p in sim.bootstrap()), history, concurrency=3,
                                     time_limit_s=time_limit_s, rate=50, spawn=spawn)
                main = asyncio.ensure_future(run.main_phase())
                if cut_client is not None:
                    await asyncio.sleep(time_limit_s / 3)
                    sim.isolate(cut_client)
                    await asyncio.sleep(time_limit_s / 3)
                    sim.heal()
                await main
                await run.final_reads()
            return run

        run = sim.run_as(admin, clients())
    finally:
        sim.close()
    history = read_history(run_dir / "history.jsonl")
    return (run_dir / "history.jsonl").read_bytes(), history, run_checkers(run.workload.checkers(run.test),
                                                                            run.test, history)


@pytest.mark.parametrize("workload", ["queue", "txn"])
def test_a_seed_gives_the_same_history_twice_and_the_checkers_find_it_valid(tmp_path, workload):
    first, history, verdict = simulated_run(tmp_path, 3, workload, 5)
    second, _, _ = simulated_run(tmp_path, 3, workload, 5)
    assert first == second
    if workload == "txn":
        assert_valid_but_for_aborted_polls(verdict["checkers"]["txn"], history)
        assert all(v["valid"] is True for k, v in verdict["checkers"].items() if k != "txn")
    else:
        assert verdict["valid"] is True, {k: v.get("anomaly_types") for k, v in verdict["checkers"].items()}
    assert sum(1 for op in history if op.type == "ok" and op.f in ("send", "txn")) > 50


def test_another_seed_gives_another_history(tmp_path):
    first, _, _ = simulated_run(tmp_path, 3, "queue", 3)
    other, _, _ = simulated_run(tmp_path, 4, "queue", 3)
    assert first != other


def test_a_client_node_cut_off_ends_its_sends_info_and_the_run_stays_valid(tmp_path):
    _, history, verdict = simulated_run(tmp_path, 5, "queue", 9, cut_client="client-0")
    assert verdict["checkers"]["queue"]["valid"] is True
    # worker 0's processes are 0, 3, 6, ...: while cut off, its sends time out (info) and it moves on
    cut = [op for op in history if op.f == "send" and op.type == "info" and op.process % 3 == 0]
    others = [op for op in history if op.f == "send" and op.type == "info" and op.process % 3 != 0]
    assert cut and not others
