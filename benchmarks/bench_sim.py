"""The simulator's speed: virtual seconds per CPU second, and CPU per acknowledged send (issue 41 item 5).

    .venv/bin/python benchmarks/bench_sim.py [--virtual-s 300] [--seeds 1] [--real-run STORE/TEST/RUN]

Three simulated runs of the 1-controller 3-broker cluster (clusters/sim/drive.py, each in this
process, PYTHONHASHSEED as given): idle (no client), producing (one acks=all send every 10 ms, no
faults) and producing under drive.py's fault mix; then a `kafkaesque sim` queue run (the workload's
simulated clients, every simulated fault kind, stored and checked). For each: virtual seconds, CPU seconds, their ratio
(the issue's goal: 150, a 5-minute run in 2 CPU s), and CPU milliseconds per acknowledged send. Beside
them, when a stored real run is given (or found in ./store): its ops and wall seconds from its
history, the wall milliseconds a real op costs. Prints figures, never asserts; on a loaded machine the
CPU figures are what count, and they still vary.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yardstick import bracket  # noqa: E402  # benchmarks/yardstick.py (this script's directory is on sys.path)

from kafkaesque_harness.clusters.sim.drive import drive  # noqa: E402

GOAL_RATIO = 150.0  # 5 virtual minutes in 2 CPU seconds


def real_run_cost(run_dir: Path) -> tuple[int, float] | None:
    """(client ops invoked, wall seconds from the first to the last event) of a stored run's history."""
    history = run_dir / "history.jsonl"
    if not history.is_file():
        return None
    ops, first, last = 0, None, None
    with history.open() as fh:
        for line in fh:
            event = json.loads(line)
            first = event["time"] if first is None else first
            last = event["time"]
            ops += event.get("process") != "nemesis" and event.get("type") == "invoke"
    return (ops, (last - first) / 1e9) if ops and first is not None and last is not None else None


def queue_run(virtual_s: float) -> None:
    """`kafkaesque sim`'s queue workload (the simulated kafka-python clients, 10 processes at 100 ops/s) under
    the simulator's whole fault mix, stored and checked: the issue's "5-minute queue run" when virtual_s is 300."""
    from kafkaesque_harness.harness.simulate import SIM_FAULTS, simulate
    from kafkaesque_harness.harness.spec import TestSpec

    store = tempfile.mkdtemp(prefix="bench-sim-store-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    try:
        spec = TestSpec.make(name="bench", workload="queue", nemesis=list(SIM_FAULTS), time_limit=virtual_s, seed=1,
                             store=store)
        cpu0 = time.process_time()
        _, run_dir = simulate(spec, log=lambda _: None)
        cpu = time.process_time() - cpu0
        ops = real_run_cost(run_dir)
        n = ops[0] if ops else 0
        print(f"  kafkaesque sim queue, 5 fault kinds: {virtual_s:.0f} virtual s (+ heal, recovery, final reads, "
              f"checks, report) in {cpu:6.2f} CPU s = {virtual_s / cpu:6.1f} virtual s/CPU s "
              f"({virtual_s / cpu / GOAL_RATIO:4.0%} of the goal); {n} ops, {1000 * cpu / max(n, 1):.2f} CPU ms/op")
    finally:
        shutil.rmtree(store, ignore_errors=True)


def newest_stored_run(store: Path) -> Path | None:
    runs = sorted(store.glob("*/*/history.jsonl"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--virtual-s", type=float, default=300.0, help="virtual seconds of each run's main phase")
    ap.add_argument("--seeds", type=int, default=1, help="runs of each kind (seeds 1..N)")
    ap.add_argument("--real-run", type=Path, default=None, help="a stored real run's directory to compare with")
    ap.add_argument("--store", type=Path, default=Path("store"), help="where to look for a real run otherwise")
    ap.add_argument("--no-queue-run", action="store_true", help="skip the kafkaesque sim queue run")
    args = ap.parse_args()
    bracket()  # the machine's speed before and after: figures compare through it
    kinds = [("idle", dict(interval_s=1e9, faults=False)), ("producing", dict(interval_s=0.01, faults=False)),
             ("producing + faults", dict(interval_s=0.01, faults=True))]
    print(f"simulated runs of {args.virtual_s:.0f} virtual s (+10 s recovery), 1 controller + 3 brokers:")
    for label, kw in kinds:
        for seed in range(1, args.seeds + 1):
            root = tempfile.mkdtemp(prefix="bench-sim-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
            try:
                r = drive(seed, root, args.virtual_s, **kw)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            ratio = r.virtual_s / r.cpu_s
            per_op = f"{1000 * r.cpu_s / r.acked:6.2f} CPU ms/acked send" if r.acked > 1 else ""
            print(f"  {label:<19} seed {seed}: {r.virtual_s:7.1f} virtual s in {r.cpu_s:6.2f} CPU s = "
                  f"{ratio:6.1f} virtual s/CPU s ({ratio / GOAL_RATIO:4.0%} of the goal)  "
                  f"acked {r.acked:6d}  faults {len(r.faults):3d}  {per_op}")
    if not args.no_queue_run:
        queue_run(args.virtual_s)
    real = args.real_run or newest_stored_run(args.store)
    cost = real_run_cost(real) if real else None
    if cost:
        ops, wall = cost
        print(f"real run {real}: {ops} ops in {wall:.1f} wall s = {1000 * wall / ops:.2f} wall ms/op "
              "(the harness's clients and a real cluster: wall time, not CPU)")
    else:
        print("no stored real run to compare with (give --real-run STORE/TEST/RUN)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
