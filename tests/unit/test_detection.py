"""The detection table (studies/detection.py) from a campaign's record: counts per row, anomaly names,
median time to the first anomalous op, stalled scenarios and budget-skipped runs kept apart."""

import json
from pathlib import Path

from kafkaesque_harness.studies.detection import first_anomaly_s, render_markdown, summarize, write_detection


def run(tmp_path, i, variant, plan, status, first_ns=None, stalled=False, protocol_wait=False, acks="all",
        flush="never", time_limit=60, anomaly="lost-write", workload=None):
    d = tmp_path / f"run{i}"
    d.mkdir()
    anomalies = []
    if first_ns is not None:
        anomalies = [{"name": anomaly, "count": 1, "examples": [
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
    spec = {"broker_variant": variant, "acks": acks, "flush_policy": flush, "nemesis": plan.split(","),
            "time_limit": time_limit}
    if workload is not None:  # a record without it is the queue workload's (campaigns before the txn workload)
        spec["workload"] = workload
    return {"spec": spec,
            "status": status, "run_dir": str(d),
            "anomalies": [{"name": a["name"]} for a in anomalies]}


def campaign(tmp_path, runs=None, min_isr=2, name="t"):
    runs = runs if runs is not None else [
        run(tmp_path, 0, "default", "scenario:x", "valid"),
        run(tmp_path, 1, "default", "scenario:x", "valid"),
        run(tmp_path, 2, "no-elr", "scenario:x", "invalid", first_ns=30_000_000_000),
        run(tmp_path, 3, "no-elr", "scenario:x", "invalid", first_ns=10_000_000_000),
        run(tmp_path, 4, "no-elr", "scenario:x", "valid", stalled=True),
        {"spec": {"broker_variant": "no-elr", "acks": "all", "flush_policy": "never", "nemesis": ["protocol"],
                  "time_limit": 60}, "status": "skipped", "run_dir": None, "anomalies": []}]
    return {"name": name, "source": f"{name}.toml", "started": "now", "duration_s": 1, "cluster": "local",
            "matrix": {"repetitions": 3, "settings": {"time_limit": 60, "min_isr": min_isr}}, "runs": runs}


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
    rows = {(r.variant, r.plan): r for r in summarize([campaign(tmp_path)])}
    d = rows[("default", "scenario:x")]
    assert (d.runs, d.found, d.median_first_s) == (2, 0, None)
    n = rows[("no-elr", "scenario:x")]
    assert (n.runs, n.found, n.stalled, sorted(n.anomalies), n.median_first_s) == (3, 2, 1, ["lost-write"], 20.0)
    assert n.beyond_default == ["lost-write"]
    p = rows[("no-elr", "protocol")]
    assert (p.runs, p.not_run, p.beyond_default) == (0, 1, None)  # no default protocol row to compare with


def test_campaigns_with_the_same_cell_add_up_and_other_settings_stay_apart(tmp_path):
    a = campaign(tmp_path / "a", [run(tmp_path, 10, "no-elr", "protocol", "invalid", first_ns=1, time_limit=300),
                                  run(tmp_path, 11, "no-elr", "protocol", "valid", time_limit=300)])
    b = campaign(tmp_path / "b", [run(tmp_path, 12, "no-elr", "protocol", "invalid", first_ns=2, time_limit=300),
                                  run(tmp_path, 13, "no-elr", "protocol", "invalid", first_ns=3, time_limit=60)])
    c = campaign(tmp_path / "c", [run(tmp_path, 14, "no-elr", "protocol", "valid", time_limit=300)], min_isr=1)
    rows = {(r.plan, r.time_limit, r.min_isr): r for r in summarize([a, b, c])}
    assert (rows[("protocol", 300.0, 2)].runs, rows[("protocol", 300.0, 2)].found) == (3, 2)
    assert rows[("protocol", 60.0, 2)].runs == 1 and rows[("protocol", 300.0, 1)].runs == 1


def test_beyond_default_names_only_what_the_default_never_showed_in_the_same_row(tmp_path):
    rows = summarize([campaign(tmp_path, [
        run(tmp_path, 0, "default", "scenario:x", "invalid", first_ns=1, acks="1"),
        run(tmp_path, 1, "no-elr", "scenario:x", "invalid", first_ns=1, acks="1"),
        run(tmp_path, 2, "no-elr", "scenario:y", "invalid", first_ns=1, acks="1", anomaly="log-divergence"),
        run(tmp_path, 3, "default", "scenario:y", "invalid", first_ns=1, acks="1")])])
    by = {(r.variant, r.plan): r for r in rows}
    assert by[("no-elr", "scenario:x")].beyond_default == []          # acks=1 loses writes anyway
    assert by[("no-elr", "scenario:y")].beyond_default == ["log-divergence"]


def test_markdown_names_the_command_and_the_default_rows_first(tmp_path):
    md = render_markdown([campaign(tmp_path)], "kafkaesque detect x.toml")
    assert "`kafkaesque detect x.toml`" in md
    table = md.split("## Every row")[1]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]  # after the header
    assert rows[0].startswith("| default")
    assert "| no-elr | queue | all | never | 2 | `scenario:x` | 60 s | 3 | 2/3 (9.4%-99%) | lost-write | lost-write | 20.0 |" in md
    assert "Met within what 2 runs can say: 0 of 2 runs: rate below 78% (95%)" in md


def test_the_claims_are_judged_from_the_rows(tmp_path, monkeypatch):
    import kafkaesque_harness.studies.detection as det
    monkeypatch.setattr(det, "scenario_targets", lambda: {"scenario:x": ("no-elr",), "scenario:z": ("no-elr",)})
    runs = [run(tmp_path, 0, "default", "scenario:x", "invalid", first_ns=1),
            run(tmp_path, 1, "no-elr", "scenario:x", "invalid", first_ns=1),
            run(tmp_path, 2, "no-elr", "scenario:z", "valid")]
    runs += [run(tmp_path, 10 + i, "no-elr", "protocol", "invalid" if i < 4 else "valid", first_ns=1, time_limit=300)
             for i in range(5)]
    runs += [run(tmp_path, 20 + i, "no-elr", "kill,partition", "invalid" if i < 1 else "valid", first_ns=1,
                 time_limit=300) for i in range(5)]
    runs += [run(tmp_path, 30 + i, "truncate-to-hw", "protocol", "invalid" if i < 3 else "valid", first_ns=1,
                 time_limit=300) for i in range(5)]
    runs += [run(tmp_path, 40 + i, "truncate-to-hw", "kill,partition", "invalid", first_ns=1, time_limit=300)
             for i in range(5)]
    md = render_markdown([campaign(tmp_path, runs)], "kafkaesque detect")
    assert "**Not met**: 1 of 1 runs (100%, 95% CI 2.5%-100%) found an anomaly not wholly a client library's" in md
    assert "**Not met** in: `no-elr` by `scenario:z` (min ISR 2: 0/1)" in md  # a targeting scenario missed
    assert ("| no-elr | queue | 4 of 5 runs (80%, 95% CI 28%-99%) | 0.0 | 1 of 5 runs (20%, 95% CI 0.51%-72%) | 0.0 | "
            "meets 80% (but 5 runs cannot show it: the interval reaches down to 28%); random does worse |") in md
    assert ("| truncate-to-hw | queue | 3 of 5 runs (60%, 95% CI 15%-95%) | 0.0 | 5 of 5 runs (100%, 95% CI 48%-100%) | 0.0 | "
            "**below 80%**; random does as well |") in md


def test_write_detection_from_campaign_dirs_with_notes(tmp_path):
    for name in ("c", "d"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "campaign.json").write_text(json.dumps(campaign(tmp_path, [], name=name)))
    out = write_detection([tmp_path / "c", tmp_path / "d"], tmp_path / "docs" / "DETECTION.md", "kafkaesque detect",
                          notes="## Notes\n\nby hand")
    text = out.read_text()
    assert text.startswith("# Detection table") and "from 2 campaign(s)" in text and text.endswith("by hand\n")


def test_a_protocol_move_that_waits_in_vain_is_not_a_stalled_run(tmp_path):
    from kafkaesque_harness.studies.detection import _stalled

    assert _stalled(Path(run(tmp_path, 0, "no-elr", "scenario:x", "valid", stalled=True)["run_dir"]))
    assert not _stalled(Path(run(tmp_path, 1, "no-elr", "protocol", "valid", protocol_wait=True)["run_dir"]))


def test_workloads_make_rows_of_their_own(tmp_path):
    """The same plan on the same variant under the queue and the txn workload are two rows: the default
    broker's txn runs are compared with its txn runs, and each workload's protocol rate is its own."""
    runs = [run(tmp_path, 0, "default", "protocol", "valid", time_limit=300),
            run(tmp_path, 1, "default", "protocol", "invalid", first_ns=1, time_limit=300, workload="txn",
                anomaly="G1a"),
            run(tmp_path, 2, "zombie-not-fenced", "protocol", "invalid", first_ns=1, time_limit=300, workload="txn",
                anomaly="G1a")]
    rows = {(r.variant, r.workload): r for r in summarize([campaign(tmp_path, runs)])}
    assert rows[("default", "queue")].found == 0 and rows[("default", "txn")].found == 1
    assert rows[("zombie-not-fenced", "txn")].beyond_default == []  # the txn default showed G1a too
    md = render_markdown([campaign(tmp_path, runs)], "kafkaesque detect")
    assert "- `protocol` (txn) (acks=all, flush never, min ISR 2, 300 s): 1 of 1 runs (100%, 95% CI 2.5%-100%), G1a" in md
    assert "| zombie-not-fenced | txn | 1 of 1 runs (100%, 95% CI 2.5%-100%) |" in md


def test_a_section_is_replaced_and_the_rest_of_the_page_kept(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "campaign.json").write_text(json.dumps(campaign(tmp_path, [
        run(tmp_path, 0, "zombie-not-fenced", "protocol", "invalid", first_ns=2_000_000_000, time_limit=300,
            workload="txn")], name="txn-rates")))
    page = tmp_path / "DETECTION.md"
    page.write_text("# Detection table\n\nthe replication rows, by hand\n")
    ledger = tmp_path / "DETECTION-runs.jsonl"
    write_detection([tmp_path / "c"], page, "kafkaesque detect --section txn", section="txn", ledger=ledger)
    first = page.read_text()
    assert first.startswith("# Detection table\n\nthe replication rows, by hand\n")
    assert "## Transactions and consumer groups" in first and "#### 1. The default broker" in first
    # the section judges the scenarios it ran: none here, so no replication scenario is "not run" in it
    assert "scenario:zombie-follower" not in first and "not run at acks=all" not in first
    # rendered again from the ledger alone (the run dirs gone): the same section, once, the page's head kept
    import shutil

    shutil.rmtree(tmp_path / "run0")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "campaign.json").write_text(json.dumps(campaign(tmp_path, [], name="none")))
    write_detection([tmp_path / "empty"], page, "kafkaesque detect --section txn", section="txn", ledger=ledger)
    again = page.read_text()
    assert again.count("## Transactions and consumer groups") == 1
    assert again.startswith("# Detection table\n\nthe replication rows, by hand\n")
    assert "| zombie-not-fenced | txn | all | never | 2 | `protocol` | 300 s | 1 | 1/1 (2.5%-100%) | lost-write |  | 2.0 |" in again
    assert len(ledger.read_text().splitlines()) == 2  # both campaigns, each once


def test_claim_1_counts_against_the_broker_only_runs_whose_anomalies_a_client_library_does_not_explain(tmp_path):
    # the claim-1 campaign's kafka-python txn runs: every unseen write follows from kafka-python committing a
    # transaction after its own send failed (checkers/clients.py's whose: client); the broker is not judged by them
    def txn_run(i, status, whose):
        r = run(tmp_path, i, "default", "kill", status, first_ns=1 if status == "invalid" else None, workload="txn")
        if status == "invalid":
            r["anomalies"] = [{"name": "unseen", "count": 3, **({"whose": whose} if whose is not None else {})}]
        return r
    clients = campaign(tmp_path, [txn_run(0, "invalid", {"client": 3}), txn_run(1, "valid", None)])
    clients["matrix"]["settings"]["client"] = "kafka-python"
    md = render_markdown([clients], "kafkaesque detect")
    assert "Met within what 2 runs can say: 0 of 2 runs: rate below 78% (95%) with an anomaly of the broker's" in md
    assert ("not counted against the broker: 1 of 2 runs (50%, 95% CI 1.3%-99%), in `kill` (txn): 1 of 2 runs "
            "(50%, 95% CI 1.3%-99%), unseen (kafka-python)") in md
    # one instance the client does not explain (or a record without `whose`) counts against the broker
    for i, whose in ((2, {"client": 2}), (3, None)):
        md = render_markdown([campaign(tmp_path, [txn_run(i, "invalid", whose)])], "kafkaesque detect")
        assert "**Not met**: 1 of 1 runs (100%, 95% CI 2.5%-100%) found an anomaly not wholly a client library's" in md


def test_a_run_checked_again_after_a_checker_fix_counts_with_its_new_verdict_and_says_so(tmp_path):
    from kafkaesque_harness.studies.detection import load_campaign_docs

    r = run(tmp_path, 0, "default", "kill", "invalid", first_ns=1, anomaly="lost-commit")
    # `kafkaesque analyze` rewrote its results.json after the fix: valid now
    (Path(r["run_dir"]) / "results.json").write_text(json.dumps({"valid": True, "checkers": {"queue": {"anomalies": []}}}))
    cdir = tmp_path / "campaign"
    cdir.mkdir()
    (cdir / "campaign.json").write_text(json.dumps(campaign(tmp_path, [r])))
    (doc,) = load_campaign_docs([cdir])
    assert doc["runs"][0]["status"] == "valid"
    assert doc["runs"][0]["reanalysed"] == {"first_status": "invalid", "first_anomalies": ["lost-commit"]}
    md = render_markdown([doc], "kafkaesque detect")
    assert "Met within what 1 runs can say" in md
    assert "run0 (`kill`): first invalid (lost-commit), valid when re-checked" in md
    # a run whose results did not change is not marked
    same = run(tmp_path, 1, "default", "kill", "valid")
    (cdir / "campaign.json").write_text(json.dumps(campaign(tmp_path, [same])))
    assert "reanalysed" not in load_campaign_docs([cdir])[0]["runs"][0]


def test_claim_1_leaves_unknown_runs_out_and_claim_2_is_not_met_by_no_cells(tmp_path, monkeypatch):
    import kafkaesque_harness.studies.detection as det
    monkeypatch.setattr(det, "scenario_targets", lambda: {"scenario:x": ("no-elr",)})
    runs = [run(tmp_path, 0, "default", "kill", "valid"), run(tmp_path, 1, "default", "kill", "unknown")]
    md = render_markdown([campaign(tmp_path, runs)], "kafkaesque detect")
    assert "Met within what 1 runs can say: 0 of 1 runs" in md
    assert "Not counted: 1 run(s) whose verdict was unknown (`kill`: 1)." in md
    # a section (which judges only the scenarios it ran) with no scenario targeting a variant: claim 2 says so
    # instead of a vacuous "Met"
    md = render_markdown([campaign(tmp_path, runs)], "kafkaesque detect", level=2)
    assert "No scenario that targets a flaw variant ran in these campaigns." in md
    assert "Met: every targeted cell" not in md
