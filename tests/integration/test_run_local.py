"""A run end to end on the local cluster through the pytest plugin (harness/pytest_plugin.py), and
`kafkaesque analyze` / `kafkaesque ls` on what it stored."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def kafkaesque(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.kafkaesque(cluster="local", workload="queue", nemesis="kill,pause", nemesis_schedule="sequential",
                        time_limit=24, nemesis_interval=4,
                        recovery_wait=3)
def test_run_with_kill_and_pause_is_valid_and_stored(kafkaesque_history, kafkaesque_store):
    run = kafkaesque_history  # made by the plugin from the marker; its verdict (valid) already asserted
    run_dir = run.run_dir
    assert run_dir.parent.parent == kafkaesque_store
    for name in ("test.json", "history.jsonl", "results.json", "report.html", "replicas.json"):
        assert (run_dir / name).exists(), name
    nodes = ("controller-0", "broker-1", "broker-2", "broker-3")
    for node in nodes:
        assert (run_dir / "nodes" / node / "state.json").exists()
    # the replicas' state as the checker reads it, every node's dump usable (clusters/replica_dumps.py)
    replicas = json.loads((run_dir / "replicas.json").read_text())
    assert replicas["state_dumps"] is True and set(replicas["nodes"]) == set(nodes)
    assert all(replicas["nodes"][n]["state"]["role"] in ("broker", "controller") for n in nodes)
    assert list((run_dir / "nodes" / "broker-1").glob("broker.log"))
    results_before = (run_dir / "results.json").read_bytes()
    res = json.loads(results_before)
    assert res["valid"] is True and run.valid is True
    assert res["checkers"]["queue"]["stats"]["acked-sends"] > 100
    assert run.ops(f="start-kill") and run.ops(f="start-pause")
    # the capability table was stored with the spec
    assert set(run.test["capabilities"]) == {"controller-0", "broker-1", "broker-2", "broker-3"}
    assert run.test["capabilities"]["broker-1"]["sigstop"]["ok"] is True
    # analyze re-checks the stored history and writes exactly the same results
    a = kafkaesque("analyze", str(run_dir))
    assert a.returncode == 0, a.stderr
    assert (run_dir / "results.json").read_bytes() == results_before
    ls = kafkaesque("ls", "--store", str(kafkaesque_store))
    assert run_dir.name in ls.stdout
