"""A full store (issue 39 item 3): on a real file system with no space left (a tmpfs of a few pages, mounted
here as root), writing a run's results names the folder and the fix, raises no errno at the user, and leaves
no temporary file behind."""

from __future__ import annotations

import subprocess

import pytest

from kafkaesque_harness.results.store import StoreError, write_json

pytestmark = pytest.mark.integration


@pytest.fixture
def tiny_store(tmp_path):
    mount = tmp_path / "store"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_store_names_its_folder_and_the_fix_and_leaves_no_temporary_file(tiny_store):
    run = tiny_store / "queue" / "20261127T100000"
    run.mkdir(parents=True)
    (run / "history.jsonl").write_text("{}\n" * 100)  # what the run wrote before the disk filled
    with pytest.raises(StoreError) as e:
        write_json(run / "results.json", {"valid": True, "padding": "x" * 64_000})
    said = str(e.value)
    assert f"No space is left on the device of {run}" in said and "results.json was not written" in said
    assert "--store" in said and f"kafkaesque analyze {run}" in said
    assert sorted(p.name for p in run.iterdir()) == ["history.jsonl"]  # no results.json.tmp, history kept
