"""Reading and writing history files: JSON Lines, one op per line, appended and flushed as it
happens so that a harness killed with SIGKILL still leaves a readable file. Nothing else in the
project parses history files.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from history.ops import NEMESIS, OP_TYPES, History, HistoryFormatError, Op

try:  # orjson parses large histories several times faster; json is the fallback for what it refuses
    import orjson

    def _loads(raw: bytes):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return json.loads(raw)  # e.g. integers beyond 64 bits, which json accepts
except ImportError:  # pragma: no cover - orjson is a dependency; keep working without it
    _loads = json.loads


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while building millions of small objects.

    Parsing or checking a 1M-op history creates tens of millions of lists and dicts and none
    of them form cycles; with the collector running, the time goes from about 2 s to 18 s.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _validate(d: Any, lineno: int, path: str) -> Op:
    if not isinstance(d, dict):
        raise HistoryFormatError(f"{path} line {lineno}: expected a JSON object, got {type(d).__name__}.")
    for field in ("type", "f", "process"):
        if field not in d:
            raise HistoryFormatError(f"{path} line {lineno}: the op has no '{field}' field.")
    if d["type"] not in OP_TYPES:
        raise HistoryFormatError(
            f"{path} line {lineno}: type {d['type']!r} is not one of {', '.join(OP_TYPES)}."
        )
    p = d["process"]
    if not (isinstance(p, int) or p == NEMESIS):
        raise HistoryFormatError(f"{path} line {lineno}: process {p!r} must be an integer or \"nemesis\".")
    return Op.from_dict(d)


def iter_history(path: str | os.PathLike, problems: list[str] | None = None) -> Iterator[Op]:
    """Yield the ops of a JSONL history file.

    A final line without a newline is the trace of a writer killed mid-write: it is
    dropped if it does not parse, and said in `problems` (the op it held is missing, which
    the verdict must know). Any other bad line raises HistoryFormatError naming it.
    """
    path = str(path)
    # Line by line, not read whole: the Spark pipeline ingests histories of tens of millions of ops.
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh):
            if not raw.strip():
                continue
            try:
                d = _loads(raw)
            except ValueError as e:
                if not raw.endswith(b"\n"):  # torn final line: the writer died while writing it
                    if problems is not None:
                        problems.append(f"{path} line {i + 1}: torn (not valid JSON, no newline)")
                    return
                msg = getattr(e, "msg", str(e))
                raise HistoryFormatError(f"{path} line {i + 1}: not valid JSON ({msg}).") from None
            op = _validate(d, i + 1, path)
            if op.index < 0:
                op.index = i
            yield op


def read_history(path: str | os.PathLike, problems: list[str] | None = None) -> History:
    """The whole history, paired at most once however many checkers ask (history/ops.py's History)."""
    with gc_paused():
        return History(iter_history(path, problems))


class HistoryWriter:
    """Appends ops to history.jsonl as they happen; thread-safe; every line flushed.

    Assigns `index` and `time` (ns since `start_ns`, monotonic). Each op is written with one
    os.write call so a line is either whole or, at worst, the torn last line. Nothing is kept in
    memory: the live panel counts outcomes itself (harness/runner.py LiveStats), and the checks read
    the history back from the file, as `kafkaesque analyze` does.
    """

    def __init__(self, path: str | os.PathLike, start_ns: int | None = None):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._next_index = 0
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns

    def now(self) -> int:
        return time.monotonic_ns() - self.start_ns

    def append(self, op: Op) -> Op:
        with self._lock:
            op.index = self._next_index
            self._next_index += 1
            if op.time <= 0:
                op.time = self.now()
            line = (json.dumps(op.to_dict(), separators=(",", ":"), default=str) + "\n").encode()
            os.write(self._fd, line)
        return op

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
