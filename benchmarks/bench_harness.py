"""Harness throughput: sustained recorded ops/s against the local 3-broker cluster (issue 3).

    .venv/bin/python benchmarks/bench_harness.py [--seconds 30] [--concurrency 10] [--client kafka-python]

Runs `kafkaesque run` with an unlimited rate and no faults, then counts the completed ops
in the stored history over the main phase. Prints ops/s overall and per op type, and
the p50/p99 latency of sends.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yardstick import bracket  # noqa: E402  # benchmarks/yardstick.py (this script's directory is on sys.path)

from history import NEMESIS, pair_ops, read_history  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--client", default="kafka-python")
    ap.add_argument("--cluster", default="local")
    args = ap.parse_args()
    bracket()  # the machine's speed before and after: figures compare through it
    store = tempfile.mkdtemp(prefix="bench-harness-")
    cmd = [sys.executable, "-m", "harness.cli", "run", "--cluster", args.cluster, "--rate", "0",
           "--concurrency", str(args.concurrency), "--time-limit", str(args.seconds), "--client", args.client,
           "--recovery-wait", "1", "--store", store, "--no-panel"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if not r.stdout.strip():  # the run never started (bad flag, no cluster): its own sentence says why
        print(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"kafkaesque run exited {r.returncode}")
        return r.returncode or 3
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    pairs = [(i, c) for i, c in pair_ops(read_history(run_dir / "history.jsonl"))
             if i.process != NEMESIS and i.f in ("send", "poll") and c is not None]
    span = (max(c.time for _, c in pairs) - min(i.time for i, _ in pairs)) / 1e9
    print(f"client={args.client} cluster={args.cluster} concurrency={args.concurrency} main phase={span:.1f} s")
    print(f"recorded ops/s (completed send+poll): {len(pairs) / span:.0f}")
    for f in ("send", "poll"):
        n = sum(1 for i, _ in pairs if i.f == f)
        print(f"  {f}: {n / span:.0f} ops/s")
    lat = sorted((c.time - i.time) / 1e6 for i, c in pairs if i.f == "send" and c.type == "ok")
    if lat:
        print(f"send latency ms: p50 {statistics.median(lat):.1f}  p99 {lat[int(len(lat) * 0.99) - 1]:.1f}")
    print(f"verdict exit={r.returncode}  run={run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
