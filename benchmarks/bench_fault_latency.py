"""Fault injection latency, order to effect, on the docker cluster (issue 6; target under 200 ms).

    .venv/bin/python benchmarks/bench_fault_latency.py [--reps 10]

The effect is observed from inside the node, by a watcher started before the order, so the
figure is the fault's own latency and not the probe's (a `docker exec` probe alone costs
50-110 ms here). Containers share the host's realtime clock, so the watcher's timestamps and
the harness's order time are on one clock.

- kill: from the order (`cluster.kill`) until the broker's pid no longer exists, watched every
  millisecond inside the container.
- partition: from the order (the partition nemesis's start op, isolating one random broker)
  until the isolated broker can no longer open a TCP connection to any of its peers: a watcher
  in each broker tries every peer every few ms with a 20 ms connect timeout; the effect is the
  start of the first attempt that failed for the last peer to fall (resolution ~25 ms).
Prints the median and max of each (and the time the order call itself took to return), and
heals after every repetition.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafkaesque_harness.clusters.base import ClusterSpec  # noqa: E402
from kafkaesque_harness.clusters.docker import DockerCluster  # noqa: E402
from kafkaesque_harness.history import INVOKE, Op  # noqa: E402
from kafkaesque_harness.nemesis.faults import PartitionNemesis  # noqa: E402

# Prints "<unix time>" once the pid is gone.
KILL_WATCH = """
import os, sys, time
pid = int(open(sys.argv[1]).read())
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        print(time.time(), flush=True); break
    time.sleep(0.001)
"""
# Prints "<unix time> <host> <ok>" for every connect attempt to each peer, for argv[1] seconds.
CONNECT_WATCH = """
import socket, sys, time
end = time.time() + float(sys.argv[1])
peers = [(h, int(p)) for h, p in (a.split(":") for a in sys.argv[2:])]
while time.time() < end:
    for h, p in peers:
        t = time.time()
        try:
            socket.create_connection((h, p), timeout=0.02).close(); ok = 1
        except OSError:
            ok = 0
        print(f"{t:.4f} {h} {ok}", flush=True)
    time.sleep(0.003)
"""


def wait_until(pred, timeout=10.0, every=0.05) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return
        time.sleep(every)
    raise TimeoutError


def _watch(c: DockerCluster, node: str, script: str, args: list[str], out: str) -> None:
    c.remote(node).run(["sh", "-c", f"python3 -c '{script}' {' '.join(args)} > {out} 2>&1 &"], check=True)


def kill_latency(c: DockerCluster, node: str) -> tuple[float, float]:
    out = "/tmp/kill-watch.txt"
    c.remote(node).run(["rm", "-f", out])
    _watch(c, node, KILL_WATCH, [c.pidfile(node)], out)
    time.sleep(0.5)  # the watcher is up and polling
    t0 = time.time()
    c.kill(node)
    returned = time.time() - t0
    wait_until(lambda: c.remote(node).run(["cat", out]).out.strip() != "")
    gone = float(c.remote(node).run(["cat", out]).out.split()[0])
    return (gone - t0) * 1000, returned * 1000


def partition_latency(c: DockerCluster, nem: PartitionNemesis) -> tuple[float, float]:
    out = "/tmp/connect-watch.txt"
    brokers = c.broker_nodes()
    for node in brokers:
        peers = [f"{c.address(p)[0]}:{c.address(p)[1]}" for p in c.nodes() if p != node]
        c.remote(node).run(["rm", "-f", out])
        _watch(c, node, CONNECT_WATCH, ["3"] + peers, out)
    time.sleep(0.7)  # every watcher has made attempts that succeed
    t0 = time.time()
    done = nem.invoke(c, Op(INVOKE, "start-partition", "nemesis", None))
    returned = time.time() - t0
    (node,) = [n for n, d in done.value["partition"].items() if len(d) == len(c.nodes()) - 1]
    time.sleep(3)  # the watchers end by themselves
    first_fail: dict[str, float] = {}
    for line in c.remote(node).run(["cat", out]).out.splitlines():
        t, host, ok = line.split()
        if float(t) >= t0 and ok == "0":
            first_fail.setdefault(host, float(t))
    nem.invoke(c, Op(INVOKE, "stop-partition", "nemesis", None))
    if len(first_fail) < len(c.nodes()) - 1:
        raise RuntimeError(f"{node} still reached some peers after the partition: {first_fail}")
    return (max(first_fail.values()) - t0) * 1000, returned * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    c = DockerCluster(ClusterSpec(brokers=3), tempfile.mkdtemp(), owner=f"bench{random.randrange(10**6)}")
    c.up()
    try:
        kills, kill_calls, parts, part_calls = [], [], [], []
        for _ in range(args.reps):
            effect, call = kill_latency(c, "broker-2")
            kills.append(effect)
            kill_calls.append(call)
            c.start("broker-2")
            c.wait_ready(["broker-2"], 30)
        nem = PartitionNemesis({"target": "random-node", "seed": 1})
        nem.setup(c)
        try:
            for _ in range(args.reps):
                effect, call = partition_latency(c, nem)
                parts.append(effect)
                part_calls.append(call)
        finally:
            nem.teardown(c)
        for name, xs, calls in (("kill", kills, kill_calls), ("partition", parts, part_calls)):
            print(f"{name:10s} order->effect: median {statistics.median(xs):6.0f} ms   max {max(xs):6.0f} ms   "
                  f"(order call returns after median {statistics.median(calls):.0f} ms; n={len(xs)}, "
                  f"target < 200 ms)")
    finally:
        c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
