"""The txn checker: Jepsen's Kafka workload analyses (jepsen.tests.kafka) over the txn history (issue 25).

History schema (workloads/txn.py writes it; Jepsen's EDN maps onto it, checkers/formats/edn.py):
  txn / send / poll  invoke [["send", k, v], ["poll"], ...]
                     ok     [["send", k, [offset, v]], ["poll", {"<k>": [[offset, v], ...]}], ...]
                     fail: definitely not committed; info: unknown (value as invoked or partly filled)
  assign / subscribe invoke and ok [k, ...]; completions may carry "rebalance_log" [{"keys": [...]}, ...]
  crash              info: the client was dropped; its worker goes on as a fresh process
  poll with "final": true  the final reads of every key from its start, read_committed

Each analysis is defined once (`_Analysis` methods), named as Jepsen names it:
  inconsistent-offsets   two values at one offset of a key
  duplicate              one value at two offsets of a key
  lost-write             a committed send below the highest offset some committed read reached, never read
  unseen                 a committed send no committed read ever returned (with final reads: in the keys
                         a final read completed; a key with committed sends and none is unknown)
  G1a                    a committed read of a value sent by a failed (aborted) transaction
  precommitted-read      a transaction polled a value it sent itself (Kafka hides uncommitted records)
  int-poll-skip / int-nonmonotonic-poll   within one transaction, successive reads of a key skip over
                         or go back in the key's version order (keys rebalanced during it excepted)
  int-send-skip / int-nonmonotonic-send   the same for one transaction's successive sends to a key
  poll-skip / nonmonotonic-poll           between one process's transactions (an assign or subscribe
                         that drops the key resets it)
  nonmonotonic-send      a process's send went before its previous send to the key
  torn-transaction       (ours, not Jepsen's) a committed transaction partly visible: the final reads
                         hold some of its sends but not others, or a read returned one of its sends and
                         passed over another's offset in a key it read across
  G0, G1c, G-single, G2-item and their -process / -realtime forms: cycles in the dependency graph over
                         transactions (below)

The version order of a key is its offsets as sends (of transactions that must have committed) and polls
(of any transaction: a poll must return only committed data whatever its own transaction does) report
them; an index is an offset with the gaps left out (transaction markers take offsets nothing reads).
The graph (Jepsen's: ww from offsets only with `ww_deps`, as in Jepsen; wr always; rw only with
`rw_deps`: Jepsen leaves its rw graph out) links ok and info transactions:
  ww  T1 sent the value just before T2's in a key's version order
  wr  T2 polled a value T1 sent
  rw  T1's last read of a key was just before the value T2 sent
  process / realtime  T1 came first in the same process / completed before T2 began (Elle's orders)
Cycles are found and explained as checkers/elle.py does (its strongly connected components and
real-time frontier); each cycle class is searched for on its own, so an allowed class never hides a
forbidden one.

Whose (checkers/clients.py): an unseen send, a lost-write or a torn transaction whose missing send the client
library failed itself (the transaction's completion's "client_events" has its "send-error") is the client's,
told with the library's own error ("... yet its commit_transaction returned"); a process-order nonmonotonic-poll
or poll-skip whose read starts where a reset or seek of the process moved it carries that event. Without such
an event an anomaly stays unattributed; either way it counts.

Allowed (Jepsen's allowed-error-types): int-send-skip and G0 (and its forms) always, as Kafka never
isolates writes; poll-skip and nonmonotonic-poll when consumers subscribe (rebalances move them); G1c
(and forms) with ww_deps; G-single and G2-item (and forms) with rw_deps (polls are no snapshot); plus the
test's workload option "allowed". Allowed anomalies are reported in details["allowed"], not as anomalies.
Verdict: false on any anomaly not allowed; unknown when no transaction completed ok (nothing to judge),
a final read of a key with committed sends did not complete, or the cycle search ran out of its budget where a forbidden cycle class could be; else true.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

import networkx as nx

from kafkaesque_harness.checkers.clients import Moves, cause_fields, count_whose, send_error_cause
from kafkaesque_harness.checkers.core import MAX_EXAMPLES, UNKNOWN, Anomaly, Result
from kafkaesque_harness.checkers.graph import (
    PROCESS,
    REALTIME,
    RW,
    WR,
    WW,
    kind_view,
    nontrivial_sccs,
    realtime_edges,
)
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.history import CLIENT_EVENTS, FAIL, INFO, NEMESIS, OK, Op, client_events, pair_ops

_second = itemgetter(1)
CYCLE_BASES = ("G0", "G1c", "G-single", "G2-item")
CYCLE_TYPES = tuple(b + s for s in ("", "-process", "-realtime") for b in CYCLE_BASES)
ANOMALY_TYPES = ("inconsistent-offsets", "duplicate", "lost-write", "unseen", "G1a", "precommitted-read",
                 "int-poll-skip", "int-nonmonotonic-poll", "int-send-skip", "int-nonmonotonic-send",
                 "poll-skip", "nonmonotonic-poll", "nonmonotonic-send", "torn-transaction",
                 *CYCLE_TYPES, "cycle-search-timeout")
TXN_FS = frozenset({"txn", "send", "poll"})

EXPLANATIONS = {
    "inconsistent-offsets": "Sends and polls disagree on the value at one offset of a key: the logs diverged.",
    "duplicate": "One sent value appears at more than one offset of its key.",
    "lost-write": "A send that must have committed sits below the highest offset a committed read reached, "
                  "yet no committed read returned it.",
    "unseen": "A committed send that no committed read (final reads included) ever returned.",
    "G1a": "A committed read returned a value sent by a transaction that failed (aborted read).",
    "precommitted-read": "A transaction polled a value it sent itself: Kafka consumers must never see records "
                         "of an open transaction.",
    "int-poll-skip": "Within one transaction, successive reads of a key skipped over values that exist.",
    "int-nonmonotonic-poll": "Within one transaction, successive reads of a key went back (or repeated) in "
                             "the key's order.",
    "int-send-skip": "Within one transaction, successive sends to a key landed with other values between them.",
    "int-nonmonotonic-send": "Within one transaction, a later send to a key landed before an earlier one.",
    "poll-skip": "A process's next transaction began reading a key past values that exist after where its "
                 "previous one stopped.",
    "nonmonotonic-poll": "A process's next transaction began reading a key at or before where its previous "
                         "one stopped.",
    "nonmonotonic-send": "A process's send to a key landed at or before its previous send to that key.",
    "torn-transaction": "A committed transaction was partly visible: some of its sends were read where "
                        "others, in the range read, were not.",
    "G0": "A cycle of write-write dependencies (offsets of two transactions interleave in opposite orders).",
    "G1c": "A cycle of write-write and write-read dependencies (each transaction saw the other's effects).",
    "G-single": "A dependency cycle with exactly one anti-dependency (read skew).",
    "G2-item": "A dependency cycle with two or more anti-dependencies (write skew).",
    "cycle-search-timeout": "The cycle search ran out of its budget in a strongly connected component.",
}
for _base in CYCLE_BASES:
    for _suffix, _what in (("-process", "process order"), ("-realtime", "real-time order")):
        EXPLANATIONS[_base + _suffix] = EXPLANATIONS[_base].rstrip(".") + f", closed by {_what}."

ALWAYS_ALLOWED = frozenset({"int-send-skip", "G0", "G0-process", "G0-realtime"})
SUBSCRIBE_ALLOWED = frozenset({"poll-skip", "nonmonotonic-poll"})
WW_DEPS_ALLOWED = frozenset({"G1c", "G1c-process", "G1c-realtime"})
RW_DEPS_ALLOWED = frozenset(b + s for b in ("G-single", "G2-item") for s in ("", "-process", "-realtime"))


class TxnOptionError(ValueError):
    """A checker option in the test that cannot be used; the message names it and the fix."""


def check_options(test: dict[str, Any], history: Sequence[Op]) -> dict[str, Any]:
    """The checker's settings from the test's workload options (test.json "workload_options"):
    ww_deps, rw_deps (bool), allowed (anomaly names), and whether consumers subscribed: "sub_via"
    (Jepsen's, e.g. ["assign", "subscribe"]) or "subscribe_p" > 0 when given, else whether the history
    holds a subscribe op."""
    opts = test.get("workload_options") or {}
    allowed = opts.get("allowed") or []
    if isinstance(allowed, str):
        allowed = [a.strip() for a in allowed.split(",") if a.strip()]
    unknown = [a for a in allowed if a not in ANOMALY_TYPES]
    if unknown:
        raise TxnOptionError(f"workload option allowed names {', '.join(map(repr, unknown))}, which the txn checker "
                             f"does not know; use names from: {', '.join(ANOMALY_TYPES)}")
    if "sub_via" in opts:
        subscribe = "subscribe" in (opts["sub_via"] or [])
    elif "subscribe_p" in opts:
        subscribe = float(opts["subscribe_p"]) > 0
    else:
        subscribe = any(op.f == "subscribe" and op.process != NEMESIS for op in history)
    return {"ww_deps": bool(opts.get("ww_deps", False)), "rw_deps": bool(opts.get("rw_deps", False)),
            "subscribe": subscribe, "allowed": frozenset(allowed)}


def allowed_anomalies(subscribe: bool, ww_deps: bool, rw_deps: bool, extra: Iterable[str] = ()) -> frozenset[str]:
    """Jepsen's allowed-error-types for these settings, plus `extra`."""
    out = set(ALWAYS_ALLOWED) | set(extra)
    if subscribe:
        out |= SUBSCRIBE_ALLOWED
    if ww_deps:
        out |= WW_DEPS_ALLOWED
    if rw_deps:
        out |= RW_DEPS_ALLOWED
    return frozenset(out)


class TxnChecker:
    name = "txn"

    def __init__(self, cycle_budget_s: float = 30.0):
        self.cycle_budget_s = cycle_budget_s

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        o = check_options(test, history)
        return check_txn(history, subscribe=o["subscribe"], ww_deps=o["ww_deps"], rw_deps=o["rw_deps"],
                         allowed=o["allowed"], cycle_budget_s=self.cycle_budget_s)


# --- reading the history ------------------------------------------------------------------------------------

_KEYS: dict[Any, Any] = {}  # key as written -> key as judged (histories name a handful of keys, millions of times)


def _key(k: Any) -> Any:
    """Keys are ints (a poll's JSON object keys are their decimal text); a foreign history's other keys stay."""
    got = _KEYS.get(k)
    if got is None:
        got = int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k
        if len(_KEYS) < 1 << 16:
            _KEYS[k] = got
    return got


class Txn:
    """One txn/send/poll operation: its invocation, completion, outcome and what it sent and read,
    key by key in order, as (offset or None, value) pairs. Shaped like checkers/elle.py's Txn (id, inv,
    comp, type, describe) so its real-time edges and SCC search apply."""

    __slots__ = ("id", "inv", "comp", "type", "writes", "reads", "rebalanced", "final", "send_errors")

    def __init__(self, id_: int, inv: Op, comp: Op | None):
        self.id, self.inv, self.comp = id_, inv, comp
        self.type = comp.type if comp is not None else INFO
        value = comp.value if comp is not None and isinstance(comp.value, list) else inv.value
        self.writes: dict[Any, list[tuple[Any, Any]]] = {}
        self.reads: dict[Any, list[tuple[Any, Any]]] = {}
        for mop in value or ():
            self._add(mop)
        extra = (comp.extra or {}) if comp is not None else {}
        self.rebalanced = frozenset(_key(k) for e in extra.get("rebalance_log") or () if isinstance(e, dict)
                                    for k in e.get("keys") or ())
        self.final = bool((inv.extra or {}).get("final"))
        # the sends the client library failed itself, with its own error (history/clients.py send-error)
        self.send_errors: dict[tuple[Any, Any], dict[str, Any]] | None = None
        if CLIENT_EVENTS in extra:
            errors = {(_key(e.get("key")), e.get("value")): {**e, "process": inv.process, "op": self.op().index}
                      for e in client_events(extra) if e.get("type") == "send-error"}
            self.send_errors = errors or None

    def send_error(self, k: Any, v: Any) -> dict[str, Any] | None:
        """The library's own error for this transaction's send of `v` to `k`, if it failed one in the client."""
        return self.send_errors.get((k, v)) if self.send_errors else None

    def _add(self, mop: Any) -> None:
        f = mop[0] if isinstance(mop, list | tuple) and mop else None
        if f == "send" and len(mop) == 3:
            placed = mop[2]
            pair = (placed[0], placed[1]) if isinstance(placed, list | tuple) and len(placed) == 2 else (None, placed)
            k = _key(mop[1])
            got = self.writes.get(k)
            if got is None:
                self.writes[k] = [pair]
            else:
                got.append(pair)
        elif f == "poll" and len(mop) == 2 and isinstance(mop[1], dict):
            reads = self.reads
            for k, recs in mop[1].items():
                k = _key(k)
                pairs = recs or []
                try:  # each record an [offset, value] pair; kept as it is (a copy costs more than the check)
                    if set(map(len, pairs)) - {2} or not isinstance(pairs, list):
                        raise ValueError
                except (TypeError, ValueError):
                    raise ValueError(self._bad(mop)) from None
                if k in reads:
                    reads[k] = reads[k] + pairs  # a new list: the op's own value is never changed
                else:
                    reads[k] = pairs
        elif f != "poll" or (len(mop) == 2 and mop[1] is not None) or len(mop) > 2:
            raise ValueError(self._bad(mop))

    def _bad(self, mop: Any) -> str:
        return (f"op #{self.op().index} (process {self.inv.process}) holds the micro-op {mop!r}, which is neither "
                f"[\"send\", key, value] nor [\"poll\", {{key: [[offset, value], ...]}}]; write txn histories in the "
                f"schema of checkers/txn.py")

    def op(self) -> Op:
        return self.comp or self.inv

    def describe(self) -> str:
        parts = []
        for k, pairs in self.writes.items():
            parts.append(f"sent {_pairs_text(pairs)} to key {k}")
        for k, pairs in self.reads.items():
            parts.append(f"polled {_pairs_text(pairs)} from key {k}")
        return (f"T{self.id} (op #{self.op().index}, process {self.inv.process}, {self.type}: "
                f"{'; '.join(parts) or 'nothing'})")


def _pairs_text(pairs: list[tuple[Any, Any]]) -> str:
    shown = [f"{v!r}" + (f"@{o}" if o is not None else "") for o, v in pairs[:4]]
    return ", ".join(shown) + (f" ... ({len(pairs)} in all)" if len(pairs) > 4 else "")


class _Found:
    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.whose: dict[str, dict[str, int]] = defaultdict(dict)  # name -> owner -> instances (checkers/clients.py)

    def add(self, name: str, summary: str, ops: Iterable[Op], **fields: Any) -> None:
        self.counts[name] += 1
        if fields.get("whose"):
            count_whose(self.whose[name], fields["whose"])
        if len(self.examples[name]) < MAX_EXAMPLES:
            op_list = [o for o in ops if o is not None]
            self.examples[name].append({"summary": summary, **fields, "op_indexes": [o.index for o in op_list],
                                        "ops": [o.to_dict() for o in op_list]})


class _Order:
    """One key's version order: its offsets (sorted, gaps left out) and the value at each, as Jepsen
    builds it (the first value seen at an offset stands for it; a value's index is its last place)."""

    __slots__ = ("offsets", "values", "index", "at")

    def __init__(self, log: dict[int, list[Any]]):
        self.offsets = sorted(log)
        self.at = [log[o] for o in self.offsets]           # every value seen at each index
        self.values = [vs[0] for vs in self.at]             # the one standing for it
        self.index = {v: i for i, v in enumerate(self.values)}


# --- the analyses -------------------------------------------------------------------------------------------

class _Analysis:
    def __init__(self, history: Sequence[Op]):
        self.pairs = [(inv, comp) for inv, comp in pair_ops(history) if inv.process != NEMESIS]
        self.txns = [Txn(i, inv, comp) for i, (inv, comp) in
                     enumerate(p for p in self.pairs if p[0].f in TXN_FS)]
        self.found = _Found()
        self.writer: dict[Any, dict[Any, Txn]] = defaultdict(dict)        # key -> value -> (last) sender
        self.first_reader: dict[Any, dict[Any, Txn]] = defaultdict(dict)  # key -> value -> first reader
        self.ok_read: dict[Any, set] = defaultdict(set)
        for t in self.txns:
            for k, pairs in t.writes.items():
                wk = self.writer[k]
                for _, v in pairs:
                    wk[v] = t
            for k, pairs in t.reads.items():
                values = set(map(_second, pairs))
                rk = self.first_reader[k]
                for v in values:  # (not values - rk.keys(): that walks all of rk for every reader)
                    if v not in rk:
                        rk[v] = t
                if t.type == OK:
                    self.ok_read[k].update(values)
        self.committed = [t for t in self.txns if self.must_have_committed(t)]
        self.orders = self._version_orders()

    def must_have_committed(self, t: Txn) -> bool:
        """Ok, or info with one of its sends returned by a committed read (else that read was aborted)."""
        if t.type == OK:
            return True
        return t.type == INFO and any(v in self.ok_read.get(k, ()) for k, pairs in t.writes.items()
                                      for _, v in pairs)

    def _version_orders(self) -> dict[Any, _Order]:
        logs: dict[Any, dict[int, list[Any]]] = defaultdict(dict)

        def note(k: Any, pairs: Iterable) -> None:
            log = logs[k]
            for o, v in pairs:
                at = log.get(o)
                if at is None:
                    if o is not None:  # an offset not known (a send that timed out) places nothing
                        log[o] = [v]
                elif v not in at:
                    at.append(v)

        committed = {t.id for t in self.committed}
        for t in self.txns:
            if t.id in committed:
                for k, pairs in t.writes.items():
                    note(k, pairs)
            for k, pairs in t.reads.items():
                note(k, pairs)
        return {k: _Order(log) for k, log in logs.items() if log}

    def op_of(self, k: Any, v: Any) -> Op | None:
        t = self.writer.get(k, {}).get(v) or self.first_reader.get(k, {}).get(v)
        return t.op() if t else None

    # Offsets ------------------------------------------------------------------------------------------------
    def inconsistent_offsets(self) -> None:
        for k, order in self.orders.items():
            for i, vs in enumerate(order.at):
                if len(vs) > 1:
                    off = order.offsets[i]
                    self.found.add("inconsistent-offsets",
                                   f"key {k} offset {off} holds {', '.join(map(repr, vs))} by different sends and "
                                   f"polls", (self.op_of(k, v) for v in vs[:4]), key=k, offset=off, index=i,
                                   values=list(vs))

    def duplicates(self) -> None:
        for k, order in self.orders.items():
            places: dict[Any, list[int]] = defaultdict(list)
            for off, vs in zip(order.offsets, order.at, strict=True):
                for v in vs:
                    places[v].append(off)
            for v, offs in places.items():
                if len(offs) > 1:
                    self.found.add("duplicate", f"value {v!r} of key {k} is at offsets {offs}",
                                   [self.op_of(k, v)], key=k, value=v, count=len(offs), offsets=offs)

    # Committed data seen or not ---------------------------------------------------------------------------
    def lost_writes(self) -> None:
        committed = {t.id for t in self.committed}
        for k, read in self.ok_read.items():
            order = self.orders.get(k)
            if order is None:
                continue
            first: dict[Any, int] = {}
            last: dict[Any, int] = {}
            for i, vs in enumerate(order.at):
                for v in vs:
                    first.setdefault(v, i)
                    last[v] = i
            bound, top = max(((first[v], v) for v in read if v in first), default=(-1, None), key=lambda x: x[0])
            if bound < 0:
                continue
            top_reader = self.first_reader[k][top]  # a committed read returned it
            for i in range(bound + 1):
                for v in order.at[i]:
                    if last[v] > bound or v in read:
                        continue
                    w = self.writer.get(k, {}).get(v)
                    if w is None or w.id not in committed:
                        continue
                    self.found.add("lost-write",
                                   **_caused(f"{v!r} sent to key {k} (offset {order.offsets[first[v]]}) by op "
                                             f"#{w.op().index} ({w.type}) was never read, though op "
                                             f"#{top_reader.op().index} read key {k} up to offset "
                                             f"{order.offsets[bound]}", w.send_error(k, v), w.type == OK),
                                   ops=[w.op(), top_reader.op()], key=k, value=v, index=first[v],
                                   max_read_index=bound)

    def unseen(self) -> list[Any]:
        """Jepsen's unseen; for a history with final reads (ours mark them), only in the keys a final read
        completed: returns the keys with committed sends that none did (their verdict is unknown)."""
        finals = [t for t in self.txns if t.final]
        covered = {k for t in finals if t.type == OK for k in t.reads}
        uncovered = []
        for k, wk in self.writer.items():
            read = self.ok_read.get(k, set())
            missing = [(v, t) for v, t in wk.items() if t.type == OK and v not in read]
            if finals and k not in covered:
                if missing:
                    uncovered.append(k)
                continue
            for v, t in missing:
                self.found.add("unseen", **_caused(f"{v!r} sent to key {k} by the committed op #{t.op().index} was "
                                                   f"never returned by a committed read", t.send_error(k, v)),
                               ops=[t.op()], key=k, value=v)
        return sorted(uncovered, key=str)

    def aborted_reads(self) -> None:
        for t in self.txns:
            if t.type != OK:
                continue
            for k, pairs in t.reads.items():
                wk = self.writer.get(k, {})
                for o, v in pairs:
                    w = wk.get(v)
                    if w is not None and w.type == FAIL:
                        self.found.add("G1a", f"op #{t.op().index} read {v!r} from key {k} (offset {o}), sent by "
                                              f"op #{w.op().index}, which failed", [t.op(), w.op()], key=k, value=v)

    def precommitted_reads(self) -> None:
        """Once per transaction, as Jepsen counts them (its first key with such a read)."""
        for t in self.txns:
            for k, pairs in t.writes.items():
                own = {v for _, v in t.reads.get(k, ())} & {v for _, v in pairs}
                if own:
                    v = next(iter(own))
                    self.found.add("precommitted-read", f"op #{t.op().index} polled {v!r} from key {k}, which it "
                                                        f"sent itself before committing", [t.op()], key=k, value=v)
                    break

    # Order within and between transactions ----------------------------------------------------------------
    def _step(self, k: Any, v1: Any, v2: Any) -> tuple[int, list[Any]]:
        """(delta of indexes from v1 to v2 in k's order, the values skipped); delta 1 when either is unknown."""
        order = self.orders.get(k)
        i1 = order.index.get(v1) if order else None
        i2 = order.index.get(v2) if order else None
        if i1 is None or i2 is None:
            return 1, []
        return i2 - i1, order.values[i1 + 1:i2][:MAX_EXAMPLES]

    def internal_order(self) -> None:
        for t in self.txns:
            for k, pairs in t.reads.items():
                if len(pairs) > 1 and k not in t.rebalanced:  # a rebalance during the op: no contiguity (Jepsen)
                    self._judge_steps(k, pairs, t, "int-poll-", "int-nonmonotonic-poll", "polled")
            for k, pairs in t.writes.items():
                if len(pairs) > 1:
                    self._judge_steps(k, pairs, t, "int-send-", "int-nonmonotonic-send", "sent")

    def _judge_steps(self, k: Any, pairs: list[tuple[Any, Any]], t: Txn, skip_prefix: str, nonmonotonic: str,
                     verb: str) -> None:
        """Each successive pair of one transaction's values of a key, judged only where the indexes do not
        simply go up by one (the common case, checked here without a call)."""
        order = self.orders.get(k)
        if order is None:
            return
        index = order.index
        before = index.get(pairs[0][1])
        for n in range(1, len(pairs)):
            now = index.get(pairs[n][1])
            if before is not None and now is not None and now - before != 1:
                self._judge_pair_named(skip_prefix, nonmonotonic, f"op #{t.op().index} {verb}", k, pairs[n - 1][1],
                                       pairs[n][1], [t.op()])
            before = now

    def _judge_pair_named(self, skip_prefix: str, nonmonotonic: str, what: str, k: Any, v1: Any, v2: Any,
                          ops: list[Op], cause: dict[str, Any] | None = None, **where: Any) -> None:
        """Jepsen's names: "<skip_prefix>skip" for a skip, `nonmonotonic` for a step back; `cause`: the client
        event (a reset, a seek) that placed the second read, if one did (checkers/clients.py)."""
        delta, skipped = self._step(k, v1, v2)
        if delta > 1:
            self.found.add(f"{skip_prefix}skip", **cause_fields(
                f"{what} {v1!r} then {v2!r} of key {k}, skipping {delta - 1} value(s) "
                f"({', '.join(map(repr, skipped))}) between them", cause), ops=ops,
                key=k, values=[v1, v2], delta=delta, skipped=skipped, **where)
        elif delta < 1:
            back = "the same value" if delta == 0 else f"{-delta} place(s) back"
            self.found.add(nonmonotonic, **cause_fields(
                f"{what} {v1!r} then {v2!r} of key {k}, {back} in the key's order", cause), ops=ops,
                key=k, values=[v1, v2], delta=delta, **where)

    def process_order(self) -> None:
        """Between one process's transactions: polls (poll-skip, nonmonotonic-poll) and sends
        (nonmonotonic-send). An ok or info assign/subscribe keeps only the state of the keys it names."""
        by_inv = {t.inv.index: t for t in self.txns}
        last_read: dict[Any, dict[Any, Txn]] = defaultdict(dict)   # process -> key -> last ok reader
        last_sent: dict[Any, dict[Any, Txn]] = defaultdict(dict)   # process -> key -> last ok/info sender
        moves = Moves()  # the consumers' own resets and the workload's seeks (checkers/clients.py)
        for inv, comp in self.pairs:
            p = inv.process
            outcome = comp.type if comp is not None else INFO
            if comp is not None and comp.extra and CLIENT_EVENTS in comp.extra:
                moves.note(p, comp.extra, comp.index)
            if inv.f in ("assign", "subscribe"):
                if outcome in (OK, INFO):
                    keys = {_key(k) for k in ((comp.value if comp is not None else None) or inv.value or [])}
                    last_read[p] = {k: t for k, t in last_read[p].items() if k in keys}
                    last_sent[p] = {k: t for k, t in last_sent[p].items() if k in keys}
                continue
            t = by_inv.get(inv.index)
            if t is None:
                continue
            for k, pairs in t.reads.items():
                before = last_read[p].get(k)
                move = moves.explain(p, k, pairs[0][0]) if pairs and moves.pending else None
                if before is not None and pairs and before.reads[k]:  # an empty last read: where it stood is unknown
                    self._judge_pair_named("poll-", "nonmonotonic-poll",
                                           f"process {p}'s op #{before.op().index} polled up to, and its op "
                                           f"#{t.op().index} polled from,", k, before.reads[k][-1][1], pairs[0][1],
                                           [before.op(), t.op()], cause=move, process=p)
            if t.type == OK:
                for k in t.reads:
                    last_read[p][k] = t
            if t.type in (OK, INFO):
                for k, pairs in t.writes.items():
                    before = last_sent[p].get(k)
                    if before is not None and pairs:
                        v1, v2 = before.writes[k][-1][1], pairs[0][1]
                        delta, _ = self._step(k, v1, v2)
                        if delta < 1:
                            self.found.add("nonmonotonic-send",
                                           f"process {p}'s op #{before.op().index} sent {v1!r} to key {k}, then its op "
                                           f"#{t.op().index} sent {v2!r}, which landed "
                                           f"{'in the same place' if delta == 0 else f'{-delta} place(s) before it'}",
                                           [before.op(), t.op()],
                                           key=k, values=[v1, v2], delta=delta, process=p)
                    last_sent[p][k] = t

    def torn_transactions(self) -> None:
        committed = [t for t in self.committed if sum(len(ps) for ps in t.writes.values()) > 1]
        # The final reads: each key's read from its start (a txn's "final" poll) holds its committed log.
        final: dict[Any, set] = {}
        for t in self.txns:
            if t.final and t.type == OK:
                for k, pairs in t.reads.items():
                    final.setdefault(k, set()).update(v for _, v in pairs)
        for t in committed:
            covered = [(k, v) for k, pairs in t.writes.items() if k in final for _, v in pairs]
            seen = [(k, v) for k, v in covered if v in final[k]]
            missing = [(k, v) for k, v in covered if v not in final[k]]
            if seen and missing:
                (k1, v1), (k2, v2) = seen[0], missing[0]
                self.found.add("torn-transaction",
                               **_caused(f"the final reads hold {v1!r} of key {k1} sent by the committed op "
                                         f"#{t.op().index}, but not {v2!r} it sent to key {k2}", t.send_error(k2, v2),
                                         t.type == OK),
                               ops=[t.op()], kind="final-reads", seen=[k1, v1], missing=[k2, v2])
        # Reads: a read that returned one of a transaction's sends and read across another's place without it.
        for r in self.txns:
            if r.type != OK or not r.reads:
                continue
            places: dict[Any, tuple[list[Any], list[int]]] = {}
            holes = False
            for k, pairs in r.reads.items():
                order = self.orders.get(k)
                if order is None or k in r.rebalanced:
                    continue
                index = order.index
                idx = [index[v] for _, v in pairs if v in index]
                if idx:
                    places[k] = (pairs, idx)
                    # holes in a forward read: it passed over values (a read going back is another anomaly)
                    holes = holes or (idx[-1] - idx[0] + 1 > len(idx)
                                      and all(a < b for a, b in zip(idx, idx[1:], strict=False)))
            if not holes:
                continue  # a read without holes passed over nothing (the common case: no sets built)
            spans: dict[Any, tuple[int, int, set, bool]] = {
                k: (idx[0], idx[-1], set(map(_second, pairs)),
                    idx[-1] - idx[0] + 1 > len(idx) and all(a < b for a, b in zip(idx, idx[1:], strict=False)))
                for k, (pairs, idx) in places.items()}
            writers: dict[int, Txn] = {}
            for k, pairs in r.reads.items():
                wk = self.writer.get(k, {})
                for _, v in pairs:
                    w = wk.get(v)
                    if w is not None and w is not r and w.id not in writers:
                        writers[w.id] = w
            for w in writers.values():
                hit = self._torn_read(r, w, spans)
                if hit:
                    (k1, v1), (k2, v2) = hit
                    self.found.add("torn-transaction",
                                   **_caused(f"op #{r.op().index} read {v1!r} of key {k1} sent by op #{w.op().index}, "
                                             f"and read key {k2} across the place of {v2!r} that op also sent, without "
                                             f"it", w.send_error(k2, v2), w.type == OK),
                                   ops=[r.op(), w.op()], kind="read", seen=[k1, v1], missing=[k2, v2])

    def _torn_read(self, r: Txn, w: Txn, spans: dict[Any, tuple[int, int, set, bool]]):
        seen = next(((k, v) for k, pairs in w.writes.items() if k in spans for _, v in pairs
                     if v in spans[k][2]), None)
        if seen is None:
            return None
        for k, pairs in w.writes.items():
            span = spans.get(k)
            if span is None or not span[3]:
                continue
            order = self.orders[k]
            for _, v in pairs:
                i = order.index.get(v)
                if i is not None and span[0] < i < span[1] and v not in span[2]:
                    return seen, (k, v)
        return None


def _caused(what: str, send_error: dict[str, Any] | None, committed: bool = True) -> dict[str, Any]:
    """An example's summary (and, when the library failed the send itself, whose, cause and event) for an
    anomaly about a send: checkers/clients.py's fields."""
    if send_error is None:
        return {"summary": what}
    return cause_fields(what, send_error, "client", send_error_cause(send_error, committed))


# --- the dependency graph ------------------------------------------------------------------------------------

def _dependency_edges(a: _Analysis, graph_txns: list[Txn], ww_deps: bool, rw_deps: bool, edge, realtime) -> None:
    """Every dependency edge between `graph_txns`, handed to `edge(id1, id2, kind, why-format, *args)`;
    `realtime(graph_txns, edge)` adds the real-time order (_realtime_barriers or _realtime_frontier)."""
    in_graph = {t.id for t in graph_txns}
    for r in graph_txns:
        for k, pairs in r.reads.items():
            wk = a.writer.get(k, {})
            linked = set()
            for o, v in pairs:
                w = wk.get(v)
                if w is not None and w is not r and w.id in in_graph and w.id not in linked:
                    linked.add(w.id)
                    edge(w.id, r.id, WR, "sent {!r} to key {} (offset {}), which T{} polled", v, k, o, r.id)
            if rw_deps and pairs:
                order = a.orders.get(k)
                i = order.index.get(pairs[-1][1]) if order else None
                if i is not None and i + 1 < len(order.values):
                    w = wk.get(order.values[i + 1])
                    if w is not None and w is not r and w.id in in_graph:
                        edge(r.id, w.id, RW, "polled key {} up to offset {}, not seeing {!r} at offset {}, which T{} sent",
                             k, order.offsets[i], order.values[i + 1], order.offsets[i + 1], w.id)
    if ww_deps:
        for k, order in a.orders.items():
            wk = a.writer.get(k, {})
            for i in range(1, len(order.values)):
                w1, w2 = wk.get(order.values[i - 1]), wk.get(order.values[i])
                if w1 is not None and w2 is not None and w1 is not w2 and w1.id in in_graph and w2.id in in_graph:
                    edge(w1.id, w2.id, WW, "sent {!r} to key {} at offset {}, just before T{}'s {!r} at offset {}",
                         order.values[i - 1], k, order.offsets[i - 1], w2.id, order.values[i], order.offsets[i])
    by_process: dict[Any, list[Txn]] = defaultdict(list)
    for t in graph_txns:
        by_process[t.inv.process].append(t)
    for ts in by_process.values():
        for t1, t2 in zip(ts, ts[1:], strict=False):
            edge(t1.id, t2.id, PROCESS, "came before T{} in process {}", t2.id, t1.inv.process)
    realtime(graph_txns, edge)


def _realtime_frontier(txns: list[Txn], edge) -> None:
    """T1 completed before T2 began, as edges between transactions (checkers/elle.py's frontier): for the
    few transactions of the cyclic components, whose cycles are explained step by step."""
    realtime_edges(txns, lambda t1, t2, kind, *why: edge(t1.id, t2.id, kind, *why))


def _realtime_barriers(first_free_id: int):
    """T1 completed before T2 began, through barrier nodes (ids from `first_free_id` on): each completion
    links to the newest barrier, each barrier to the one before, each invocation from the newest: T1
    reaches T2 exactly when T1 completed before T2 began, with three edges a transaction at most (the
    frontier's edges grow with the concurrency). Only for finding the cyclic components."""
    def add(txns: list[Txn], edge) -> None:
        events = []
        for t in txns:
            events.append((t.inv.time, 0, t))
            if t.type == OK:
                events.append((t.comp.time, 1, t))
        events.sort(key=lambda e: (e[0], e[1]))  # at equal times invocations first: "before" is strict
        barrier, read, next_id = None, False, first_free_id
        for _, completion, t in events:
            if not completion:
                if barrier is not None:
                    edge(barrier, t.id, REALTIME)
                    read = True
            elif barrier is None or read:
                # a new barrier, as invocations already hang on the newest: they must not follow t
                edge(t.id, next_id, REALTIME)
                if barrier is not None:
                    edge(barrier, next_id, REALTIME)
                barrier, read, next_id = next_id, False, next_id + 1
            else:
                edge(t.id, barrier, REALTIME)
    return add


# The order a step's kind is named in: data dependencies first, anti-dependencies last (they make a class worse).
_STEP_PRIORITY = (WW, WR, PROCESS, REALTIME, RW)
# (edge kinds the search may use, the kind the cycle must go through): each class searched on its own.
_SEARCHES = (({WW}, WW), ({WW, WR}, WR), ({WW, WR, RW}, RW), ({WW, WR, RW, PROCESS}, PROCESS),
             ({WW, WR, RW, PROCESS, REALTIME}, REALTIME))


def _cycle_through(sub: nx.DiGraph, kinds: set[str], through: str, deadline: float) -> list[int] | None:
    """A short cycle of `sub` over edges of `kinds` that takes an edge of kind `through`: an edge within a
    strongly connected component of that view, closed by the shortest path back."""
    view = kind_view(sub, kinds)
    for comp in nx.strongly_connected_components(view):
        if time.monotonic() > deadline:
            raise TimeoutError
        if len(comp) < 2:
            continue
        for x in comp:
            for y in view.successors(x):
                if y in comp and through in sub[x][y]["kinds"]:
                    return [x, *nx.shortest_path(view, y, x)]
    return None


def _name_cycle(sub: nx.DiGraph, cycle: list[int], kinds: set[str], through: str) -> tuple[str, list[str]]:
    steps = []
    for n, (x, y) in enumerate(zip(cycle, cycle[1:], strict=False)):
        have = sub[x][y]["kinds"]
        steps.append(through if n == 0 else next(k for k in _STEP_PRIORITY if k in have and k in kinds))
    rws = steps.count(RW)
    base = "G2-item" if rws > 1 else "G-single" if rws == 1 else "G1c" if WR in steps else "G0"
    suffix = "-realtime" if REALTIME in steps else "-process" if PROCESS in steps else ""
    return base + suffix, steps


def _explain_cycle(sub: nx.DiGraph, cycle: list[int], steps: list[str],
                   txns: dict[int, Txn]) -> tuple[str, list[str], list[Op]]:
    """The cycle in words, step by step (as checkers/elle.py renders its cycles), and its transactions' ops."""
    words = []
    for (x, y), kind in zip(zip(cycle, cycle[1:], strict=False), steps, strict=True):
        template, *args = sub[x][y]["kinds"][kind]
        words.append(f"T{x} {template.format(*args)} ({kind})")
    members = [txns[t] for t in cycle[:-1]]
    summary = ("; ".join(words) + f"; so T{cycle[0]} precedes itself. Transactions: "
               + " ".join(t.describe() for t in members))
    return summary, words, [t.op() for t in members][:MAX_EXAMPLES]


def _cycles(a: _Analysis, ww_deps: bool, rw_deps: bool, budget_s: float) -> tuple[dict[str, Any], bool]:
    graph_txns = [t for t in a.txns if t.type != FAIL]
    succ: dict[int, list[int]] = defaultdict(list)

    def edge(x: int, y: int, kind: str, *why: Any) -> None:
        succ[x].append(y)

    _dependency_edges(a, graph_txns, ww_deps, rw_deps, edge, _realtime_barriers(len(a.txns)))
    stats = {"edges": sum(map(len, succ.values()))}
    sccs = [{x for x in scc if x < len(a.txns)} for scc in nontrivial_sccs(succ)]
    succ.clear()  # the cyclic parts get their edges again, with reasons, below
    stats["cyclic-components"] = len(sccs)
    if not sccs:
        return stats, False
    members = set().union(*sccs)
    kinds: dict[tuple[int, int], dict[str, tuple]] = {}

    def explain(x: int, y: int, kind: str, *why: Any) -> None:
        if x in members and y in members:
            kinds.setdefault((x, y), {}).setdefault(kind, why)

    _dependency_edges(a, [t for t in graph_txns if t.id in members], ww_deps, rw_deps, explain, _realtime_frontier)
    by_id = {t.id: t for t in a.txns}
    deadline = time.monotonic() + budget_s
    searches = [s for s in _SEARCHES if (s[1] != WW or ww_deps) and (s[1] != RW or rw_deps)]
    for scc in sccs:
        sub = nx.DiGraph()
        sub.add_edges_from((x, y, {"kinds": k}) for (x, y), k in kinds.items() if x in scc and y in scc)
        try:
            for allowed, through in searches:
                cycle = _cycle_through(sub, {k for k in allowed if rw_deps or k != RW}, through, deadline)
                if cycle is not None:
                    name, steps = _name_cycle(sub, cycle, allowed, through)
                    summary, words, ops = _explain_cycle(sub, cycle, steps, by_id)
                    a.found.add(name, summary, ops, cycle=cycle, steps=words,
                                edges=[[x, y, kind] for x, y, kind in zip(cycle, cycle[1:], steps, strict=False)])
        except TimeoutError:
            a.found.add("cycle-search-timeout", f"the cycle search ran out of its {budget_s:.0f} s budget in a "
                                                f"strongly connected component of {len(scc)} transactions", [])
            return stats, True
    return stats, False


def check_txn(history: Sequence[Op], *, subscribe: bool = False, ww_deps: bool = False, rw_deps: bool = False,
              allowed: Iterable[str] = (), cycle_budget_s: float = 30.0) -> Result:
    started = time.monotonic()
    a = _Analysis(history)
    a.inconsistent_offsets()
    a.duplicates()
    a.lost_writes()
    uncovered = a.unseen()
    a.aborted_reads()
    a.precommitted_reads()
    a.internal_order()
    a.process_order()
    a.torn_transactions()
    graph_stats, timed_out = _cycles(a, ww_deps, rw_deps, cycle_budget_s)
    ok_allowed = allowed_anomalies(subscribe, ww_deps, rw_deps, allowed)
    found = a.found
    names = [n for n in ANOMALY_TYPES if found.counts[n]]
    bad = [n for n in names if n not in ok_allowed and n != "cycle-search-timeout"]
    reasons = []
    if uncovered:
        reasons.append(say("no-final-read", partitions=uncovered))
    if timed_out and not ({b + s for b in CYCLE_BASES for s in ("", "-process", "-realtime")} <= ok_allowed):
        reasons.append(say("cycle-search-out-of-budget", seconds=cycle_budget_s,
                           models="the Kafka transaction model (with the allowed anomalies)"))
    if not any(t.type == OK for t in a.txns):
        reasons.append(say("no-committed-transaction"))
    valid: Any = False if bad else UNKNOWN if reasons else True

    def anomaly(n: str) -> Anomaly:
        return Anomaly(n, found.counts[n], found.examples[n], EXPLANATIONS[n], whose=found.whose.get(n) or None)

    stats = {"transactions": len(a.txns), "keys": len(a.orders),
             "outcomes": {t: sum(1 for x in a.txns if x.type == t) for t in (OK, INFO, FAIL)},
             **graph_stats, "subscribe": subscribe, "ww_deps": ww_deps, "rw_deps": rw_deps,
             "error-types": names, "bad-error-types": bad, "allowed": sorted(ok_allowed),
             "check-seconds": round(time.monotonic() - started, 3)}
    details: dict[str, Any] = {}
    allowed_found = [anomaly(n).to_dict() for n in names if n not in bad and n != "cycle-search-timeout"]
    if allowed_found:
        details["allowed"] = allowed_found
    if timed_out:
        details["cycle_search_timeout"] = anomaly("cycle-search-timeout").to_dict()
    cycles = [ex["summary"] for n in names if n in CYCLE_TYPES and n in bad for ex in found.examples[n][:2]]
    if cycles:
        details["cycles_text"] = cycles
    return Result(checker="txn", valid=valid, anomalies=[anomaly(n) for n in bad], stats=stats, details=details,
                  unknown_reasons=reasons)


__all__ = ["ANOMALY_TYPES", "EXPLANATIONS", "TxnChecker", "TxnOptionError", "allowed_anomalies", "check_options",
           "check_txn"]
