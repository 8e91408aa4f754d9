"""tansu 0.6.0 as a diskless cluster (issue 43): clusters/examples/tansu-s3.toml as a user runs it, three
brokers over one bucket of moto's S3 server, the store a node of its own, all in containers the harness
creates from the node image. One short run with a broker kill and a pause of the store, and what
docs/analyses/tansu-0.6.0.md found in such runs. Needs the Docker engine; fails, never skips, without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaesque_harness.history import read_history
from kafkaesque_harness.history.faults import fault_records
from tests.integration.test_tansu import containers_of

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]
TANSU_S3 = PROJECT / "clusters" / "examples" / "tansu-s3.toml"
BROKERS = ("tansu-1", "tansu-2", "tansu-3")


def test_a_broker_kill_and_a_store_pause_on_three_tansu_brokers_over_one_bucket(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", "run", "--cluster", str(TANSU_S3),
                        "--no-panel", "--store", str(tmp_path / "store"), "--recovery-wait", "2", "--seed", "7",
                        "--nemesis", "kill,storage-pause", "--nemesis-schedule", "sequential",
                        "--nemesis-interval", "4", "--time-limit", "16", "--name", "tansu-s3"],
                       capture_output=True, text=True, timeout=240, cwd=PROJECT)
    run_dir = Path(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else tmp_path
    assert r.returncode in (0, 1, 2), r.stderr[-3000:]  # a verdict, never a harness error
    test = json.loads((run_dir / "test.json").read_text())
    results = json.loads((run_dir / "results.json").read_text())
    # the set-up: the store first, then three brokers, each answering Metadata; what each said of its version
    assert test["nodes"] == ["s3", *BROKERS]
    assert test["node_versions"]["s3"]["command"] == "moto 5.2.5"
    assert {test["node_versions"][b]["command"] for b in BROKERS} == {"tansu 0.6.0"}
    # the workload's clients went through every broker: worker w to broker w mod 3
    brokers_used = set(test["client_bootstraps"])
    assert len(brokers_used) == 3, test["client_bootstraps"]
    # both faults were applied, observed and healed, through the ledger into the history
    history = read_history(run_dir / "history.jsonl")
    records = fault_records(history)
    pauses = [f for f in records if f.by == "storage-pause"]
    kills = [f for f in records if f.by == "kill"]
    assert pauses and all(f.nodes == ["s3"] and f.applied and f.observed and f.healed for f in pauses), pauses
    assert pauses[0].evidence["process"] == "paused"
    assert kills and all(set(f.nodes) <= set(BROKERS) and f.applied and f.observed and f.healed for f in kills), kills
    queue = results["checkers"]["queue"]
    assert queue["stats"]["acked-sends"] > 50
    assert containers_of(run_dir.name) == []  # the harness removed the four containers it created
