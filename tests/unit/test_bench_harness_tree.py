"""benchmarks/bench_harness.py splits the CPU of its own process tree only (issue 44 item 5): a process it
started counts, daemons re-parented to it count, and other processes on the machine do not."""

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_harness  # noqa: E402  # benchmarks/ is no package: its scripts import each other by name


def test_descendants_follow_parents_and_leave_other_trees_out():
    parents = {1: 0, 10: 1, 11: 10, 12: 11, 20: 1, 21: 20}
    assert bench_harness.descendants(10, parents) == {10, 11, 12}


def test_the_split_counts_a_child_and_not_an_unrelated_process():
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a tree of its own, not below the parent
    try:
        script = ("import subprocess, sys, time; c = subprocess.Popen(['sleep', '30']); print(c.pid, flush=True); "
                  "time.sleep(30)")
        parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        child = None
        try:
            child = int(parent.stdout.readline())
            seen = bench_harness.cpu_by_process(parent.pid)
            assert {parent.pid, child} <= set(seen)
            assert other.pid not in seen and os.getpid() not in seen
        finally:
            if child is not None:
                os.kill(child, 9)
            parent.kill()
            parent.wait()
    finally:
        other.kill()
        other.wait()
