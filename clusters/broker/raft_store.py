"""Durable state of one Raft node of the controller quorum (002 1.2.1: the metadata log is
replicated with Raft; Raft's safety rests on term, vote and log surviving a crash).

What Raft must not forget: the current term, whom it voted for in that term, and its log
(with the snapshot that replaced the log's compacted prefix). Every method below returns
only once its change is durable (fsynced), so the node may send a message that depends on
it (a vote, an AppendEntries acknowledgement) right after the call.

Two stores share one interface:

- `MemoryRaftStore` keeps the state in memory; a test "crashes" a node by dropping the
  RaftNode object and "restarts" it from the same store, which models a disk where every
  returned write is durable.
- `FileRaftStore` is one append-only file of frames
  `[u32 length][u32 crc32(payload)][u32 crc32(the 8 bytes before)][json payload]`.
  A crash mid-append leaves a torn tail: on load, a partial header, a payload that runs past
  the end of the file, a *last* frame failing its CRC, or zeros to the end are dropped and the
  file truncated to the last good frame (that append was never acknowledged, so nothing
  promised is lost). A bad frame with data after it is not a torn tail but corruption, and
  loading refuses with one sentence.
  A snapshot rewrites the whole file (snapshot frame, term/vote frame, the entries after the
  snapshot) to a temporary file, fsyncs it and renames it over the old one, so a crash leaves
  either the old file or the new one.

Frame payloads: {"k": "vote", "term", "vote"}, {"k": "entry", "i", "t", "r"},
{"k": "truncate", "from"} (entries at and after "from" are gone), {"k": "snapshot", "i", "t",
"data"}. Records and snapshot data must be JSON values for the file store.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from kafkaesque_harness.clusters.broker import hostenv
from kafkaesque_harness.clusters.broker.log.checkpoints import atomic_write


@dataclass(frozen=True)
class Entry:
    """One log entry. `record` None is a leader's no-op (appended when it takes office)."""

    index: int
    term: int
    record: Any = None


@dataclass(frozen=True)
class Snapshot:
    """The applied state machine at `index` (the entry at `index` had term `term`)."""

    index: int
    term: int
    data: Any = None


@dataclass
class PersistentState:
    term: int = 0
    voted_for: int | None = None
    snapshot: Snapshot = field(default_factory=lambda: Snapshot(0, 0, None))
    entries: list[Entry] = field(default_factory=list)  # those after snapshot.index, contiguous


class RaftStore(Protocol):
    def load(self) -> PersistentState: ...

    def save_term_vote(self, term: int, voted_for: int | None) -> None: ...

    def append(self, entries: list[Entry]) -> None: ...

    def truncate_from(self, index: int) -> None: ...

    def save_snapshot(self, snapshot: Snapshot, entries_after: list[Entry]) -> None: ...


def entries_after_snapshot(snapshot: Snapshot, entries: list[Entry]) -> list[Entry]:
    """The entries that may follow `snapshot`: the suffix after its index if the log holds the
    snapshot's last entry with the same term, else none (a conflicting log is discarded).
    The same rule serves InstallSnapshot and loading a store."""
    if snapshot.index == 0:
        return list(entries)
    for pos, e in enumerate(entries):
        if e.index == snapshot.index:
            return list(entries[pos + 1:]) if e.term == snapshot.term else []
    if entries and entries[0].index == snapshot.index + 1:
        return list(entries)  # the log already starts right after the snapshot
    return []


class MemoryRaftStore:
    """Durable-by-assumption store for simulations; counts its writes (fsyncs in a real store)."""

    def __init__(self) -> None:
        self.state = PersistentState()
        self.writes = 0

    def load(self) -> PersistentState:
        s = self.state
        return PersistentState(s.term, s.voted_for, s.snapshot, list(s.entries))

    def save_term_vote(self, term: int, voted_for: int | None) -> None:
        self.state.term, self.state.voted_for = term, voted_for
        self.writes += 1

    def append(self, entries: list[Entry]) -> None:
        self.state.entries.extend(entries)
        self.writes += 1

    def truncate_from(self, index: int) -> None:
        self.state.entries = [e for e in self.state.entries if e.index < index]
        self.writes += 1

    def save_snapshot(self, snapshot: Snapshot, entries_after: list[Entry]) -> None:
        self.state.snapshot, self.state.entries = snapshot, list(entries_after)
        self.writes += 1


class CorruptRaftStore(Exception):
    """The store file is damaged before its tail: not a crash artefact, so not repaired."""


_HEADER = struct.Struct(">III")  # payload length, crc32 of the payload, crc32 of these 8 bytes


