"""Reading and writing history files: JSON Lines, one op per line, appended and flushed as it
happens so that a harness killed with SIGKILL still leaves a readable file. Nothing else in the
project parses history files.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import json
import os
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kafkaesque_harness.history.faults import BEYOND_BUDGET, marks_beyond_budget
from kafkaesque_harness.history.ops import NEMESIS, OP_TYPES, History, HistoryFormatError, Op

try:  # orjson parses large histories several times faster; json reads what it refuses (_op_lines)
    from orjson import loads as _parse
except ImportError:  # pragma: no cover - orjson is a dependency; keep working without it
    _parse = json.loads


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


def _check_op(d: Any, lineno: int, path: str) -> None:
    """Raise HistoryFormatError, naming the line, unless `d` is an op's JSON object."""
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


def _index_problem(path: str, lineno: int, index: Any, last: int) -> None:
    """A line whose index does not follow the one before: a hand-edited, merged or repeated history, refused
    rather than judged (its "anomalies" would be the edit's)."""
    if type(index) is not int:
        raise HistoryFormatError(f"{path} line {lineno}: index {index!r} is not an integer; the history is "
                                 "malformed: restore it from a copy.")
    how = "repeats" if index == last else "goes back from"
    raise HistoryFormatError(f"{path} line {lineno}: index {index} {how} index {last} of the line before; a "
                             "history's indexes only grow, so a line was repeated or moved: restore the history "
                             "from a copy.")


def _op(d: dict[str, Any], line: int) -> Op:
    """The Op of a checked JSON object read from line `line` (0-based): an op written without an index
    takes its line's."""
    op = Op.from_dict(d)
    if op.index < 0:
        op.index = line
    return op


_BLANK, _TORN = object(), object()  # what _reparse makes of a blank line, of a torn last line


def _reparse(raw: bytes, e: ValueError, i: int, path: str, problems: list[str] | None) -> Any:
    """A line orjson refused (line `i`, from 0): its JSON as json reads it (e.g. integers beyond 64 bits), or
    _BLANK, or _TORN for a final line without a newline that does not parse (the trace of a writer killed
    mid-write, said in `problems`); any other bad line raises HistoryFormatError naming it."""
    if not raw.strip():
        return _BLANK
    try:
        return json.loads(raw)
    except ValueError:
        if not raw.endswith(b"\n"):  # torn final line: the writer died while writing it
            if problems is not None:
                problems.append(f"{path} line {i + 1}: torn (not valid JSON, no newline)")
            return _TORN
        msg = getattr(e, "msg", str(e))
        raise HistoryFormatError(f"{path} line {i + 1}: not valid JSON ({msg}).") from None


