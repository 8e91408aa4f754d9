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


def test_a_containers_processes_count_when_they_carry_the_owner_id_the_run_registered():
    # 1: init; 10: the benchmark's run (registered run-a), 11: its child; 50: docker's shim, 51: run-a's
    # container broker below it, 52: that broker's child; 60: another run's container broker (run-b), 61: its child
    parents = {1: 0, 10: 1, 11: 10, 50: 1, 51: 50, 52: 51, 60: 50, 61: 60}
    owners = {51: "run-a", 60: "run-b"}
    runs = {10: "run-a", 99: "run-b"}  # run-b registered by a harness outside the benchmark's tree
    assert bench_harness.own_processes(10, parents, owners, runs) == {10, 11, 51, 52}
    # a run the tree did not register: its containers stay out, whoever carries its id
    assert bench_harness.own_processes(11, parents, owners, runs) == {11}


def test_the_owner_id_is_read_from_a_processs_environment():
    env = {**os.environ, "KAFKAESQUE_OWNER": "run-x"}
    p = subprocess.Popen(["sleep", "30"], env=env)
    bare = subprocess.Popen(["sleep", "30"], env={k: v for k, v in os.environ.items() if k != "KAFKAESQUE_OWNER"})
    try:
        assert bench_harness.owner_of(p.pid) == "run-x" and bench_harness.owner_of(bare.pid) is None
    finally:
        for q in (p, bare):
            q.kill()
            q.wait()
