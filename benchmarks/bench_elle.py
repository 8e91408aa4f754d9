"""The Elle-style list-append checker on 100k, 300k and 1M generated transactions, and on Elle's huge-scc anchor.

    .venv/bin/python benchmarks/bench_elle.py [--txns 100000 300000 1000000] [--repeat 3]
        [--max-writes-per-key 32] [--shuffle-completions] [--from-file] [--against-previous]

Prints, per size, the best time of --repeat runs (each in a fresh process), its CPU time, the
peak memory and what the check added over the history itself, with the load average before
that run (the machine is shared: CPU time is the steadier figure). Target (issue 44): 1M
transactions under 10 s and under 1 GB, time and memory linear in the transactions.

--from-file writes the history to a JSON Lines file first (in a process of its own) and checks
the file as `kafkaesque check FILE --model list-append` does (checkers/core.py run_checkers: one
pass, the history never held), so the peak is the check's alone. --against-previous also runs
the checker as it was before issue 44 (tests/unit/elle_reference.py, the differential test's
reference) on the same history, alternating with ours, and prints the ratio of the two.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yardstick import bracket  # noqa: E402  # benchmarks/yardstick.py (this script's directory is on sys.path)

from kafkaesque_harness.checkers.core import run_checkers  # noqa: E402
from kafkaesque_harness.checkers.elle import ElleListAppendChecker, check_list_append  # noqa: E402
from kafkaesque_harness.checkers.formats.edn import parse_edn_history  # noqa: E402
from kafkaesque_harness.history import HistoryFile, Op, gc_paused  # noqa: E402

ANCHOR = Path(__file__).resolve().parents[1].parent / "shared" / "anchors" / "elle" / "huge-scc.edn"


def history(n: int, keys: int = 200, concurrency: int = 10, seed: int = 1, max_writes_per_key: int = 32,
            shuffle_completions: bool = False) -> list[Op]:
    """Transactions by `concurrency` processes, overlapping in time, executed serially at their
    completion: strict serializable, so valid. As Jepsen's list-append generator does
    (:max-writes-per-key), a key takes at most `max_writes_per_key` appends and is then retired for a
    fresh one, `keys` being live at a time: reads return short lists, so the history grows linearly
    with the transactions (without rotation a read carries the whole list, and the history itself grows
    quadratically). 0: never retire a key. `shuffle_completions`: each batch completes in a random
    order, still executed in invocation order, so the serialization order is not the completion
    order (as in a database that commits out of order); still strict serializable."""
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
            if shuffle_completions:
                rng.shuffle(pending)
            for q, m in pending:
                t += 1
                ops.append(Op("ok", "txn", q, m, time=t, index=len(ops)))
            pending = []
    for q, m in pending:
        t += 1
        ops.append(Op("ok", "txn", q, m, time=t, index=len(ops)))
    return ops


def _previous_checker():
    """The checker as it was before issue 44, kept as the differential test's reference."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.unit.elle_reference import check_list_append as previous

    return previous


def _write_history(path: str, n: int, max_writes_per_key: int, shuffle: bool) -> None:
    """In a child process of its own: the file's writer never shares its memory with a measurement."""
    import orjson

    with open(path, "wb") as f:
        for op in history(n, max_writes_per_key=max_writes_per_key, shuffle_completions=shuffle):
            f.write(orjson.dumps(op.to_dict()) + b"\n")


