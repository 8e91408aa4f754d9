"""`kafkaesque run` end to end on the local cluster, and `kafkaesque analyze` reproducing its results."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def kafkaesque(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_run_with_kill_and_pause_is_valid_and_stored(tmp_path):
    r = kafkaesque("run", "--cluster", "local", "--workload", "queue", "--nemesis", "kill,pause",
                   "--time-limit", "24", "--nemesis-interval", "4", "--recovery-wait", "3",
                   "--store", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1])  # the run directory is the last line
    for name in ("test.json", "history.jsonl", "results.json", "report.html"):
        assert (run_dir / name).exists(), name
    for node in ("controller-0", "broker-1", "broker-2", "broker-3"):
        assert (run_dir / "nodes" / node / "state.json").exists()
    assert list((run_dir / "nodes" / "broker-1").glob("broker.log"))
    results_before = (run_dir / "results.json").read_bytes()
    res = json.loads(results_before)
    assert res["valid"] is True
    assert res["checkers"]["queue"]["stats"]["acked-sends"] > 100
    history = (run_dir / "history.jsonl").read_text()
    assert '"start-kill"' in history and '"start-pause"' in history
    # analyze re-checks the stored history and writes exactly the same results
    a = kafkaesque("analyze", str(run_dir))
    assert a.returncode == 0, a.stderr
    assert (run_dir / "results.json").read_bytes() == results_before
    ls = kafkaesque("ls", "--store", str(tmp_path))
    assert run_dir.name in ls.stdout
