"""Every Porcupine anchor history gets the verdict its MANIFEST.json expects (Porcupine's own Go tests),
and every non-linearizable one comes with a counterexample."""

import json
from pathlib import Path

import pytest

from kafkaesque_harness.checkers.formats.porcupine import parse_etcd_log, parse_kv_log
from kafkaesque_harness.checkers.linearizable import check_linearizable

ANCHORS = Path(__file__).resolve().parents[2].parent / "shared" / "anchors" / "porcupine"
MANIFEST = json.loads((ANCHORS / "MANIFEST.json").read_text()) if (ANCHORS / "MANIFEST.json").exists() else None


def cases():
    if MANIFEST is None:
        return [pytest.param(None, id="anchors-missing")]  # fails below: never skipped
    return [pytest.param(f, id=f["file"]) for f in MANIFEST["files"]]


@pytest.mark.parametrize("entry", cases())
def test_anchor_verdict_matches_porcupine(entry):
    assert MANIFEST is not None, f"the anchors are missing at {ANCHORS} (shared/ must sit beside the repo)"
    path = ANCHORS / entry["file"]
    if entry["model"] == "etcd":
        history, model = parse_etcd_log(path), "etcd"
    else:
        history, model = parse_kv_log(path), "kv"
    result = check_linearizable(history, model, time_limit=120)
    assert result.valid is entry["expected_linearizable"], entry["file"]
    if result.valid is False:
        ce = result.details["counterexample"]
        assert ce["text"] and ce["culprit"]["op_index"] >= 0
