"""The Spark pipeline on one generated history of N ops: ingest and check times, peak memory, beside the in-process checker.

    .venv/bin/python benchmarks/bench_pipeline.py [--ops 1000000,3000000,10000000,50000000] [--master local[2]]
        [--standalone 1000000,10000000] [--dir /tmp/kafkaesque-bench-pipeline] [--in-process-max N] [--keep]

Each size is stream-generated to disk as a stored run (benchmarks/bench_queue_checker.py's
generator: 8 keys, 10 processes, ~70% sends, polls continuing where each process left off,
one final read per key), then timed, each phase in a process of its own:

  ingest       `kafkaesque pipeline ingest RUN --warehouse W --force`   (pyarrow, no JVM)
  check        `kafkaesque pipeline check --warehouse W --spark-master M` (JVM start included;
               "Spark jobs" is the part after the session is up)
  in-process   the queue checker streamed over the history file (what `kafkaesque check` and
               `analyze` run: checkers.queue over history.HistoryFile, state in columns), at every
               size up to --in-process-max (default: all)
  standalone   at the sizes in --standalone: the same check on a Spark standalone master with two
               1-core workers started by `kafkaesque pipeline standalone up` (the scale-out path),
               its per-run counts compared with the local check's: "identical" or what differs

Peak memory is the peak summed RSS of the phase's process tree (the Spark JVM included),
sampled every 0.2 s from /proc. The per-op cost of each path and Spark's ratio to the
in-process checker are printed. A size whose files would not fit the free disk (df) is
skipped with the reason. The counts of Spark and the in-process checker are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_queue_checker import generate  # noqa: E402
from yardstick import bracket  # noqa: E402

BYTES_PER_OP = 160  # measured: 1M ops of this generator are 154 MB of JSONL; Parquet adds about a fifth
IN_PROCESS = """
import json, sys, time
from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.checkers.queue import QueueChecker
from kafkaesque_harness.history import HistoryFile
t0 = time.perf_counter()
r = run_checkers([QueueChecker()], {}, HistoryFile(sys.argv[1]))
q = r["checkers"]["queue"]["stats"]
print(json.dumps({"s": time.perf_counter() - t0, "valid": r["valid"], "lost": q["lost-write-count"],
                  "duplicate": q["duplicate-count"]}))
"""


def tree_rss(pid: int) -> int:
    """Summed RSS of `pid` and all its descendants, from /proc (no psutil: not a dependency)."""
    import os

    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack += children.get(p, [])
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
        except OSError:
            pass
    return total


def timed(argv: list[str]) -> tuple[float, int, subprocess.CompletedProcess]:
    """(seconds, peak RSS of the process tree in bytes, the completed process)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    elapsed = time.perf_counter() - t0
    sampler.join()
    return elapsed, peak[0], subprocess.CompletedProcess(argv, proc.returncode, out, err)


def write_run(root: Path, n_ops: int) -> Path:
    from kafkaesque_harness.harness.spec import TestSpec
    from kafkaesque_harness.results.store import write_json

    run = root / "store" / f"bench-{n_ops}" / "20260101T000000"
    run.mkdir(parents=True, exist_ok=True)
    write_json(run / "test.json", TestSpec.make(name=f"bench-{n_ops}", partitions=8, concurrency=10).to_dict())
    generate(str(run / "history.jsonl"), n_ops, keys=8, processes=10)
    return run


def spark_check(kafkaesque: str, wh: Path, master: str, out: Path) -> tuple[float, int, dict]:
    """`kafkaesque pipeline check` on `master`: (seconds, peak RSS, its check.json)."""
    s, peak, r = timed([kafkaesque, "pipeline", "check", "--warehouse", str(wh), "--spark-master", master,
                        "--output", str(out)])
    assert r.returncode in (0, 1, 2) and out.is_file(), f"check exited {r.returncode} without {out}: {r.stderr[-2000:]}"
    return s, peak, json.loads(out.read_text())


