"""Flush policies (when the log fsyncs) and the per-data-dir flush log (what was fsynced).

001 section 5 lists Kafka's flush behaviours: every write, every nth write, every n ms, or
only when the OS (or a segment roll) decides. The broker's `--flush-policy` flag takes
"every-write", "every-N-records:N", "every-ms:N" or "never"; `parse_flush_policy` turns it
into a FlushPolicy.

Every fsync of a segment appends one JSON line to `<data dir>/flush.log`:

    {"file": "<topic>-<p>/00000000000000000000.log", "synced_bytes": 4096, "offset": 120}

`synced_bytes` is the file's length at that fsync and `offset` the partition's log end offset
then. Issue 4's scenario tests read the last line per file after a SIGKILL and cut each file
to that length, which is what a power cut does to unsynced bytes (001 5.1.1, lossy unclean
shutdown). A segment created and never synced gets a line with synced_bytes 0; a deleted
one a line with "deleted": true.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from enum import Enum

FLUSH_LOG_NAME = "flush.log"


class FlushMode(Enum):
    EVERY_WRITE = "every-write"
    EVERY_N_RECORDS = "every-N-records"
    EVERY_MS = "every-ms"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class FlushPolicy:
    """When PartitionLog fsyncs: after each append, after N records, every N ms, or never."""

    mode: FlushMode
    n: int = 0  # records for EVERY_N_RECORDS, milliseconds for EVERY_MS

    def __str__(self) -> str:
        if self.mode in (FlushMode.EVERY_N_RECORDS, FlushMode.EVERY_MS):
            return f"{self.mode.value}:{self.n}"
        return self.mode.value


_POLICY_RE = re.compile(r"^(every-write|never|every-N-records:(\d+)|every-ms:(\d+))$")


def parse_flush_policy(text: str) -> FlushPolicy:
    """Parse a --flush-policy value; a bad one raises ValueError with one sentence naming the fix."""
    s = text.strip()
    m = _POLICY_RE.match(s)
    if m is None:
        raise ValueError(
            f"unknown flush policy {text!r}: use every-write, every-N-records:N, every-ms:N or never "
            f"(N a positive integer)"
        )
    if s == "every-write":
        return FlushPolicy(FlushMode.EVERY_WRITE)
    if s == "never":
        return FlushPolicy(FlushMode.NEVER)
    n = int(m.group(2) or m.group(3))
    if n <= 0:
        raise ValueError(f"flush policy {text!r} needs a positive N, e.g. {s.split(':')[0]}:100")
    if m.group(2) is not None:
        return FlushPolicy(FlushMode.EVERY_N_RECORDS, n)
    return FlushPolicy(FlushMode.EVERY_MS, n)


class FlushLog:
    """Append-only JSON-lines record of every fsync under one data dir (shared by its partitions).

    Lines are written with one os.write on an O_APPEND descriptor, so they survive a SIGKILL
    of the broker (the page cache stays), which is all the scenario runner needs.
    """

    def __init__(self, data_dir: str):
        self.data_dir = os.path.abspath(data_dir)
        self.path = os.path.join(self.data_dir, FLUSH_LOG_NAME)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def record(self, file_path: str, synced_bytes: int, offset: int, deleted: bool = False) -> None:
        entry: dict[str, object] = {
            "file": os.path.relpath(os.path.abspath(file_path), self.data_dir),
            "synced_bytes": synced_bytes,
            "offset": offset,
        }
        if deleted:
            entry["deleted"] = True
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd >= 0:
                os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def last_synced_lengths(data_dir: str) -> dict[str, int | None]:
    """From `<data_dir>/flush.log`: relative file path -> last fsynced length (None if deleted).

    For scenario tests that emulate a lossy crash by cutting each file to this length.
    """
    out: dict[str, int | None] = {}
    path = os.path.join(data_dir, FLUSH_LOG_NAME)
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by the kill itself
            out[e["file"]] = None if e.get("deleted") else int(e["synced_bytes"])
    return out
