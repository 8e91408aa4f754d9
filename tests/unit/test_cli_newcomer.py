"""A newcomer's first day (issue 39 item 3): the CLI follows pytest's, docker's and kubectl's conventions
(-h, -V, help readable at 80 columns, flags of one name), lists every fault and scenario as JSON, filters
`ls`, refuses a mistyped run id, writes the report `analyze` names, reads an uncollected run's traces, and
refuses a history whose indexes repeat or go back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kafkaesque_harness.harness.cli import app
from kafkaesque_harness.history import HistoryWriter, Op

runner = CliRunner()


def _commands(command, path=()):
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


def test_every_commands_help_is_readable_at_80_columns_with_no_typer_artefacts():
    root = typer.main.get_command(app)
    paths = [p for p, _ in _commands(root)]
    assert ("run",) in paths and ("pipeline", "check") in paths
    for path in paths:
        r = runner.invoke(app, [*path, "-h"], env={"COLUMNS": "80"}, terminal_width=80)
        assert r.exit_code == 0, (path, r.output)
        text = r.output
        assert "…" not in text, (path, text)  # no option or variant name cut short
        assert "--no-no-" not in text and not re.search(r"<(bool|str|int|float|path|list\[str\])>|\{\w+\}", text), \
            (path, text)
        assert all(len(line) <= 80 for line in text.splitlines()), (path, max(text.splitlines(), key=len))


def test_dash_h_and_dash_v_at_the_top():
    assert runner.invoke(app, ["-V"]).output.startswith("kafkaesque ")
    top = runner.invoke(app, ["-h"])
    assert top.exit_code == 0 and "-h, --help" in top.output and "130 interrupted" in " ".join(top.output.split())


def test_faults_json_lists_every_fault_and_every_scenario():
    from kafkaesque_harness.nemesis.kinds import all_kinds
    from kafkaesque_harness.nemesis.scenarios import SCENARIOS

    r = runner.invoke(app, ["faults", "--json"])
    doc = json.loads(r.output)
    assert {f["name"] for f in doc["faults"]} == set(all_kinds())
    assert {s["name"] for s in doc["scenarios"]} == {f"scenario:{n}" for n in SCENARIOS}
    assert all(f["help"] for f in doc["faults"]) and all(s["help"] for s in doc["scenarios"])
    assert "scenario:zombie-leader" in runner.invoke(app, ["faults"]).output


def _stored(store: Path, test: str, stamp: str, valid) -> Path:
    run = store / test / stamp
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps({"name": test, "workload": "queue", "nemesis": ["kill"]}))
    (run / "results.json").write_text(json.dumps({"valid": valid, "checkers": {}}))
    return run


def test_ls_filters_by_verdict_and_name_and_keeps_the_newest_n(tmp_path):
    store = tmp_path / "store"
    _stored(store, "queue-kill", "20261127T100000", True)
    _stored(store, "queue-kill", "20261127T110000", False)
    _stored(store, "txn-pause", "20261127T120000", "unknown")
    _stored(store, "queue-pause", "20261127T130000", False)

    def ls(*args):
        r = runner.invoke(app, ["ls", "--store", str(store), "--json", *args])
        assert r.exit_code == 0, r.output
        return [(x["test"], x["started"]) for x in json.loads(r.output)]

    assert ls("--verdict", "invalid") == [("queue-pause", "20261127T130000"), ("queue-kill", "20261127T110000")]
    assert ls("--verdict", "unknown") == [("txn-pause", "20261127T120000")]
    assert ls("--name", "queue", "--last", "2") == [("queue-pause", "20261127T130000"),
                                                     ("queue-kill", "20261127T110000")]
    bad = runner.invoke(app, ["ls", "--store", str(store), "--verdict", "maybe"])
    assert bad.exit_code == 3 and "unknown --verdict 'maybe'" in bad.output


def test_cleanup_of_an_unknown_run_id_is_exit_3_with_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))
    r = runner.invoke(app, ["cleanup", "--run", "no-such-run-1234"])
    assert r.exit_code == 3 and "no run 'no-such-run-1234' is registered on this machine" in " ".join(r.output.split())


def test_analyze_writes_the_report_it_names(tmp_path):
    run = _stored(tmp_path / "store", "queue", "20261127T100000", True)
    (run / "results.json").unlink()  # a crashed run: no results, no report
    with HistoryWriter(run / "history.jsonl") as w:
        w.append(Op("invoke", "send", 0, [0, 1], time=1))
        w.append(Op("ok", "send", 0, [0, [0, 1]], time=2))
    r = runner.invoke(app, ["analyze", str(run)])
    assert "report:" in r.output
    named = Path(re.search(r"report: (\S+report\.html)", " ".join(r.output.split()))[1])
    assert named.exists() and named.stat().st_size > 10_000


def test_an_uncollected_runs_traces_are_read_where_the_nodes_wrote_them(tmp_path):
    from kafkaesque_harness.clusters.trace_files import load_traces

    run = tmp_path / "run"
    (run / "data" / "broker-1").mkdir(parents=True)  # the harness died before collecting into nodes/
    (run / "data" / "broker-1" / "trace.jsonl").write_text(json.dumps({"event": "trace_started"}) + "\n")
    (run / "nodes" / "broker-2").mkdir(parents=True)
    (run / "nodes" / "broker-2" / "trace.jsonl").write_text(json.dumps({"event": "trace_started"}) + "\n")
    nodes = load_traces(run, ["broker-1", "broker-2", "broker-3"])["nodes"]
    assert nodes["broker-1"]["where"] == "data/broker-1/trace.jsonl" and nodes["broker-1"]["lines"]
    assert nodes["broker-2"]["where"] == "nodes/broker-2/trace.jsonl" and nodes["broker-2"]["lines"]
    assert nodes["broker-3"]["why"] == "the file is missing"


@pytest.mark.parametrize("edit", ["repeat", "backwards"])
def test_a_history_whose_indexes_repeat_or_go_back_is_refused_with_its_line(tmp_path, edit):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        for i in range(4):
            w.append(Op("invoke", "send", i, [0, i], time=2 * i))
            w.append(Op("ok", "send", i, [0, [i, i]], time=2 * i + 1))
    lines = path.read_text().splitlines()
    lines = lines[:3] + [lines[2]] + lines[3:] if edit == "repeat" else lines[:2] + [lines[3], lines[2]] + lines[4:]
    path.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["check", str(path), "--model", "queue"])
    said = " ".join(r.output.split())
    assert r.exit_code == 3 and "line 4: index" in said and "restore the history from a copy" in said, said
