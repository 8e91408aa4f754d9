"""`kafkaesque sim` (harness/simulate.py): a simulated run stored and checked as a real one, replayable by its
seed; settings the simulator cannot run refused with a sentence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

KAFKAESQUE = [sys.executable, "-c", "import sys; from kafkaesque_harness.harness.cli import main; "
              "sys.argv[0] = 'kafkaesque'; main()"]


def sim(store: Path, name: str, *flags: str) -> tuple[int, Path | None, str]:
    out = subprocess.run([*KAFKAESQUE, "sim", "--store", str(store), "--name", name, *flags],
                         capture_output=True, text=True, timeout=600)
    lines = out.stdout.strip().splitlines()
    return out.returncode, (Path(lines[-1]) if lines else None), out.stderr


RUN = ("--seed", "5", "--time-limit", "12", "--nemesis", "kill", "--nemesis-interval", "2", "--concurrency", "4",
       "--rate", "50", "--recovery-wait", "5")


def test_a_simulated_run_is_stored_checked_and_replays_byte_for_byte(tmp_path):
    code, run_dir, err = sim(tmp_path, "a", *RUN)
    assert run_dir is not None, err
    test = json.loads((run_dir / "test.json").read_text())
    results = json.loads((run_dir / "results.json").read_text())
    assert test["simulated"] is True and test["cluster"] == "sim" and test["seed"] == 5
    assert results["simulated"] is True
    assert results["valid"] is True and code == 0, (results.get("unknown_reasons"), err)
    assert results["checkers"]["faults"]["stats"]["kill"]["observed"] >= 1
    assert {"queue", "trace", "replicas", "progress"} <= set(results["checkers"])
    assert (run_dir / "replicas.json").is_file() and (run_dir / "report.html").is_file()

    _, again, _ = sim(tmp_path, "b", *RUN)
    assert again is not None
    for name in ["history.jsonl", *(f"data/{n}/trace.jsonl" for n in test["nodes"])]:
        assert (run_dir / name).read_bytes() == (again / name).read_bytes(), name


def test_a_fault_or_workload_the_simulator_lacks_is_refused_with_a_sentence(tmp_path):
    code, _, err = sim(tmp_path, "c", "--nemesis", "disk")
    assert code == 3 and "the simulator has no fault disk" in err
    code, _, err = sim(tmp_path, "d", "--workload", "register")
    assert code == 3 and "the simulator has clients for the queue and txn workloads" in err


def test_a_mutant_the_simulator_runs_is_found_by_the_real_checkers(tmp_path):
    # controller-metadata-not-fsynced (clusters/mutants.py): a power-cut controller forgets metadata it acted on
    # and gives broker epochs again; the trace checker names it (by hand: seeds 1-3 of this schedule all find it).
    code, run_dir, err = sim(tmp_path, "mutant", "--seed", "1", "--time-limit", "25", "--nemesis", "lossy-crash",
                             "--nemesis-interval", "2", "--concurrency", "4", "--rate", "50", "--recovery-wait", "5",
                             "--mutant", "controller-metadata-not-fsynced")
    assert run_dir is not None, err
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 1 and results["valid"] is False
    assert {"epoch-reuse", "registration-clean"} <= set(results["checkers"]["trace"]["anomaly_types"])
    assert json.loads((run_dir / "test.json").read_text())["mutant"] == "controller-metadata-not-fsynced"
