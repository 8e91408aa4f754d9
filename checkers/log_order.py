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
                        those copies are counted in stats["resent-duplicate-count"], no anomaly;
                        the queue checker's rule, checkers/queue.py resent_copies)
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
import operator
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain, compress, repeat
from typing import Any

from kafkaesque_harness.checkers.core import UNKNOWN, Anomaly, Result
from kafkaesque_harness.checkers.queue import (
    Examples,
    drained,
    poll_items,
    resent_copies,
    resent_requests,
    written,
)
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.checkers.stream import (
    EXTRA,
    INT64,
    POS,
    PROCESS,
    SEQ_BITS,
    TIME,
    TYPE,
    VALUE,
    F,
    InMemory,
    IntColumn,
    IntSet,
    OffsetValues,
    OpSource,
    Row,
    completion,
    widened,
)
from kafkaesque_harness.history import FAIL, INFO, NEMESIS, OK, Op, beyond_budget_time

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
_BELOW_ALL, _ABOVE_ALL = float("-inf"), float("inf")  # no acknowledgement before; no send after
NOTHING_OBSERVED = say("no-log-observed")
# A completion the history does not hold ranks after every position (the old `len(history) + 1`).
NEVER = 1 << 62


class LogOrderChecker:
    """The log fast path (the module's docstring). It reads the history once, pair by pair (`stream`), as the
    queue checker does (checkers/stream.py); a history whose sends repeat a value in one partition is read
    a second time (LogOrderCheck says why)."""

    name = "log-order"

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return check_log_order(history)

    def stream(self, test: dict[str, Any], cutoff: int | None, ops: OpSource) -> LogOrderCheck:
        return LogOrderCheck(cutoff, ops)


def check_log_order(history: Sequence[Op]) -> Result:
    """The log fast path on a history in memory (the same check as a stream: LogOrderCheck)."""
    ops = InMemory(history)
    check = LogOrderCheck(beyond_budget_time(history), ops)
    for inv, comp in ops.pairs():
        check.feed(inv, comp)
    return check.result()


