"""The fault ledger: every fault of a run, from the moment a nemesis asks for it until it is healed.

One ledger per run, shared by every nemesis (random faults, scenarios, the protocol nemesis,
the controller and membership nemeses) through nemesis/actions.py, which is the only code
that acts on the cluster. Each fault is a FaultRecord (history/faults.py, the
schema) that moves through

    requested -> applied (the commands succeeded) -> observed (evidence it took effect)
              -> healed (undone, and evidence of that too)

and the runner writes what changed into the completion of the nemesis op during which it
changed (`changes()`), so the history carries the whole record and a stored run can be
judged without the cluster (checkers/evidence.py). The ledger also answers the heal's
question "what is still active?", so a heal never depends on one nemesis's own bookkeeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kafkaesque_harness.history import FaultRecord


class FaultLedger:
    def __init__(self, clock: Callable[[], int] = lambda: 0):
        self.clock = clock  # the history's clock (ns since the test started)
        self._records: dict[int, FaultRecord] = {}
        self._changed: dict[int, None] = {}  # ids changed since the last changes(), in order
        self._lock = threading.Lock()

    # --- the four stages ------------------------------------------------------------------------
    def request(self, fault: str, nodes: list[str], by: str, detail: Any = None) -> FaultRecord:
        with self._lock:
            rec = FaultRecord(len(self._records) + 1, fault, sorted(nodes), by, detail, t_requested=self.clock())
            self._records[rec.id] = rec
            self._changed[rec.id] = None
        return rec

    def applied(self, rec: FaultRecord, ok: bool = True, error: str | None = None) -> None:
        self._set(rec, applied=ok, apply_error=error, t_applied=self.clock() if ok else None)

    def observed(self, rec: FaultRecord, ok: bool, evidence: dict[str, Any] | None = None,
                 error: str | None = None) -> None:
        self._set(rec, observed=ok, observe_error=None if ok else (error or "no evidence that it took effect"),
                  evidence=evidence or {})

    def healed(self, rec: FaultRecord, ok: bool, evidence: dict[str, Any] | None = None,
               error: str | None = None) -> None:
        self._set(rec, healed=ok, heal_error=None if ok else (error or "no evidence that it was undone"),
                  heal_evidence=evidence or {}, t_healed=self.clock())

    def _set(self, rec: FaultRecord, **fields: Any) -> None:
        """A stage reached: its fields set on the record, which changes() then reports."""
        with self._lock:
            for name, value in fields.items():
                setattr(rec, name, value)
            self._changed[rec.id] = None

    def note(self, rec: FaultRecord, **fields: Any) -> None:
        """More evidence on a record (e.g. whether leadership moved after a leader was killed)."""
        with self._lock:
            rec.evidence = {**rec.evidence, **fields}
            self._changed[rec.id] = None

    @contextmanager
    def applying(self, fault: str, nodes: list[str], by: str, detail: Any = None) -> Iterator[FaultRecord]:
        """Request a fault and run the block that applies it: the record is applied when the block
        returns, and not applied (with the error) when it raises, which is then raised on."""
        rec = self.request(fault, nodes, by, detail)
        try:
            yield rec
        except BaseException as e:
            self.applied(rec, False, f"{type(e).__name__}: {e}"[:300])
            raise
        if rec.applied is None:
            self.applied(rec)

    # --- questions --------------------------------------------------------------------------------
    def active(self, faults: tuple[str, ...] = (), node: str | None = None, by: str | None = None
               ) -> list[FaultRecord]:
        """Applied and not healed, optionally of these kinds, on this node, asked for by this nemesis."""
        with self._lock:
            return [r for r in self._records.values() if r.active and (not faults or r.fault in faults)
                    and (node is None or node in r.nodes) and (by is None or r.by == by)]

    def records(self) -> list[FaultRecord]:
        with self._lock:
            return list(self._records.values())

    def changes(self) -> list[dict[str, Any]]:
        """The records changed since the last call, as they are now (what the next nemesis completion
        carries under value["faults"])."""
        with self._lock:
            out = [self._records[i].to_dict() for i in self._changed]
            self._changed.clear()
        return out
