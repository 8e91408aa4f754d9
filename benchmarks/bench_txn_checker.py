"""The txn checker (checkers/txn.py) on generated histories of N transactions: check time and peak memory.

    .venv/bin/python benchmarks/bench_txn_checker.py [--sizes 10000,100000] [--keys 8] [--processes 10]
        [--planted] [--ww-deps] [--rw-deps]

Each size runs in a fresh interpreter (peak RSS is per process). The history is Jepsen's Kafka workload
in shape: concurrent processes, transactions of 1-4 sends and polls over assigned keys, 10% aborted
(their polls rewound, their sends taking offsets no committed read returns), a transaction marker after
every commit, polls continuing where the process's last committed transaction stopped, and one final read
per key from its start. It is valid. With --planted, anomalies are planted in it (an aborted read, an
internal poll skip, a precommitted read, a lost write, a duplicate, a write-read cycle) and the script
says which analyses found them. Target (issue 25): 100k transactions under 10 s. The CPU time is printed
beside the wall time: on a machine shared with other runs the wall time includes waiting for a core.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafkaesque_harness.checkers.txn import check_txn  # noqa: E402
from kafkaesque_harness.history import Op, gc_paused  # noqa: E402

PLANTED = ("G1a", "int-poll-skip", "precommitted-read", "lost-write", "duplicate", "G1c")


class _Log:
    """One key's log: offsets -> (value, committed?), with markers taking offsets of their own."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int]] = []  # (offset, value) of committed records, in order
        self.next_offset = 0


