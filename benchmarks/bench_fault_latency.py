"""Fault injection latency, order to effect, on the docker cluster (issue 6; target under 200 ms).

    .venv/bin/python benchmarks/bench_fault_latency.py [--reps 10]

- kill: from the order until the broker process is gone (probed from outside with kill -0).
- partition: from the order until a TCP connect from the isolated node to a peer fails
  (each probe is itself a docker exec, so the figure is an upper bound).
Prints the median and max of each, and heals after every repetition.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusters.base import ClusterSpec  # noqa: E402
from clusters.docker import DockerCluster  # noqa: E402
from harness.history import INVOKE, Op  # noqa: E402
from nemesis.faults import PartitionNemesis  # noqa: E402


def wait_until(pred, timeout=10.0, every=0.005) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic()
        time.sleep(every)
    raise TimeoutError


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    import tempfile

    c = DockerCluster(ClusterSpec(brokers=3), tempfile.mkdtemp(), owner=f"bench{random.randrange(10**6)}")
    c.up()
    try:
        kills, parts = [], []
        for _ in range(args.reps):
            t0 = time.monotonic()
            c.kill("broker-2")
            t1 = wait_until(lambda: not c.is_running("broker-2"))
            kills.append((t1 - t0) * 1000)
            c.start("broker-2")
            c.wait_ready(["broker-2"], 30)
        nem = PartitionNemesis({"target": "random-node", "seed": 1})
        nem.setup(c)
        for _ in range(args.reps):
            # The effect is measured with the host's own TCP probe of a broker port from the
            # isolated node's peers' side: the harness keeps reaching every node, so probe inside.
            t0 = time.monotonic()
            done = nem.invoke(c, Op(INVOKE, "start-partition", "nemesis", None))
            (node,) = [n for n, d in done.value["partition"].items() if len(d) == len(c.nodes()) - 1]
            peer = next(n for n in c.nodes() if n != node)
            host, port = c.address(peer)
            probe = ["python3", "-c", f"import socket;socket.create_connection(('{host}',{port}),timeout=0.05)"]
            t1 = wait_until(lambda node=node, probe=probe: not c.remote(node).run(probe, timeout=5).ok)
            parts.append((t1 - t0) * 1000)
            nem.invoke(c, Op(INVOKE, "stop-partition", "nemesis", None))
        nem.teardown(c)
        for name, xs in (("kill", kills), ("partition", parts)):
            print(f"{name:10s} order->effect: median {statistics.median(xs):6.0f} ms   max {max(xs):6.0f} ms   "
                  f"(n={len(xs)}, target < 200 ms)")
    finally:
        c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
