"""The simulated nodes' disks: real directories, and a page-cache model of what a power cut loses.

Each node writes its files for real, under the run's directory (put it on tmpfs, /dev/shm, when there is
one: `run_root`). The simulator sees every fsync the broker makes (its seam, clusters/broker/hostenv.py)
and keeps, per file, the content that fsync made durable: the file as it would be read after a power
cut. `power_cut` puts every file of a node back to that content, the semantics of the lossy file system
of real runs (clusters/lossyfs.py): file data not fsynced is lost, truncations included (an unsynced cut
comes back), while metadata (create, rename, unlink) is durable at once. With `torn=True` a file that
grew keeps a seeded part of its unsynced tail instead, as a disk that wrote some pages and not others.

`discard_process_buffers` is the other half of a SIGKILL: what the process held in user space (a
buffered file's pending bytes) is gone. The node's descriptors are pointed at /dev/null, so that the dead
process's file objects write nowhere when they are flushed or collected, and their numbers stay taken
(a reused number could make a dead writer scribble on a live file).
"""

from __future__ import annotations

import os
import random
import stat
import tempfile
from dataclasses import dataclass

TAIL_CHECK_BYTES = 4096  # at an fsync, the durable tail re-read to catch a file cut and rewritten since the last


def run_root(prefix: str = "kafkaesque-sim-") -> str:
    """A fresh directory for one simulated run, on tmpfs when the host has it."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


@dataclass
class DurableFile:
    keeper: int  # a descriptor of ours on the inode: it cannot be freed and its number reused meanwhile
    content: bytearray  # what the last fsync made durable


@dataclass(frozen=True)
class PowerCutReport:
    files: int  # files whose content changed
    bytes_lost: int
    torn: int  # files that kept part of their unsynced tail


class PageCache:
    """Durable contents of every fsynced file, by inode, for every node of a run."""

    def __init__(self) -> None:
        self.durable: dict[tuple[int, int], DurableFile] = {}
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return  # a directory: metadata is durable at once in this model
        self.fsyncs += 1
        key = (st.st_dev, st.st_ino)
        entry = self.durable.get(key)
        if entry is None:
            # The broker's descriptor may be write-only (an "ab" file): ours reads the same inode.
            entry = self.durable[key] = DurableFile(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY), bytearray())
        old, keeper = len(entry.content), entry.keeper
        check_from = max(0, old - TAIL_CHECK_BYTES)
        if st.st_size >= old and os.pread(keeper, old - check_from, check_from) == entry.content[check_from:]:
            entry.content += os.pread(keeper, st.st_size - old, old)  # appended since: read only the new bytes
        else:
            entry.content = bytearray(os.pread(keeper, st.st_size, 0))  # cut or rewritten: read it whole
        self._forget_unlinked()

    def _forget_unlinked(self) -> None:
        """Inodes no name points to any more (replaced by a rename, deleted) need no durable copy."""
        if len(self.durable) < 64:
            return
        for key, entry in list(self.durable.items()):
            if os.fstat(entry.keeper).st_nlink == 0:
                os.close(entry.keeper)
                del self.durable[key]

    def power_cut(self, node_dir: str, rng: random.Random, torn: bool = False) -> PowerCutReport:
        """Every regular file under node_dir back to its durable content (or, torn, with part of its tail)."""
        changed = lost = torn_files = 0
        for path in _files_under(node_dir):
            st = os.stat(path)
            entry = self.durable.get((st.st_dev, st.st_ino))
            durable = entry.content if entry is not None else b""
            with open(path, "r+b") as fh:
                current = fh.read()
                if current == durable:
                    continue
                keep = b""
                if torn and len(current) > len(durable) and current.startswith(bytes(durable)):
                    keep = current[len(durable):len(durable) + rng.randint(0, len(current) - len(durable))]
                    torn_files += 1 if keep else 0
                fh.seek(0)
                fh.write(bytes(durable) + keep)
                fh.truncate()
            changed += 1
            lost += max(0, len(current) - len(durable) - len(keep))
        return PowerCutReport(changed, lost, torn_files)

    def close(self) -> None:
        for entry in self.durable.values():
            os.close(entry.keeper)
        self.durable.clear()

    def keepers(self) -> set[int]:
        return {e.keeper for e in self.durable.values()}


def _files_under(root: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        found += [os.path.join(dirpath, f) for f in sorted(filenames)]
    return found


def discard_process_buffers(node_dir: str, spare: set[int]) -> int:
    """Point every descriptor of this process open on a file under node_dir (but `spare`) at /dev/null; how
    many. Linux only (/proc/self/fd), as the lossy file system is."""
    root = os.path.realpath(node_dir) + os.sep
    null = os.open(os.devnull, os.O_WRONLY)
    n = 0
    try:
        for name in sorted(os.listdir("/proc/self/fd"), key=int):
            fd = int(name)
            if fd in spare or fd == null:
                continue
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue
            if target.startswith(root):
                os.dup2(null, fd)
                n += 1
    finally:
        os.close(null)
    return n
