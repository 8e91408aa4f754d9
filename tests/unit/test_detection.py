"""The detection table (results/detection.py) from a campaign's record: counts per row, anomaly names,
median time to the first anomalous op, stalled scenarios and budget-skipped runs kept apart."""

import json
from pathlib import Path

from results.detection import first_anomaly_s, render_markdown, summarize, write_detection


def run(tmp_path, i, variant, plan, status, first_ns=None, stalled=False, protocol_wait=False):
    d = tmp_path / f"run{i}"
    d.mkdir()
    anomalies = []
    if first_ns is not None:
        anomalies = [{"name": "lost-write", "count": 1, "examples": [
            {"op": {"index": 3, "time": first_ns, "process": 1, "type": "ok", "f": "send", "value": [0, [1, 2]]}},
            {"op": {"index": 9, "time": first_ns + 5_000_000_000, "process": 2, "type": "ok", "f": "send",
                    "value": [0, [2, 3]]}}]}]
    (d / "results.json").write_text(json.dumps({"valid": status == "valid" or (False if status == "invalid"
                                                                               else "unknown"),
                                                "checkers": {"queue": {"anomalies": anomalies}}}))
    wait = '{"f":"scenario-wait","type":"info","error":"ScenarioStalled: in-isr not reached"}' if stalled else ""
    if protocol_wait:  # a protocol-nemesis move that waited in vain: its random walk, not a stall
        wait = ('{"f":"scenario-wait","type":"info","value":{"scenario": "protocol"},'
                '"error":"ScenarioStalled: in-isr not reached"}')
    (d / "history.jsonl").write_text(wait + "\n")
    return {"spec": {"broker_variant": variant, "acks": "all", "flush_policy": "never", "nemesis": [plan]},
            "status": status, "run_dir": str(d),
            "anomalies": [{"name": a["name"]} for a in anomalies]}


def campaign(tmp_path):
    runs = [run(tmp_path, 0, "default", "scenario:x", "valid"),
            run(tmp_path, 1, "default", "scenario:x", "valid"),
            run(tmp_path, 2, "no-elr", "scenario:x", "invalid", first_ns=30_000_000_000),
            run(tmp_path, 3, "no-elr", "scenario:x", "invalid", first_ns=10_000_000_000),
            run(tmp_path, 4, "no-elr", "scenario:x", "valid", stalled=True),
            {"spec": {"broker_variant": "no-elr", "acks": "all", "flush_policy": "never", "nemesis": ["protocol"]},
             "status": "skipped", "run_dir": None, "anomalies": []}]
    return {"name": "t", "started": "now", "duration_s": 1, "cluster": "local",
            "matrix": {"repetitions": 3, "settings": {"time_limit": 60}}, "runs": runs}


def test_first_anomaly_is_the_earliest_moment_an_example_is_proven():
    # example 1 is proven by its read at 7 s (after the ack at 1 s); example 2 by its op at 2.5 s
    assert first_anomaly_s({"checkers": {"q": {"anomalies": [{"examples": [
        {"op": {"time": 1_000_000_000, "type": "ok", "f": "send"},
         "reads": [{"time": 7_000_000_000, "type": "ok", "f": "final-poll"}]},
        {"op": {"time": 2_500_000_000, "type": "ok", "f": "send"}}]}]}}}) == 2.5
    assert first_anomaly_s({"checkers": {"q": {"anomalies": []}}}) is None
    # a lost write the final read proves carries only its send: it says nothing of when it was found
    final = {"final_hwm": 822, "send": {"time": 150_000_000, "type": "ok", "f": "send"}}
    assert first_anomaly_s({"checkers": {"q": {"anomalies": [{"examples": [final]}]}}}) is None


def test_rows_count_found_stalled_and_not_run_apart(tmp_path):
    rows = {(r["variant"], r["plan"]): r for r in summarize(campaign(tmp_path))}
    d = rows[("default", "scenario:x")]
    assert (d["runs"], d["found"], d["median_first_s"]) == (2, 0, None)
    n = rows[("no-elr", "scenario:x")]
    assert (n["runs"], n["found"], n["stalled"], n["anomalies"], n["median_first_s"]) == (3, 2, 1, ["lost-write"], 20.0)
    p = rows[("no-elr", "protocol")]
    assert (p["runs"], p["not_run"]) == (0, 1)


def test_markdown_names_the_command_and_the_default_rows_first(tmp_path):
    md = render_markdown(campaign(tmp_path), "kafkaesque detect x.toml")
    assert "`kafkaesque detect x.toml`" in md
    table = [line for line in md.splitlines() if line.startswith("| ")][1:]
    assert table[0].startswith("| default") and "| no-elr | all | never | `scenario:x` | 3 | 2 | lost-write | 20.0 |" in md
    assert "Default broker: 0 run(s) with an anomaly out of 2" in md


def test_write_detection_from_a_campaign_dir(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "campaign.json").write_text(json.dumps(campaign(tmp_path)))
    out = write_detection(tmp_path / "c", tmp_path / "docs" / "DETECTION.md", "kafkaesque detect")
    assert out.read_text().startswith("# Detection table")


def test_a_protocol_move_that_waits_in_vain_is_not_a_stalled_run(tmp_path):
    from results.detection import _stalled

    assert _stalled(Path(run(tmp_path, 0, "no-elr", "scenario:x", "valid", stalled=True)["run_dir"]))
    assert not _stalled(Path(run(tmp_path, 1, "no-elr", "protocol", "valid", protocol_wait=True)["run_dir"]))