def generate(n_txns: int, keys: int, processes: int, planted: bool, seed: int = 1) -> list[Op]:
    rng = random.Random(seed)
    logs = [_Log() for _ in range(keys)]
    # A process's consumer position per key: an index into that key's committed records.
    positions = [[0] * keys for _ in range(processes)]
    ops: list[Op] = []
    value = 0
    open_txn: list[tuple[Op, list] | None] = [None] * processes
    plant_at = {name: n_txns * (i + 1) // (len(PLANTED) + 2) for i, name in enumerate(PLANTED)} if planted else {}
    aborted_values: list[tuple[int, int, int]] = []  # (key, offset, value) of aborted sends

    def emit(type_: str, f: str, p: int, v, **extra) -> Op:
        op = Op(type_, f, p, v, time=len(ops) * 1000, index=len(ops), extra=extra or None)
        ops.append(op)
        return op

    def commit(p: int, mops: list, j: int) -> None:
        """Run process p's open transaction at this instant: polls read committed records from its
        position, sends take the next offsets; aborted ones rewind the position and leave no visible record."""
        abort = rng.random() < 0.1
        start = list(positions[p])
        done, sent = [], []
        for m in mops:
            if m[0] == "poll":
                got = {}
                for k in rng.sample(range(keys), min(keys, 2)):
                    recs = logs[k].records[positions[p][k]:positions[p][k] + rng.randint(0, 5)]
                    positions[p][k] += len(recs)
                    got[str(k)] = [[o, v] for o, v in recs]
                done.append(["poll", got])
            else:
                _, k, v = m
                o = logs[k].next_offset
                logs[k].next_offset += 1
                sent.append((k, o, v))
                done.append(["send", k, [o, v]])
        if abort:
            positions[p] = start
            aborted_values.extend(sent)
        else:
            for k, o, v in sent:
                logs[k].records.append((o, v))
        for k in {k for k, _, _ in sent}:
            logs[k].next_offset += 1  # the commit or abort marker
        if j == plant_at.get("G1a") and aborted_values:
            k, o, v = aborted_values[-1]
            done.append(["poll", {str(k): [[o, v]]}])
        if j == plant_at.get("precommitted-read") and sent and not abort:
            k, o, v = sent[0]
            done.append(["poll", {str(k): [[o, v]]}])
        if j == plant_at.get("int-poll-skip") and not abort:
            k = max(range(keys), key=lambda k: len(logs[k].records) - positions[p][k])
            recs = logs[k].records[positions[p][k]:positions[p][k] + 3]
            if len(recs) == 3:
                done.append(["poll", {str(k): [[o, v] for o, v in (recs[0], recs[2])]}])
        emit("fail" if abort else "ok", "txn", p, done, **({"error": "aborted-by-workload"} if abort else {}))

    for j in range(n_txns):
        p = j % processes
        if open_txn[p] is not None:
            commit(p, open_txn[p][1], j)
        mops = []
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.5:
                value += 1
                mops.append(["send", rng.randrange(keys), value])
            else:
                mops.append(["poll"])
        open_txn[p] = (emit("invoke", "txn", p, mops), mops)
    for p in range(processes):
        if open_txn[p] is not None:
            commit(p, open_txn[p][1], -1)
    if planted:
        _plant_after(ops, logs, rng)
    for k in range(keys):
        p = processes + k
        emit("invoke", "poll", p, [["poll"]], final=True)
        emit("ok", "poll", p, [["poll", {str(k): [[o, v] for o, v in logs[k].records]}]], final=True)
    if planted:
        _lose(ops, 0, logs[0].records[5][1])
    return ops


def _lose(ops: list[Op], key: int, value: int) -> None:
    """A lost write: no read returns this committed value (every poll passes over it)."""
    for op in ops:
        if op.type != "invoke" and isinstance(op.value, list):
            for m in op.value:
                if m[0] == "poll" and str(key) in m[1]:
                    m[1][str(key)] = [r for r in m[1][str(key)] if r[1] != value]


def _plant_after(ops: list[Op], logs: list[_Log], rng: random.Random) -> None:
    """A duplicate (a record read again at a later offset) and a write-read cycle (two new transactions
    each reading the other's send)."""
    k = 1 % len(logs)
    o, v = logs[k].records[0]
    p = 10_000
    ops.append(Op("invoke", "poll", p, [["poll"]], time=len(ops) * 1000, index=len(ops)))
    ops.append(Op("ok", "poll", p, [["poll", {str(k): [[logs[k].next_offset + 50, v]]}]], time=len(ops) * 1000,
                  index=len(ops)))
    a, b = 10_001, 10_002
    base = len(ops) * 1000
    va, vb = -1, -2
    oa, ob = logs[0].next_offset, logs[k].next_offset
    logs[0].next_offset += 2
    logs[k].next_offset += 2
    logs[0].records.append((oa, va))
    logs[k].records.append((ob, vb))
    for i, op in enumerate([
            Op("invoke", "txn", a, [["send", 0, va], ["poll"]]), Op("invoke", "txn", b, [["send", k, vb], ["poll"]]),
            Op("ok", "txn", a, [["send", 0, [oa, va]], ["poll", {str(k): [[ob, vb]]}]]),
            Op("ok", "txn", b, [["send", k, [ob, vb]], ["poll", {"0": [[oa, va]]}]])]):
        op.time, op.index = base + i * 1000, len(ops)
        ops.append(op)


def run_one(n: int, keys: int, processes: int, planted: bool, ww_deps: bool, rw_deps: bool) -> dict:
    t0 = time.monotonic()
    history = generate(n, keys, processes, planted)
    gen_s = time.monotonic() - t0
    t0, c0 = time.monotonic(), time.process_time()
    with gc_paused():  # as run_checkers runs every checker (checkers/core.py)
        r = check_txn(history, ww_deps=ww_deps, rw_deps=rw_deps, cycle_budget_s=60)
    check_s, check_cpu_s = time.monotonic() - t0, time.process_time() - c0
    return {"transactions": n, "ops": len(history), "generate_s": round(gen_s, 2), "check_s": round(check_s, 2), "check_cpu_s": round(check_cpu_s, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "valid": r.valid, "anomalies": {a.name: a.count for a in r.anomalies},
            "allowed": {a["name"]: a["count"] for a in r.details.get("allowed", [])}, "edges": r.stats.get("edges")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="transaction counts, comma-separated (1000000 too)")
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--planted", action="store_true", help="plant anomalies and report which were found")
    ap.add_argument("--ww-deps", action="store_true")
    ap.add_argument("--rw-deps", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this interpreter
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.keys, args.processes, args.planted, args.ww_deps, args.rw_deps)))
        return 0
    failed = 0
    for n in (int(s) for s in args.sizes.split(",")):
        argv = [sys.executable, __file__, "--one", str(n), "--keys", str(args.keys), "--processes",
                str(args.processes)] + [f for f, on in (("--planted", args.planted), ("--ww-deps", args.ww_deps),
                                                        ("--rw-deps", args.rw_deps)) if on]
        out = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        print(f"{n:>9,} txns ({out['ops']:,} ops): check {out['check_s']:.2f} s ({out['check_cpu_s']:.2f} s CPU), peak RSS {out['peak_rss_mb']} MB "
              f"(generation {out['generate_s']:.2f} s), {out['edges']:,} edges, valid {out['valid']}")
        if out["anomalies"] or out["allowed"]:
            print(f"           anomalies {out['anomalies']}; allowed {out['allowed']}")
        if args.planted:
            missing = [a for a in PLANTED if a not in out["anomalies"]]
            print(f"           planted {', '.join(PLANTED)}: " + (f"NOT FOUND {missing}" if missing else "all found"))
            failed += bool(missing)
        elif out["valid"] is not True:
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
