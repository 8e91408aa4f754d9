"""The CLI's conventions (issue 27): --version, doctor with its fixes and exit status, --json on ls, check,
analyze and cleanup --dry-run, and a stored run of a newer store format refused by name."""

from __future__ import annotations

import json
from importlib import metadata

from typer.testing import CliRunner

import kafkaesque_harness.harness.doctor as doctor
from kafkaesque_harness.harness.cli import app
from kafkaesque_harness.history import HistoryWriter, Op
from kafkaesque_harness.history.extras import DIST
from kafkaesque_harness.results.store import STORE_FORMAT

runner = CliRunner()


def test_version_prints_the_installed_distributions_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"kafkaesque {metadata.version(DIST)}"


def test_doctor_lists_each_finding_with_its_fix_and_exits_by_whether_the_default_cluster_can_run(monkeypatch):
    r = runner.invoke(app, ["doctor", "--json"])
    found = json.loads(r.output)
    names = [f["name"] for f in found["findings"]]
    for expected in ("docker engine", "root", "network namespaces", "iptables", "tc", "fuse", "java 17+",
                     "free ports"):
        assert expected in names
    assert all(f["fix"] for f in found["findings"] if not f["ok"])  # every missing part says how to get it
    assert r.exit_code == (0 if found["can_run"] else 3)
    # a machine where neither the engine answers nor a port can be bound: the default cluster cannot run
    monkeypatch.setattr(doctor, "_docker", lambda: [doctor.Finding("docker engine", False, "no engine", "start it")])
    monkeypatch.setattr(doctor, "_ports", lambda: doctor.Finding("free ports", False, "EMFILE", "ulimit -n"))
    r = runner.invoke(app, ["doctor"])
    assert r.exit_code == 3 and "the default cluster cannot run here" in r.output
    assert "start it" in r.output and "ulimit -n" in r.output
    monkeypatch.setattr(doctor, "_ports", lambda: doctor.Finding("free ports", True, "ok"))
    assert json.loads(runner.invoke(app, ["doctor", "--json"]).output)["default_cluster"].startswith("local")


def _stored_run(store, fmt=STORE_FORMAT):
    run = store / "queue" / "20260101T000000"
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps({"name": "queue", "workload": "queue", "nemesis": ["kill"],
                                               "partitions": 1, "store_format": fmt}))
    w = HistoryWriter(run / "history.jsonl")
    w.append(Op("invoke", "send", 0, [0, 1]))
    w.append(Op("ok", "send", 0, [0, [0, 1]]))
    w.close()
    return run


def test_ls_and_analyze_speak_json(tmp_path):
    run = _stored_run(tmp_path / "store")
    r = runner.invoke(app, ["analyze", str(run), "--json"])
    results = json.loads(r.output)
    assert results["store_format"] == STORE_FORMAT and "checkers" in results and r.exit_code in (0, 1, 2)
    assert results["checked_by"] == f"{DIST} {metadata.version(DIST)}"
    listed = json.loads(runner.invoke(app, ["ls", "--store", str(tmp_path / "store"), "--json"]).output)
    assert [x["path"] for x in listed] == [str(run)] and listed[0]["valid"] == results["valid"]
    assert json.loads(runner.invoke(app, ["ls", "--store", str(tmp_path / "empty"), "--json"]).output) == []


def test_a_run_in_a_newer_store_format_is_refused_not_misread(tmp_path):
    run = _stored_run(tmp_path / "store", fmt=STORE_FORMAT + 1)
    r = runner.invoke(app, ["analyze", str(run)])
    assert r.exit_code == 3 and f"store format {STORE_FORMAT + 1}, newer than this kafkaesque reads" in \
        " ".join(r.output.split())
    assert not (run / "results.json").exists()


def test_check_json_prints_the_whole_results(tmp_path):
    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path)
    w.append(Op("invoke", "send", 0, [0, 1]))
    w.append(Op("ok", "send", 0, [0, [0, 1]]))
    w.append(Op("invoke", "poll", 1, None))
    w.append(Op("ok", "poll", 1, {"0": [[0, 2]]}))  # a value nobody sent: invalid
    w.close()
    r = runner.invoke(app, ["check", str(path), "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["valid"] is False and doc["checkers"]


def test_cleanup_json_needs_dry_run():
    r = runner.invoke(app, ["cleanup", "--json"])
    assert r.exit_code == 3 and "--json goes with --dry-run" in r.output
