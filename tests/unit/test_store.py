"""The store layout: run dirs, the latest link, ls ordering, and an unwritable store."""

import json
import os

import pytest

from kafkaesque_harness.results.store import StoreError, create_run_dir, list_runs


def test_run_dirs_and_latest_link(tmp_path):
    a = create_run_dir(tmp_path, "queue")
    b = create_run_dir(tmp_path, "queue")
    assert a != b and a.parent == b.parent == tmp_path / "queue"
    assert os.readlink(tmp_path / "queue" / "latest") == b.name


def test_ls_lists_newest_first_with_verdicts(tmp_path):
    runs = [create_run_dir(tmp_path, "queue") for _ in range(3)]
    for i, r in enumerate(runs):
        (r / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": ["kill"]}))
        (r / "results.json").write_text(json.dumps({"valid": i != 1, "checkers": {
            "queue": {"anomaly_types": ["lost-write"] if i == 1 else []}}}))
    listed = list_runs(tmp_path)
    assert [r.path for r in listed] == list(reversed(runs))
    assert [r.valid for r in listed] == [True, False, True]
    assert listed[1].anomalies == ["lost-write"]


def test_ls_says_which_runs_were_simulated(tmp_path):
    real, simulated = create_run_dir(tmp_path, "queue"), create_run_dir(tmp_path, "sim-queue")
    (real / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": []}))
    (simulated / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": [], "simulated": True}))
    workloads = {r.path: r.workload for r in list_runs(tmp_path)}
    assert workloads == {real: "queue", simulated: "queue (simulated)"}


def test_unwritable_store_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="pass a writable --store directory"):
        create_run_dir(blocker, "queue")


def test_ls_survives_json_that_is_not_an_object(tmp_path):
    """A hand-edited or foreign run dir: test.json or results.json valid JSON but not an object, or a
    checker entry of the wrong shape. The listing skips or marks it; it never ends in a traceback."""
    odd_test, odd_results, odd_checkers, good = (create_run_dir(tmp_path, "queue") for _ in range(4))
    (odd_test / "test.json").write_text("[1, 2]")
    for r in (odd_results, odd_checkers, good):
        (r / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": ["kill"]}))
    (odd_results / "results.json").write_text('"valid"')
    (odd_checkers / "results.json").write_text(json.dumps({"valid": False, "checkers": {"queue": 5, "x": {
        "anomaly_types": "lost-write"}}}))
    (good / "results.json").write_text(json.dumps({"valid": True, "checkers": {}}))
    listed = {r.path: r for r in list_runs(tmp_path)}
    assert odd_test not in listed
    assert listed[odd_results].valid == "unreadable"
    assert listed[odd_checkers].valid is False and listed[odd_checkers].anomalies == []
    assert listed[good].valid is True