class LogOrderCheck:
    """The log fast path as a stream: `feed` each (invocation, completion) pair of rows in invocation order,
    then `result`. After a fault beyond the budget it keeps one _Era per side of it.

    Each partition's observations are judged as if its acknowledged sends came first (in invocation
    order) and its reads after (in invocation order, record by record): the rules of `_Partition.judge`.
    A read record at an offset already acknowledged, with the value acknowledged there, changes nothing
    under those rules, so it is only counted; any other record is kept and judged at the end, when every
    acknowledgement is known. That holds while no two sends of a partition carry one value (the later
    one replaces the earlier, which may have been the first to claim an offset): a history where two do
    is read again with every record kept (`exact`)."""

    def __init__(self, cutoff: int | None, ops: OpSource, exact: bool = False):
        self.cutoff, self.ops, self.exact = cutoff, ops, exact
        self.carried: dict[int, IntSet] = defaultdict(IntSet)  # key -> every value a send (of any era) carried
        # key -> value -> the requests the client sent it in, if it re-sent it (any era, any outcome)
        self.requests: dict[int, dict[Any, int]] = defaultdict(dict)
        self.resent_duplicates = 0  # values at several offsets, each copy from one of the client's requests
        self.eras = [_Era(self, e if cutoff is not None else None) for e in ((0, 1) if cutoff is not None else (0,))]

    def era_of(self, time: Any) -> int:
        return 1 if time >= self.cutoff else 0

    def feed(self, inv: Row, comp: Row | None) -> None:
        if inv[PROCESS] == NEMESIS:
            return
        t = comp[TYPE] if comp is not None else INFO
        ret = comp[POS] if comp is not None and t != INFO else NEVER
        f = inv[F]
        if f == "send":
            v = inv[VALUE]
            if type(v) is list and len(v) == 2 and type(value := v[1]) is not list:  # written's common case
                key = int(v[0])
            else:
                key, _, value = written(f, v)
            extra = comp[EXTRA] if comp is not None else None
            if extra and "resent" in extra:  # the client re-sent it (resent_requests)
                requests = resent_requests(extra)
                if requests is not None:
                    self.requests[key][value] = requests
            era = self.eras[0] if self.cutoff is None else self._era(comp if comp is not None and t != INFO else inv)
            if t != FAIL:
                # A value carried before (by a send of this partition, in either era) may replace an earlier
                # send's: the class's docstring says what that costs.
                again = not self.carried[key].add_new(value)
                p = era.partitions.get(key) or era.partition(key)
                if t == OK:
                    cv = comp[VALUE]
                    if comp[F] == "send" and type(cv) is list and len(cv) == 2 and type(at := cv[1]) is list \
                            and len(at) == 2:
                        off = int(at[0])  # written's common case: [key, [offset, value]]
                    else:
                        off = int(written(comp[F], cv)[1])
                    # acknowledged without an offset (negative: queue.ACK_WITHOUT_OFFSET): it places nothing
                    p.send(value, inv[POS], ret, off if off >= 0 else None, ret, again)
                else:
                    p.send(value, inv[POS], ret, None, inv[POS], again)  # may or may not have happened
        elif t == OK and (f == "poll" or f == "final-poll"):
            era = self.eras[0] if self.cutoff is None else self._era(comp)
            partitions, read_keys = era.partitions, era.read_keys
            end = int(drained(f, comp[VALUE])[1]) if f == "final-poll" else None
            inv_pos = inv[POS]
            seq = inv_pos << SEQ_BITS
            exact = self.exact
            for key, recs in poll_items(f, comp[VALUE]):
                if key not in read_keys:
                    read_keys[key] = None
                p = partitions.get(key) or era.partition(key)
                n = len(recs)
                if n and not exact:
                    # The common case: records at offsets that follow on, each acknowledged with the value read
                    # there: nothing to keep (see the class's docstring), only how far the log reached, as the
                    # record loop would have found it (the last record's offset, as written).
                    if p.claims.holds_firsts(recs, n):
                        last = recs[-1][0]
                        reach = last + 1  # max(first, last) + 1: they follow on
                        if last >= p.end:
                            p.end = reach
                        if end is not None:
                            reach = max(reach, end)
                            if end > p.end:
                                p.end = end
                            p.final_reads.append((inv_pos, end, ret))
                        if type(reach) is int:  # add_read's common case, without the call
                            try:
                                p.read_rets.append(ret)
                                p.read_reaches.append(reach)
                            except OverflowError:
                                p.add_read(ret, reach)
                        else:
                            p.add_read(ret, reach)
                        seq += n
                        continue
                # reach: how far this read saw the log go (records come in offset order; a read
                # that is not is the queue checker's nonmonotonic-poll)
                reach = max(recs[0][0], recs[-1][0]) + 1 if recs else 0
                if end is not None:
                    reach = max(reach, end)
                    p.final_reads.append((inv_pos, end, ret))
                p.add_read(ret, reach)
                p.read(recs, end, seq)
                seq += n

    def _era(self, row: Row) -> _Era:
        return self.eras[0] if self.cutoff is None else self.eras[self.era_of(row[TIME])]

    def result(self) -> Result:
        if not self.exact and any(p.repeated for era in self.eras for p in era.partitions.values()):
            again = LogOrderCheck(self.cutoff, self.ops, exact=True)
            for inv, comp in self.ops.pairs():
                again.feed(inv, comp)
            return again.result()
        found = Examples()
        observed = 0
        for era in self.eras:
            observed += era.judge(found)
        stats: dict[str, Any] = {f"{n}-count": found.counts[n] for n in EXPLANATIONS}
        if self.cutoff is not None:
            stats["eras"] = 2
        stats["observations"] = observed
        if self.resent_duplicates:
            stats["resent-duplicate-count"] = self.resent_duplicates
        anomalies = [Anomaly(n, found.counts[n], found.examples[n], EXPLANATIONS[n]) for n in EXPLANATIONS
                     if found.counts[n]]
        # No observation, no verdict: "valid" would claim an order was checked when none was seen.
        reasons = [] if observed else [NOTHING_OBSERVED]
        valid: Any = False if anomalies else UNKNOWN if reasons else True
        return Result(checker="log-order", valid=valid, anomalies=anomalies, stats=stats, unknown_reasons=reasons)