def bench(n_ops: int, root: Path, master: str, in_process_max: int, standalone: str | None, keep: bool) -> None:
    free = shutil.disk_usage(root).free
    need = n_ops * BYTES_PER_OP * 1.3
    if need > free:
        print(f"{n_ops:>12,} ops: skipped, needs about {need / 1e9:.0f} GB and {root} has {free / 1e9:.0f} GB free")
        return
    kafkaesque = str(ROOT / ".venv" / "bin" / "kafkaesque")
    wh = root / f"warehouse-{n_ops}"
    t0 = time.perf_counter()
    run = write_run(root, n_ops)
    gen_s = time.perf_counter() - t0
    size_mb = (run / "history.jsonl").stat().st_size / 1e6
    print(f"{n_ops:>12,} ops: {size_mb:,.0f} MB JSONL, generated in {gen_s:.0f} s (load {os.getloadavg()[0]:.1f})",
          flush=True)
    per_op = lambda s: s / n_ops * 1e6  # noqa: E731 - microseconds an op
    try:
        s, peak, r = timed([kafkaesque, "pipeline", "ingest", str(run), "--warehouse", str(wh), "--force",
                            "--jobs", "1"])
        assert r.returncode == 0, r.stderr[-2000:]
        pq_mb = sum(f.stat().st_size for f in wh.rglob("*.parquet")) / 1e6
        print(f"    ingest (pyarrow)          {s:7.1f} s  {per_op(s):5.1f} us/op   peak {peak / 2**20:6.0f} MiB   "
              f"Parquet {pq_mb:,.0f} MB", flush=True)
        spark_s, peak, report = spark_check(kafkaesque, wh, master, root / f"check-{n_ops}.json")
        row = report["runs"][0]
        print(f"    check (Spark {master:<9}) {spark_s:7.1f} s  {per_op(spark_s):5.1f} us/op   peak {peak / 2**20:6.0f} "
              f"MiB   Spark jobs {report['seconds']:.1f} s   verdict {row['verdict']}, lost {row['lost_write']}, "
              f"duplicate {row['duplicate']} (load {os.getloadavg()[0]:.1f})", flush=True)
        if n_ops <= in_process_max:
            s, peak, r = timed([sys.executable, "-c", IN_PROCESS, str(run / "history.jsonl")])
            assert r.returncode == 0, r.stderr[-2000:]
            res = json.loads(r.stdout.strip().splitlines()[-1])
            v = {True: "true", False: "false"}.get(res["valid"], res["valid"])
            print(f"    in-process (streamed)     {s:7.1f} s  {per_op(s):5.1f} us/op   peak {peak / 2**20:6.0f} MiB   "
                  f"verdict {v}, lost {res['lost']}, duplicate {res['duplicate']}   "
                  f"Spark/in-process {spark_s / s:.2f}x (load {os.getloadavg()[0]:.1f})", flush=True)
        else:
            print(f"    in-process checker        not run above --in-process-max {in_process_max:,} ops", flush=True)
        if standalone:
            s, peak, other = spark_check(kafkaesque, wh, standalone, root / f"check-{n_ops}-standalone.json")
            verdict = "identical to the local check" if other["runs"] == report["runs"] else \
                f"DIFFERS from the local check: {other['runs']} against {report['runs']}"
            print(f"    check (standalone)        {s:7.1f} s  {per_op(s):5.1f} us/op   peak {peak / 2**20:6.0f} MiB "
                  f"(driver; the workers are apart)   Spark jobs {other['seconds']:.1f} s   "
                  f"{verdict}", flush=True)
    finally:
        if not keep:
            shutil.rmtree(run.parent, ignore_errors=True)
            shutil.rmtree(wh, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="1000000,10000000,50000000", help="comma list of history sizes")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default="/tmp/kafkaesque-bench-pipeline", help="scratch space (not the repo)")
    ap.add_argument("--in-process-max", type=int, default=1 << 62, help="no in-process check above this size")
    ap.add_argument("--standalone", default="", help="comma list of sizes also checked on a standalone master")
    ap.add_argument("--keep", action="store_true", help="keep the generated history and Parquet")
    args = ap.parse_args()
    bracket()  # the machine's speed before and after: figures compare through it
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    on_standalone = {int(x) for x in args.standalone.split(",") if x}
    master = None
    if on_standalone:
        where = root / "standalone"
        r = subprocess.run([str(ROOT / ".venv" / "bin" / "kafkaesque"), "pipeline", "standalone", "up", "--dir",
                            str(where)], capture_output=True, text=True, cwd=ROOT)
        if r.returncode != 0:
            print(f"the standalone master did not start: {r.stderr.strip()}")
            return 3
        master = json.loads((where / "standalone.json").read_text())["url"]
        print(f"standalone master {master}, two 1-core workers (kafkaesque pipeline standalone up)", flush=True)
    try:
        for n in (int(x) for x in args.ops.split(",")):
            bench(n, root, args.master, args.in_process_max, master if n in on_standalone else None, args.keep)
    finally:
        if master:
            subprocess.run([str(ROOT / ".venv" / "bin" / "kafkaesque"), "pipeline", "standalone", "down", "--dir",
                            str(root / "standalone")], capture_output=True, text=True, cwd=ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
