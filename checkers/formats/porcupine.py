"""Porcupine's test histories (../shared/anchors/porcupine/FORMAT.md) as our ops.

- etcd Jepsen logs: `INFO  jepsen.util - <proc> <type> <f> <value>`, a single CAS register
  (model "etcd": CAS register, initially absent).
- kv logs: one EDN map per line `{:process P, :type T, :f F, :key "K", :value V}` (model "kv").

Line order is the only time: ops get their line number as time and index. A malformed
line raises HistoryFormatError naming the file, the line and what is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.history import OP_TYPES, HistoryFormatError, Op

_ETCD = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(.*?)\s*$")
_KV = re.compile(r'^\{:process (\d+), :type :(\w+), :f :(\w+), :key "([^"]*)", :value (nil|"[^"]*")\}\s*$')


def _etcd_value(text: str, where: str):
    if text in ("nil", ":timed-out"):
        return None
    if text.startswith("["):
        parts = text.strip("[]").split()
        if len(parts) != 2:
            raise HistoryFormatError(f"{where}: a cas value must be [a b], got {text!r}.")
        return [int(parts[0]), int(parts[1])]
    try:
        return int(text)
    except ValueError:
        raise HistoryFormatError(f"{where}: cannot read the value {text!r}.") from None


def parse_etcd_log(path: str | Path) -> list[Op]:
    ops = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        m = _ETCD.match(line)
        where = f"{path} line {n}"
        if m is None:
            raise HistoryFormatError(f"{where}: not a Jepsen etcd log line (INFO  jepsen.util - proc type f value).")
        proc, type_, f, value = m.groups()
        if type_ not in OP_TYPES:
            raise HistoryFormatError(f"{where}: type :{type_} is not one of {', '.join(OP_TYPES)}.")
        ops.append(Op(type_, f, int(proc), _etcd_value(value, where), time=len(ops), index=len(ops)))
    return ops


def parse_kv_log(path: str | Path) -> list[Op]:
    ops = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        m = _KV.match(line)
        if m is None:
            raise HistoryFormatError(f"{path} line {n}: not a Porcupine kv line "
                                     '({:process P, :type T, :f F, :key "K", :value V}).')
        proc, type_, f, key, value = m.groups()
        v = None if value == "nil" else value[1:-1]
        ops.append(Op(type_, f, int(proc), [key, v], time=len(ops), index=len(ops)))
    return ops
