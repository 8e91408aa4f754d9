"""The queue checks of a history FILE, streamed (issue 26): against DuckDB on the same file, against the
in-memory path, and how peak memory grows with the history's length.

    .venv/bin/python benchmarks/bench_queue_streaming.py --dir /work/bench-stream \\
        [--ops 1000000,3000000,10000000,50000000] [--compare-ops 1000000] [--baseline-tree /work/main] [--keep]
        [--duckdb-python /path/to/venv/bin/python]

For each size it writes the history (benchmarks/bench_queue_checker.py's generator) under --dir, unless a file
of that size is there already, then times each way of checking it in a fresh process: wall and CPU seconds
inside the process, the whole process's wall (start and exit included), and its peak RSS (getrusage). At the
sizes in --compare-ops it also times DuckDB (pip install duckdb: a benchmark-only dependency) on one and on
two threads, twice: computing the queue checker's rules (benchmarks/peers/duckdb_queue_rules.py: pairing,
consumer positions, the six assign-mode anomalies and the verdict; tests/unit/test_duckdb_queue_rules.py holds
its counts equal to the checker's), the figure for the same work; and computing lost writes and duplicates
only, the figure issue 26 first quoted, which skips most of that work. DuckDB runs in --duckdb-python when
this interpreter has no duckdb (e.g. a separate venv; the benchmark prints which DuckDB it found where). Then
each checker streamed alone, and the in-memory path
(read_history, then the checker) of this tree and of --baseline-tree (a checkout of the code before the
stream, e.g. main); at the other sizes only what `kafkaesque check` runs (both checkers, one pass). The
machine is shared: the load average is printed beside each figure. Files this run wrote are deleted unless
--keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
sys.path.insert(0, str(TREE))

from benchmarks.bench_queue_checker import generate  # noqa: E402
from benchmarks.yardstick import bracket  # noqa: E402

# Each way of checking, as the code a fresh process runs; it prints {"valid": ..., "lost": ..., ...}.
ONE_CHECKER = """
from kafkaesque_harness.checkers.stream import InFile
from kafkaesque_harness.history import HistoryFile, gc_paused
from {module} import {reader}
with gc_paused():
    hf = HistoryFile(PATH)
    ops = InFile(hf)
    check = {reader}(hf.beyond_budget_time(), ops)
    for inv, comp in ops.pairs():
        check.feed(inv, comp)
    r = check.result()
out = {{"valid": r.valid, "dup": r.stats["duplicate-count"], **({{"lost": r.stats["lost-write-count"]}}
                                                               if "lost-write-count" in r.stats else {{}})}}
"""
WAYS = {
    "stream: queue checker": ONE_CHECKER.format(module="kafkaesque_harness.checkers.queue", reader="QueueCheck"),
    "stream: log fast path": ONE_CHECKER.format(module="kafkaesque_harness.checkers.log_order", reader="LogOrderCheck"),
    "stream: both, one pass (kafkaesque check)": """
from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.checkers.log_order import LogOrderChecker
from kafkaesque_harness.checkers.queue import QueueChecker
from kafkaesque_harness.history import HistoryFile
r = run_checkers([QueueChecker(), LogOrderChecker()], {}, HistoryFile(PATH))
q = r["checkers"]["queue"]["stats"]
out = {"valid": r["valid"], "lost": q["lost-write-count"], "dup": q["duplicate-count"]}
""",
    "in memory: queue checker": """
from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.checkers.queue import QueueChecker
from kafkaesque_harness.history import read_history
r = run_checkers([QueueChecker()], {}, read_history(PATH))
q = r["checkers"]["queue"]["stats"]
out = {"valid": r["valid"], "lost": q["lost-write-count"], "dup": q["duplicate-count"]}
""",
    "in memory: log fast path": """
