"""The Spark pipeline on one generated history of N ops: ingest and check times, peak memory, beside the in-process checker.

    .venv/bin/python benchmarks/bench_pipeline.py [--ops 1000000,10000000,50000000] [--master local[2]]
        [--dir /tmp/kafkaesque-bench-pipeline] [--in-process-max 10000000] [--keep]

Each size is stream-generated to disk as a stored run (benchmarks/bench_queue_checker.py's
generator: 8 keys, 10 processes, ~70% sends, polls continuing where each process left off,
one final read per key), then timed, each phase in a process of its own:

  ingest       `kafkaesque pipeline ingest RUN --warehouse W --force`   (pyarrow, no JVM)
  check        `kafkaesque pipeline check --warehouse W --spark-master M` (JVM start included;
               "Spark jobs" is the part after the session is up)
  in-process   read_history + checkers.queue (what `kafkaesque run` / `analyze` do), for sizes up
               to --in-process-max: it holds the whole history in memory

Peak memory is the peak summed RSS of the phase's process tree (the Spark JVM included),
sampled every 0.2 s with psutil. A size whose files would not fit the free disk (df) is
skipped with the reason. Verdicts of Spark and the in-process checker are printed side by side.
"""

from __future__ import annotations

import argparse
import json
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

BYTES_PER_OP = 160  # measured: 1M ops of this generator are 154 MB of JSONL; Parquet adds about a fifth
IN_PROCESS = """
import json, sys, time
from checkers.queue import check_queue
from history import gc_paused, read_history
t0 = time.perf_counter()
h = read_history(sys.argv[1])
t1 = time.perf_counter()
with gc_paused():
    r = check_queue(h)
t2 = time.perf_counter()
print(json.dumps({"parse_s": t1 - t0, "check_s": t2 - t1, "valid": r.valid}))
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
    from harness.spec import TestSpec
    from results.store import write_json

    run = root / "store" / f"bench-{n_ops}" / "20260101T000000"
    run.mkdir(parents=True, exist_ok=True)
    write_json(run / "test.json", TestSpec(name=f"bench-{n_ops}", partitions=8, concurrency=10).to_dict())
    generate(str(run / "history.jsonl"), n_ops, keys=8, processes=10)
    return run


def bench(n_ops: int, root: Path, master: str, in_process_max: int, keep: bool) -> None:
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
    print(f"{n_ops:>12,} ops: {size_mb:,.0f} MB JSONL, generated in {gen_s:.0f} s", flush=True)
    try:
        s, peak, r = timed([kafkaesque, "pipeline", "ingest", str(run), "--warehouse", str(wh), "--force",
                            "--jobs", "1"])
        assert r.returncode == 0, r.stderr[-2000:]
        pq_mb = sum(f.stat().st_size for f in wh.rglob("*.parquet")) / 1e6
        print(f"    ingest (pyarrow)        {s:7.1f} s   peak {peak / 2**20:6.0f} MiB   Parquet {pq_mb:,.0f} MB",
              flush=True)
        s, peak, r = timed([kafkaesque, "pipeline", "check", "--warehouse", str(wh), "--spark-master", master])
        assert r.returncode in (0, 1, 2) and (wh / "check.json").is_file(), \
            f"check exited {r.returncode} without check.json: {r.stderr[-2000:]}"
        report = json.loads((wh / "check.json").read_text())
        spark_verdict = report["runs"][0]["verdict"]
        print(f"    check (Spark {master})  {s:7.1f} s   peak {peak / 2**20:6.0f} MiB   "
              f"Spark jobs {report['seconds']:.1f} s   verdict {spark_verdict}", flush=True)
        if n_ops <= in_process_max:
            s, peak, r = timed([sys.executable, "-c", IN_PROCESS, str(run / "history.jsonl")])
            assert r.returncode == 0, r.stderr[-2000:]
            res = json.loads(r.stdout.strip().splitlines()[-1])
            v = {True: "true", False: "false"}.get(res["valid"], res["valid"])
            print(f"    in-process checker      {s:7.1f} s   peak {peak / 2**20:6.0f} MiB   "
                  f"(parse {res['parse_s']:.1f} s + check {res['check_s']:.1f} s)   verdict {v}", flush=True)
        else:
            print(f"    in-process checker      not run above --in-process-max {in_process_max:,} ops", flush=True)
    finally:
        if not keep:
            shutil.rmtree(run.parent, ignore_errors=True)
            shutil.rmtree(wh, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="1000000,10000000,50000000", help="comma list of history sizes")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default="/tmp/kafkaesque-bench-pipeline", help="scratch space (not the repo)")
    ap.add_argument("--in-process-max", type=int, default=10_000_000)
    ap.add_argument("--keep", action="store_true", help="keep the generated history and Parquet")
    args = ap.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    for n in (int(x) for x in args.ops.split(",")):
        bench(n, root, args.master, args.in_process_max, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
