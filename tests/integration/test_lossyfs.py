"""The lossy file system really loses exactly the unsynced bytes, as a power cut after kill -9 would."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

WRITER = r"""
import os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
os.write(fd, b"S" * 4096)       # synced
os.fsync(fd)
os.write(fd, b"U" * 3000)       # never synced
print("ready", flush=True)
time.sleep(60)                  # killed with SIGKILL here
"""


def _wait_status(status: Path, event: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if status.exists():
            for line in status.read_text().splitlines():
                d = json.loads(line)
                if d["event"] == event:
                    return d
        time.sleep(0.05)
    raise AssertionError(f"lossyfs never reported {event!r}")


@pytest.fixture
def lossy_mount(tmp_path):
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse is missing: the lossy-crash fault needs FUSE on this machine")
    backing, mnt, status = tmp_path / "backing", tmp_path / "mnt", tmp_path / "status"
    backing.mkdir()
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "kafkaesque_harness.clusters.lossyfs", str(backing), str(mnt),
                             "--status-file", str(status)], stderr=subprocess.PIPE)
    _wait_status(status, "mounted")
    yield proc, backing, mnt, status
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_kill_then_drop_keeps_exactly_the_fsynced_bytes(lossy_mount):
    proc, backing, mnt, status = lossy_mount
    (mnt / "topic-0").mkdir()
    target = mnt / "topic-0" / "00000000000000000000.log"
    w = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert w.stdout.readline().strip() == "ready"
    assert target.stat().st_size == 4096 + 3000  # the writer sees its unsynced bytes
    w.send_signal(signal.SIGKILL)
    w.wait(10)
    proc.send_signal(signal.SIGUSR1)
    dropped = _wait_status(status, "dropped")
    assert dropped["bytes"] == 3000
    data = target.read_bytes()
    assert data == b"S" * 4096
    assert (backing / "topic-0" / "00000000000000000000.log").read_bytes() == b"S" * 4096


def test_sync_all_and_rename_reach_the_backing_dir(lossy_mount):
    proc, backing, mnt, status = lossy_mount
    tmp = mnt / "checkpoint.tmp"
    tmp.write_bytes(b"hwm 42\n")
    os.replace(tmp, mnt / "checkpoint")
    assert (mnt / "checkpoint").read_bytes() == b"hwm 42\n"
    assert (backing / "checkpoint").read_bytes() == b""  # renamed, but its data never synced
    proc.send_signal(signal.SIGUSR2)
    _wait_status(status, "synced")
    assert (backing / "checkpoint").read_bytes() == b"hwm 42\n"


def test_sigterm_unmounts(lossy_mount):
    proc, backing, mnt, status = lossy_mount
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    assert not os.path.ismount(mnt)


def test_a_handle_held_open_reads_the_file_as_it_is_now(lossy_mount):
    """Reads of clean bytes go to a descriptor the file system keeps per handle: they must still see damage done
    in place through another handle (the file-corruption fault's way), follow a rename, and after a drop see
    only the synced bytes."""
    proc, backing, mnt, status = lossy_mount
    path = mnt / "seg.log"
    with open(path, "wb") as f:
        f.write(b"A" * 8192)
        f.flush()
        os.fsync(f.fileno())
    held = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(held, 16, 4096) == b"A" * 16
        with open(path, "r+b") as f:  # as nemesis/kinds/file_corruption.py flip_bits does
            f.seek(4096)
            f.write(b"B" * 16)
            f.flush()
            os.fsync(f.fileno())
        assert os.pread(held, 16, 4096) == b"B" * 16
        assert (backing / "seg.log").read_bytes()[4096:4112] == b"B" * 16
        os.rename(path, mnt / "seg.moved")
        assert os.pread(held, 4, 0) == b"AAAA"
        # appended through another handle (unsynced): read at once through the held one, as a consumer reads a
        # producer's append (the kernel keeps a file's attributes ATTR_TIMEOUT, but a write through it moves them)
        with open(mnt / "seg.moved", "ab") as f:
            f.write(b"D" * 100)
        assert os.pread(held, 200, 8192) == b"D" * 100 and os.fstat(held).st_size == 8292
        with open(mnt / "seg.moved", "r+b") as f:  # unsynced: lost at the drop
            f.seek(0)
            f.write(b"C" * 4)
        assert os.pread(held, 4, 0) == b"CCCC"
        # The drop takes the kernel's cached pages too (they outlive every handle): the overwritten bytes come
        # back as they were synced, to a new handle and to one held across it.
        proc.send_signal(signal.SIGUSR1)
        _wait_status(status, "dropped")
        # the held handle first: a lookup of the path would refresh the file's attributes and pages on its own
        assert os.pread(held, 8, 0) == b"AAAAAAAA"
        assert os.fstat(held).st_size == 8192 and os.pread(held, 200, 8192) == b""  # the unsynced append is gone
        assert (mnt / "seg.moved").read_bytes()[:8] == b"AAAAAAAA"
    finally:
        os.close(held)
