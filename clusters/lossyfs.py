"""A FUSE file system that loses unsynced writes on demand, as a power cut would (LazyFS in spirit).

    python -m kafkaesque_harness.clusters.lossyfs BACKING_DIR MOUNTPOINT [--status-file F]

Every file operation passes through to BACKING_DIR, except file data: written bytes stay
in this process's memory (a per-file page cache) until the file is fsynced, and only then
reach BACKING_DIR (and its disk). SIGUSR1 drops every unsynced byte at once - the lossy
half of a power cut; the fault SIGKILLs the broker first, so nothing can sync in between.
SIGUSR2 syncs everything (a clean flush). After handling either signal the process writes
one JSON line to --status-file ({"event": "dropped"|"synced", "files": n, "bytes": n,
"seq": n}), so the nemesis can wait for the effect instead of sleeping.

Simplifications, stated: metadata (create, rename, unlink, truncate-to-zero of a new
file, mkdir) reaches the backing directory at once, as on a file system that journals
metadata; only file contents are lost. The broker's recovery must cope with files whose
tails are missing or short, which is exactly the case the protocol's unclean-shutdown
rules are about (001 section 5).

This module runs inside nodes: it imports nothing from the harness.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import stat
import sys
from dataclasses import dataclass

import pyfuse3
import trio

# How long the kernel may keep a regular file's attributes (seconds). With 0, libfuse's auto_inval_data (on, and
# pyfuse3 has no switch for it) made the kernel ask for them before every read: 4 requests in 5 were GETATTRs,
# a round trip through this process that a broker's event loop waited on for each consumer fetch. Kept, they stay
# right: every change to a file's data or size goes through this mount (the kernel moves its own copy, and a
# write makes it ask again before the next read), a lookup of a path refreshes them, and a drop invalidates the
# dropped files (_forget_pages). Directories keep 0: their entries change under renames.
ATTR_TIMEOUT = 1.0


@dataclass
class DirtyFile:
    """The logical content of a file with unsynced writes (the whole file, in memory)."""

    data: bytearray
    dirty_from: int  # the lowest offset that differs from the backing file


class LossyOperations(pyfuse3.Operations):
    enable_writeback_cache = False

    def __init__(self, backing: str):
        super().__init__()
        self.backing = os.path.abspath(backing)
        root_ino = os.lstat(self.backing).st_ino
        self._root_ino = root_ino
        self.paths: dict[int, str] = {pyfuse3.ROOT_INODE: self.backing}
        self.dirty: dict[int, DirtyFile] = {}
        self.fds: dict[int, int] = {}  # fh -> inode
        # fh -> a descriptor of its backing file, opened at the handle's first clean read: a broker's consumer
        # fetches are mostly such reads, and opening the file for each cost more than the read
        self.read_fds: dict[int, int] = {}
        self._next_fh = 1
        self.seq = 0

    # --- inode <-> path --------------------------------------------------------------
    def _ino(self, st: os.stat_result) -> int:
        return pyfuse3.ROOT_INODE if st.st_ino == self._root_ino else st.st_ino

    def _path(self, inode: int) -> str:
        try:
            return self.paths[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def _child(self, parent: int, name: bytes) -> str:
        return os.path.join(self._path(parent), os.fsdecode(name))

    def _attrs(self, path: str) -> pyfuse3.EntryAttributes:
        try:
            st = os.lstat(path)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno) from None
        ino = self._ino(st)
        self.paths[ino] = path
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        e.generation = 0
        e.entry_timeout = 0
        e.attr_timeout = ATTR_TIMEOUT if stat.S_ISREG(st.st_mode) else 0
        e.st_mode = st.st_mode
        e.st_nlink = st.st_nlink
        e.st_uid = st.st_uid
        e.st_gid = st.st_gid
        e.st_rdev = st.st_rdev
        e.st_size = len(self.dirty[ino].data) if ino in self.dirty else st.st_size
        e.st_blksize = 4096
        e.st_blocks = (e.st_size + 511) // 512
        e.st_atime_ns = st.st_atime_ns
        e.st_mtime_ns = st.st_mtime_ns
        e.st_ctime_ns = st.st_ctime_ns
        return e

    # --- metadata: passed straight through -------------------------------------------
    async def lookup(self, parent_inode, name, ctx=None):
        return self._attrs(self._child(parent_inode, name))

    async def getattr(self, inode, ctx=None):
        return self._attrs(self._path(inode))

    async def setattr(self, inode, attr, fields, fh, ctx):
        path = self._path(inode)
        try:
            if fields.update_size:
                self._truncate(inode, path, attr.st_size)
            if fields.update_mode:
                os.chmod(path, stat.S_IMODE(attr.st_mode))
            if fields.update_atime or fields.update_mtime:
                st = os.lstat(path)
                atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
                mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
                os.utime(path, ns=(atime, mtime))
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno) from None
        return self._attrs(path)

    def _truncate(self, inode: int, path: str, size: int) -> None:
        d = self.dirty.get(inode)
        if d is None:
            d = self.dirty[inode] = DirtyFile(self._load(path), dirty_from=size)
        if size < len(d.data):
            del d.data[size:]
        else:
            d.data.extend(b"\0" * (size - len(d.data)))
        d.dirty_from = min(d.dirty_from, size)

    async def readlink(self, inode, ctx):
        return os.fsencode(os.readlink(self._path(inode)))

    async def opendir(self, inode, ctx):
        self._path(inode)
        return inode

    async def readdir(self, fh, start_id, token):
        path = self._path(fh)
        entries = sorted(os.listdir(path))
        for i, name in enumerate(entries[start_id:], start=start_id):
            try:
                attrs = self._attrs(os.path.join(path, name))
            except pyfuse3.FUSEError:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, i + 1):
                break

    async def releasedir(self, fh):
        pass

    async def fsyncdir(self, fh, datasync):
        fd = os.open(self._path(fh), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def mkdir(self, parent_inode, name, mode, ctx):
        path = self._child(parent_inode, name)
        os.mkdir(path, mode)
        return self._attrs(path)

    async def rmdir(self, parent_inode, name, ctx):
        try:
            os.rmdir(self._child(parent_inode, name))
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno) from None

    async def unlink(self, parent_inode, name, ctx):
        path = self._child(parent_inode, name)
        try:
            ino = self._ino(os.lstat(path))
            os.unlink(path)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno) from None
        self.dirty.pop(ino, None)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        old = self._child(parent_inode_old, name_old)
        new = self._child(parent_inode_new, name_new)
        try:
            ino = self._ino(os.lstat(old))
            try:
                replaced = self._ino(os.lstat(new))
                self.dirty.pop(replaced, None)
            except FileNotFoundError:
                pass
            os.rename(old, new)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno) from None
        self.paths[ino] = new

    async def statfs(self, ctx):
        sv = os.statvfs(self.backing)
        s = pyfuse3.StatvfsData()
        for attr in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                     "f_favail", "f_namemax"):
            setattr(s, attr, getattr(sv, attr))
        return s

    async def forget(self, inode_list):
        pass  # paths stay known; inode numbers are the backing ones, so they stay valid

    # --- file data: held in memory until fsync ---------------------------------------
    def _new_fh(self, inode: int) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.fds[fh] = inode
        return fh

    async def open(self, inode, flags, ctx):
        path = self._path(inode)
        if flags & os.O_TRUNC:
            self._truncate(inode, path, 0)
        return pyfuse3.FileInfo(fh=self._new_fh(inode))

    async def create(self, parent_inode, name, mode, flags, ctx):
        path = self._child(parent_inode, name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | (flags & os.O_EXCL), mode)
            os.close(fd)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno) from None
        attrs = self._attrs(path)
        if flags & os.O_TRUNC:
            self._truncate(attrs.st_ino, path, 0)
        return pyfuse3.FileInfo(fh=self._new_fh(attrs.st_ino)), attrs

    def _load(self, path: str) -> bytearray:
        with open(path, "rb") as f:
            return bytearray(f.read())

    async def read(self, fh, off, size):
        inode = self.fds[fh]
        d = self.dirty.get(inode)
        if d is not None:
            with memoryview(d.data) as view:  # one copy, not two
                return bytes(view[off:off + size])
        fd = self.read_fds.get(fh)
        if fd is None:
            try:
                fd = self.read_fds[fh] = os.open(self._path(inode), os.O_RDONLY)
            except OSError as e:
                raise pyfuse3.FUSEError(e.errno) from None
        # the backing file as it is now: a sync, a truncate and the file-corruption fault all change it in place,
        # and a descriptor follows the file through a rename or unlink, as the broker's own does
        return os.pread(fd, size, off)

    async def write(self, fh, off, buf):
        inode = self.fds[fh]
        d = self.dirty.get(inode)
        if d is None:
            d = self.dirty[inode] = DirtyFile(self._load(self._path(inode)), dirty_from=off)
        end = off + len(buf)
        if off > len(d.data):
            d.data.extend(b"\0" * (off - len(d.data)))
        d.data[off:end] = buf
        d.dirty_from = min(d.dirty_from, off)
        return len(buf)

    def sync_inode(self, inode: int) -> int:
        """Write a file's unsynced bytes to the backing file and fsync it; returns bytes written."""
        d = self.dirty.pop(inode, None)
        if d is None:
            return 0
        path = self.paths.get(inode)
        if path is None or not os.path.exists(path):
            return 0
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, len(d.data)) if os.fstat(fd).st_size != len(d.data) else None
            written = os.pwrite(fd, bytes(d.data[d.dirty_from:]), d.dirty_from)
            os.fsync(fd)
        finally:
            os.close(fd)
        return written

    async def fsync(self, fh, datasync):
        self.sync_inode(self.fds[fh])

    async def flush(self, fh):
        pass  # close() is not a sync: the data stays unsynced, as in a page cache

    async def release(self, fh):
        self.fds.pop(fh, None)
        fd = self.read_fds.pop(fh, None)
        if fd is not None:
            os.close(fd)

    # --- the fault ---------------------------------------------------------------------
    def drop_unsynced(self) -> tuple[int, int, list[int]]:
        """Forget every unsynced byte: (files, bytes lost, their inodes, whose kernel page cache must go too)."""
        files = len(self.dirty)
        lost = sum(len(d.data) - d.dirty_from for d in self.dirty.values())
        inodes = list(self.dirty)
        self.dirty.clear()
        return files, lost, inodes

    def sync_all(self) -> tuple[int, int]:
        files = len(self.dirty)
        return files, sum(self.sync_inode(i) for i in list(self.dirty))


