"""Harness throughput: sustained recorded ops/s against the local 3-broker cluster (issue 3).

    .venv/bin/python benchmarks/bench_harness.py [--seconds 30] [--concurrency 10] [--client kafka-python]

Runs `kafkaesque run` with an unlimited rate and no faults, then counts the completed ops
in the stored history over the main phase. Prints ops/s overall and per op type, the
p50/p99 latency of sends, and where the machine's CPU went over the main phase, by kind of
process (the harness, the brokers, their FUSE daemons, a foreign broker, the rest): on 2
cores that says what bounds the figure. Only this benchmark's own process tree counts: the run it
starts and everything that run starts, daemons included (this process is their subreaper, so a
double-forked broker stays in the tree), and the processes of the run's containers (--cluster docker:
they descend from docker's shim, not from the run, and carry the run's KAFKAESQUE_OWNER, which the run's
registration names); other runs' harnesses and brokers on the machine do not.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_broker import cpu_seconds  # noqa: E402  # (this script's directory is on sys.path)
from yardstick import bracket  # noqa: E402  # benchmarks/yardstick.py

from kafkaesque_harness.clusters.ownership import registered_runs  # noqa: E402
from kafkaesque_harness.clusters.reference import OWNER_ENV  # noqa: E402
from kafkaesque_harness.history import NEMESIS, pair_ops, read_history  # noqa: E402

# A process's kind by its command line, first match: what bench_harness splits the machine's CPU by
KINDS = (("harness", ("harness.cli run", "kafkaesque run")), ("lossyfs", ("lossyfs",)),
         ("brokers and controller", ("kafkaesque_harness.clusters.broker",)), ("tansu", ("tansu",)))


PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphaned descendants are re-parented to this process, not to init


def adopt_orphans() -> None:
    """Make this process the subreaper of its descendants (Linux), so a daemon that a shell started with
    nohup ... & and left stays in this process's tree. Best effort: without it, such daemons are missed."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def parent_of(pid: int) -> int:
    """The parent's pid, from /proc/<pid>/stat; OSError if the process is gone."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    """root and every process below it, from a pid -> parent pid map."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, ppid in parents.items():
        children[ppid].append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


def own_processes(root: int, parents: dict[int, int], owners: dict[int, str], runs: dict[int, str]) -> set[int]:
    """The processes the benchmark's run accounts for: root and its descendants, and every process that
    carries (`owners`: pid -> its KAFKAESQUE_OWNER) the owner id of a run that a process of that tree
    registered (`runs`: the registering pid -> the owner id), with its descendants: a docker cluster's
    brokers, which descend from the container runtime. Another run's processes carry another owner id."""
    tree = descendants(root, parents)
    ours = {owner for pid, owner in runs.items() if pid in tree}
    for pid, owner in owners.items():
        if owner in ours and pid not in tree:
            tree |= descendants(pid, parents)
    return tree


def owner_of(pid: int) -> str | None:
    """The run id in the process's KAFKAESQUE_OWNER (clusters/reference.py), or None."""
    marker = f"{OWNER_ENV}=".encode()
    with open(f"/proc/{pid}/environ", "rb") as f:
        return next((kv[len(marker):].decode(errors="replace") for kv in f.read().split(b"\0")
                     if kv.startswith(marker)), None)


def cpu_by_process(root: int) -> dict[int, tuple[float, str]]:
    """CPU seconds so far (user + system) and the command line of each process of root's run (own_processes),
    from /proc."""
    parents, owners = {}, {}
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            parents[pid] = parent_of(pid)
            owner = owner_of(pid)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if owner:
            owners[pid] = owner
    runs = {r.harness.pid: r.owner for r in registered_runs() if r.harness.state() == "live"}
    out = {}
    for pid in own_processes(root, parents, owners, runs):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            out[pid] = (cpu_seconds(pid), cmd)
        except OSError:
            continue  # gone meanwhile
    return out


def kind_of(cmd: str) -> str:
    return next((kind for kind, words in KINDS if any(w in cmd for w in words)), "the rest")


def cpu_split(store: str, proc: subprocess.Popen, seconds: float) -> dict[str, float] | None:
    """Cores each kind of process used over the main phase: from the first op in the run's history to
    1 s before its time limit. None if the run ended before (it printed why)."""
    deadline = time.monotonic() + 600
    while not any(p.stat().st_size for p in Path(store).glob("*/*/history.jsonl")):
        if proc.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(0.2)
    before, t0 = cpu_by_process(proc.pid), time.monotonic()
    time.sleep(max(seconds - 1, 1))
    after, elapsed = cpu_by_process(proc.pid), time.monotonic() - t0
    cores: dict[str, float] = collections.Counter()
    for pid, (busy, cmd) in after.items():
        cores[kind_of(cmd)] += (busy - before.get(pid, (0.0, ""))[0]) / elapsed
    return cores


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--client", default="kafka-python")
    ap.add_argument("--cluster", default="local")
    args = ap.parse_args()
    bracket()  # the machine's speed before and after: figures compare through it
    adopt_orphans()  # so the run's daemons stay in this process's tree, which alone is counted
    store = tempfile.mkdtemp(prefix="bench-harness-")
    cmd = [sys.executable, "-m", "kafkaesque_harness.harness.cli", "run", "--cluster", args.cluster, "--rate", "0",
           "--concurrency", str(args.concurrency), "--time-limit", str(args.seconds), "--client", args.client,
           "--recovery-wait", "1", "--store", store, "--no-panel"]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:  # no pipe to fill meanwhile
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        cores = cpu_split(store, proc, args.seconds)
        proc.wait()
        out.seek(0)
        err.seek(0)
        r = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
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
    if cores:
        print(f"CPU over the main phase ({os.cpu_count()} cores): "
              + ", ".join(f"{kind} {c:.2f}" for kind, c in sorted(cores.items(), key=lambda kc: -kc[1]))
              + f"; total {sum(cores.values()):.2f} cores")
    print(f"verdict exit={r.returncode}  run={run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
