"""What every checker returns, and how checkers compose (DESIGN.md, "Checker").

Verdicts are three-valued everywhere: True, False or "unknown" (Porcupine's ok / illegal /
unknown). A checker that runs out of its budget, or lacks any of its inputs, says "unknown",
never a guess, and says why in `unknown_reasons` (one sentence each); the composite lists
every part's reasons, so an unknown verdict always carries at least one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

from kafkaesque_harness.checkers.clients import attribute_with_trace, attribution
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.checkers.stream import InFile, OpSource, Row
from kafkaesque_harness.history import HistoryFile, Op, gc_paused, read_history

Valid = bool | Literal["unknown"]
UNKNOWN: Literal["unknown"] = "unknown"
MAX_EXAMPLES = 8


def merge_valid(values: Iterable[Valid]) -> Valid:
    """False if any is false; else "unknown" if any is unknown; else True."""
    saw_unknown = False
    for v in values:
        if v is False:
            return False
        if v == UNKNOWN:
            saw_unknown = True
    return UNKNOWN if saw_unknown else True


@dataclass
class Anomaly:
    """One anomaly type with its count and up to MAX_EXAMPLES concrete examples.

    `examples` are JSON-ready dicts, each carrying the ops (as Op.to_dict()) that prove it.
    """

    name: str
    count: int
    examples: list[dict[str, Any]] = field(default_factory=list)
    explanation: str = ""
    # whose the instances are, where the evidence can tell (checkers/clients.py): owner -> how many of `count`;
    # the rest are unattributed. None: the checker does not attribute.
    whose: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "count": self.count,
            "explanation": self.explanation,
            "examples": self.examples[:MAX_EXAMPLES],
        }
        if self.whose:
            d["whose"] = dict(self.whose)
        return d


@dataclass
class Result:
    checker: str
    valid: Valid
    anomalies: list[Anomaly] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # counterexamples, cycles, ...
    error: str | None = None  # set when the checker itself could not finish
    unknown_reasons: list[str] = field(default_factory=list)  # why it could not decide, one sentence each

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "checker": self.checker,
            "valid": self.valid,
            "anomaly_types": [a.name for a in self.anomalies],
            "anomalies": [a.to_dict() for a in self.anomalies],
            "stats": self.stats,
        }
        if self.details:
            d["details"] = self.details
        if self.error:
            d["error"] = self.error
        if self.unknown_reasons:
            d["unknown_reasons"] = self.unknown_reasons
        return d


class Checker(Protocol):
    name: str

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result: ...


@dataclass(frozen=True)
class CheckContext:
    """What a checker may read besides (test, history), handed in by whoever composes the checks (the
    runner, `kafkaesque analyze`): `previous`, the results of the checkers before it in the list, by name
    (a later checker builds on an earlier one's findings instead of computing them again); `data`, the
    run's recorded inputs other than its history, by name ("replicas": the replicas' normalised state,
    clusters/replica_dumps.py). The checker itself reads no file."""

    previous: Mapping[str, Result] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ContextualChecker(Checker, Protocol):
    """A checker that also reads its context (earlier results, the run's other inputs): run_checkers calls
    `check_in` with it; `check` is the same check with an empty context."""

    def check_in(self, test: dict[str, Any], history: Sequence[Op], context: CheckContext) -> Result: ...


def reasons_of(r: Result) -> list[str]:
    """Why `r` could not decide, each sentence naming the checker; never empty for an unknown verdict."""
    out = [f"{r.checker}: {s}" for s in r.unknown_reasons]
    if r.valid == UNKNOWN and r.error:
        out.append(say("checker-could-not-finish", checker=r.checker, error=r.error))
    if r.valid == UNKNOWN and not out:
        out.append(say("checker-gave-no-reason", checker=r.checker))
    return out


def compose(results: Sequence[Result]) -> dict[str, Any]:
    """The composite verdict: false if any part is false, unknown if any is unknown. `unknown_reasons`
    lists every part's reasons (also beside a false verdict: what else could not be decided)."""
    out: dict[str, Any] = {
        "valid": merge_valid(r.valid for r in results),
        "checkers": {r.checker: r.to_dict() for r in results},
    }
    reasons = [s for r in results for s in reasons_of(r)]
    if reasons:
        out["unknown_reasons"] = reasons
    owners = attribution(results)  # whose the reported anomalies are (checkers/clients.py)
    if owners is not None:
        out["attribution"] = owners
    return out


@runtime_checkable
class StreamChecker(Checker, Protocol):
    """A checker that reads the history once, pair by pair, in invocation order, keeping only what it needs
    (checkers/stream.py): `stream` gives its reader, fed every pair and then asked for the result. The same
    reader serves `check` on a history in memory; run_checkers hands a history file (HistoryFile) to every
    such checker in one pass, without holding it. `cutoff` is the time of the last fault beyond the budget
    (history/faults.py); `ops` is where the history's pairs and ops are read from."""

    def stream(self, test: dict[str, Any], cutoff: int | None, ops: OpSource) -> PairReader: ...


class PairReader(Protocol):
    def feed(self, inv: Row, comp: Row | None) -> None: ...

    def result(self) -> Result: ...


NO_CLIENT_OPS = say("no-client-ops")


def run_checkers(checkers: Sequence[Checker], test: dict[str, Any], history: Sequence[Op] | HistoryFile,
                 data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run each checker in order, handing each contextual one the results before it and `data` (the
    run's other inputs, CheckContext); a checker that raises is reported as unknown with its error, not
    lost. A history without a single client op proves nothing: every checker is unknown (a valid verdict
    on it would be vacuous). A history file (HistoryFile) is read once for all the StreamCheckers, and is
    never held whole unless another checker needs it so; a line it cannot read raises HistoryFormatError."""
    if not any(op.is_client for op in history):
        out = compose([Result(checker=c.name, valid=UNKNOWN, unknown_reasons=[NO_CLIENT_OPS]) for c in checkers])
        out["unknown_reasons"] = [NO_CLIENT_OPS]  # once, not once per checker: it is one fact
        return out
    results: list[Result] = []
    previous: dict[str, Result] = {}
    data = MappingProxyType(dict(data or {}))
    with gc_paused():
        streamed = _stream_file(checkers, test, history) if isinstance(history, HistoryFile) else {}
        in_memory = None
        for c in checkers:
            try:
                if c.name in streamed:
                    result = streamed[c.name]()
                else:
                    if isinstance(history, HistoryFile):
                        in_memory = in_memory if in_memory is not None else read_history(history.path)
                    target = in_memory if in_memory is not None else history
                    if isinstance(c, ContextualChecker):
                        result = c.check_in(test, target, CheckContext(MappingProxyType(dict(previous)), data))
                    else:
                        result = c.check(test, target)
            except Exception as e:  # noqa: BLE001 - a crashing checker must not hide the others
                result = Result(checker=c.name, valid=UNKNOWN, error=f"{type(e).__name__}: {e}")
            results.append(result)
            previous[c.name] = result
    failed = None
    try:
        attribute_with_trace(results, data)  # the broker answers behind the client events (checkers/clients.py)
    except Exception as e:  # noqa: BLE001 - an attribution that fails leaves the verdict as the checkers gave it
        failed = f"{type(e).__name__}: {e}"
    out = compose(results)
    if failed:
        out["attribution_error"] = failed
    return out


def _stream_file(checkers: Sequence[Checker], test: dict[str, Any], history: HistoryFile) -> dict[str, Any]:
    """One pass over the file for every StreamChecker that reads no context: checker name -> what gives its
    result (raising the checker's error, if it failed while reading)."""
    cutoff = history.beyond_budget_time()
    ops = InFile(history)
    readers: dict[str, Any] = {}
    failed: dict[str, Exception] = {}
    for c in checkers:
        if isinstance(c, StreamChecker) and not isinstance(c, ContextualChecker):
            try:
                readers[c.name] = c.stream(test, cutoff, ops)
            except Exception as e:  # noqa: BLE001 - reported as that checker's error
                failed[c.name] = e
    live = dict(readers)
    for inv, comp in ops.pairs():
        for name, reader in list(live.items()):
            try:
                reader.feed(inv, comp)
            except Exception as e:  # noqa: BLE001 - reported as that checker's error; the others read on
                failed[name] = e
                del live[name]

    def outcome(name: str):
        def result() -> Result:
            if name in failed:
                raise failed[name]
            return readers[name].result()
        return result
    return {name: outcome(name) for name in (*readers, *failed)}


def missing_node_files(checker: str, test: dict[str, Any], doc: dict[str, Any] | None, reason: str,
                       what: str, handed: str) -> Result | None:
    """The unknown verdict of a checker whose input is a file per node collected into the run dir (the
    replicas' state dumps, the protocol traces) when that input is missing as a whole; None when `doc`
    names nodes. `reason` is the checkers/reasons.py key, `what` the files in words ("traces"), `handed`
    the document the checker is handed, in words."""
    if doc is None:
        why = (f"the run directory is not known, so the nodes' {what} cannot be read" if not test.get("run_dir")
               else f"{handed} was not handed to the checker")
        return Result(checker, UNKNOWN, unknown_reasons=[say(reason, why=why)])
    if not doc.get("nodes"):
        return Result(checker, UNKNOWN, unknown_reasons=[
            say(reason, why=f"no node left its {what} in nodes/ and test.json names no nodes")])
    return None
