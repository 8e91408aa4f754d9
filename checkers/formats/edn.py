"""Jepsen's EDN histories in and out (issue 5 item 4): one op map per line.

`parse_edn_history(path)` reads Jepsen/Elle histories into our ops (keywords become
strings: `:append` -> "append"; `:f :txn` values become [[f, k, v], ...]; an op's other
fields go to Op.extra, named with "_" for "-": Jepsen's :rebalance-log is "rebalance_log").
Ops without :process are paired invoke -> the completion right after it (as Elle's paper
example needs), by giving each such pair a process of its own. `parse_kafka_edn_history(path)`
reads a history of Jepsen's Kafka workload (jepsen.tests.kafka: :send/:poll/:txn with micro-op
vectors, :assign, :subscribe, :crash) into the txn schema (checkers/txn.py): poll maps keyed by
the key's decimal text, as our histories' JSON has them. `export_edn(history, path)` writes our
histories as Jepsen EDN (queue ops map one-to-one to Jepsen's Kafka workload: send and poll; txn
ops' micro-ops likewise), so Jepsen users can cross-check with Elle, Knossos or Jepsen's Kafka
checker.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from kafkaesque_harness.checkers.formats.lines import read_text_lines
from kafkaesque_harness.history import OP_TYPES, HistoryFormatError, Op
from kafkaesque_harness.history.extras import need
from kafkaesque_harness.history.ops import STANDARD_FIELDS

edn_format = need("edn_format", "edn", "reading and writing Jepsen's EDN histories")
Keyword = edn_format.Keyword


def _plain(x: Any) -> Any:
    """edn_format's values as plain Python: keywords become their names ("a/b" for :a/b), vectors and
    lists become lists, maps dicts; map keys and set members that are vectors become tuples, the
    hashable form of a list (a dict key cannot be a list)."""
    if isinstance(x, Keyword):
        return x.name
    if isinstance(x, (list, tuple, edn_format.ImmutableList)):
        return [_plain(v) for v in x]
    if isinstance(x, (dict, edn_format.ImmutableDict)):
        return {_hashable(_plain(k)): _plain(v) for k, v in x.items()}
    if isinstance(x, frozenset):
        return frozenset(_hashable(_plain(v)) for v in x)
    return x


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


class _NotFast(ValueError):
    """Text the fast reader does not read itself; edn_format reads it instead (never a guess)."""


# The fast reader accepts a strict subset of EDN and reads it exactly as edn_format does (a property
# test in tests/unit/test_edn_reader.py holds it to that): maps, vectors, lists, strings with the
# escapes \" \\ \n \t \r \b \f \uXXXX, keywords (:a, :a/b), nil, true, false, integers (N suffix
# too) and decimal floats. Anything else (sets, symbols, characters, tags, ##Inf, M and ratios,
# comments, other escapes) raises _NotFast, and the line goes to edn_format.
#
# Tokens are separated by edn_format's own whitespace (space, tab, newline and comma: a comma
# inside a string is part of the string). An atom is a run of anything else up to a delimiter; it
# is read only when the whole run is one token of edn_format's lexer (its regular expressions,
# edn_format/edn_lex.py), so a run such as `07`, `1.5e` or `:a/b/c`, which edn_format would lex
# as two tokens, is left to edn_format.
_TOKEN = re.compile(r'[ \t\n,]*(?:([\[\]{}()])|"([^"\\]*(?:\\.[^"\\]*)*)"|([^ \t\n,\[\]{}()"]+))')
_SYMBOL_CHARS = r"\w.*+!\-_?$%&=:#<>@"  # edn_lex PARTS["all"]
_KEYWORD = re.compile(rf":(?:[{_SYMBOL_CHARS}]+/[{_SYMBOL_CHARS}]+|[{_SYMBOL_CHARS}]+)")
_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)N?")
_FLOAT = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)")
_CONSTANTS = {"nil": None, "true": True, "false": False}
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|(.))")
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_CLOSER = {"[": "]", "(": ")", "{": "}"}
# Histories repeat the same keywords and small numbers on every line: read each atom once.
_ATOMS: dict[str, Any] = dict(_CONSTANTS)
_ATOMS_MAX = 1 << 16


def _unescape(m: re.Match) -> str:
    if m.group(1) is not None:
        return chr(int(m.group(1), 16))  # a lone surrogate stays one, as edn_format leaves it
    c = _ESCAPES.get(m.group(2))
    if c is None:
        raise _NotFast(f"escape \\{m.group(2)}")
    return c


def _atom(text: str) -> Any:
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if text[0] == ":":
        if _KEYWORD.fullmatch(text):
            return text[1:]
    elif _INT.fullmatch(text):
        return int(text[:-1] if text[-1] == "N" else text)
    elif _FLOAT.fullmatch(text):
        return float(text)
    raise _NotFast(f"atom {text!r}")


def _fast_loads(text: str) -> Any:
    """One EDN value from `text`, or _NotFast when the text is beyond the fast subset or malformed
    (edn_format then reads it, or says what is wrong); 20x faster than edn_format."""
    stack: list[tuple[str, list]] = []  # (the closing bracket expected, the items so far)
    items: list = []
    value: Any
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            raise _NotFast("a character no token starts with")  # e.g. an unterminated string
        pos = m.end()
        bracket, string, atom = m.groups()
        if string is not None:
            items.append(_ESCAPE.sub(_unescape, string) if "\\" in string else string)
        elif atom is not None:
            value = _ATOMS.get(atom, _ATOMS)
            if value is _ATOMS:  # not seen yet: read it, and remember it (atoms are immutable values)
                value = _atom(atom)
                if len(_ATOMS) < _ATOMS_MAX:
                    _ATOMS[atom] = value
            items.append(value)
        elif bracket in _CLOSER:
            stack.append((_CLOSER[bracket], items))
            items = []
        else:
            if not stack or stack[-1][0] != bracket:
                raise _NotFast(f"unbalanced {bracket!r}")
            closer, outer = stack.pop()
            if closer == "}":
                if len(items) % 2:
                    raise _NotFast("a map with an odd number of forms")
                try:
                    value = dict(zip(items[::2], items[1::2], strict=True))  # even: checked above
                except TypeError:  # a vector or map as a key: _plain's tuples, left to edn_format
                    raise _NotFast("an unhashable map key") from None
                if 2 * len(value) != len(items):
                    # A repeated key (or :a beside "a", one key once plain): which value stays depends
                    # on the order _plain meets them in edn_format's map, so edn_format decides.
                    raise _NotFast("a repeated map key")
            else:
                value = items
            outer.append(value)
            items = outer
    if stack or text[pos:].strip(" \t\n,") or len(items) != 1:
        raise _NotFast("not exactly one complete form")
    return items[0]


def read_edn_form(text: str) -> Any:
    """The one EDN value in `text`, as plain Python (_plain); raises ValueError when `text` holds no
    value, more than one, or is not EDN."""
    try:
        return _fast_loads(text)
    except ValueError:  # _NotFast, or a number int() refuses (over 4300 digits): edn_format has the last word
        pass
    try:
        forms = edn_format.loads_all(text)
    except Exception as e:  # noqa: BLE001 - edn_format raises several types (its own, ValueError, NotImplementedError)
        raise ValueError(_edn_error(e)) from None
    if len(forms) != 1:
        raise ValueError(f"{len(forms)} forms where one was expected")
    try:
        return _plain(forms[0])
    except TypeError as e:  # e.g. a map as a map key
        raise ValueError(str(e)) from None


def _edn_error(e: Exception) -> str:
    """edn_format's error in a few words: its parser raises with the offending token as the argument."""
    token = e.args[0] if e.args else None
    if hasattr(token, "lexpos") and hasattr(token, "value"):
        return f"unexpected {token.value!r} at column {token.lexpos + 1}"
    return " ".join(str(e).split())[:200] or type(e).__name__


