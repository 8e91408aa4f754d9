"""Generated documents name stores, campaigns and runs by their place in the store or by name, never by an
absolute path of the machine that made them (issue 37 item 6): DETECTION.md's and MUTATION.md's command
lines, a run's report, a campaign's index page and JUnit file."""

from __future__ import annotations

import json

from kafkaesque_harness.results.campaign_report import junit_xml, render_index
from kafkaesque_harness.results.report import render_report
from kafkaesque_harness.results.store import command_as_shown, store_relative
from tests.unit.test_report import _make_run


def test_a_stored_run_or_campaign_is_named_by_its_place_in_the_store():
    assert store_relative("/srv/x/store/queue/20261127T201413") == "queue/20261127T201413"
    assert store_relative("/srv/x/store/campaigns/nightly/20261127T201413") == "campaigns/nightly/20261127T201413"
    assert store_relative("/srv/x/elsewhere/notes.md") == "notes.md"


def test_a_documents_command_line_names_no_path_of_this_machine(tmp_path):
    store = tmp_path / "detect-store"
    (store / "campaigns").mkdir(parents=True)
    campaign = store / "campaigns" / "detection-core" / "20261124T205108"
    argv = ["kafkaesque", "detect", "--from-campaign", str(campaign), "--notes", "docs/DETECTION-notes.md",
            f"--store={store}", "--out", "docs/DETECTION.md"]
    shown = command_as_shown(argv)
    assert shown == ("kafkaesque detect --from-campaign STORE/campaigns/detection-core/20261124T205108 "
                     "--notes docs/DETECTION-notes.md --store=STORE --out docs/DETECTION.md")
    assert str(tmp_path) not in shown


def test_a_report_shows_its_run_and_store_by_their_place_and_name(tmp_path):
    run = _make_run(tmp_path)
    test = json.loads((run / "test.json").read_text())
    test.update(run_dir=str(tmp_path / "store" / "queue" / "20261127T201413"), store=str(tmp_path / "store"))
    (run / "test.json").write_text(json.dumps(test))
    html = render_report(run).read_text()
    assert str(tmp_path) not in html
    assert "queue/20261127T201413" in html


def test_a_campaigns_index_and_junit_name_no_path_of_this_machine(tmp_path):
    run_dir = tmp_path / "store" / "queue" / "20261127T201413"
    run_dir.mkdir(parents=True)
    (run_dir / "report.html").write_text("<html></html>")
    campaign_dir = tmp_path / "store" / "campaigns" / "nightly" / "20261127T201500"
    campaign_dir.mkdir(parents=True)
    record = {"id": "queue|kill|default|acks=all|flush=never|rep1", "index": 0, "repetition": 1, "status": "invalid",
              "row": "queue|kill", "column": "default|acks=all|flush=never", "spec": {"seed": 3},
              "run_dir": str(run_dir), "duration_s": 61.0,
              "anomalies": [{"name": "lost-write", "count": 1, "checker": "queue", "examples": []}]}
    doc = {"name": "nightly", "source": str(tmp_path / "campaigns" / "nightly.toml"), "cluster": "local",
           "store": str(tmp_path / "store"), "started": "2026-11-27T20:15:00", "finished": "", "duration_s": 61.0,
           "planned": 1, "exit_code": 1, "runs": [record], "rows": ["queue|kill"],
           "columns": ["default|acks=all|flush=never"], "requirements": [], "counts": {}}
    for text in (junit_xml(doc), render_index(doc, campaign_dir)):
        assert str(tmp_path) not in text
    assert "queue/20261127T201413/report.html" in junit_xml(doc)
    assert "nightly.toml" in render_index(doc, campaign_dir)
