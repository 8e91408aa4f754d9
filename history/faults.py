"""The standard fault record, and what is read back from it: a history's faults and their windows.

Every fault a nemesis injects goes through one ledger (nemesis/ledger.py), which follows it
through four stages and writes each stage into the history: a nemesis op's completion carries,
under `value["faults"]`, the records that op created or changed. A record is

    id           unique in the run
    fault        kill, stop, pause, lossy-crash, partition, net, clock, disk, drop-caches, membership,
                 stall-producer (a client process, not a node: nodes is empty, detail and evidence name it)
    nodes        the nodes it acts on
    by           the nemesis that asked for it: "kill", "scenario:unclean-election", "protocol", ...
    detail       what exactly (a grudge, a clock offset, a move), JSON
    applied      the commands ran and succeeded (false: apply_error says why; null: still running)
    observed     evidence that it took effect: the process gone or stopped, a probe across the
                 cut timing out, the clock read back from the node, the lossy file system's report
                 (`evidence`; false: `observe_error` says what was seen instead)
    healed       it was undone and that was seen too (`heal_evidence`; false: `heal_error`)
    t_requested, t_applied, t_healed   nanoseconds on the history's clock

A later copy of a record (same id) supersedes an earlier one. Jepsen's histories carry their
nemesis ops the same way: the fault's own description travels with the op that made it.

Fault windows (when each fault was active) are computed here once, for the report and the
Spark pipeline alike: from t_applied to t_healed, or to the run's final heal op, or open.
Histories written before the ledger existed fall back to the old rule: a nemesis start-X
completion until the next stop-X (or the final heal).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kafkaesque_harness.history.ops import INVOKE, NEMESIS, Op

FAULTS_KEY = "faults"  # where a nemesis op's completion carries the records it touched
HEAL_F = "heal"        # the run's final heal op (harness/runner.py)
# The mark a nemesis completion carries when its fault broke the durability contract (e.g. every
# replica lost its unsynced writes at once): what follows may lose acknowledged writes by design,
# so the checkers stop counting such losses from that point.
BEYOND_BUDGET = "beyond_fault_budget"


def beyond_budget_time(history: Sequence[Op]) -> int | None:
    """The time (ns) of the last nemesis completion marked beyond the fault budget, or None."""
    last = None
    for op in history:
        if marks_beyond_budget(op.process, op.type, op.value):
            last = op.time
    return last


def marks_beyond_budget(process: Any, type_: str, value: Any) -> bool:
    """Whether an op (its process, type and value) is a nemesis completion marked beyond the fault budget:
    the one rule, for ops in memory (beyond_budget_time) and lines of a file (HistoryFile)."""
    return process == NEMESIS and type_ != INVOKE and isinstance(value, dict) and bool(value.get(BEYOND_BUDGET))


@dataclass
class FaultRecord:
    id: int
    fault: str
    nodes: list[str]
    by: str
    detail: Any = None
    applied: bool | None = None
    apply_error: str | None = None
    observed: bool | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    observe_error: str | None = None
    healed: bool | None = None
    heal_evidence: dict[str, Any] = field(default_factory=dict)
    heal_error: str | None = None
    t_requested: int = 0
    t_applied: int | None = None
    t_healed: int | None = None

    @property
    def label(self) -> str:
        """e.g. "kill broker-1", "partition broker-1,controller-0"."""
        return f"{self.fault} {','.join(self.nodes)}" if self.nodes else self.fault

    @property
    def active(self) -> bool:
        """Applied and not yet undone: what a heal still owes."""
        return self.applied is True and self.healed is None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FaultRecord:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


def records_in(op: Op) -> list[dict[str, Any]]:
    """The fault records a nemesis op's completion carries (none for other ops)."""
    if op.process != NEMESIS or op.type == INVOKE or not isinstance(op.value, dict):
        return []
    recs = op.value.get(FAULTS_KEY)
    return [r for r in recs if isinstance(r, dict) and "id" in r] if isinstance(recs, list) else []


def fault_records(history: Iterable[Op]) -> list[FaultRecord]:
    """Every fault of the history in its final state, by id."""
    latest: dict[int, dict[str, Any]] = {}
    for op in history:
        for r in records_in(op):
            latest[r["id"]] = r
    return [FaultRecord.from_dict(latest[i]) for i in sorted(latest)]


@dataclass
class FaultWindow:
    name: str               # "kill broker-1"
    fault: str              # "kill"
    start_ns: int
    end_ns: int | None      # None: never healed inside the history
    detail: str

    @property
    def start_s(self) -> float:
        return self.start_ns / 1e9

    @property
    def end_s(self) -> float | None:
        return None if self.end_ns is None else self.end_ns / 1e9


class FaultWindows:
    """Fault windows as a fold over a history's ops (`see` each op in order, then `finish`), so the
    pipeline can stream a history of millions of ops through it and the report can hand it a list."""

    def __init__(self) -> None:
        self._records: dict[Any, dict[str, Any]] = {}
        self._final_heal_ns: int | None = None
        self._legacy_open: dict[str, tuple[int, str]] = {}
        self._legacy: list[FaultWindow] = []

    def see(self, op: Op) -> None:
        if op.process != NEMESIS or op.type == INVOKE:
            return
        for r in records_in(op):
            self._records[r["id"]] = r
        if op.f == HEAL_F:
            self._final_heal_ns = op.time if self._final_heal_ns is None else self._final_heal_ns
            for name in list(self._legacy_open):
                self._legacy_close(name, op.time)
        elif op.f.startswith("start-"):
            self._legacy_open.setdefault(op.f[6:], (op.time, json.dumps(op.value, default=str)[:200]))
        elif op.f.startswith("stop-") and op.f[5:] in self._legacy_open:
            self._legacy_close(op.f[5:], op.time)

    def _legacy_close(self, name: str, t: int) -> None:
        start, detail = self._legacy_open.pop(name)
        self._legacy.append(FaultWindow(name, name, start, t, detail))

    def finish(self) -> list[FaultWindow]:
        if not self._records:  # a history from before the ledger: start-X .. stop-X
            legacy = self._legacy + [FaultWindow(n, n, s, None, d) for n, (s, d) in self._legacy_open.items()]
            return sorted(legacy, key=lambda w: w.start_ns)
        out = []
        for r in map(FaultRecord.from_dict, self._records.values()):
            if r.applied is not True:
                continue  # it never happened: no window
            start = r.t_applied if r.t_applied is not None else r.t_requested
            end = r.t_healed if r.t_healed is not None else self._final_heal_ns
            out.append(FaultWindow(r.label, r.fault, start, end, json.dumps(r.detail, default=str)[:200]
                                   if r.detail is not None else r.by))
        return sorted(out, key=lambda w: (w.start_ns, w.name))


def fault_windows(history: Iterable[Op]) -> list[FaultWindow]:
    """When each fault was active (the one rule the report and the pipeline share)."""
    folder = FaultWindows()
    for op in history:
        folder.see(op)
    return folder.finish()