def parse_edn_history(path: str | Path) -> list[Op]:
    ops: list[Op] = []
    pending_anonymous: int | None = None
    next_anon = 1 << 30
    for n, line in enumerate(read_text_lines(path), start=1):
        text = line.strip()
        if not text or text.startswith(";"):
            continue
        try:
            d = read_edn_form(text)
        except ValueError as e:
            raise HistoryFormatError(f"{path} line {n}: not one EDN map ({e}); write one op map per line.") from None
        op = _op(d, f"{path} line {n}")
        process = op.process
        if process is None:
            # No :process: an invocation pairs with the completion that follows it.
            if op.type == "invoke":
                pending_anonymous = next_anon
                next_anon += 1
            op.process = pending_anonymous if pending_anonymous is not None else next_anon
        op.index = len(ops)
        ops.append(op)
    return ops


def _op(d: Any, where: str) -> Op:
    """One op from an EDN op map; a field of the wrong kind is a HistoryFormatError naming it."""
    if not isinstance(d, dict) or "type" not in d:
        raise HistoryFormatError(f"{where}: an op must be a map with a :type.")
    if not isinstance(d["type"], str) or d["type"] not in OP_TYPES:
        raise HistoryFormatError(f"{where}: :type {d['type']!r} is not one of {', '.join(OP_TYPES)}.")
    process = d.get("process")
    if not (process is None or process == "nemesis" or (isinstance(process, int) and not isinstance(process, bool))):
        raise HistoryFormatError(f"{where}: :process {process!r} must be an integer or :nemesis.")
    time = d.get("time", 0)  # no :time means no real-time information: every op at time 0
    if isinstance(time, bool) or not isinstance(time, (int, float)) or not math.isfinite(time):
        raise HistoryFormatError(f"{where}: :time {time!r} must be a number of nanoseconds.")
    f = d.get("f", "txn")
    extra = {str(k).replace("-", "_"): v for k, v in d.items() if k not in STANDARD_FIELDS}
    return Op(type=d["type"], f=f if isinstance(f, str) else str(f), process=process,  # type: ignore[arg-type]
              value=d.get("value"), time=int(time), error=d.get("error"), extra=extra or None)