from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.checkers.log_order import LogOrderChecker
from kafkaesque_harness.history import read_history
r = run_checkers([LogOrderChecker()], {}, read_history(PATH))
out = {"valid": r["valid"], "dup": r["checkers"]["log-order"]["stats"]["duplicate-count"]}
""",
}

ONE_PASS = "stream: both, one pass (kafkaesque check)"

DUCKDB = """
import duckdb
con = duckdb.connect()
con.execute(f"SET threads={THREADS}")
con.execute("SET preserve_insertion_order=false")
for sql in [
    f'''CREATE TEMP TABLE ops AS SELECT f, value FROM read_json('{PATH}', format='newline_delimited',
        columns={{time:'BIGINT', process:'JSON', type:'VARCHAR', f:'VARCHAR', value:'JSON', index:'BIGINT'}})
        WHERE type='ok' AND f IN ('send','poll','final-poll')''',
    '''CREATE TEMP TABLE acked AS SELECT CAST(value->>0 AS BIGINT) AS k, CAST(value->1->>1 AS BIGINT) AS v
        FROM ops WHERE f='send' ''',
    '''CREATE TEMP TABLE entries AS SELECT unnest(map_entries(json_transform(value, '"MAP(VARCHAR, BIGINT[][])"'))) AS e
        FROM ops WHERE f='poll' ''',
    # materialised first: unnesting value->2 in the same query re-parses the huge final reads per row
    '''CREATE TEMP TABLE finals AS SELECT CAST(value->>0 AS BIGINT) AS k, CAST(value->2 AS BIGINT[][]) AS recs
        FROM ops WHERE f='final-poll' ''',
    '''CREATE TEMP TABLE reads AS SELECT k, r[1] AS off, r[2] AS v, final FROM (
        SELECT CAST(e.key AS BIGINT) AS k, unnest(e.value) AS r, false AS final FROM entries
        UNION ALL SELECT k, unnest(recs), true FROM finals)''']:
    con.execute(sql)
lost = con.execute('''SELECT count(*) FROM acked a ANTI JOIN (SELECT k, v FROM reads WHERE final) r
                      ON r.k = a.k AND r.v = a.v''').fetchone()[0]
dup = con.execute('''SELECT count(*) FROM (SELECT k, v FROM reads GROUP BY k, v
                     HAVING count(DISTINCT off) > 1)''').fetchone()[0]
out = {"lost": lost, "dup": dup}
"""

# The same rules as the queue checker (its verdict and anomaly counts), the peer for the same work
DUCKDB_RULES = """
from benchmarks.peers.duckdb_queue_rules import queue_rule_counts
c = queue_rule_counts(PATH, THREADS)
out = {"valid": c["verdict"], "lost": c["lost-write"], "dup": c["duplicate"]}
"""

HARNESS = """
import json, resource, sys, time
sys.path.insert(0, TREE)
t0, c0 = time.perf_counter(), time.process_time()
{code}
out.update(wall=time.perf_counter() - t0, cpu=time.process_time() - c0,
           rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out, default=str))
