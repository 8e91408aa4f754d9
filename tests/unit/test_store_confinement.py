"""The store keeps every run inside it (results/store.py, issue 20 item 3): a test name is one plain folder
name, and neither `..` nor a link in the name's place leads a run dir out of the store."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kafkaesque_harness.results.store import StoreError, create_run_dir


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", "/etc", "x/../../y", "", " "])
def test_a_test_name_that_is_a_path_is_refused_and_nothing_is_made(tmp_path, name):
    store = tmp_path / "store"
    with pytest.raises(StoreError, match=r"^The test name .* is (a path, not a folder name|empty); give a plain "
                                         r"folder name such as queue-kill\.$"):
        create_run_dir(store, name)
    assert list(tmp_path.iterdir()) == []  # neither the store nor anything beside it


def test_a_link_in_place_of_the_test_folder_cannot_lead_out_of_the_store(tmp_path):
    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    (store / "queue").symlink_to(outside)
    with pytest.raises(StoreError, match=r"queue leads out of the store .* \(a link\); remove it, or give the test "
                                         r"another name\.$"):
        create_run_dir(store, "queue")
    assert list(outside.iterdir()) == []


def test_a_plain_name_gets_its_run_dir_inside_the_store(tmp_path):
    run = create_run_dir(tmp_path / "a" / ".." / "store", "queue-kill")
    assert run.resolve().parent == (tmp_path / "store" / "queue-kill").resolve()


def test_kafkaesque_run_with_name_dot_dot_writes_nothing_outside_the_store(tmp_path):
    store = tmp_path / "store"
    r = subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", "run", "--name", "../x", "--cluster", "local",
                        "--store", str(store)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and "--name" in r.stderr, r.stderr
    assert not (tmp_path / "x").exists() and not store.exists()
