"""The Elle-style list-append checker on 100,000 generated transactions, and on Elle's huge-scc anchor.

    .venv/bin/python benchmarks/bench_elle.py [--txns 100000] [--max-writes-per-key 32]

Prints the time and peak memory of each (target: 100,000 transactions under 10 s).
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkers.elle import check_list_append  # noqa: E402
from checkers.formats.edn import parse_edn_history  # noqa: E402
from history import Op, gc_paused  # noqa: E402

ANCHOR = Path(__file__).resolve().parents[1].parent / "shared" / "anchors" / "elle" / "huge-scc.edn"


def history(n: int, keys: int = 200, concurrency: int = 10, seed: int = 1, max_writes_per_key: int = 32) -> list[Op]:
    """Transactions by `concurrency` processes, overlapping in time, executed serially at their
    completion: strict serializable, so valid. As Jepsen's list-append generator does
    (:max-writes-per-key), a key takes at most `max_writes_per_key` appends and is then retired for a
    fresh one, `keys` being live at a time: reads return short lists, so the history grows linearly
    with the transactions (without rotation a read carries the whole list, and the history itself grows
    quadratically). 0: never retire a key."""
    rng = random.Random(seed)
    live = list(range(keys))
    next_key = keys
    writes: dict[int, int] = {}
    lists: dict[int, list[int]] = {k: [] for k in live}
    ops, value, t = [], 0, 0
    pending = []
    for i in range(n):
        mops, inv_mops = [], []
        for _ in range(rng.randint(1, 4)):
            slot = rng.randrange(keys)
            k = live[slot]
            if rng.random() < 0.5:
                value += 1
                lists[k].append(value)
                mops.append(["append", k, value])
                inv_mops.append(["append", k, value])
                writes[k] = writes.get(k, 0) + 1
                if max_writes_per_key and writes[k] >= max_writes_per_key:
                    live[slot], next_key = next_key, next_key + 1  # retired: later txns use a fresh key
                    lists[live[slot]] = []
            else:
                mops.append(["r", k, list(lists[k])])
                inv_mops.append(["r", k, None])
        p = i % concurrency
        t += 1
        ops.append(Op("invoke", "txn", p, inv_mops, time=t, index=len(ops)))
        pending.append((p, mops))
        if len(pending) == concurrency:
            for q, m in pending:
                t += 1
                ops.append(Op("ok", "txn", q, m, time=t, index=len(ops)))
            pending = []
    for q, m in pending:
        t += 1
        ops.append(Op("ok", "txn", q, m, time=t, index=len(ops)))
    return ops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, default=100_000)
    ap.add_argument("--max-writes-per-key", type=int, default=32, help="appends per key before it is retired "
                    "(Jepsen's :max-writes-per-key); 0: never, reads then carry whole lists")
    args = ap.parse_args()
    h = history(args.txns, max_writes_per_key=args.max_writes_per_key)
    t0 = time.perf_counter()
    with gc_paused():
        r = check_list_append(h, ["strict-serializable"])
    t1 = time.perf_counter()
    print(f"list-append, {args.txns:,} transactions: {t1 - t0:.2f} s  valid={r.valid}  "
          f"edges={r.stats['edges']:,}  (target: under 10 s)")
    if ANCHOR.exists():
        h = parse_edn_history(ANCHOR)
        t2 = time.perf_counter()
        with gc_paused():
            r = check_list_append(h, None, cycle_budget_s=30)
        print(f"huge-scc anchor ({len(h):,} ops): {time.perf_counter() - t2:.2f} s  valid={r.valid}  "
              f"anomalies={[a.name for a in r.anomalies]}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
