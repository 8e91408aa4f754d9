"""A seeded simulated run for the simulator's own proofs (determinism, speed): a cluster, a producer
and a fault schedule, all drawn from one seed.

    python -m kafkaesque_harness.clusters.sim.drive --seed N --run-dir DIR [--time-limit S] [--no-faults]

The producer (probe.py's client, acks=all, one record every `interval_s`) finds the leader by asking the
brokers for metadata, sends over one connection until an error, and counts what was acknowledged.
The fault schedule picks, every few seconds, one of kill/restart, power cut/restart, pause/resume,
isolate/heal, a one-way cut/heal and a clock jump, on a node it draws. Then everything is healed, the
cluster recovers for a while, and the run ends: <run-dir>/data/<node>/ holds each node's log and trace,
<run-dir>/sim.json the summary (faults, acknowledged sends, virtual seconds, CPU seconds).

The process re-executes itself with PYTHONHASHSEED=0 when it has another: the iteration order of sets
of strings must not change between two runs of one seed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kafkaesque_harness.clusters.sim.mutant import mutant_code
from kafkaesque_harness.clusters.sim.probe import (
    connect_to,
    create_topic,
    leader_of,
    metadata_request,
    produce_request,
)

TOPIC = "sim"
HASH_SEED = "0"
FAULTS = ("kill", "power-cut", "pause", "isolate", "one-way", "clock-jump")


@dataclass
class DriveResult:
    seed: int
    virtual_s: float = 0.0
    cpu_s: float = 0.0
    sends: int = 0
    acked: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)
    loop_callbacks: int = 0
    network_writes: int = 0


NETWORK_ERRORS = (TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError)


async def _find_leader(sim: Any) -> str | None:
    """Ask the brokers in turn for the topic's metadata, as a client's metadata refresh does."""
    for broker in sim.brokers:
        try:
            client = await asyncio.wait_for(connect_to(sim, broker), 1.0)
        except NETWORK_ERRORS:
            continue
        try:
            leader = leader_of(await asyncio.wait_for(client.call(metadata_request(TOPIC)), 1.0), TOPIC, 0)
        except NETWORK_ERRORS:
            continue
        finally:
            client.close()
        if leader >= 0:
            return f"broker-{leader}"
    return None


async def _producer(sim: Any, result: DriveResult, until_s: float, interval_s: float) -> None:
    """acks=all sends of one record each to the leader, over one connection kept until an error."""
    conn, n = None, 0
    while sim.now() < until_s:
        if conn is None:
            leader = await _find_leader(sim)
            try:
                conn = await asyncio.wait_for(connect_to(sim, leader), 1.0) if leader else None
            except NETWORK_ERRORS:
                conn = None
            if conn is None:
                await asyncio.sleep(0.2)
                continue
        n += 1
        result.sends += 1
        try:
            resp = await asyncio.wait_for(conn.call(produce_request(TOPIC, 0, [b"%d" % n], acks=-1, timeout_ms=2000)),
                                          3.0)
            error = resp.responses[0].partition_responses[0].error_code
        except NETWORK_ERRORS:
            error = -1
        if error == 0:
            result.acked += 1
        else:
            conn.close()
            conn = None
        await asyncio.sleep(interval_s)


def _inject(sim: Any, rng: random.Random, result: DriveResult) -> list[Any]:
    """One fault, drawn; the healing actions to run when it ends."""
    kind = rng.choice(FAULTS)
    node = rng.choice(sim.names)
    result.faults.append({"at": round(sim.now(), 6), "fault": kind, "node": node})
    if kind in ("kill", "power-cut"):
        (sim.kill if kind == "kill" else sim.power_cut)(node)
        return [lambda: sim.start(node)]
    if kind == "pause":
        sim.pause(node)
        return [lambda: sim.resume(node)]
    if kind == "isolate":
        sim.isolate(node)
        return [sim.heal]
    if kind == "one-way":
        other = rng.choice([n for n in sim.names if n != node])
        sim.block(node, other)
        result.faults[-1]["to"] = other
        return [sim.heal]
    sim.jump_clock(node, rng.choice([-1, 1]) * rng.uniform(1, 120))
    return []


def drive(seed: int, run_dir: str, time_limit_s: float = 60.0, faults: bool = True, interval_s: float = 0.01,
          recovery_s: float = 10.0) -> DriveResult:
    # Imported here, not at the top: with --mutant the broker must be switched to the copy first (mutant.py).
    from kafkaesque_harness.clusters.sim.cluster import SimCluster

    cpu0 = time.process_time()
    result = DriveResult(seed)
    sim = SimCluster(seed, run_dir=run_dir)
    rng = random.Random(f"{seed}/faults")
    try:
        sim.start_all()
        sim.wait_ready(30)
        client = sim.add_client("client-1")
        sim.run_as(client, create_topic(sim, TOPIC))
        end = sim.now() + time_limit_s
        sim.spawn(client, _producer(sim, result, end, interval_s))
        while sim.now() < end:
            sim.run_for(min(rng.uniform(2, 8), end - sim.now()))
            if not faults or sim.now() >= end:
                continue
            heal = _inject(sim, rng, result)
            sim.run_for(min(rng.uniform(1, 5), max(0.0, end - sim.now())))
            for action in heal:
                action()
        sim.heal()
        for name in sim.names:
            sim.resume(name)
            if not sim.running(name):
                sim.start(name)
        sim.run_for(recovery_s)
        result.virtual_s = round(sim.now(), 6)
        result.loop_callbacks = sim.loop.callbacks_run
        result.network_writes = sim.net.writes
    finally:
        sim.close()
    result.cpu_s = time.process_time() - cpu0
    return result


def _reexec_with_fixed_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name if __spec__ else __name__, *sys.argv[1:]], env)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kafkaesque_harness.clusters.sim.drive", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--time-limit", type=float, default=60.0, help="virtual seconds of producing and faults")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--interval", type=float, default=0.01, help="virtual seconds between two sends")
    ap.add_argument("--mutant", default=None, help="run a mutant of the broker (clusters/mutants.py)")
    args = ap.parse_args(argv)
    os.makedirs(args.run_dir, exist_ok=True)
    copy = mutant_code(args.mutant) if args.mutant else None
    try:
        result = drive(args.seed, args.run_dir, args.time_limit, faults=not args.no_faults, interval_s=args.interval)
    finally:
        if copy is not None:
            copy.close()
    summary = {k: v for k, v in asdict(result).items() if k != "cpu_s"}  # CPU time is not part of the run
    with open(os.path.join(args.run_dir, "sim.json"), "w") as fh:
        json.dump(summary, fh, indent=1, sort_keys=True)
    print(json.dumps({"seed": result.seed, "virtual_s": result.virtual_s, "cpu_s": round(result.cpu_s, 3),
                      "acked": result.acked, "sends": result.sends, "faults": len(result.faults)}))
    return 0


if __name__ == "__main__":
    _reexec_with_fixed_hash_seed()
    sys.exit(main())
