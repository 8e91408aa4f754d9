"""The op schema (DESIGN.md, "Operations and histories"): the four op types, the nemesis's
process name, the Op record, and how invocations pair with their completions.

The ground floor of the project: this package imports nothing of the rest, and everything that
reads or writes a history (workloads, nemeses, checkers, results, the runner) stands on it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
OP_TYPES = (INVOKE, OK, FAIL, INFO)
NEMESIS = "nemesis"
STANDARD_FIELDS = frozenset({"index", "time", "process", "type", "f", "value", "node", "error"})


class HistoryFormatError(ValueError):
    """A history file line that is not a valid op; the message names the line and the problem."""


@dataclass(slots=True)
class Op:
    """One event of a history.

    `process` is an int for client processes and "nemesis" for the fault injector.
    `time` is nanoseconds since the test started (monotonic clock).
    Queue ops (Jepsen's Kafka workload): send value [key, value], completed
    [key, [offset, value]]; poll completes with {key: [[offset, value], ...]} where the
    JSON object keys are the decimal string of the int key.
    """

    type: str
    f: str
    process: int | str
    value: Any = None
    time: int = 0
    index: int = -1
    node: str | None = None
    error: Any = None
    # A workload's own fields beside the standard ones (the txn workload's "rebalance_log" and "final",
    # Jepsen's :rebalance-log and final-poll markers): written as top-level keys, read back from them.
    extra: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "time": self.time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
        }
        if self.node is not None:
            d["node"] = self.node
        if self.error is not None:
            d["error"] = self.error
        if self.extra:
            d.update({k: v for k, v in self.extra.items() if k not in STANDARD_FIELDS})
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Op:
        return cls(
            type=d["type"],
            f=d["f"],
            process=d["process"],
            value=d.get("value"),
            time=d.get("time", 0),
            index=d.get("index", -1),
            node=d.get("node"),
            error=d.get("error"),
            extra={k: v for k, v in d.items() if k not in STANDARD_FIELDS} or None,
        )

    @property
    def is_client(self) -> bool:
        return self.process != NEMESIS


class History(list):
    """A run's ops as read from history.jsonl (history/files.py's read_history), paired once.

    Every checker, the evidence rules and the report ask `pair_ops` for the pairs of the same
    history; for a History the pairing is done on the first ask and shared by the rest. A History
    is not changed after it is read: build a new one (or use a plain list) to change ops.
    """

    _pairs: list[tuple[Op, Op | None]] | None = None
    _paired_len = -1

    def pairs(self) -> list[tuple[Op, Op | None]]:
        if self._pairs is None or self._paired_len != len(self):
            self._pairs, self._paired_len = _pair(self), len(self)
        return self._pairs


def pair_ops(history: Iterable[Op]) -> list[tuple[Op, Op | None]]:
    """Pair every invocation with its completion, in invocation order.

    An invocation without a completion (the harness died, or the history was cut) pairs
    with None; checkers treat it as indeterminate (info). Completions without an
    invocation are ignored. The pairs of a History are computed once and shared: read them,
    never change the list.
    """
    return history.pairs() if isinstance(history, History) else _pair(history)


def _pair(history: Iterable[Op]) -> list[tuple[Op, Op | None]]:
    return list(pair_stream((op.type, op.process, op) for op in history))


def pair_stream(events: Iterable[tuple[str, Any, Any]]) -> Iterator[tuple[Any, Any | None]]:
    """pair_ops's rule over a stream: (type, process, item) in history order in, (invocation's item,
    completion's item or None) out, in invocation order, as soon as each pair is settled. A pair is settled
    when its completion arrives, when its process invokes again (the open one then never completes), or at
    the end. What is held meanwhile is the pairs invoked since the oldest open invocation: a history file of
    any length pairs in memory bounded by how far its ops overlap, not by its length."""
    open_by_process: dict[Any, int] = {}
    waiting: deque[list[Any]] = deque()  # [invocation, completion, settled], oldest first
    first = 0                              # the invocation number of waiting[0]
    count = 0
    for type_, process, item in events:
        if type_ == INVOKE:
            was = open_by_process.get(process)
            if was is not None:
                waiting[was - first][2] = True  # superseded: it pairs with None
            open_by_process[process] = count
            waiting.append([item, None, False])
            count += 1
        else:
            i = open_by_process.pop(process, None)
            if i is None:
                continue  # a completion without an invocation is ignored
            pair = waiting[i - first]
            pair[1], pair[2] = item, True
        while waiting and waiting[0][2]:
            inv, comp, _ = waiting.popleft()
            first += 1
            yield inv, comp
    for inv, comp, _ in waiting:
        yield inv, comp