"""


DUCKDB_VERSION = "import duckdb, sys; print(duckdb.__version__, duckdb.__file__, sys.executable)"


def find_duckdb(python: str | None) -> str | None:
    """The interpreter that runs DuckDB: `python` if given (it must import duckdb), else this one when it
    has duckdb, else None. Says which DuckDB it found, and where."""
    for candidate in ([python] if python else [sys.executable]):
        done = subprocess.run([candidate, "-c", DUCKDB_VERSION], capture_output=True, text=True)
        if done.returncode == 0:
            version, module, exe = done.stdout.split()
            print(f"DuckDB {version} from {module} (run by {exe})", flush=True)
            return candidate
        print(f"no DuckDB for {candidate}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}")
    return None


def measure(code: str, path: Path, tree: Path, python: str = sys.executable, **names: object) -> dict:
    """Run `code` in a fresh interpreter (`python`); its figures, the whole process's wall, and the load
    average."""
    load = os.getloadavg()[0]
    prelude = f"PATH = {str(path)!r}\nTREE = {str(tree)!r}\n" + "".join(f"{k} = {v!r}\n" for k, v in names.items())
    t0 = time.perf_counter()
    done = subprocess.run([python, "-c", prelude + HARNESS.format(code=code)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tree)}, cwd=str(tree))
    process_wall = time.perf_counter() - t0
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}",
                "load": load}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_wall": process_wall, "load": load}


def row(name: str, m: dict) -> str:
    if "error" in m:
        return f"  {name:<44} failed: {m['error']}   (load {m['load']:.1f})"
    found = ", ".join(f"{k}={m[k]}" for k in ("valid", "lost", "dup") if k in m)
    return (f"  {name:<44} {m['wall']:7.2f} s wall {m['cpu']:7.2f} s CPU {m['process_wall']:7.2f} s process "
            f"{m['rss_mb']:7.0f} MB peak   (load {m['load']:.1f})   {found}")


def history_file(directory: Path, n_ops: int, keys: int, processes: int) -> tuple[Path, bool]:
    """The history of `n_ops` ops under `directory`, written now unless there; whether it was written now."""
    path = directory / f"queue-{n_ops}-{keys}k-{processes}p.jsonl"
    if path.exists():
        return path, False
    t0 = time.perf_counter()
    generate(str(path), n_ops, keys, processes)
    print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s", flush=True)
    return path, True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="where the history files go (they can be GBs)")
    ap.add_argument("--ops", default="1000000", help="history sizes, comma-separated")
    ap.add_argument("--compare-ops", default="1000000",
                    help="the sizes at which DuckDB and the in-memory paths are timed too (comma-separated)")
    ap.add_argument("--baseline-tree", type=Path, default=None,
                    help="a checkout of the code before the stream (its in-memory path is timed too)")
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="keep the history files this run wrote")
    ap.add_argument("--duckdb-python", default=None,
                    help="an interpreter that imports duckdb (default: this one), e.g. a venv kept for the benchmark")
    args = ap.parse_args()
    bracket()  # the machine's speed before and after: figures compare through it
    args.dir.mkdir(parents=True, exist_ok=True)
    compare = {int(n) for n in args.compare_ops.split(",") if n}
    peaks: list[tuple[int, float, float, float]] = []
    duckdb_python = find_duckdb(args.duckdb_python) if compare else None
    for n_ops in (int(n) for n in args.ops.split(",")):
        path, written = history_file(args.dir, n_ops, args.keys, args.processes)
        print(f"\n{n_ops:,} ops, {path.stat().st_size / 1e6:,.0f} MB ({path.name}):", flush=True)
        try:
            if n_ops in compare and duckdb_python is None:
                print("  DuckDB is not installed (pip install 'kafkaesque-harness[bench]', or --duckdb-python): "
                      "its rows are left out")
            elif n_ops in compare:
                for threads in (1, 2):
                    print(row(f"DuckDB, {threads} thread(s): the queue rules",
                              measure(DUCKDB_RULES, path, TREE, duckdb_python, THREADS=threads)), flush=True)
                for threads in (1, 2):
                    print(row(f"DuckDB, {threads} thread(s): lost and dups only",
                              measure(DUCKDB, path, TREE, duckdb_python, THREADS=threads)), flush=True)
            figures = {}
            for name, code in WAYS.items():
                if n_ops not in compare and name != ONE_PASS:
                    continue  # beyond the compared sizes, only what `kafkaesque check` runs
                figures[name] = measure(code, path, TREE)
                print(row(name, figures[name]), flush=True)
                if name.startswith("in memory") and args.baseline_tree is not None:
                    m = measure(code, path, args.baseline_tree)
                    print(row(f"{name} ({args.baseline_tree.name})", m), flush=True)
            both = figures[ONE_PASS]
            if "error" not in both:
                peaks.append((n_ops, both["rss_mb"], both["wall"], both["load"]))
        finally:
            if written and not args.keep:
                path.unlink()
    if len(peaks) > 1:
        print("\npeak RSS of `kafkaesque check`'s checks (both checkers, one pass) by history length:")
        for n_ops, rss, wall, load in peaks:
            print(f"  {n_ops:>12,} ops {rss:8.0f} MB {wall:8.1f} s   (load {load:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