def _op_lines(path: str, problems: list[str] | None, fh=None,
              first_line: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 0, the op's checked JSON object) for each op of a JSONL history, from `fh`'s position
    when given (line `first_line`). A final line without a newline is the trace of a writer killed mid-write:
    it is dropped if it does not parse, and said in `problems` (the op it held is missing, which the verdict
    must know). Any other bad line raises HistoryFormatError naming it; blank lines are passed over."""
    # Line by line, not read whole: `kafkaesque check` and the Spark ingest read histories of tens of
    # millions of ops. This loop is the cost of reading one: the common case is kept to the parse and
    # _check_op's rules inline.
    last = -1  # the last index written: a writer numbers its ops 0, 1, 2, ... (one without an index is not checked)
    with contextlib.nullcontext(fh) if fh is not None else open(path, "rb") as fh:
        for i, raw in enumerate(fh, first_line):
            try:
                d = _parse(raw)
            except ValueError as e:
                d = _reparse(raw, e, i, path, problems)
                if d is _BLANK:
                    continue
                if d is _TORN:
                    return
            if type(d) is not dict or not ("f" in d and d.get("type") in OP_TYPES
                                          and (type(p := d.get("process")) is int or p == NEMESIS)):
                _check_op(d, i + 1, path)
            index = d.get("index")
            if index is not None:
                if type(index) is not int or index <= last:
                    _index_problem(path, i + 1, index, last)
                last = index
            yield i, d


def iter_history(path: str | os.PathLike, problems: list[str] | None = None) -> Iterator[Op]:
    """Yield the ops of a JSONL history file (_op_lines says what a bad or torn line does)."""
    for line, d in _op_lines(str(path), problems):
        yield _op(d, line)


def read_history(path: str | os.PathLike, problems: list[str] | None = None) -> History:
    """The whole history, paired at most once however many checkers ask (history/ops.py's History)."""
    with gc_paused():
        return History(iter_history(path, problems))


class HistoryFile:
    """A history file read as a stream, never held whole (`kafkaesque check` of a history of tens of millions
    of ops; checkers that can, check it in one pass: checkers/core.py run_checkers). `rows()` yields each op's
    position (its index in read_history's list) and its JSON object, checked as iter_history checks it, and
    builds no Op; `op(pos)` reads one op back, as read_history would hold it (for the few an anomaly's
    example shows). Iterating it yields Ops, read again from the file each time."""

    CHECKPOINT = 1024  # `op(pos)` reads at most this many ops from the nearest remembered place

    def __init__(self, path: str | os.PathLike, problems: list[str] | None = None):
        self.path = str(path)
        self.problems = problems if problems is not None else []
        self.count: int | None = None  # how many ops, once a pass has read them all
        self.client_fs: set[str] = set()  # the names (f) of its client ops, once a pass has read them all
        # every CHECKPOINT ops: the byte offset and the number of the line after an op, and the next op's position
        self._offsets, self._lines, self._firsts = array("q", [0]), array("q", [0]), array("q", [0])

    def rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(position, checked JSON object) of each op, in file order."""
        problems: list[str] = []
        client_fs: set[str] = set()
        every, known = self.CHECKPOINT, self._firsts[-1]
        next_checkpoint = known + every - 1  # the next position after which to remember where the file is
        pos = -1
        with open(self.path, "rb") as fh:
            for i, d in _op_lines(self.path, problems, fh):
                pos += 1
                if d["process"] != NEMESIS:
                    client_fs.add(d["f"])
                yield pos, d
                if pos == next_checkpoint:
                    next_checkpoint += every
                    self._offsets.append(fh.tell())
                    self._lines.append(i + 1)
                    self._firsts.append(pos + 1)
        self.count = pos + 1
        self.client_fs = client_fs
        for p in problems:
            if p not in self.problems:
                self.problems.append(p)

    def op(self, pos: int) -> Op:
        """The op at `pos` (read_history(path)[pos]), read back from the file: rows() must have passed it."""
        for op in self.ops_from(pos):
            return op
        raise IndexError(f"{self.path} has no op {pos}")

    def ops_from(self, pos: int) -> Iterator[Op]:
        """The ops from position `pos` on, read back from the file: a pass (rows()) must have passed `pos`."""
        k = bisect.bisect_right(self._firsts, pos) - 1
        with open(self.path, "rb") as fh:
            fh.seek(self._offsets[k])
            for at, (line, d) in enumerate(_op_lines(self.path, None, fh, self._lines[k]), self._firsts[k]):
                if at >= pos:
                    yield _op(d, line)

    def beyond_budget_time(self) -> int | None:
        """history/faults.py's beyond_budget_time over the file, reading only the lines that carry the mark
        (a search of the raw bytes; the rest is not parsed). A mark spelled with JSON escapes is not found:
        our writer never writes one so."""
        last = None
        for raw in _lines_containing(self.path, BEYOND_BUDGET.encode()):
            try:
                d = json.loads(raw)
            except ValueError:
                continue  # a bad line: rows() says which, or drops it if it is the torn last one
            if isinstance(d, dict) and marks_beyond_budget(d.get("process"), d.get("type"), d.get("value")):
                last = d.get("time", 0)
        return last

    def __iter__(self) -> Iterator[Op]:
        return iter_history(self.path, self.problems)

    def __len__(self) -> int:
        if self.count is None:
            for _ in self.rows():
                pass
        return self.count


def _lines_containing(path: str, needle: bytes, block: int = 1 << 22) -> Iterator[bytes]:
    """Each line of the file that contains `needle`, found by a search of the raw bytes."""
    with open(path, "rb") as fh:
        tail = b""
        while chunk := fh.read(block):
            buf = tail + chunk
            whole = buf.rfind(b"\n") + 1  # the complete lines end here
            i = buf.find(needle, 0, whole)
            while i >= 0:
                start, end = buf.rfind(b"\n", 0, i) + 1, buf.index(b"\n", i) + 1
                yield buf[start:end]
                i = buf.find(needle, end, whole)
            tail = buf[whole:]
        if needle in tail:
            yield tail


class HistoryWriter:
    """Appends ops to history.jsonl as they happen; thread-safe; every line flushed.

    Assigns `index` and `time` (ns since `start_ns`, monotonic). Each op is written with one
    os.write call so a line is either whole or, at worst, the torn last line. Nothing is kept in
    memory: the live panel counts outcomes itself (harness/runner.py LiveStats), and the checks read
    the history back from the file, as `kafkaesque analyze` does. `clock_ns`: the clock op times are read
    from (the host's monotonic clock; a simulated run gives its virtual one, so nothing reads the host's).
    """

    def __init__(self, path: str | os.PathLike, start_ns: int | None = None,
                 clock_ns: Callable[[], int] = time.monotonic_ns):
        self.path = Path(path)
        self.clock_ns = clock_ns
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._next_index = 0
        self.start_ns = clock_ns() if start_ns is None else start_ns

    def now(self) -> int:
        return self.clock_ns() - self.start_ns

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