class _Era:
    """The observations on one side of the last fault beyond the budget (or all of them), by partition."""

    def __init__(self, check: LogOrderCheck, era: int | None):
        self.check, self.era = check, era
        self.partitions: dict[int, _Partition] = {}
        self.send_keys: dict[int, None] = {}  # the partitions in the order sends, and reads, first named them
        self.read_keys: dict[int, None] = {}

    def partition(self, key: int) -> _Partition:
        p = self.partitions.get(key)
        if p is None:
            p = self.partitions[key] = _Partition(key, self.check, self)
        return p

    def judge(self, found: Examples) -> int:
        """Add each partition's anomalies to `found`, in the order of the rules; returns how many
        observations there were (acknowledged sends and reads of a partition)."""
        observed = 0
        for key in set(self.send_keys) | set(self.read_keys):
            for name, make in self.partitions[key].judge(self.check.carried[key], self.check.requests.get(key, {})):
                found.add(name, make)
        for p in self.partitions.values():
            observed += sum(1 for *_, is_acked in p.sends() if is_acked) + len(p.read_rets)
        return observed


class _Partition:
    """One partition's sends and reads in one era, as columns, and the read records `judge` needs."""

    def __init__(self, key: int, check: LogOrderCheck, era: _Era):
        self.key, self.check, self.ops, self.era = key, check, check.ops, era
        # sends, in invocation order: value, invocation, completion (NEVER if none), offset (acknowledged)
        self.send_values, self.send_offsets = IntColumn(), IntColumn()
        self.send_invokes, self.send_returns = array("i"), array("q")  # invokes widen as they must (widened)
        self.send_acked = bytearray()
        self.repeated = False     # two sends carried one value (the later may replace the earlier)
        self.claims = OffsetValues()  # offset -> the first value acknowledged there (seq: its completion)
        self.claim_conflicts: list[tuple[Any, Any, int, int]] = []  # (offset, value, first claim's op, this op)
        # reads, in invocation order: completion, reach; final reads also (invocation, end it claimed, position)
        self.read_rets = array("i")  # widened as they must be (add_read)
        self.read_reaches: array | list = array("i")
        self.final_reads: list[tuple[int, Any, int]] = []
        self.kept_seqs, self.kept_offsets, self.kept_values = array("q"), IntColumn(), IntColumn()
        self.end: Any = 0

    def send(self, value: Any, inv: int, ret: int, off: int | None, op: int, again: bool) -> None:
        """A send (`op`: the position of its acknowledgement, else of its invocation); `again`: its value
        was carried before."""
        self.era.send_keys.setdefault(self.key)
        if again:
            self.repeated = True
        self.send_values.append(value)
        try:
            self.send_invokes.append(inv)
        except OverflowError:
            self.send_invokes = widened(self.send_invokes, inv)
        self.send_returns.append(ret)
        self.send_offsets.append(off if off is not None else 0)
        self.send_acked.append(off is not None)
        if off is not None:
            claims = self.claims
            seqs = claims.seqs
            if type(value) is int and 0 <= off < len(seqs) and seqs[off] < 0 and INT64[0] <= value <= INT64[1]:
                claims.vals[off], seqs[off] = value, ret  # OffsetValues.observe's common case: a new offset
                return
            first = claims.observe(off, value, ret)
            if first is not True and first is not False:
                self.claim_conflicts.append((off, value, first[1], ret))

    def add_read(self, ret: int, reach: Any) -> None:
        """A read completed at position `ret` saw the log reach `reach` (4-byte columns, widened to 8 bytes
        as they must be; the reaches a list once one is not an int64). The columns may already hold `ret`:
        feed's inline append stops at the first that overflows."""
        if len(self.read_rets) == len(self.read_reaches):
            try:
                self.read_rets.append(ret)
            except OverflowError:
                self.read_rets = widened(self.read_rets, ret)
        reaches = self.read_reaches
        if type(reaches) is array and not (type(reach) is int and INT64[0] <= reach <= INT64[1]):
            reaches = self.read_reaches = list(reaches)  # a reach no int64 holds: a list holds anything
        try:
            reaches.append(reach)
        except OverflowError:
            self.read_reaches = widened(reaches, reach)

    def read(self, recs: list, claimed_end: Any, seq: int) -> None:
        """The records of a read (the common case is LogOrderCheck.feed's): keep those an acknowledgement
        does not settle; note how far the log reached."""
        claims, end, exact = self.claims, self.end, self.check.exact
        vals, seqs = claims.vals, claims.seqs
        for o, v in recs:
            # The hot path: a record at an offset acknowledged with this value (see LogOrderCheck).
            if exact or not (type(o) is int and 0 <= o < len(seqs) and seqs[o] >= 0 and vals[o] == v):
                self.kept_seqs.append(seq)
                self.kept_offsets.append(o)
                self.kept_values.append(v)
            if o >= end:
                end = o + 1
            seq += 1
        if claimed_end is not None:
            end = max(end, claimed_end)
        self.end = end

    def judge(self, carried: IntSet, requests: dict[Any, int]) -> Iterator[tuple[str, Callable[[], dict[str, Any]]]]:
        """The partition's anomalies, in the order of the rules: (name, the example's maker). The rules, in
        order: the acknowledged sends claim their offsets (in the order their values were first sent), then
        each read record in turn is held against what is known at its offset. `requests`: value -> how many
        produce requests the client sent it in, for the values it re-sent (their copies: resent_copies)."""
        key, ops = self.key, self.ops
        claims, claim_conflicts = self._claims()
        value_at: dict[Any, Any] = {}   # offset -> the first value a read saw there, where no send was acked
        proof: dict[Any, int] = {}      # offset -> the seq of that read
        first_offset: dict[Any, Any] = {}  # value -> the first offset it was observed at
        extra_offsets: dict[Any, set] = defaultdict(set)

        def read_op(seq: int) -> Op:
            return completion(ops, seq >> SEQ_BITS)

        for off, val, first_ret, ret in claim_conflicts:
            first_val = claimed(claims, off)
            yield "inconsistent-offsets", lambda off=off, val=val, first_val=first_val, first_ret=first_ret, ret=ret: {
                "key": key, "offset": off, "values": [first_val, val],
                "summary": f"partition {key} offset {off}: {first_val!r} and {val!r}",
                "reads": [ops.op(first_ret).to_dict(), ops.op(ret).to_dict()]}
        acked_offset = self._acked_offsets(set(self.kept_values))  # value -> offset, for the values reads kept
        for seq, o, v in zip(self.kept_seqs, self.kept_offsets, self.kept_values, strict=True):
            seen = claimed(claims, o)
            if seen is not _MISSING:
                first = lambda o=o: ops.op(claimed_by(claims, o))  # noqa: E731 - the op that claimed `o`
            else:
                seen = value_at.get(o, _MISSING)
                if seen is _MISSING:
                    value_at[o], proof[o] = v, seq
                first = lambda o=o: read_op(proof[o])  # noqa: E731 - the read that saw `o` first
            if seen is not _MISSING and seen != v:
                yield "inconsistent-offsets", lambda o=o, v=v, seen=seen, seq=seq, first=first: {
                    "key": key, "offset": o, "values": [seen, v], "summary": f"partition {key} offset {o}: {seen!r} and {v!r}",
                    "reads": [first().to_dict(), read_op(seq).to_dict()]}
            fo = first_offset.setdefault(v, acked_offset[v] if v in acked_offset else o)
            if fo != o:
                extra_offsets[v].add(o)
            if v not in carried:
                yield "unexpected", lambda o=o, v=v, seq=seq: {
                    "key": key, "offset": o, "value": v,
                    "summary": f"partition {key} offset {o} holds {v!r}, which no send carried",
                    "reads": [read_op(seq).to_dict()]}
        for val, offs in extra_offsets.items():
            offs = sorted(offs | {first_offset[val]})
            if resent_copies(len(offs), requests.get(val, 1)):
                self.check.resent_duplicates += 1
                continue
            yield "duplicate", lambda val=val, offs=offs: {
                "key": key, "value": val, "offsets": offs, "summary": f"{val!r} appears at offsets {offs} of partition {key}"}
        yield from self._orders(claims, first_offset, extra_offsets, value_at)

    def _claims(self) -> tuple[OffsetValues, list[tuple[Any, Any, int, int]]]:
        """The offsets the acknowledged sends claim (the first value there, seq: its send's completion), and
        the sends that claimed an offset already claimed by another value. Kept as the sends came, unless
        two carried one value: then from the sends as `sends` gives them."""
        if not self.repeated:
            return self.claims, self.claim_conflicts
        claims, conflicts = OffsetValues(), []
        for val, _, ret, off, is_acked in self.sends():
            if is_acked:
                first = claims.observe(off, val, ret)
                if first is not True and first is not False:
                    conflicts.append((off, val, first[1], ret))
        return claims, conflicts

    def _acked_offsets(self, values: set) -> dict[Any, Any]:
        """value -> the offset it was acknowledged at, for the acknowledged sends carrying one of `values`."""
        if not values:
            return {}
        if not self.repeated:
            hits = compress(range(len(self.send_values)), map(values.__contains__, self.send_values))
            return {self.send_values[k]: self.send_offsets[k] for k in hits if self.send_acked[k]}
        return {val: off for val, _, _, off, is_acked in self.sends() if is_acked and val in values}

    def _orders(self, claims: OffsetValues, first_offset: dict, extra_offsets: dict,
                value_at: dict) -> Iterator[tuple[str, Callable]]:
        """realtime-order, future-read, stale-read and offset-gap (the module's docstring)."""
        key, ops = self.key, self.ops
        # (invocation, completion, offset, value, op position) of each acknowledged send, and of each
        # indeterminate send whose value a read saw: it did happen, at the offset it was seen at.
        acked, placed_later = [], []
        spare = 0
        for val, inv, ret, off, is_acked in self.sends():
            if is_acked:
                acked.append((inv, ret, off, val, ret))
            elif val in first_offset:
                placed_later.append((inv, ret, min(extra_offsets.get(val, set()) | {first_offset[val]}), val, inv))
            else:
                spare += 1  # an indeterminate send never observed: it may fill an unobserved offset
        placed = acked + placed_later
        end = max([self.end] + [off + 1 for _, _, off, _, _ in placed])
        # realtime-order: sweep invocations; among sends acknowledged before, the highest offset
        # must stay below the invoked send's offset. At C speed: for each send, how many were acknowledged
        # before it began (bisect), and the highest offset among them (a running max).
        by_ack = sorted(acked, key=lambda s: s[1])
        by_inv = sorted(placed, key=lambda s: s[0])
        ack_returns = [s[1] for s in by_ack]
        highest = [_BELOW_ALL, *accumulate((s[2] for s in by_ack), max)]
        before = map(bisect.bisect_left, repeat(ack_returns), (s[0] for s in by_inv))
        for k in compress(range(len(by_inv)), map(operator.gt, map(highest.__getitem__, before), (s[2] for s in by_inv))):
            s = by_inv[k]
            n_before = bisect.bisect_left(ack_returns, s[0])
            # the first acknowledgement, in completion order, to reach that highest offset
            best = next(a for a in by_ack[:n_before] if a[2] == highest[n_before])
            yield "realtime-order", lambda best=best, s=s: {
                "key": key, "summary": f"{best[3]!r} was acknowledged at offset {best[2]} before the send of "
                                       f"{s[3]!r} began, which got the lower offset {s[2]} (partition {key})",
                "sends": [ops.op(best[4]).to_dict(), ops.op(s[4]).to_dict()]}
        # future-read: a read that saw the log reach offset r implies every offset below r was
        # filled before it ended, so no send at such an offset may begin after the read ended. At C speed:
        # for each read, the sends begun after it ended (bisect) and the least offset among them.
        suffix_min: list = [None] * (len(by_inv) + 1)
        for k in range(len(by_inv) - 1, -1, -1):
            cur = suffix_min[k + 1]
            suffix_min[k] = by_inv[k] if cur is None or by_inv[k][2] < cur[2] else cur
        least = [s[2] if s is not None else _ABOVE_ALL for s in suffix_min]
        inv_positions = [s[0] for s in by_inv]
        after = map(bisect.bisect_right, repeat(inv_positions), self.read_rets)
        for i in compress(range(len(self.read_rets)), map(operator.lt, map(least.__getitem__, after), self.read_reaches)):
            ret_pos, reach = self.read_rets[i], self.read_reaches[i]
            s = suffix_min[bisect.bisect_right(inv_positions, ret_pos)]
            yield "future-read", lambda ret_pos=ret_pos, reach=reach, s=s: {
                "key": key, "summary": f"a read of partition {key} saw the log reach offset {reach}, but "
                                       f"{s[3]!r} at offset {s[2]} was sent only after that read ended",
                "reads": [ops.op(ret_pos).to_dict(), ops.op(s[4]).to_dict()]}
        # stale-read: whatever completed before a final read began (an acknowledged send at offset
        # o, a read that saw the log reach r) bounds the end that final read may claim from below.
        for inv_pos, claimed_end, ret_pos in self.final_reads:
            bound = self._bound_before(acked, inv_pos)
            if bound is not None and bound[0] > claimed_end:
                need, by = bound
                yield "stale-read", lambda need=need, by=by, claimed_end=claimed_end, ret_pos=ret_pos: {
                    "key": key, "summary": f"a final read of partition {key} claimed the log ends at {claimed_end}, "
                                           f"but before it began the log was already known to reach {need}",
                    "reads": [ops.op(ret_pos).to_dict(), ops.op(by).to_dict()]}
        # offset-gap: offsets below the end that no observation fills need that many
        # indeterminate sends whose values were never observed.
        unfilled = _unfilled(claims, value_at, end)
        if unfilled > spare:
            yield "offset-gap", lambda: {
                "key": key, "summary": f"partition {key}: {unfilled} offset(s) below {end} were never observed, "
                                       f"but only {spare} indeterminate send(s) could have filled them"}

    def sends(self) -> Iterator[tuple[Any, int, int, Any, bool]]:
        """(value, invocation, completion, offset, acknowledged) of each send in the order its value was first
        sent, with its last send's data (a later send of a value replaces the earlier)."""
        columns = zip(self.send_values, self.send_invokes, self.send_returns, self.send_offsets, self.send_acked,
                      strict=True)
        if not self.repeated:
            return ((val, inv, ret, off, bool(a)) for val, inv, ret, off, a in columns)
        last: dict[Any, tuple[Any, int, int, Any, bool]] = {}
        for val, inv, ret, off, a in columns:
            last[val] = (val, inv, ret, off, bool(a))
        return iter(list(last.values()))

    def _bound_before(self, acked: list, inv_pos: int) -> tuple[Any, int] | None:
        """The highest offset known to exist before position `inv_pos`: (an acknowledged send's offset + 1, or
        a read's reach; the op that showed it, the first in completion order to show that much), or None."""
        bounds = chain(((ret, off + 1) for _, ret, off, _, _ in acked),
                       zip(self.read_rets, self.read_reaches, strict=True))
        best = None  # (completion, need)
        for ret, need in bounds:
            if ret < inv_pos and (best is None or need > best[1] or (need == best[1] and ret < best[0])):
                best = (ret, need)
        return None if best is None else (best[1], best[0])  # a completion's position is its op's


