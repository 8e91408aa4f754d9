"""The HTML report: self-contained, verdict first, anomalies with their ops and faults, everything escaped."""

import json

from harness.history import HistoryWriter, Op
from results.report import fault_windows, render_report

EVIL = "</script><script>alert(1)</script>"


def _make_run(tmp_path, valid=False):
    run = tmp_path / "run"
    run.mkdir()
    (run / "test.json").write_text(json.dumps({"name": "queue-" + EVIL, "workload": "queue", "nemesis": "kill"}))
    w = HistoryWriter(run / "history.jsonl")
    w.append(Op("invoke", "send", 0, [0, 1], time=1_000_000))
    w.append(Op("ok", "send", 0, [0, [0, 1]], time=2_000_000))
    w.append(Op("invoke", "start-kill", "nemesis", None, time=3_000_000))
    w.append(Op("info", "start-kill", "nemesis", {"kill": ["broker-1"]}, time=3_500_000))
    w.append(Op("invoke", "send", 1, [0, EVIL], time=4_000_000))
    w.append(Op("info", "send", 1, None, time=5_000_000_000, error="timeout"))
    w.append(Op("invoke", "stop-kill", "nemesis", None, time=6_000_000_000))
    w.append(Op("info", "stop-kill", "nemesis", {"restart": ["broker-1"]}, time=6_100_000_000))
    w.append(Op("invoke", "final-poll", 2, [0], time=7_000_000_000))
    w.append(Op("ok", "final-poll", 2, [0, 1, [[0, 1]]], time=7_100_000_000))
    w.close()
    lost = {"index": 1, "time": 2_000_000, "process": 0, "type": "ok", "f": "send", "value": [0, [5, EVIL]]}
    results = {"valid": valid, "checkers": {"queue": {"checker": "queue", "valid": valid,
               "anomaly_types": ["lost-write"], "stats": {},
               "anomalies": [{"name": "lost-write", "count": 1, "explanation": "acked but never read",
                              "examples": [{"op": lost}]}]}}}
    (run / "results.json").write_text(json.dumps(results))
    (run / "nodes" / "broker-1").mkdir(parents=True)
    (run / "nodes" / "broker-1" / "broker.log").write_text("{}\n")
    return run


def test_report_is_self_contained_and_verdict_first(tmp_path):
    html = render_report(_make_run(tmp_path)).read_text()
    # plotly.js is inline; nothing is loaded from elsewhere (its bundle merely names a CDN for
    # map topologies, which these plots never use).
    assert "Plotly.newPlot" in html and "<script src" not in html and "<link" not in html
    assert html.index('id="verdict"') < html.index('id="anomalies"') < html.index("plot-latency")
    assert "INVALID" in html
    assert 'href="nodes/broker-1/broker.log"' in html


def test_every_history_value_is_escaped(tmp_path):
    html = render_report(_make_run(tmp_path)).read_text()
    assert "<script>alert(1)" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in html  # shown, as text


def test_anomaly_example_names_the_fault_active_at_the_time(tmp_path):
    html = render_report(_make_run(tmp_path)).read_text()
    row = html[html.index("lost-write"):]
    assert "none" in row[:3000]  # the lost write was acked before the kill started


def test_fault_windows_pair_start_and_stop():
    hist = [Op("info", "start-kill", "nemesis", {}, time=1_000_000_000),
            Op("info", "stop-kill", "nemesis", {}, time=3_000_000_000),
            Op("info", "start-pause", "nemesis", {}, time=4_000_000_000)]
    ws = fault_windows(hist)
    assert [(w.name, w.start_s, w.end_s) for w in ws] == [("kill", 1.0, 3.0), ("pause", 4.0, None)]


def test_unclean_recoveries_are_shown_as_potential_data_loss_before_the_anomalies(tmp_path):
    run = _make_run(tmp_path, valid=True)
    results = json.loads((run / "results.json").read_text())
    results["checkers"]["replicas"] = {"checker": "replicas", "valid": True, "anomalies": [], "stats": {},
                                       "details": {"unclean_recoveries": [
                                           {"topic": "queue", "partition": 3, "leader": 2, "strategy": EVIL,
                                            "leader_epoch": 7, "candidates": {"2": [4, 120]}}]}}
    (run / "results.json").write_text(json.dumps(results))
    html = render_report(run).read_text()
    assert html.index('id="unclean-recoveries"') < html.index('id="anomalies"')
    box = html[html.index('id="unclean-recoveries"'):html.index('id="anomalies"')]
    assert "queue-3: broker 2" in box and "leader epoch 7" in box and "<script>alert" not in box
    (tmp_path / "clean").mkdir()
    assert 'id="unclean-recoveries"' not in render_report(_make_run(tmp_path / "clean")).read_text()
