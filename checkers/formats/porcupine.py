"""Porcupine's test histories (../shared/anchors/porcupine/FORMAT.md) as our ops.

- etcd Jepsen logs: `INFO  jepsen.util - <proc> <type> <f> <value>`, a single CAS register
  (model "etcd": CAS register, initially absent).
- kv logs: one EDN map per line `{:process P, :type T, :f F, :key "K", :value V}` (model "kv").

Line order is the only time: ops get their line number as time and index. Anything else (a
malformed line, a binary file, bytes that are not UTF-8) raises HistoryFormatError naming the
file, the line and what is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from kafkaesque_harness.checkers.formats.lines import read_text_lines
from kafkaesque_harness.history import OP_TYPES, HistoryFormatError, Op

_ETCD = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(.*?)\s*$")
_KV = re.compile(r'^\{:process (\d+), :type :(\w+), :f :(\w+), :key "([^"]*)", :value (nil|"[^"]*")\}\s*$')
_CAS = re.compile(r"^\[\s*(-?\d+)\s+(-?\d+)\s*\]$")
WRONG_FORMAT = "check that the file is a Porcupine {} log, or pass the --format it is written in"


def _shown(text: str) -> str:
    """A value for a message: quoted, and cut short, since a binary file's "line" can be megabytes."""
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _etcd_value(text: str, where: str):
    if text in ("nil", ":timed-out"):
        return None
    if text.startswith("["):
        m = _CAS.match(text)
        if m is None:
            raise HistoryFormatError(f"{where}: a cas value must be [old new], two integers, not {_shown(text)}; "
                                     f"{WRONG_FORMAT.format('etcd')}.")
        return [int(m.group(1)), int(m.group(2))]
    try:
        return int(text)
    except ValueError:
        raise HistoryFormatError(f"{where}: the value {_shown(text)} is not an integer, nil or a cas pair; "
                                 f"{WRONG_FORMAT.format('etcd')}.") from None


def _op_type(type_: str, where: str, kind: str) -> str:
    if type_ not in OP_TYPES:
        raise HistoryFormatError(f"{where}: type :{type_} is not one of {', '.join(OP_TYPES)}; "
                                 f"{WRONG_FORMAT.format(kind)}.")
    return type_


def _matched_lines(path: str | Path, pattern: re.Pattern, kind: str, shape: str) -> Iterator[tuple[re.Match, str]]:
    """Each non-blank line of the file as `pattern` matched it, with where it stands ("PATH line N"). A line
    that does not match is a HistoryFormatError naming it and the `shape` a line of a `kind` log has."""
    for n, line in enumerate(read_text_lines(path), start=1):
        if not line.strip():
            continue
        m = pattern.match(line)
        where = f"{path} line {n}"
        if m is None:
            raise HistoryFormatError(f"{where}: {_shown(line)} is not {shape}; {WRONG_FORMAT.format(kind)}.")
        yield m, where


def parse_etcd_log(path: str | Path) -> list[Op]:
    ops = []
    for m, where in _matched_lines(path, _ETCD, "etcd",
                                   "a Jepsen etcd log line (INFO  jepsen.util - proc type f value)"):
        proc, type_, f, value = m.groups()
        ops.append(Op(_op_type(type_, where, "etcd"), f, int(proc), _etcd_value(value, where), time=len(ops),
                      index=len(ops)))
    return ops


def parse_kv_log(path: str | Path) -> list[Op]:
    ops = []
    for m, where in _matched_lines(path, _KV, "kv",
                                   'a Porcupine kv line ({:process P, :type T, :f F, :key "K", :value V})'):
        proc, type_, f, key, value = m.groups()
        v = None if value == "nil" else value[1:-1]
        ops.append(Op(_op_type(type_, where, "kv"), f, int(proc), [key, v], time=len(ops), index=len(ops)))
    return ops