def encode_frame(payload: dict[str, Any]) -> bytes:
    """One frame of the file format (public so tests can write torn and damaged tails)."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    head = struct.pack(">II", len(body), zlib.crc32(body))
    return head + struct.pack(">I", zlib.crc32(head)) + body


def _read_frames(data: bytes, path: str) -> tuple[list[dict[str, Any]], int]:
    """The payloads of the good frames and the byte length they cover (torn tail excluded).

    What a crash mid-append can leave after the last good frame: a partial header, a payload
    cut short, a last frame whose payload fails its CRC, or zeros (a file extended but not
    written). The header has its own CRC so a damaged length is never mistaken for a payload
    cut short, which would silently drop the good frames after it.
    """
    frames: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        rest = data[pos:]
        if len(rest) < _HEADER.size or not rest.strip(b"\0"):
            break  # a partial header, or zeros to the end
        length, crc, head_crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if zlib.crc32(data[pos:pos + 8]) != head_crc:
            _corrupt(path, pos, "header")
        if end > len(data):
            break  # the payload was cut short
        if zlib.crc32(data[pos + _HEADER.size:end]) != crc:
            if data[end:].strip(b"\0"):
                _corrupt(path, pos, "payload")
            break  # the last frame was half-written
        frames.append(json.loads(data[pos + _HEADER.size:end]))
        pos = end
    return frames, pos


def _corrupt(path: str, pos: int, part: str) -> None:
    raise CorruptRaftStore(
        f"{path} has a damaged frame {part} at byte {pos} with data after it; this is disk "
        "corruption, not a torn write: restore the node's state from a backup or remove it from "
        "the quorum before starting it again")


class FileRaftStore:
    """One fsynced append-only file per node (see the module docstring for the format)."""

    def __init__(self, path: str):
        self.path = path
        self.dropped_tail_bytes = 0  # how much a torn tail cost at the last load (for logs/tests)
        self._fh: Any = None
        self._term: int = 0  # term and vote are rewritten into the file at each snapshot
        self._vote: int | None = None

    def load(self) -> PersistentState:
        state = PersistentState()
        if os.path.exists(self.path):
            with open(self.path, "rb") as fh:
                data = fh.read()
            frames, good = _read_frames(data, self.path)
            for f in frames:
                self._replay(state, f)
            self._term, self._vote = state.term, state.voted_for
            self.dropped_tail_bytes = len(data) - good
            if good < len(data):
                with open(self.path, "r+b") as fh:
                    fh.truncate(good)
                    fh.flush()
                    hostenv.fsync(fh.fileno())
        self._open_for_append()
        return state

    def _replay(self, state: PersistentState, f: dict[str, Any]) -> None:
        kind = f["k"]
        if kind == "vote":
            state.term, state.voted_for = f["term"], f["vote"]
        elif kind == "entry":
            expected = state.entries[-1].index + 1 if state.entries else state.snapshot.index + 1
            if f["i"] != expected:
                raise CorruptRaftStore(f"{self.path}: entry {f['i']} where entry {expected} was expected; "
                                       "the file was not written by this store")
            state.entries.append(Entry(f["i"], f["t"], f["r"]))
        elif kind == "truncate":
            state.entries = [e for e in state.entries if e.index < f["from"]]
        elif kind == "snapshot":
            state.snapshot = Snapshot(f["i"], f["t"], f["data"])
            state.entries = entries_after_snapshot(state.snapshot, state.entries)
        else:
            raise CorruptRaftStore(f"{self.path}: unknown frame kind {kind!r}")

    def _open_for_append(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = open(self.path, "ab")

    def _write(self, frames: list[dict[str, Any]]) -> None:
        if self._fh is None:
            self._open_for_append()
        self._fh.write(b"".join(encode_frame(f) for f in frames))
        self._fh.flush()
        hostenv.fsync(self._fh.fileno())

    def save_term_vote(self, term: int, voted_for: int | None) -> None:
        self._write([{"k": "vote", "term": term, "vote": voted_for}])
        self._term, self._vote = term, voted_for

    def append(self, entries: list[Entry]) -> None:
        if entries:
            self._write([{"k": "entry", "i": e.index, "t": e.term, "r": e.record} for e in entries])

    def truncate_from(self, index: int) -> None:
        self._write([{"k": "truncate", "from": index}])

    def save_snapshot(self, snapshot: Snapshot, entries_after: list[Entry]) -> None:
        """Compaction: rewrite the file as snapshot + term/vote + the entries after it, atomically."""
        frames = [{"k": "snapshot", "i": snapshot.index, "t": snapshot.term, "data": snapshot.data},
                  {"k": "vote", "term": self._term, "vote": self._vote}]
        frames += [{"k": "entry", "i": e.index, "t": e.term, "r": e.record} for e in entries_after]
        atomic_write(self.path, b"".join(encode_frame(f) for f in frames))  # tmp, fsync, rename, fsync dir
        self._open_for_append()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