KAFKA_FS = ("txn", "send", "poll")  # the ops whose values are micro-op vectors (jepsen.tests.kafka)


def parse_kafka_edn_history(path: str | Path) -> list[Op]:
    """A Jepsen Kafka-workload history (history.edn) as txn-schema ops (checkers/txn.py)."""
    ops = parse_edn_history(path)
    for op in ops:
        if op.f in KAFKA_FS and op.value is not None:
            op.value = _kafka_micro_ops(op.value, f"{path}: op #{op.index}")
    return ops


def _kafka_micro_ops(value: Any, where: str) -> list:
    """[[send k v-or-[offset v]] [poll] [poll {k [[offset v] ...]}]] with the poll maps keyed by text."""
    if not isinstance(value, list):
        raise HistoryFormatError(f"{where}: the value {value!r} is not a vector of micro-ops; a Kafka-workload op's "
                                 f"value is like [[:send 1 2] [:poll]].")
    out = []
    for mop in value:
        if isinstance(mop, list) and len(mop) == 2 and mop[0] == "poll" and isinstance(mop[1], dict):
            out.append(["poll", {str(k): v for k, v in mop[1].items()}])
        elif isinstance(mop, list) and mop and mop[0] in ("send", "poll"):
            out.append(mop)
        else:
            raise HistoryFormatError(f"{where}: the micro-op {mop!r} is neither [:send k v] nor [:poll ...]; is this a "
                                     f"history of Jepsen's Kafka workload?")
    return out


def _edn(x: Any, keywordize: bool = False) -> str:
    if isinstance(x, _Raw):
        return str(x)
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


def _micro_op(mop: Any) -> str:
    """One micro-op as Jepsen writes it: [:send k ...], [:poll {k [...]}] with int keys, [:append k v], [:r k v]."""
    if isinstance(mop, list) and len(mop) == 2 and mop[0] == "poll" and isinstance(mop[1], dict):
        return "[:poll {" + ", ".join(f"{_edn(_int_key(k))} {_edn(v)}" for k, v in mop[1].items()) + "}]"
    return _edn(mop, keywordize=True)


def _int_key(k: Any) -> Any:
    return int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k


def _is_micro_ops(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, list) and m and m[0] in ("send", "poll") for m in value)


def _value(op: Op) -> str:
    if (op.f == "txn" or (op.f in ("send", "poll") and _is_micro_ops(op.value))) and isinstance(op.value, list):
        return "[" + " ".join(_micro_op(mop) for mop in op.value) + "]"
    if op.f in ("poll", "final-poll") and op.type == "ok":
        if op.f == "final-poll" and isinstance(op.value, list) and len(op.value) == 3:
            return "{" + f"{op.value[0]} {_edn(op.value[2])}" + "}"
        if isinstance(op.value, dict):
            return "{" + ", ".join(f"{int(k)} {_edn(v)}" for k, v in op.value.items()) + "}"
    return _edn(op.value)


def _keywordized_maps(entries: Any) -> str:
    """Jepsen's :rebalance-log entries: maps with keyword keys ({:keys [0 1], :type :assigned})."""
    return _Raw("[" + " ".join("{" + ", ".join(f":{k} " + (f":{v}" if isinstance(v, str) else _edn(v))
                                             for k, v in e.items()) + "}" for e in entries if isinstance(e, dict)) + "]")


class _Raw(str):
    """EDN text already written (_edn passes it through)."""


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
            if op.extra and op.extra.get("rebalance_log"):
                fields.append(f":rebalance-log {_edn(_keywordized_maps(op.extra['rebalance_log']))}")
            f.write("{" + ", ".join(fields) + "}\n")
