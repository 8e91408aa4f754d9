"""`kafkaesque check`: any history file, the right exit code, one sentence for bad input."""

import json
from pathlib import Path

from typer.testing import CliRunner

from kafkaesque_harness.harness.cli import app
from kafkaesque_harness.history import HistoryWriter, Op

runner = CliRunner()
ANCHORS = Path(__file__).resolve().parents[2].parent / "shared" / "anchors" / "porcupine"


def test_porcupine_nonlinearizable_history_exits_1_with_a_counterexample():
    r = runner.invoke(app, ["check", str(ANCHORS / "jepsen" / "etcd_000.log"), "--format", "porcupine-etcd"])
    assert r.exit_code == 1
    assert "cannot be placed" in r.output and '"valid": false' in r.output


def test_porcupine_linearizable_history_exits_0():
    r = runner.invoke(app, ["check", str(ANCHORS / "kv" / "c10-ok.txt"), "--format", "porcupine-kv"])
    assert r.exit_code == 0


def test_our_queue_history_with_a_lost_write_exits_1(tmp_path):
    with HistoryWriter(tmp_path / "h.jsonl") as w:
        for op in (Op("invoke", "send", 0, [0, 1]), Op("ok", "send", 0, [0, [0, 1]]),
                   Op("invoke", "final-poll", 1, [0]), Op("ok", "final-poll", 1, [0, 0, []])):
            w.append(op)
    r = runner.invoke(app, ["check", str(tmp_path / "h.jsonl")])
    assert r.exit_code == 1 and "lost-write" in r.output


def test_bad_input_is_one_sentence(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "ok", "f": "x", "process": 0}\nnot json\n{"type": "ok", "f": "x", "process": 0}\n')
    r = runner.invoke(app, ["check", str(bad)])
    assert r.exit_code == 3 and "line 2: not valid JSON" in r.output
    r = runner.invoke(app, ["check", str(bad), "--format", "xml"])
    assert r.exit_code == 3 and "unknown format 'xml'; valid:" in r.output
    r = runner.invoke(app, ["check", str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 3 and "does not exist" in r.output


def test_unmatched_invocations_are_still_checked(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_text("\n".join(json.dumps(d) for d in [
        {"index": 0, "type": "invoke", "f": "write", "process": 0, "value": 1},
        {"index": 1, "type": "invoke", "f": "read", "process": 1, "value": None},
        {"index": 2, "type": "ok", "f": "read", "process": 1, "value": 1}]) + "\n")
    r = runner.invoke(app, ["check", str(p), "--model", "register"])
    assert r.exit_code == 0  # the open write may have happened before the read
