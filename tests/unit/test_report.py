"""The HTML report: self-contained, verdict first, anomalies with their ops and faults, everything escaped."""

import json

from kafkaesque_harness.checkers.queue import QUEUE_VALUES
from kafkaesque_harness.history import HistoryWriter, Op, pair_ops, read_history
from kafkaesque_harness.results.report import (
    fault_at,
    fault_windows,
    faults_during,
    first_screen_summary,
    render_report,
)

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
    # one plotly bundle, and the report's size is that bundle plus the run's own data
    from plotly.offline import get_plotlyjs

    assert html.count("* plotly.js v") == 1
    assert len(html.encode()) < len(get_plotlyjs().encode()) + 1_000_000


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


# --- the first screen: one line per anomaly type, and the lost writes with their faults and times ---

def _lost_write_run(tmp_path, valid=False):
    """A partition fault during which 42 is acknowledged at offset 5 of partition 0; a poll still
    sees it; after a kill a send of 99 is acknowledged at the same offset, and the final read has 99."""
    run = tmp_path / "lost"
    run.mkdir()
    (run / "test.json").write_text(json.dumps({"name": "queue", "workload": "queue", "nemesis": "partition,kill"}))
    s = 1_000_000_000
    w = HistoryWriter(run / "history.jsonl")
    w.append(Op("info", "start-partition", "nemesis", {"isolate": "broker-2"}, time=s // 2))
    w.append(Op("invoke", "send", 0, [0, 42], time=s - 1000))
    w.append(Op("ok", "send", 0, [0, [5, 42]], time=s))
    w.append(Op("invoke", "send", 3, [1, EVIL], time=s + 1000))
    w.append(Op("ok", "send", 3, [1, [2, EVIL]], time=s + 2000))
    w.append(Op("invoke", "poll", 1, None, time=2 * s - 1000))
    w.append(Op("ok", "poll", 1, {"0": [[5, 42]]}, time=2 * s))
    w.append(Op("info", "stop-partition", "nemesis", {}, time=3 * s))
    w.append(Op("info", "start-kill", "nemesis", {"kill": ["broker-1"]}, time=4 * s))
    w.append(Op("invoke", "send", 2, [0, 99], time=5 * s - 1000))
    w.append(Op("ok", "send", 2, [0, [5, 99]], time=5 * s))
    w.append(Op("info", "stop-kill", "nemesis", {}, time=6 * s))
    w.append(Op("invoke", "final-poll", 4, [0], time=8 * s - 1000))
    w.append(Op("ok", "final-poll", 4, [0, 7, [[5, 99]]], time=8 * s))
    w.close()
    sends = {"f": "send", "type": "ok", "process": 0}
    queue = {"checker": "queue", "valid": False, "anomaly_types": ["duplicate", "lost-write"], "stats": {},
             "anomalies": [
                 {"name": "duplicate", "count": 3, "explanation": "one value at two offsets",
                  "examples": [{"summary": "value 7 appears at offsets [1, 2] of partition 0"}]},
                 {"name": "lost-write", "count": 30, "explanation": "acked but never read",
                  "examples": [{"key": 0, "offset": 5, "value": 42, "summary": "send of 42 was lost",
                                "send": {**sends, "index": 2, "time": s, "value": [0, [5, 42]]}},
                               {"key": 1, "offset": 2, "value": EVIL, "summary": "send of " + EVIL,
                                "send": {**sends, "index": 4, "time": s + 2000, "value": [1, [2, EVIL]]}}]}]}
    results = {"valid": False, "checkers": {"queue": queue}}
    if valid:
        results = {"valid": True, "checkers": {"queue": {"checker": "queue", "valid": True, "anomalies": [],
                                                         "stats": {}}}}
    (run / "results.json").write_text(json.dumps(results))
    return run, results


def test_first_screen_summary_names_the_lost_writes_their_faults_and_times(tmp_path):
    run, results = _lost_write_run(tmp_path)
    history = read_history(run / "history.jsonl")
    summary = first_screen_summary(results, pair_ops(history), fault_windows(history), QUEUE_VALUES)
    assert [(x["name"], x["count"]) for x in summary["lines"]] == [("lost-write", 30), ("duplicate", 3)]
    assert summary["lines"][1]["text"] == "value 7 appears at offsets [1, 2] of partition 0"
    assert summary["lost_total"] == 30
    first, second = summary["lost"]
    # acknowledged under the partition; last seen by the poll at 2 s; gone by the send of 99 at
    # offset 5 at 5 s, with the partition (until 3 s) and the kill (from 4 s) in between
    assert (first["partition"], first["offset"], first["value"]) == (0, 5, "42")
    assert (first["acked_s"], first["acked_fault"]) == (1.0, "partition")
    assert (first["gone_from_s"], first["gone_to_s"]) == (2.0, 5.0)
    assert first["gone_fault"] == "partition, kill" and first["gone_by"] == "99 was acked at that offset later"
    # partition 1 has no final read and nothing else read offset 2: when it went is unknown
    assert second["gone_to_s"] is None and second["gone_fault"] == ""
    assert summary["lost_groups"][0].startswith("1 acknowledged at 1.00 s while partition was active; "
                                                "gone by 5.00 s, under partition, kill")
    assert "not known" in summary["lost_groups"][1]


def test_report_first_screen_comes_before_the_details_and_is_escaped(tmp_path):
    run, _ = _lost_write_run(tmp_path)
    html = render_report(run).read_text()
    assert html.index('id="verdict"') < html.index('id="summary-lines"') < html.index('id="lost-writes-table"') \
        < html.index('id="anomalies"') < html.index('id="plot-latency"') < html.index("<h2 id=\"test\">Test</h2>")
    table = html[html.index('id="lost-writes-table"'):html.index("</table>", html.index('id="lost-writes-table"'))]
    assert "<td>5</td>" in table and "1.00" in table and "2.00–5.00" in table and "partition, kill" in table
    assert "30 acknowledged write(s) lost" in html
    assert "<script>alert(1)" not in html and "&lt;/script&gt;&lt;script&gt;alert(1)" in table
    # the detailed sections list lost writes first too
    assert html.index("<h3>lost-write", html.index('id="anomalies"')) < \
        html.index("<h3>duplicate", html.index('id="anomalies"'))


def test_report_first_screen_of_a_valid_run_says_so_without_a_lost_write_table(tmp_path):
    run, results = _lost_write_run(tmp_path, valid=True)
    history = read_history(run / "history.jsonl")
    summary = first_screen_summary(results, pair_ops(history), fault_windows(history), QUEUE_VALUES)
    assert summary == {"lines": [], "lost": [], "lost_groups": [], "lost_total": 0}
    html = render_report(run).read_text()
    assert 'id="summary-valid"' in html and "No anomalies: queue found none, and the run proved" in html
    assert 'id="lost-writes-table"' not in html and "VALID" in html


def test_fault_windows_run_from_the_fault_applied_to_its_heal_or_the_final_heal():
    """From the fault records the ledger puts in the nemesis ops (history/faults.py): the rule the
    report and the pipeline share."""
    from kafkaesque_harness.nemesis.ledger import FaultLedger

    s, now = 1_000_000_000, [0]
    ledger = FaultLedger(clock=lambda: now[0])
    hist = []

    def op(f, at, act=lambda: None):
        now[0] = at * s
        out = act()
        hist.append(Op("info", f, "nemesis", {"faults": ledger.changes()}, time=at * s))
        return out

    def fault(kind, node):
        rec = ledger.request(kind, [node], "scenario:t")
        ledger.applied(rec)
        return rec

    cut = op("scenario-isolate", 2, lambda: fault("partition", "broker-2"))
    kill = op("scenario-kill", 3, lambda: fault("kill", "broker-1"))
    op("scenario-pause", 4, lambda: fault("pause", "broker-3"))
    op("scenario-heal", 5, lambda: ledger.healed(cut, True))
    op("scenario-start", 6, lambda: ledger.healed(kill, True))
    failed = ledger.request("kill", ["broker-2"], "kill")  # never applied: no window
    op("start-kill", 7, lambda: ledger.applied(failed, False, "no such process"))
    hist.append(Op("info", "heal", "nemesis", {"errors": []}, time=9 * s))
    ws = fault_windows(hist)
    assert [(w.name, w.start_s, w.end_s) for w in ws] == [
        ("partition broker-2", 2.0, 5.0), ("kill broker-1", 3.0, 6.0), ("pause broker-3", 4.0, 9.0)]
    assert fault_at(ws, 4.5) == "partition broker-2, kill broker-1, pause broker-3"
    assert faults_during(ws, 5.5, 7.0) == "kill broker-1, pause broker-3"


def test_histories_from_before_the_ledger_keep_their_start_stop_windows():
    s = 1_000_000_000
    hist = [Op("invoke", "start-kill", "nemesis", None, time=1 * s),
            Op("info", "start-kill", "nemesis", {"kill": ["broker-1"]}, time=2 * s),
            Op("info", "stop-kill", "nemesis", {"healed": ["broker-1"]}, time=5 * s),
            Op("info", "start-pause", "nemesis", {"pause": ["broker-2"]}, time=6 * s),
            Op("info", "heal", "nemesis", {"errors": []}, time=8 * s)]
    assert [(w.name, w.start_s, w.end_s) for w in fault_windows(hist)] == [("kill", 2.0, 5.0), ("pause", 6.0, 8.0)]


def test_the_report_takes_the_history_the_runner_already_read(tmp_path):
    run = _make_run(tmp_path)
    history = read_history(run / "history.jsonl")
    (run / "history.jsonl").unlink()  # not read again
    html = render_report(run, history).read_text()
    assert f"{len(history)} history events over 7.1 s" in html
    assert "partition 0 final HWM" in html  # the final read, as the queue workload's values read


def test_a_trace_violation_is_shown_with_the_trace_lines_that_prove_it(tmp_path):
    run = _make_run(tmp_path)
    results = json.loads((run / "results.json").read_text())
    results["checkers"]["trace"] = {"checker": "trace", "valid": False, "anomaly_types": ["ack-above-hwm"], "stats": {},
                                    "anomalies": [{"name": "ack-above-hwm", "count": 1, "explanation": "acked early",
                                                   "examples": [{"summary": "broker-2 acked 5..6 with the HWM at 5",
                                                                 "trace": [{"node": "broker-2", "line": 4242,
                                                                            "event": "produce_acked", "hwm": 5,
                                                                            "last": 6}]}]}]}
    (run / "results.json").write_text(json.dumps(results))
    html = render_report(run).read_text()
    section = html[html.index("ack-above-hwm"):]
    assert "broker-2 acked 5..6" in section and "<td>broker-2</td><td>4242</td><td>produce_acked</td>" in section


def test_the_first_screen_names_the_system_the_fault_plan_and_availability(tmp_path):
    from kafkaesque_harness.results.report import fault_plan_in_words, readable, system_under_test

    foreign = {"cluster": "/home/u/tansu.toml", "cluster_file": {"path": "/home/u/tansu.toml"},
               "node_versions": {"tansu-1": {"command": "tansu 0.6.0", "api_versions": "3.9"}}}
    assert system_under_test(foreign)[0] == "tansu 0.6.0"
    assert "described by tansu.toml" in system_under_test(foreign)[1]
    assert system_under_test({"broker_variant": "no-elr", "cluster": "local"})[0] == "the reference broker (no-elr)"
    plan = fault_plan_in_words({"nemesis": ["scenario:zombie-leader", "kill"], "nemesis_interval": 5,
                                "nemesis_target": "random-node"})
    assert plan == ("the scenario zombie-leader; with kill at random (overlapping), a start or a stop about every "
                    "5 s, each on a random node")
    assert fault_plan_in_words({"nemesis": []}).startswith("none")
    # a one-broker system: every target is that broker, said so
    assert fault_plan_in_words({"nemesis": ["kill"], "brokers": 1}).endswith("each on the only broker")
    assert fault_plan_in_words({"nemesis": ["kill"], "brokers": 3}).endswith("a majority or every broker")
    # a foreign system's verdict rests on the client-side checkers, and its first screen says so
    assert "client-side checkers only" in system_under_test(foreign)[1]
    assert "client-side" not in system_under_test({"cluster": "local"})[1]
    assert readable({"process": "down", "probes": {"broker-2": "timeout"}}) == "process: down; probes: broker-2: timeout"
    run = _make_run(tmp_path)
    html = render_report(run).read_text()
    assert 'id="sut"' in html and 'id="fault-plan"' in html and 'id="availability"' in html
    assert 'href="#anomaly-queue-lost-write"' in html and 'id="anomaly-queue-lost-write"' in html
    for section in ("#faults", "#reached", "#plots", "#timeline"):
        assert f'href="{section}"' in html and f'id="{section[1:]}"' in html
