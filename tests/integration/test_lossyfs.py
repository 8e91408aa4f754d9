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
    proc = subprocess.Popen([sys.executable, "-m", "clusters.lossyfs", str(backing), str(mnt),
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
