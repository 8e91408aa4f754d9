"""The linearizability checker on Porcupine's own histories, beside Porcupine's Go times (TIMINGS.json).

    .venv/bin/python benchmarks/bench_linearizable.py [--reps 3]

Prints per-file times (median of reps, parse excluded as in the Go benchmark), the totals,
the ratio to Go, and the slowest files.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkers.formats.porcupine import parse_etcd_log, parse_kv_log  # noqa: E402
from checkers.linearizable import calls_from_history, check_calls  # noqa: E402
from checkers.models import MODELS  # noqa: E402

ANCHORS = Path(__file__).resolve().parents[1].parent / "shared" / "anchors" / "porcupine"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    timings = {r["file"]: r for r in json.loads((ANCHORS / "TIMINGS.json").read_text())["rows"]}
    rows = []
    for name, t in sorted(timings.items()):
        model = "etcd" if t["model"] == "etcd" else "kv"
        history = (parse_etcd_log if model == "etcd" else parse_kv_log)(ANCHORS / name)
        calls = calls_from_history(history, model)
        times, verdict = [], None
        for _ in range(args.reps):
            t0 = time.perf_counter()
            verdict, _ = check_calls(calls, MODELS[model](), time_limit=300)
            times.append((time.perf_counter() - t0) * 1000)
        ms = statistics.median(times)
        rows.append((name, ms, t["go_ms_median"], verdict, t["expected_linearizable"]))
        print(f"{name:24s} {ms:10.2f} ms   go {t['go_ms_median']:10.3f} ms   verdict {verdict}"
              f"{'' if verdict == t['expected_linearizable'] else '  MISMATCH'}")
    ours, go = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"\ntotal: ours {ours:.0f} ms, Porcupine (Go) {go:.0f} ms, ratio {ours / go:.2f}x (target: within 3x)")
    print("slowest:", ", ".join(f"{r[0]} {r[1]:.0f} ms" for r in sorted(rows, key=lambda r: -r[1])[:5]))
    print("mismatches:", sum(1 for r in rows if r[3] != r[4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
