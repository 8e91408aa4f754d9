"""Jepsen's EDN histories in and out (issue 5 item 4): one op map per line.

`parse_edn_history(path)` reads Jepsen/Elle histories into our ops (keywords become
strings: `:append` -> "append"; `:f :txn` values become [[f, k, v], ...]). Ops without
:process are paired invoke -> the completion right after it (as Elle's paper example
needs), by giving each such pair a process of its own. `export_edn(history, path)` writes
our histories as Jepsen EDN (queue ops map one-to-one to Jepsen's Kafka workload: send and
poll), so Jepsen users can cross-check with Elle or Knossos.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import edn_format
from edn_format import Keyword

from harness.history import OP_TYPES, HistoryFormatError, Op


def _plain(x: Any) -> Any:
    if isinstance(x, Keyword):
        return x.name
    if isinstance(x, (list, tuple, edn_format.ImmutableList)):
        return [_plain(v) for v in x]
    if isinstance(x, (dict, edn_format.ImmutableDict)):
        return {_plain(k): _plain(v) for k, v in x.items()}
    return x


_TOKEN = re.compile(r'\s*(?:([\[\]{}()])|"((?:[^"\\]|\\.)*)"|([^\s,\[\]{}()"]+))')
_INT = re.compile(r"-?\d+N?$")


def _fast_loads(text: str) -> Any:
    """A small reader for the EDN that histories use (maps, vectors, lists, keywords, numbers,
    strings, nil, booleans); 20x faster than edn_format, which remains the fallback."""
    tokens = [(m.group(1), m.group(2), m.group(3)) for m in _TOKEN.finditer(text.replace(",", " "))]
    pos = 0

    def read() -> Any:
        nonlocal pos
        brace, string, atom = tokens[pos]
        pos += 1
        if brace in ("[", "("):
            out = []
            while tokens[pos][0] not in ("]", ")"):
                out.append(read())
            pos += 1
            return out
        if brace == "{":
            items = []
            while tokens[pos][0] != "}":
                items.append(read())
            pos += 1
            return dict(zip(items[::2], items[1::2], strict=True))
        if string is not None:
            return bytes(string, "utf-8").decode("unicode_escape")
        if atom is None:
            raise ValueError(f"unexpected {brace!r}")
        if atom.startswith(":"):
            return atom[1:]
        if atom == "nil":
            return None
        if atom in ("true", "false"):
            return atom == "true"
        if _INT.match(atom):
            return int(atom.rstrip("N"))
        return float(atom)

    value = read()
    if pos != len(tokens):
        raise ValueError("trailing input")
    return value


def parse_edn_history(path: str | Path) -> list[Op]:
    ops: list[Op] = []
    pending_anonymous: int | None = None
    next_anon = 1 << 30
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        text = line.split(";", 1)[0].strip() if line.lstrip().startswith(";") else line.strip()
        if not text or text.startswith(";"):
            continue
        try:
            d = _fast_loads(text)
        except (ValueError, IndexError):
            try:
                d = _plain(edn_format.loads(text))
            except Exception as e:  # noqa: BLE001 - edn_format raises several types
                raise HistoryFormatError(f"{path} line {n}: not an EDN map ({e}).") from None
        if not isinstance(d, dict) or "type" not in d:
            raise HistoryFormatError(f"{path} line {n}: an op must be a map with a :type.")
        if d["type"] not in OP_TYPES:
            raise HistoryFormatError(f"{path} line {n}: :type {d['type']!r} is not one of {', '.join(OP_TYPES)}.")
        process = d.get("process")
        if process is None:
            # No :process: an invocation pairs with the completion that follows it.
            if d["type"] == "invoke":
                pending_anonymous = next_anon
                next_anon += 1
            process = pending_anonymous if pending_anonymous is not None else next_anon
        value = d.get("value")
        f = d.get("f", "txn")
        ops.append(Op(type=d["type"], f=f if isinstance(f, str) else str(f), process=process, value=value,
                      # no :time means no real-time information: every op at time 0
                      time=int(d.get("time", 0)), index=len(ops), error=d.get("error")))
    return ops


def _edn(x: Any, keywordize: bool = False) -> str:
    if x is None:
        return "nil"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, float)):
        return repr(x)
    if isinstance(x, str):
        return ":" + x if keywordize else edn_format.dumps(x)
    if isinstance(x, list | tuple):
        return "[" + " ".join(_edn(v, keywordize=(i == 0 and keywordize)) for i, v in enumerate(x)) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{_edn(k)} {_edn(v)}" for k, v in x.items()) + "}"
    return edn_format.dumps(str(x))


def _value(op: Op) -> str:
    if op.f == "txn" and isinstance(op.value, list):
        return "[" + " ".join(_edn(mop, keywordize=True) for mop in op.value) + "]"
    if op.f in ("poll", "final-poll") and op.type == "ok":
        if op.f == "final-poll" and isinstance(op.value, list) and len(op.value) == 3:
            return "{" + f"{op.value[0]} {_edn(op.value[2])}" + "}"
        if isinstance(op.value, dict):
            return "{" + ", ".join(f"{int(k)} {_edn(v)}" for k, v in op.value.items()) + "}"
    return _edn(op.value)


def export_edn(history: list[Op], path: str | Path) -> None:
    """Write our ops as Jepsen EDN op maps (final-polls become polls, as Jepsen has no final read op)."""
    with open(path, "w") as f:
        for op in history:
            fname = "poll" if op.f == "final-poll" else op.f
            process = ":nemesis" if op.process == "nemesis" else str(op.process)
            fields = [f":index {op.index}", f":time {op.time}", f":type :{op.type}", f":process {process}",
                      f":f :{fname}", f":value {_value(op)}"]
            if op.error is not None:
                fields.append(f":error {_edn(str(op.error))}")
            f.write("{" + ", ".join(fields) + "}\n")
