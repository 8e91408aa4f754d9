"""The queue checker on a generated history of N ops (default 1,000,000): parse time, check time, memory.

    .venv/bin/python benchmarks/bench_queue_checker.py [--ops 1000000] [--keys 8] [--processes 10]

The history is realistic in shape: concurrent processes, ~70% sends (a few info and fail),
polls of up to 20 records per key continuing where the process left off, and one final
read per key covering everything. It is written to a temporary JSONL file first, so the
parse time is that of a real stored history.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafkaesque_harness.checkers.core import run_checkers  # noqa: E402
from kafkaesque_harness.checkers.log_order import LogOrderChecker  # noqa: E402
from kafkaesque_harness.checkers.queue import QueueChecker  # noqa: E402
from kafkaesque_harness.history import read_history  # noqa: E402


def generate(path: str, n_ops: int, keys: int, processes: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    logs: list[list[int]] = [[] for _ in range(keys)]
    positions = [[0] * keys for _ in range(processes)]
    t = 0
    value = 0
    index = 0
    with open(path, "wb") as f:
        def emit(d):
            nonlocal index
            d["index"] = index
            index += 1
            f.write(orjson.dumps(d) + b"\n")  # the same compact JSON as json.dumps(separators=(",", ":")), 5x faster

        while index < n_ops - 2 * keys:
            p = rng.randrange(processes)
            t += rng.randrange(100_000, 2_000_000)
            if rng.random() < 0.7:
                k = rng.randrange(keys)
                value += 1
                emit({"time": t, "process": p, "type": "invoke", "f": "send", "value": [k, value]})
                r = rng.random()
                t += rng.randrange(500_000, 5_000_000)
                if r < 0.98:
                    logs[k].append(value)
                    emit({"time": t, "process": p, "type": "ok", "f": "send", "value": [k, [len(logs[k]) - 1, value]]})
                elif r < 0.99:
                    emit({"time": t, "process": p, "type": "fail", "f": "send", "value": [k, value]})
                else:
                    logs[k].append(value)  # an indeterminate send that did happen
                    emit({"time": t, "process": p, "type": "info", "f": "send", "value": [k, value]})
            else:
                emit({"time": t, "process": p, "type": "invoke", "f": "poll", "value": None})
                out = {}
                for k in range(keys):
                    start = positions[p][k]
                    recs = [[o, logs[k][o]] for o in range(start, min(start + 20, len(logs[k])))]
                    if recs:
                        out[str(k)] = recs
                        positions[p][k] = recs[-1][0] + 1
                t += rng.randrange(500_000, 5_000_000)
                emit({"time": t, "process": p, "type": "ok", "f": "poll", "value": out})
        for k in range(keys):
            t += 1_000_000
            emit({"time": t, "process": processes + k, "type": "invoke", "f": "final-poll", "value": [k]})
            emit({"time": t + 1, "process": processes + k, "type": "ok", "f": "final-poll",
                  "value": [k, len(logs[k]), [[o, v] for o, v in enumerate(logs[k])]]})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--processes", type=int, default=10)
    args = ap.parse_args()
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    try:
        t0 = time.perf_counter()
        generate(path, args.ops, args.keys, args.processes)
        t1 = time.perf_counter()
        history = read_history(path)
        t2 = time.perf_counter()
        result = run_checkers([QueueChecker()], {}, history)  # as `kafkaesque run` and `analyze` do
        t3 = time.perf_counter()
        fast = run_checkers([LogOrderChecker()], {}, history)
        t4 = time.perf_counter()
        size_mb = os.path.getsize(path) / 1e6
    finally:
        os.unlink(path)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"history: {len(history):,} ops, {size_mb:.0f} MB JSONL (generated in {t1 - t0:.1f} s)")
    print(f"parse (read_history): {t2 - t1:.2f} s")
    print(f"queue checker:        {t3 - t2:.2f} s   valid={result['valid']}")
    print(f"parse + check:        {t3 - t1:.2f} s   (target: under 10 s)")
    print(f"log fast path:        {t4 - t3:.2f} s   valid={fast['valid']}   (target: under 10 s)")
    print(f"peak RSS: {peak_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
