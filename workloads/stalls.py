"""Producer stalls: one client process stops inside an open transaction for a while, as a GC pause or a
stopped client VM would stop it, then goes on with the same transaction (the stall-producer fault).

The producers are clients inside the harness process, so this fault is a request to the workload, not a
signal to a node. The runner asks a workload that has the ability (workloads/base.py StallableProducers)
for its one ProducerStallControl and hands it to the fault actions (nemesis/actions.py stall_producer and
resume_producers, which write every stage into the fault ledger); the workload's clients hold the same
control and obey it at their stall points. Nothing else touches it, and nothing in a client sleeps
without a request from here.

    request(seconds, ...)   the nemesis side asks: which process (a chosen one, any holding a transactional
                            id of a set, or any) and for how long
    claim(process, id)      a client at a stall point (inside an open transaction, a send delivered, more
                            to send before the commit) takes a request that matches it
    Stall.hold(evidence)    ... and stops there: `entered` is set with what it held (transactional id,
                            producer id and epoch where the library tells them, the partitions sent to),
                            then it waits out the seconds (or a release), and `resumed` is set with the
                            measured stall
    Stall.finish(outcome)   the client's transaction came to an end: committed, fenced, aborted, unknown
                            (`finished`)

A request that no client claimed in time is withdrawn (`withdraw`), so a late client never stalls for a
fault the ledger says did not happen. Thread-safe: one lock for the open requests; each stage is an Event.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

# What a stalled transaction came to (Stall.outcome["result"]): the client's completion, read by outcome_of.
COMMITTED, FENCED, ABORTED, UNKNOWN = "committed", "fenced", "aborted", "unknown"
# How the client libraries name a producer whose epoch was bumped under it (KIP-98, KIP-588): librdkafka's
# PRODUCER_FENCED, INVALID_PRODUCER_EPOCH and its local _FENCED ("fenced by a newer instance"); kafka-python's
# ProducerFencedError and InvalidProducerEpochError. Compared in upper case, underscores dropped.
FENCING_ERRORS = ("FENCED", "INVALIDPRODUCEREPOCH")


@dataclass(eq=False)  # one request is one object: compared by identity
class Stall:
    """One requested stall and its stages. `process` and `transactional_ids` say which client may take it
    (None: any); `fault` is the id of its fault record in the run's ledger; the client fills in `evidence`,
    `stalled_s` and `outcome` as it goes."""

    id: int
    seconds: float
    process: int | None = None
    transactional_ids: frozenset[str] | None = None
    fault: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    stalled_s: float | None = None
    outcome: dict[str, Any] | None = None
    entered: threading.Event = field(default_factory=threading.Event)
    resumed: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)

    def matches(self, process: int, transactional_id: str) -> bool:
        return ((self.process is None or self.process == process)
                and (self.transactional_ids is None or transactional_id in self.transactional_ids))

    def hold(self, evidence: dict[str, Any], clock: Callable[[], float] = time.monotonic) -> float:
        """The client's side: stop here for `seconds` (or until released), holding the transaction that
        `evidence` describes; returns how long it really stood still."""
        self.evidence = dict(evidence)
        start = clock()
        self.entered.set()
        self._release.wait(self.seconds)
        self.stalled_s = round(clock() - start, 3)
        self.resumed.set()
        return self.stalled_s

    def finish(self, outcome: dict[str, Any]) -> None:
        """The client's side: what the stalled transaction came to (outcome_of its completion)."""
        self.outcome = dict(outcome)
        self.finished.set()

    def release(self) -> None:
        """End the stall now (the run's final heal), whatever is left of its seconds."""
        self._release.set()


class ProducerStallControl:
    """The one control a run's clients and its fault actions share (module docstring)."""

    def __init__(self, txn_timeout_s: float):
        self.txn_timeout_s = txn_timeout_s  # the producers' transaction.timeout.ms, in seconds
        self._open: list[Stall] = []        # requested, not yet claimed
        self._claimed: list[Stall] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    # --- the fault actions' side ------------------------------------------------------------------------
    def request(self, seconds: float, process: int | None = None,
                transactional_ids: Collection[str] | None = None, fault: int | None = None) -> Stall:
        """Ask for a stall of `seconds` at the next stall point of a matching client (`fault`: its ledger id)."""
        stall = Stall(next(self._ids), float(seconds), process,
                      frozenset(transactional_ids) if transactional_ids is not None else None, fault)
        with self._lock:
            self._open.append(stall)
        return stall

    def withdraw(self, stall: Stall) -> bool:
        """Take back a request no client has claimed (True); False when a client claimed it already."""
        with self._lock:
            if stall in self._open:
                self._open.remove(stall)
                return True
            return False

    def release_all(self) -> list[Stall]:
        """Withdraw every open request and end every stall still held; the stalls that were held."""
        with self._lock:
            self._open.clear()
            held = [s for s in self._claimed if not s.resumed.is_set()]
        for s in held:
            s.release()
        return held

    # --- the clients' side ------------------------------------------------------------------------------
    def wanted(self, process: int, transactional_id: str) -> bool:
        """Is a stall asked of this client? (Cheap: asked at every stall point.)"""
        with self._lock:
            return any(s.matches(process, transactional_id) for s in self._open)

    def claim(self, process: int, transactional_id: str) -> Stall | None:
        """Take the first open request this client matches; None when there is none (any longer)."""
        with self._lock:
            for s in self._open:
                if s.matches(process, transactional_id):
                    self._open.remove(s)
                    self._claimed.append(s)
                    return s
        return None


def outcome_of(type_: str, error: Any) -> dict[str, Any]:
    """What a stalled transaction came to, from its completion (workloads/txn.py's outcome rules): committed
    when ok; fenced when the error names a fenced producer (the op itself may still be fail or info); aborted
    for any other fail; unknown for any other info."""
    text = str(error or "")
    if type_ == "ok":
        result = COMMITTED
    elif any(name in text.upper().replace("_", "") for name in FENCING_ERRORS):
        result = FENCED
    elif type_ == "fail":
        result = ABORTED
    else:
        result = UNKNOWN
    out: dict[str, Any] = {"result": result, "op": type_}
    if error:
        out["error"] = text[:300]
    return out
