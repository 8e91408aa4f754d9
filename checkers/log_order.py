"""The log fast path: linearizability of partition logs in near-linear time (issue 5 item 2).

The `log` model of checkers/models.py (sends append at the next offset; a poll returns a
window of the log; a final read returns the whole log and its end) is decided by the
general search in exponential time. For this model, linearizability reduces to
conditions checked with sorting and a pass per key:

  inconsistent-offsets  two observations (acknowledgements or reads) disagree on the value
                        at one offset: one log cannot hold both (shared definition with the
                        queue checker)
  unexpected            a read returned a value no send (acknowledged or indeterminate) carried
  duplicate             one value at two offsets (each send appends once; a send the client re-sent,
                        its completion's "resent" (workloads/queue.py), appends once per request:
                        those copies are counted in stats["resent-duplicate-count"], no anomaly)
  realtime-order        send a was acknowledged before send b was invoked, yet b's offset is
                        lower: appends took effect out of real-time order
  stale-read            a final read claimed an end below what was already known when it
                        began (an acknowledged offset, or how far an earlier read saw)
  future-read           a read returned the value of a send that was invoked only after the
                        read had completed
  offset-gap            offsets below the log's observed end that nothing observed can fill:
                        more unobserved offsets than indeterminate sends that could have
                        filled them

Verdict: false on any anomaly; "unknown" when the history holds no acknowledged send and no
completed read (nothing was observed, so a valid verdict would be vacuous); else true.

After a fault beyond the durability contract (history/faults.py, BEYOND_BUDGET) the log may
have lost a suffix that was acknowledged and read, and new sends reuse those offsets: one
log no longer explains the whole history, by design. The observations are then checked in
two eras, those completed before the last such fault and those after, each against the
log model on its own (values read in either era may come from sends of either).

The differential test (tests/unit/test_log_order_vs_wgl.py) checks on random small
histories that this checker and the general search give the same verdict.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from checkers.core import MAX_EXAMPLES, UNKNOWN, Anomaly, Result
from checkers.queue import QUEUE_VALUES, poll_items
from checkers.reasons import say
from history import FAIL, INFO, NEMESIS, OK, Op, beyond_budget_time, pair_ops

EXPLANATIONS = {
    "inconsistent-offsets": "Two observations disagree on the value at one offset of a partition.",
    "unexpected": "A read returned a value that no send carried.",
    "duplicate": "One value appears at two offsets, but every send appends once.",
    "realtime-order": "A send acknowledged before another send began got a higher offset: the log does not "
                      "respect real-time order.",
    "stale-read": "A final read claimed the log ends before an offset already acknowledged or read when it began.",
    "future-read": "A read returned the value of a send that began only after the read had completed.",
    "offset-gap": "The log's observed end lies beyond offsets that no acknowledged or indeterminate send can fill.",
}


_MISSING = object()


class _Found:
    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.examples: dict[str, list] = defaultdict(list)
        self.resent_duplicates = 0  # values at several offsets, each copy from one of the client's requests

    def add(self, name: str, ex: dict[str, Any]) -> None:
        self.counts[name] += 1
        if len(self.examples[name]) < MAX_EXAMPLES:
            self.examples[name].append(ex)


NOTHING_OBSERVED = say("no-log-observed")


def check_log_order(history: Sequence[Op]) -> Result:
    cutoff = beyond_budget_time(history)
    found = _Found()
    stats: dict[str, Any] = {}
    if cutoff is not None:
        def era(op: Op) -> int:
            return 1 if op.time >= cutoff else 0
        observed = sum(_check_history(history, found, lambda op, e=e: era(op) == e) for e in (0, 1))
        stats["eras"] = 2
    else:
        observed = _check_history(history, found, None)
    anomalies = [Anomaly(n, found.counts[n], found.examples[n], EXPLANATIONS[n]) for n in EXPLANATIONS
                 if found.counts[n]]
    stats = {**{f"{n}-count": found.counts[n] for n in EXPLANATIONS}, **stats, "observations": observed}
    if found.resent_duplicates:
        stats["resent-duplicate-count"] = found.resent_duplicates
    # No observation, no verdict: "valid" would claim an order was checked when none was seen.
    reasons = [] if observed else [NOTHING_OBSERVED]
    valid: Any = False if anomalies else UNKNOWN if reasons else True
    return Result(checker="log-order", valid=valid, anomalies=anomalies, stats=stats, unknown_reasons=reasons)


def _check_history(history: Sequence[Op], found: _Found, in_era) -> int:
    """Check the observations `in_era` accepts (all when None); any send's value may be read.
    Returns how many there were (acknowledged sends and reads of a partition)."""
    pos = {id(op): k for k, op in enumerate(history)}
    sends: dict[int, dict[Any, tuple[int, int, int | None, Op]]] = defaultdict(dict)  # key -> value -> (inv, ret, offset)
    carried: dict[int, set[Any]] = defaultdict(set)  # key -> every value a send (of any era) carried
    requests: dict[int, dict[Any, int]] = defaultdict(dict)  # key -> value -> requests, if the client re-sent it
    reads: dict[int, list[tuple[int, int, list, int | None, Op, int]]] = defaultdict(list)
    for inv, comp in pair_ops(history):
        if inv.process == NEMESIS:
            continue
        t = comp.type if comp is not None else INFO
        ret = pos[id(comp)] if comp is not None and t != INFO else len(history) + 1
        if inv.f == "send":
            key, _, value = QUEUE_VALUES.written(inv)
            if t != FAIL:
                carried[key].add(value)
            if comp is not None and (comp.extra or {}).get("resent"):
                requests[key][value] = int(comp.extra["resent"].get("requests", 2))
            if in_era is not None and not in_era(comp if comp is not None and t != INFO else inv):
                continue
            if t == OK:
                sends[key][value] = (pos[id(inv)], ret, int(QUEUE_VALUES.written(comp)[1]), comp)
            elif t != FAIL:
                sends[key][value] = (pos[id(inv)], ret, None, inv)  # may or may not have happened
        elif inv.f in ("poll", "final-poll") and t == OK and (in_era is None or in_era(comp)):
            end = int(QUEUE_VALUES.drained(comp)[1]) if inv.f == "final-poll" else None
            for key, recs in poll_items(inv.f, comp.value):
                # reach: how far this read saw the log go (records come in offset order; a read
                # that is not is the queue checker's nonmonotonic-poll)
                reach = max(recs[0][0], recs[-1][0]) + 1 if recs else 0
                if end is not None:
                    reach = max(reach, end)
                reads[key].append((pos[id(inv)], ret, recs, end, comp, reach))
    for key in set(sends) | set(reads):
        _check_key(key, sends[key], reads[key], found, carried[key], requests[key])
    return (sum(1 for by_value in sends.values() for s in by_value.values() if s[2] is not None)
            + sum(map(len, reads.values())))


def _check_key(key: int, sends: dict, reads: list, found: _Found, carried: set,
               requests: dict[Any, int] | None = None) -> None:
    value_at: dict[int, Any] = {}       # offset -> the first value observed there
    proof: dict[int, Op] = {}           # offset -> the op that observed it first
    first_offset: dict[Any, int] = {}   # value -> the first offset it was observed at
    extra_offsets: dict[Any, set[int]] = defaultdict(set)

    def conflict(off: int, val: Any, op: Op) -> None:
        found.add("inconsistent-offsets", {"key": key, "offset": off, "values": [value_at[off], val],
                                           "summary": f"partition {key} offset {off}: {value_at[off]!r} and {val!r}",
                                           "reads": [proof[off].to_dict(), op.to_dict()]})

    # The hot loop (every record of every read) stays inline: a 1M-op history has tens of
    # millions of read records.
    end = 0
    for val, (_, _, off, op) in sends.items():
        if off is not None:
            if first_offset.setdefault(val, off) != off:
                extra_offsets[val].add(off)
            if off in value_at:
                if value_at[off] != val:
                    conflict(off, val, op)
            else:
                value_at[off], proof[off] = val, op
    for _, _, recs, claimed_end, op, _ in reads:
        for o, v in recs:
            seen = value_at.get(o, _MISSING)
            if seen is _MISSING:
                value_at[o], proof[o] = v, op
            elif seen != v:
                conflict(o, v, op)
            fo = first_offset.setdefault(v, o)
            if fo != o:
                extra_offsets[v].add(o)
            if v not in carried:
                found.add("unexpected", {"key": key, "offset": o, "value": v,
                                         "summary": f"partition {key} offset {o} holds {v!r}, which no send carried",
                                         "reads": [op.to_dict()]})
            if o >= end:
                end = o + 1
        if claimed_end is not None:
            end = max(end, claimed_end)
    for val, offs in extra_offsets.items():
        offs = sorted(offs | {first_offset[val]})
        if len(offs) <= (requests or {}).get(val, 1):
            found.resent_duplicates += 1
            continue
        found.add("duplicate", {"key": key, "value": val, "offsets": offs,
                                "summary": f"{val!r} appears at offsets {offs} of partition {key}"})

    acked = [(inv, ret, off, val, op) for val, (inv, ret, off, op) in sends.items() if off is not None]
    # Indeterminate sends whose value a read saw did happen, at the offset it was seen at.
    placed = acked + [(inv, ret, min(extra_offsets.get(val, set()) | {first_offset[val]}), val, op)
                      for val, (inv, ret, off, op) in sends.items() if off is None and val in first_offset]
    end = max([end] + [off + 1 for _, _, off, _, _ in placed])
    # realtime-order: sweep invocations; among sends acknowledged before, the highest offset
    # must stay below the invoked send's offset.
    by_ack = sorted(acked, key=lambda s: s[1])
    best = None
    i = 0
    for s in sorted(placed, key=lambda s: s[0]):
        while i < len(by_ack) and by_ack[i][1] < s[0]:
            if best is None or by_ack[i][2] > best[2]:
                best = by_ack[i]
            i += 1
        if best is not None and best[2] > s[2]:
            found.add("realtime-order", {
                "key": key, "summary": f"{best[3]!r} was acknowledged at offset {best[2]} before the send of "
                                       f"{s[3]!r} began, which got the lower offset {s[2]} (partition {key})",
                "sends": [best[4].to_dict(), s[4].to_dict()]})
    # future-read: a read that saw the log reach offset r implies every offset below r was
    # filled before it ended, so no send at such an offset may begin after the read ended.
    by_inv = sorted(placed, key=lambda s: s[0])
    suffix_min = [None] * (len(by_inv) + 1)
    for k in range(len(by_inv) - 1, -1, -1):
        cur = suffix_min[k + 1]
        suffix_min[k] = by_inv[k] if cur is None or by_inv[k][2] < cur[2] else cur
    inv_positions = [s[0] for s in by_inv]
    for _, ret_pos, _, _, op, reach in reads:
        k = bisect.bisect_right(inv_positions, ret_pos)
        s = suffix_min[k]
        if s is not None and s[2] < reach:
            found.add("future-read", {"key": key, "summary": f"a read of partition {key} saw the log reach offset "
                                                             f"{reach}, but {s[3]!r} at offset {s[2]} was sent only "
                                                             "after that read ended",
                                      "reads": [op.to_dict(), s[4].to_dict()]})
    # stale-read: whatever completed before a final read began (an acknowledged send at offset
    # o, a read that saw the log reach r) bounds the end that final read may claim from below.
    bounds = sorted([(ret, off + 1, op) for _, ret, off, _, op in acked] +
                    [(ret, reach, op) for _, ret, _, _, op, reach in reads])
    prefix_best: list[tuple[int, Op] | None] = []
    best_bound = None
    for _, need, op in bounds:
        if best_bound is None or need > best_bound[0]:
            best_bound = (need, op)
        prefix_best.append(best_bound)
    completions = [b[0] for b in bounds]
    for inv_pos, _, _, claimed_end, op, _ in reads:
        if claimed_end is None:
            continue
        k = bisect.bisect_left(completions, inv_pos)
        if k and prefix_best[k - 1][0] > claimed_end:
            need, proof = prefix_best[k - 1]
            found.add("stale-read", {"key": key, "summary": f"a final read of partition {key} claimed the log ends "
                                                            f"at {claimed_end}, but before it began the log was "
                                                            f"already known to reach {need}",
                                     "reads": [op.to_dict(), proof.to_dict()]})
    # offset-gap: offsets below the end that no observation fills need that many
    # indeterminate sends whose values were never observed.
    unfilled = sum(1 for o in range(end) if o not in value_at)
    spare = sum(1 for val, (_, _, off, _) in sends.items() if off is None and val not in first_offset)
    if unfilled > spare:
        found.add("offset-gap", {"key": key, "summary": f"partition {key}: {unfilled} offset(s) below {end} were "
                                                        f"never observed, but only {spare} indeterminate send(s) "
                                                        "could have filled them"})


class LogOrderChecker:
    name = "log-order"

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return check_log_order(history)