def _unfilled(claims: OffsetValues, value_at: dict[Any, Any], end: Any) -> int:
    """How many offsets below `end` neither an acknowledgement nor a read (value_at) fills."""
    if claims.generic is not None or type(end) is not int:
        # Only offsets some observation names can be filled: count those, not every offset below the end (a
        # log whose offsets start at 2**33 made range(end) run for hours).
        end = operator.index(end)
        named = set()
        for o in chain(claims.generic or (), value_at):
            try:
                i = int(o)
            except (TypeError, ValueError, OverflowError):
                continue
            if i == o and 0 <= i < end:
                named.add(i)
        if claims.generic is None:
            named.update(o for o, seq in enumerate(claims.seqs[:end]) if seq >= 0)
        return end - sum(1 for o in named if claimed(claims, o) is not _MISSING or o in value_at)
    seqs = claims.seqs
    unclaimed = seqs[:end].count(-1) + max(0, end - len(seqs))  # at C speed: the common case
    return unclaimed - sum(1 for o in value_at if o in range(end) and claimed(claims, o) is _MISSING)


def _claims_at(claims: OffsetValues, off: Any) -> dict[Any, int]:
    """The values acknowledged at `off` (the first first), looked up as a dict key would be (2.0 is 2)."""
    if type(off) is int or claims.generic is not None:
        return claims.values_at(off)
    try:
        i = int(off)
    except (TypeError, ValueError, OverflowError):
        return {}
    return claims.values_at(i) if i == off else {}


def claimed(claims: OffsetValues, off: Any) -> Any:
    """The value first acknowledged at `off`, or _MISSING."""
    values = _claims_at(claims, off)
    return next(iter(values)) if values else _MISSING


def claimed_by(claims: OffsetValues, off: Any) -> int:
    """The position of the completion that first claimed `off`."""
    return next(iter(_claims_at(claims, off).values()))
