"""A short real run of the default reference broker (local cluster, kill and pause): every node's protocol trace
is collected into the run dir, and the trace checker (checkers/trace.py) finds no violation (issue 22)."""

import json

import pytest

pytestmark = pytest.mark.integration

NODES = ("controller-0", "broker-1", "broker-2", "broker-3")


@pytest.mark.kafkaesque(cluster="local", workload="queue", nemesis="kill,pause", nemesis_schedule="sequential",
                        time_limit=30, nemesis_interval=4, recovery_wait=3)
def test_a_default_broker_run_has_its_traces_collected_and_no_violation(kafkaesque_history):
    run_dir = kafkaesque_history.run_dir
    for node in NODES:
        assert (run_dir / "nodes" / node / "trace.jsonl").stat().st_size > 0, node
    assert kafkaesque_history.test["protocol_trace"] is True
    trace = json.loads((run_dir / "results.json").read_text())["checkers"]["trace"]
    assert trace["valid"] is True and trace["anomalies"] == [] and trace["stats"]["violations"] == 0
    events = trace["stats"]["events"]
    for name in ("hwm_advanced", "produce_acked", "consumer_fetch", "become_leader", "leader_elected",
                 "broker_registered", "registered"):
        assert events.get(name, 0) > 0, name
    assert trace["stats"]["nodes"] == len(NODES)
