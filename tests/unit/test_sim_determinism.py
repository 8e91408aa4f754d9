"""One seed, one run: two processes simulating the same seed write byte-identical node files (traces,
state-change logs, data), whatever hash seed their callers had; another seed writes another run.
clusters/sim/drive.py runs a cluster, a producer and a fault schedule drawn from the seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TIME_LIMIT_S = "20"


def simulate(run_dir: Path, seed: int, hash_seed: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    out = subprocess.run([sys.executable, "-m", "kafkaesque_harness.clusters.sim.drive", "--seed", str(seed),
                          "--run-dir", str(run_dir), "--time-limit", TIME_LIMIT_S],
                         env=env, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def node_files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_the_same_seed_gives_byte_identical_traces_logs_and_data(tmp_path):
    a = simulate(tmp_path / "a", seed=17, hash_seed=None)
    b = simulate(tmp_path / "b", seed=17, hash_seed="4242")  # the simulator re-executes itself with its own
    assert a["faults"] > 0 and a["acked"] > 0, a  # a run that did something
    assert {**a, "cpu_s": 0} == {**b, "cpu_s": 0}
    files_a, files_b = node_files(tmp_path / "a"), node_files(tmp_path / "b")
    assert sorted(files_a) == sorted(files_b)
    assert any(name.endswith("trace.jsonl") for name in files_a)
    different = [name for name in files_a if files_a[name] != files_b[name]]
    assert different == []


def test_another_seed_gives_another_trace(tmp_path):
    simulate(tmp_path / "a", seed=17, hash_seed=None)
    simulate(tmp_path / "b", seed=18, hash_seed=None)
    trace = "data/broker-1/trace.jsonl"
    assert (tmp_path / "a" / trace).read_bytes() != (tmp_path / "b" / trace).read_bytes()


# --- swarm: the seed draws its configuration, and replays it ---------------------------------------------------
KAFKAESQUE = [sys.executable, "-c", "import sys; from kafkaesque_harness.harness.cli import main; "
              "sys.argv[0] = 'kafkaesque'; main()"]


def swarm_run(store: Path, name: str, seed: int, hash_seed: str | None) -> Path:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    out = subprocess.run([*KAFKAESQUE, "sim", "--seed", str(seed), "--swarm", "--time-limit", "15", "--concurrency",
                          "4", "--rate", "40", "--recovery-wait", "5", "--store", str(store), "--name", name],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.stdout.strip(), out.stderr
    return Path(out.stdout.strip().splitlines()[-1])


def test_a_swarm_seed_draws_its_settings_and_replays_them_byte_for_byte(tmp_path):
    a = swarm_run(tmp_path, "a", 5, None)
    b = swarm_run(tmp_path, "b", 5, "4242")
    test_a, test_b = (json.loads((d / "test.json").read_text()) for d in (a, b))
    assert test_a["swarm"] == test_b["swarm"] and test_a["swarm"]["nemesis"] == test_a["nemesis"]
    for key in ("brokers", "partitions", "replication_factor", "min_isr", "flush_policy", "nemesis_schedule"):
        assert test_a[key] == test_a["swarm"][key], key  # the drawn settings are the run's
    files = ["fault-schedule.json", "history.jsonl", *(f"data/{n}/trace.jsonl" for n in test_a["nodes"])]
    assert [f for f in files if (a / f).read_bytes() != (b / f).read_bytes()] == []
    other = swarm_run(tmp_path, "c", 6, None)
    assert json.loads((other / "test.json").read_text())["swarm"] != test_a["swarm"]