def _report(status_file: str | None, ops: LossyOperations, event: str, files: int, nbytes: int) -> None:
    ops.seq += 1
    line = json.dumps({"event": event, "files": files, "bytes": nbytes, "seq": ops.seq})
    print(line, file=sys.stderr, flush=True)
    if status_file:
        with open(status_file, "a") as f:
            f.write(line + "\n")


def _forget_pages(inodes: list[int]) -> None:
    for inode in inodes:
        try:
            pyfuse3.invalidate_inode(inode)
        except OSError:
            pass  # the kernel no longer knows the inode (unlinked, forgotten): nothing of it is cached


async def _signals(ops: LossyOperations, status_file: str | None) -> None:
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT) as sigs:
        async for sig in sigs:
            if sig == signal.SIGUSR1:
                files, lost, inodes = ops.drop_unsynced()
                # The kernel keeps a file's pages across opens (pyfuse3's keep_cache): without this, bytes written
                # over synced ones would still be read back after the drop, as no power cut allows. In a thread:
                # an invalidation waits for pages a reader holds, whose read this loop must answer.
                await trio.to_thread.run_sync(_forget_pages, inodes)
                _report(status_file, ops, "dropped", files, lost)
            elif sig == signal.SIGUSR2:
                _report(status_file, ops, "synced", *ops.sync_all())
            else:
                pyfuse3.terminate()
                return


async def _main(ops: LossyOperations, status_file: str | None) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_signals, ops, status_file)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kafkaesque_harness.clusters.lossyfs", description=__doc__.split("\n\n")[0])
    ap.add_argument("backing")
    ap.add_argument("mountpoint")
    ap.add_argument("--status-file", default=None)
    args = ap.parse_args(argv)
    ops = LossyOperations(args.backing)
    options = set(pyfuse3.default_options)
    options.add("fsname=lossyfs")
    options.discard("default_permissions")
    pyfuse3.init(ops, args.mountpoint, options)
    _report(args.status_file, ops, "mounted", 0, 0)
    try:
        trio.run(_main, ops, args.status_file)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