def _measure(n: int, max_writes_per_key: int, shuffle: bool, which: str, path: str | None, out) -> None:
    """In a fresh child process: the peak RSS it reports is this size's alone."""
    h = None if path else history(n, max_writes_per_key=max_writes_per_key, shuffle_completions=shuffle)
    check = _previous_checker() if which == "previous" else check_list_append
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    with gc_paused():
        if path:
            doc = run_checkers([ElleListAppendChecker(["strict-serializable"])], {}, HistoryFile(path))
            r = doc["checkers"]["elle-list-append"]
            valid, edges = r["valid"], r["stats"]["edges"]
        else:
            r = check(h, ["strict-serializable"])
            valid, edges = r.valid, r.stats["edges"]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out.send((wall, cpu, valid, edges, before / 1024, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--txns", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the best is printed")
    ap.add_argument("--max-writes-per-key", type=int, default=32, help="appends per key before it is retired "
                    "(Jepsen's :max-writes-per-key); 0: never, reads then carry whole lists")
    ap.add_argument("--shuffle-completions", action="store_true", help="complete each batch in a random order: "
                    "the serialization order is then not the completion order (the placing of each transaction at "
                    "its completion finds edges going back; its invocation order is the one that proves no cycle)")
    ap.add_argument("--no-anchor", action="store_true", help="skip Elle's huge-scc anchor")
    ap.add_argument("--from-file", action="store_true", help="check a history file in one pass (as `kafkaesque "
                    "check` does), not a history in memory: the peak is then the check's own")
    ap.add_argument("--against-previous", action="store_true", help="also run the checker as it was before issue 44 "
                    "(tests/unit/elle_reference.py) on the same history, alternating, and print the ratio")
    args = ap.parse_args()
    if args.from_file and args.against_previous:
        ap.error("the previous checker reads histories in memory only: --against-previous without --from-file")
    bracket()  # the machine's speed before and after: figures compare through it
    ctx = multiprocessing.get_context("fork")
    sides = ["ours", "previous"] if args.against_previous else ["ours"]
    scratch = tempfile.mkdtemp(prefix="bench-elle-")
    try:
        for n in args.txns:
            path = None
            if args.from_file:
                path = os.path.join(scratch, f"history-{n}.jsonl")
                writer = ctx.Process(target=_write_history, args=(path, n, args.max_writes_per_key,
                                                                  args.shuffle_completions))
                writer.start()
                writer.join()
            best = {}
            for rnd in range(args.repeat):
                for which in (sides if rnd % 2 == 0 else sides[::-1]):
                    load = _load()
                    receive, send = ctx.Pipe(duplex=False)
                    child = ctx.Process(target=_measure, args=(n, args.max_writes_per_key, args.shuffle_completions,
                                                               which, path, send))
                    child.start()
                    best.setdefault(which, []).append((*receive.recv(), load))
                    child.join()
            for which in sides:
                runs = best[which]
                wall, cpu, valid, edges, before, peak, load = min(runs)
                what = "the history file, streamed" if path else "the history in memory"
                print(f"{which:8s} list-append, {n:>9,} transactions{' (shuffled completions)' if args.shuffle_completions else ''}"
                      f", {what}: best of {len(runs)} {wall:.2f} s (cpu {cpu:.2f} s; all: "
                      f"{', '.join(f'{r[0]:.2f}' for r in runs)})  valid={valid}  edges={edges:,}  peak RSS {peak:,.0f} MB, "
                      f"{peak - before:,.0f} MB over {'the interpreter' if path else 'the history'} "
                      f"({load} before the best run)  (target: 1M under 10 s, under 1 GB)", flush=True)
            if args.against_previous:
                ours, prev = min(best["ours"]), min(best["previous"])
                print(f"ours / previous, same run: wall {ours[0] / prev[0]:.2f}x, cpu {ours[1] / prev[1]:.2f}x, "
                      f"peak RSS {ours[5] / prev[5]:.2f}x", flush=True)
            if path:
                os.unlink(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if ANCHOR.exists() and not args.no_anchor:
        h = parse_edn_history(ANCHOR)
        t2 = time.perf_counter()
        with gc_paused():
            r = check_list_append(h, None, cycle_budget_s=30)
        print(f"huge-scc anchor ({len(h):,} ops): {time.perf_counter() - t2:.2f} s  valid={r.valid}  "
              f"anomalies={[a.name for a in r.anomalies]}  ({_load()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
