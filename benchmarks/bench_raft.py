"""The controller quorum's Raft core (clusters/broker/raft.py) in the seeded simulation.

Prints three figures:

1. commits per wall-clock second of the core: a simulated quorum (messages take one tick,
   in-memory store) whose leader gets `--per-tick` proposals every tick, counted when the leader
   applies them; this is the protocol's CPU cost, without fsync or sockets;
2. time to elect after the leader crashes, in simulated ticks (heartbeat 5, election timeout
   30-60, messages 1-3 ticks), over `--trials` seeds, with and without pre-vote;
3. fsynced appends per second of the file store, one entry and 100 entries per append.

    .venv/bin/python benchmarks/bench_raft.py [--commits 20000] [--trials 200] [--fsyncs 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from kafkaesque_harness.clusters.broker.raft_sim import SimCluster
from kafkaesque_harness.clusters.broker.raft_store import Entry, FileRaftStore


def commits_per_second(size: int, commits: int, per_tick: int) -> tuple[float, float]:
    # The log-matching check scans whole logs: off here, it would dominate the measurement.
    sim = SimCluster(size, seed=1, min_delay=1, max_delay=1, log_matching_every=0)
    assert sim.run(1000, until=lambda: sim.leader() is not None)
    leader = sim.leader()
    assert leader is not None
    start_index = leader.commit_index
    ticks0, t0 = sim.now, time.perf_counter()
    proposed = 0
    while leader.commit_index - start_index < commits:
        if proposed < commits:
            leader.propose_batch(list(range(proposed, proposed + per_tick)))
            proposed += per_tick
        sim.step()
    wall = time.perf_counter() - t0
    assert sim.final_check() == [] and leader is sim.leader()
    n = leader.commit_index - start_index
    return n / wall, n / (sim.now - ticks0)


def ticks_to_elect(size: int, seed: int, pre_vote: bool) -> int:
    sim = SimCluster(size, seed=seed, pre_vote=pre_vote)
    assert sim.run(2000, until=lambda: sim.leader() is not None)
    assert sim.commit_everywhere("warm", 500)
    sim.run(sim.rng.randrange(1, 10))  # crash at a random point of the heartbeat cycle
    old = sim.leader()
    assert old is not None
    sim.crash(old.id)
    crashed_at = sim.now
    assert sim.run(5000, until=lambda: sim.leader() is not None)
    return sim.now - crashed_at


def fsync_appends_per_second(appends: int, entries_per_append: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        store = FileRaftStore(os.path.join(d, "raft.log"))
        store.load()
        record = {"type": "broker_change", "broker_id": 1, "fenced": False}
        t0 = time.perf_counter()
        index = 1
        for _ in range(appends):
            store.append([Entry(index + i, 1, record) for i in range(entries_per_append)])
            index += entries_per_append
        wall = time.perf_counter() - t0
        store.close()
    return appends / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=20000)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--fsyncs", type=int, default=200)
    args = ap.parse_args()

    print("1. core commits per second (in-memory store, simulated network, one process)")
    for size in (3, 5):
        for per_tick in (1, 100):
            wall_rate, per_tick_rate = commits_per_second(size, args.commits, per_tick)
            print(f"   {size} nodes, {per_tick:>3} proposals/tick: {wall_rate:>9,.0f} commits/s "
                  f"({per_tick_rate:,.1f} commits per simulated tick)")

    print(f"2. ticks from leader crash to new leader ({args.trials} seeds; election timeout 30-60)")
    for size in (3, 5):
        for pre_vote in (True, False):
            ticks = sorted(ticks_to_elect(size, seed, pre_vote) for seed in range(args.trials))
            p95 = ticks[int(0.95 * (len(ticks) - 1))]
            print(f"   {size} nodes, pre-vote {'on ' if pre_vote else 'off'}: min {ticks[0]}, "
                  f"median {statistics.median(ticks):.0f}, p95 {p95}, max {ticks[-1]}")

    print("3. file store, fsynced appends per second")
    for per_append in (1, 100):
        rate = fsync_appends_per_second(args.fsyncs, per_append)
        print(f"   {per_append:>3} entries/append: {rate:,.0f} appends/s ({rate * per_append:,.0f} entries/s)")


if __name__ == "__main__":
    main()
