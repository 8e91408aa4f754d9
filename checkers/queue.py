"""The queue checker: did acknowledged sends survive, and do all reads agree? (issue 3; Jepsen's Kafka checker).

History schema (workloads/queue.py writes it):
  send        invoke [key, value]           ok [key, [offset, value]]
  poll        invoke null                   ok {"<key>": [[offset, value], ...], ...}
  final-poll  invoke [key]                  ok [key, hwm, [[offset, value], ...]]  (drained [start, hwm))

One definition of each anomaly (DESIGN.md: "one definition of each anomaly"):
  lost-write            an acknowledged send whose value is missing from the final reads of its
                        key, or that sits below the final HWM but no read ever saw at its offset
  unexpected            a value read that no send ever carried
  duplicate             one value at two offsets of a key (copies of a value whose send the client
                        re-sent, up to the number of requests it sent, are counted apart: below)
  inconsistent-offsets  two reads disagree on the value at one offset (divergent logs)
  nonmonotonic-poll     a consumer's reads of a key went backwards
  poll-skip             a consumer's reads of a key jumped over an offset that exists: an
                        acknowledged send got it, or some read (a poll, a final read) returned a
                        record there, on the same side of the last fault beyond the budget (below).
                        A jump over offsets nothing proves exist is a gap (a Kafka log may lack
                        records at some offsets: transaction markers, compaction, aborted batches):
                        counted in stats["poll-gap-count"] with examples in details["poll_gaps"],
                        no anomaly. A later read may prove a skipped offset, so jumps are judged
                        after the pass (`proven_between` is the rule; Elle's queue view and the
                        Spark pipeline, results/pipeline/queue_checks.py, apply the same).
A non-idempotent librdkafka producer re-sends a batch answered NOT_LEADER_OR_FOLLOWER whatever its
retries, and a Kafka leader gives that answer to a produce it appended and that may still commit
(workloads/queue.py). The send's completion then carries "resent": {"requests": n, ...}. Up to n
copies of its value are the client's own appends, not a duplicate: they are counted in
stats["resent-duplicate-count"], with examples in details["resent_duplicates"].
Verdict: false on any anomaly; "unknown" when a key with acknowledged sends has no final
read (nothing can be concluded about its losses), or when no send at all was acknowledged (a
valid verdict would be vacuous); else true.

The durability contract covers min ISR - 1 power cuts (001: Kafka guarantees durability
for n-1 replicas). A fault that goes beyond it (a scenario or `exceed_fault_budget` power-
cutting every ISR member) marks its nemesis op `beyond_fault_budget`; a send acknowledged
before the last such op and missing afterwards is not a lost-write anomaly but is counted
and listed as lost beyond the fault budget (`lost-beyond-fault-budget`). Whether the
cluster owned up to that loss (001 5.3.2: an unclean recovery is reported as a potential
data-loss event) is the replica checker's question (checkers/replicas.py).
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkers.core import MAX_EXAMPLES, UNKNOWN, Anomaly, Result
from checkers.reasons import say
from history import INFO, NEMESIS, OK, Op, beyond_budget_time, pair_ops

ANOMALY_TYPES = ("lost-write", "unexpected", "duplicate", "inconsistent-offsets", "nonmonotonic-poll", "poll-skip",
                 "group-skip", "lost-commit")
# Judged only in subscribe mode (a consumer group's commits and resumes); the Spark pipeline's check
# (results/pipeline/) does not judge them yet, so it is compared with the in-process checker on the others.
SUBSCRIBE_ANOMALY_TYPES = ("group-skip", "lost-commit")

EXPLANATIONS = {
    "lost-write": "The broker acknowledged these sends, but after the faults healed the final reads of "
                  "their partition did not contain them.",
    "unexpected": "A read returned a value that no send ever carried.",
    "duplicate": "One sent value appears at more than one offset of its partition.",
    "inconsistent-offsets": "Two reads returned different values at the same offset: the replicas' logs diverged.",
    "nonmonotonic-poll": "A consumer's successive reads of a partition went backwards in offset.",
    "poll-skip": "A consumer's successive reads of a partition skipped offsets that exist: an acknowledged "
                 "send or another read shows a record at an offset this consumer passed over.",
    "group-skip": "The consumer group skipped records: a record exists at this offset, the group's consumers "
                  "read past it, and none of them ever read it (a consumer resumed beyond its group's committed "
                  "offset, or a commit ran ahead of what was read). Reading a record again is allowed "
                  "(at-least-once); never reading it is not.",
    "lost-commit": "The consumer group resumed a partition below an offset it had committed: the commit was "
                   "acknowledged before this poll began, yet a member took the partition up again from an earlier "
                   "offset, so the coordinator lost the acknowledged commit (at-least-once allows reading again "
                   "from the last committed offset, not from before it).",
}
GAP_EXPLANATION = ("A consumer's successive reads of a partition jumped over offsets that no send was "
                   "acknowledged at and no read returned: a Kafka log may lack records there (transaction "
                   "markers, compaction, aborted batches), so this is counted, not an anomaly.")

RESENT_EXPLANATION = ("The client sent these values in more than one produce request: librdkafka re-sends a batch "
                      "answered NOT_LEADER_OR_FOLLOWER even with retries=0, and a leader that stops leading gives "
                      "that answer to a produce it has appended, which may still commit. Each request may append "
                      "its own copy without idempotence, so these copies are counted, not a duplicate.")


NO_ACKNOWLEDGED_SEND = say("no-acknowledged-send-at-all")


def poll_items(f: str, value: Any) -> Iterator[tuple[int, list]]:
    """(key, [[offset, value], ...]) for each key a poll or final-poll completion returned."""
    if f == "final-poll":
        if isinstance(value, list) and len(value) == 3:
            yield int(value[0]), value[2] or []
    elif isinstance(value, dict):
        for k, recs in value.items():
            yield int(k), recs or []


class QueueValues:
    """How the queue workload's op values read (the schema above), defined once: the checkers here read
    them through it (and poll_items), and so do the views that are not checkers (the report, the Spark
    pipeline's ingest), through the workload's declaration (workloads/base.py ValueReader). A key is an
    int (a poll's JSON object keys are its decimal text); offsets and values are as the history holds them."""

    op_names = frozenset({"send", "poll", "final-poll"})  # the client ops whose values it reads

    @staticmethod
    def key(op: Op) -> int | None:
        """The one key an op is about: a send's, a final read's (invoke [key], ok [key, hwm, records])."""
        v = op.value
        if isinstance(v, list) and ((op.f == "send" and len(v) == 2) or (op.f == "final-poll" and len(v) in (1, 3))):
            return int(v[0])
        return None

    @staticmethod
    def written(op: Op) -> tuple[int, Any, Any] | None:
        """(key, offset, value) of a send: offset None until its ok completion ([key, [offset, value]])."""
        v = op.value
        if op.f != "send" or not isinstance(v, list) or len(v) != 2:
            return None
        placed = v[1]
        if isinstance(placed, list) and len(placed) == 2:
            return int(v[0]), placed[0], placed[1]
        return int(v[0]), None, placed

    @staticmethod
    def records(op: Op) -> Iterator[tuple[int, Any, Any]]:
        """(key, offset, value) of each record a poll or final-poll completion returned, in order (a record
        that is not an [offset, value] pair is passed over here; the checkers fail on it)."""
        for key, recs in poll_items(op.f, op.value):
            for rec in recs:
                if isinstance(rec, list | tuple) and len(rec) == 2:
                    yield key, rec[0], rec[1]

    @staticmethod
    def drained(op: Op) -> tuple[int, Any] | None:
        """(key, end offset) of a final read's ok completion: it drained the key up to that HWM."""
        v = op.value
        if op.f == "final-poll" and isinstance(v, list) and len(v) == 3:
            return int(v[0]), v[1]
        return None


QUEUE_VALUES = QueueValues()


@dataclass
class _Examples:
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    examples: dict[str, list] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, example: dict[str, Any]) -> None:
        self.counts[name] += 1
        if len(self.examples[name]) < MAX_EXAMPLES:
            self.examples[name].append(example)


class QueueChecker:
    name = "queue"

    def __init__(self, subscribe: bool = False):
        self.subscribe = subscribe

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return check_queue(history, subscribe=self.subscribe)


def check_queue(history: Sequence[Op], subscribe: bool = False) -> Result:
    """`subscribe`: the consumers are one group's members (the queue workload's subscribe mode). A rebalance
    moves a partition from one member to another, and a member resumes from the group's committed offset,
    so one consumer's reads may jump forward or go back: nonmonotonic-poll and poll-skip are not judged per
    consumer (Jepsen allows both under subscribe; counted in stats); the group as a whole must not skip
    (group-skip)."""
    written, drained = QUEUE_VALUES.written, QUEUE_VALUES.drained
    cutoff = beyond_budget_time(history)
    pairs = pair_ops(history)
    found = _Examples()
    sent_values: dict[int, dict[Any, Op]] = defaultdict(dict)    # key -> value -> invoke
    resent: dict[tuple[int, Any], int] = {}                       # (key, value) -> requests the client sent
    acked: list[tuple[Op, Op]] = []                               # (invoke, ok completion)
    info_sends: list[tuple[int, Any]] = []
    stats = defaultdict(int)
    # Reads are compared within their era: before the last fault beyond the budget (0) or after (1).
    # Such a fault may take back offsets that were read, so a read before it and one after may see
    # different values there, and a consumer's position may point past the new end; neither breaks
    # the contract. Without such a fault everything is era 0.
    def era(op: Op) -> int:
        return 1 if cutoff is not None and op.time >= cutoff else 0

    # (key, era) -> offset -> value -> first completion that read it
    seen: dict[tuple[int, int], dict[int, dict[Any, Op]]] = defaultdict(lambda: defaultdict(dict))
    value_offsets: dict[tuple[int, int], dict[Any, set[int]]] = defaultdict(lambda: defaultdict(set))
    final_hwm: dict[int, int] = {}
    final_values: dict[int, dict[Any, int]] = defaultdict(dict)
    last_offset: dict[tuple[Any, int, int], tuple[int, Op]] = {}  # (process, key, era) -> last offset read
    # (key, era) -> jumps of consumers over offsets, column by column (from, to, the read before, the
    # read after): a log with a transaction marker after every commit has millions of them.
    jumps: dict[tuple[int, int], _Jumps] = {}
    group_read: dict[tuple[int, int], set[int]] = defaultdict(set)  # subscribe mode: offsets the group's polls read
    # subscribe mode: (key, era) -> [(completion time, committed offset, the poll)], and the polls at which a
    # member took a partition up from the group's offset rather than from its own last read
    commits: dict[tuple[int, int], list[tuple[int, int, Op]]] = defaultdict(list)
    resumes: list[tuple[Op, Op, int, int]] = []  # (invoke, completion, key, first offset read)

    for inv, comp in pairs:
        if inv.process == NEMESIS:
            continue
        if inv.f == "send":
            key, _, value = written(inv)
            sent_values[key][value] = inv
            t = comp.type if comp is not None else INFO
            stats[f"send-{t}"] += 1
            if comp is not None and (comp.extra or {}).get("resent"):
                resent[(key, value)] = int(comp.extra["resent"].get("requests", 2))
            if t == OK:
                acked.append((inv, comp))
            elif t == INFO:
                info_sends.append((key, value))
        elif inv.f in ("poll", "final-poll"):
            t = comp.type if comp is not None else INFO
            stats[f"{inv.f}-{t}"] += 1
            if t != OK:
                continue
            e = era(comp)
            if subscribe and inv.f == "poll":
                for k, committed in ((comp.extra or {}).get("committed") or {}).items():
                    commits[(int(k), e)].append((comp.time, int(committed), comp))
            for key, recs in poll_items(inv.f, comp.value):
                prev = last_offset.get((inv.process, key, e))
                if subscribe and inv.f == "poll" and recs and (prev is None or int(recs[0][0]) != prev[0] + 1):
                    resumes.append((inv, comp, key, int(recs[0][0])))
                jumped = None
                for off, val in recs:
                    off = int(off)
                    readers = seen[(key, e)][off]
                    if val not in readers:
                        if readers:
                            other_val, other_op = next(iter(readers.items()))
                            found.add("inconsistent-offsets", {
                                "key": key, "offset": off, "values": [other_val, val],
                                "summary": f"partition {key} offset {off}: one read saw {other_val!r}, "
                                           f"another {val!r}",
                                "reads": [other_op.to_dict(), comp.to_dict()]})
                        readers[val] = comp
                    value_offsets[(key, e)][val].add(off)
                    if subscribe and inv.f == "poll":
                        group_read[(key, e)].add(off)
                        if prev is not None and off != prev[0] + 1:
                            stats["subscribe-rewinds" if off <= prev[0] else "subscribe-jumps"] += 1
                    elif prev is not None:
                        if off <= prev[0]:
                            found.add("nonmonotonic-poll", {
                                "key": key, "process": inv.process, "from": prev[0], "to": off,
                                "summary": f"process {inv.process} read partition {key} at offset {off} after "
                                           f"having read offset {prev[0]}",
                                "reads": [prev[1].to_dict(), comp.to_dict()]})
                        elif off > prev[0] + 1:
                            # A skip or a legitimate gap: decided after the pass, once every read
                            # and acknowledgement that may prove the skipped offsets exist is known.
                            if jumped is None:
                                jumped = jumps.get((key, e)) or jumps.setdefault((key, e), _Jumps())
                            jumped.starts.append(prev[0])
                            jumped.ends.append(off)
                            jumped.before.append(prev[1])
                            jumped.after.append(comp)
                    prev = (off, comp)
                if prev is not None and inv.f == "poll":
                    last_offset[(inv.process, key, e)] = prev
                if inv.f == "final-poll":
                    hwm = int(drained(comp)[1])
                    final_hwm[key] = max(final_hwm.get(key, -1), hwm)
                    for off, val in recs:
                        final_values[key][val] = int(off)

    # Values read but never sent (once per key and value, whatever the era); values at two offsets.
    unexpected_seen: set[tuple[int, Any]] = set()
    resent_examples: list[dict[str, Any]] = []
    for (key, e), by_value in value_offsets.items():
        for val, offsets in by_value.items():
            if val not in sent_values[key] and (key, val) not in unexpected_seen:
                unexpected_seen.add((key, val))
                off = min(offsets)
                found.add("unexpected", {"key": key, "value": val, "offsets": sorted(offsets),
                                         "summary": f"partition {key} offset {off} holds {val!r}, which was never sent",
                                         "reads": [next(iter(seen[(key, e)][off].values())).to_dict()]})
            if 1 < len(offsets) <= resent.get((key, val), 1):
                stats["resent-duplicate-count"] += 1
                if len(resent_examples) < MAX_EXAMPLES:
                    resent_examples.append({"key": key, "value": val, "offsets": sorted(offsets),
                                            "requests": resent[(key, val)]})
            elif len(offsets) > 1:
                found.add("duplicate", {"key": key, "value": val, "offsets": sorted(offsets),
                                        "summary": f"value {val!r} appears at offsets {sorted(offsets)} of partition {key}",
                                        "reads": [next(iter(seen[(key, e)][o].values())).to_dict()
                                                  for o in sorted(offsets)[:2]]})

    gap_count, gaps = _judge_jumps(jumps, seen, acked, era, found)
    if subscribe:
        _judge_group_skips(group_read, seen, acked, era, found)
        _judge_lost_commits(commits, resumes, era, found)

    def readers_at(key: int, off: int) -> dict[Any, Op]:
        out: dict[Any, Op] = {}
        for e in (0, 1):
            if (key, e) in seen:
                out.update(seen[(key, e)].get(off, {}))
        return out

    # Acknowledged sends that did not survive.
    uncovered = set()
    beyond_budget: list[dict[str, Any]] = []
    for inv, comp in acked:
        key, off, val = written(comp)
        off = int(off)
        if key not in final_hwm:
            uncovered.add(key)
            continue
        hwm = final_hwm[key]
        in_final = val in final_values[key]
        at = readers_at(key, off)
        seen_at_offset = val in at
        if not in_final or (off < hwm and not seen_at_offset):
            at_offset = sorted(map(repr, at))
            if cutoff is not None and comp.time is not None and comp.time < cutoff:
                beyond_budget.append({"key": key, "offset": off, "value": val})
                continue
            found.add("lost-write", {
                "key": key, "offset": off, "value": val, "final_hwm": hwm,
                "summary": (f"send of {val!r} to partition {key} was acknowledged at offset {off}; the final read "
                            f"covered offsets below {hwm} and "
                            + (f"held {', '.join(at_offset)} at {off}" if at_offset else f"nothing at {off}")),
                "send": comp.to_dict(), "invoke": inv.to_dict()})
        if off >= hwm:
            stats["acked-beyond-final-hwm"] += 1

    stats["info-sends-later-read"] = sum(1 for k, v in info_sends
                                         if any(v in value_offsets.get((k, e), {}) for e in (0, 1)))
    stats["acked-sends"] = len(acked)
    stats["keys-with-final-reads"] = len(final_hwm)
    stats["poll-gap-count"] = gap_count
    details: dict[str, Any] = {}
    if gap_count:
        details["poll_gaps"] = {"count": gap_count, "explanation": GAP_EXPLANATION, "examples": gaps}
    if resent_examples:
        details["resent_duplicates"] = {"count": stats["resent-duplicate-count"], "explanation": RESENT_EXPLANATION,
                                        "examples": resent_examples}
    if cutoff is not None:
        stats["lost-beyond-fault-budget"] = len(beyond_budget)
        details["lost_beyond_fault_budget"] = {
            "cutoff_ns": cutoff, "count": len(beyond_budget),
            "by_key": {str(k): sum(1 for b in beyond_budget if b["key"] == k) for k in sorted({b["key"] for b in beyond_budget})},
            "examples": beyond_budget[:MAX_EXAMPLES]}
    anomalies = [Anomaly(n, found.counts[n], found.examples[n], EXPLANATIONS[n]) for n in ANOMALY_TYPES
                 if found.counts[n]]
    reasons = []
    if uncovered:
        stats["keys-without-final-read"] = sorted(uncovered)
        reasons.append(say("no-final-read", partitions=sorted(uncovered)))
    if not acked:
        reasons.append(NO_ACKNOWLEDGED_SEND)
    valid: Any = False if anomalies else UNKNOWN if reasons else True
    stats = dict(stats)
    stats.update({f"{n}-count": found.counts[n] for n in ANOMALY_TYPES})
    return Result(checker="queue", valid=valid, anomalies=anomalies, stats=stats, details=details,
                  unknown_reasons=reasons)


def _judge_lost_commits(commits: dict[tuple[int, int], list[tuple[int, int, Op]]],
                        resumes: list[tuple[Op, Op, int, int]], era, found: _Examples) -> None:
    """Subscribe mode: a member that takes a partition up (its first read of it, or a read not following its
    own last one) starts from the group's committed offset, which is at least every commit of the partition
    acknowledged before its poll began: starting below one is a lost-commit. Commits and polls are compared
    within their era (a fault beyond the budget may take acknowledged commits back)."""
    for inv, comp, key, first in resumes:
        before = [(t, off, op) for t, off, op in commits.get((key, era(comp)), ()) if t < inv.time]
        if not before:
            continue
        t, committed, by = max(before, key=lambda c: c[1])
        if first < committed:
            found.add("lost-commit", {
                "key": key, "process": inv.process, "offset": first, "committed": committed,
                "summary": f"process {inv.process} took partition {key} up at offset {first}, though the group's "
                           f"commit of offset {committed} had been acknowledged (to process {by.process}) before",
                "reads": [by.to_dict(), comp.to_dict()]})


def _judge_group_skips(group_read: dict[tuple[int, int], set[int]], seen: dict[tuple[int, int], dict[int, dict]],
                       acked: list[tuple[Op, Op]], era, found: _Examples) -> None:
    """Subscribe mode: each offset proven to exist (some read returned a record there, or a send was
    acknowledged there, in the same era) below the highest offset the group's polls read of that partition,
    that no poll of the group read: a group-skip."""
    proof: dict[tuple[int, int], dict[int, Any]] = defaultdict(dict)
    for (key, e), by_offset in seen.items():
        if (key, e) in group_read:
            proof[(key, e)].update({off: next(iter(readers.values())) for off, readers in by_offset.items()})
    for _, comp in acked:
        (key, off, _), e = QUEUE_VALUES.written(comp), era(comp)
        if (key, e) in group_read:
            proof[(key, e)].setdefault(int(off), comp)
    for (key, e), read in sorted(group_read.items()):
        top = max(read)
        for off in sorted(o for o in proof[(key, e)] if o < top and o not in read):
            by = proof[(key, e)][off]
            found.add("group-skip", {
                "key": key, "offset": off, "group_read_up_to": top,
                "summary": f"partition {key} offset {off} holds a record (op {by.index} "
                           f"{'acknowledged a send' if by.f == 'send' else 'read it'}); the group's consumers read "
                           f"up to offset {top} but none read offset {off}",
                "proof": by.to_dict()})


def proven_between(proven: Sequence[int], start: int, to: int) -> Sequence[int]:
    """The one definition of a skip: of the offsets proven to exist (`proven`, sorted), those strictly
    between `start` and `to`. A consumer that read `start` and then `to` skipped them: a poll-skip when
    there is one, a gap (no anomaly) when there is none."""
    return proven[bisect.bisect_right(proven, start):bisect.bisect_left(proven, to)]


class _Jumps:
    """One partition's jumps in one era, as columns (an array of ints costs 8 bytes an entry, a tuple 90)."""

    __slots__ = ("starts", "ends", "before", "after")

    def __init__(self) -> None:
        self.starts, self.ends = array("q"), array("q")
        self.before: list[Op] = []
        self.after: list[Op] = []


def _judge_jumps(jumps: dict[tuple[int, int], _Jumps], seen: dict[tuple[int, int], dict[int, dict[Any, Op]]],
                 acked: list[tuple[Op, Op]], era, found: _Examples) -> tuple[int, list[dict[str, Any]]]:
    """Each jump of a consumer over offsets: a poll-skip when an offset it skipped is proven to exist
    (an acknowledged send got it, or some read returned a record there, in the same era), else a gap
    (a transaction marker, a compacted or aborted record: offsets a Kafka log may legitimately lack).
    Adds the skips to `found`; returns (how many gaps, the first few as examples)."""
    if not jumps:
        return 0, []
    # (key, era) -> offset -> the op proving a record is there: a read first, else the acknowledgement
    proof: dict[tuple[int, int], dict[int, Op]] = {}
    for key, e in jumps:
        proof[(key, e)] = {off: next(iter(readers.values())) for off, readers in seen.get((key, e), {}).items()}
    for _, comp in acked:
        (key, off, _), e = QUEUE_VALUES.written(comp), era(comp)
        if (key, e) in jumps:
            proof[(key, e)].setdefault(int(off), comp)
    gaps: list[dict[str, Any]] = []
    gap_count = 0
    for (key, e), jumped in jumps.items():
        offsets = sorted(proof[(key, e)])
        for k, (start, to) in enumerate(zip(jumped.starts, jumped.ends, strict=True)):
            skipped = proven_between(offsets, start, to)
            if not skipped:
                gap_count += 1  # the common case on a log with markers: counted, an example only for the first few
                if len(gaps) < MAX_EXAMPLES:
                    p = jumped.after[k].process
                    gaps.append({"key": key, "process": p, "from": start, "to": to,
                                 "summary": f"process {p} read partition {key} offset {start}, then offset {to}; "
                                            f"nothing shows a record at the {to - start - 1} offset(s) between"})
                continue
            first, p = proof[(key, e)][skipped[0]], jumped.after[k].process
            found.add("poll-skip", {
                "key": key, "process": p, "from": start, "to": to, "skipped_existing": skipped[:MAX_EXAMPLES],
                "summary": f"process {p} read partition {key} offset {start}, then offset {to}, skipping "
                           f"{len(skipped)} offset(s) that exist (offset {skipped[0]}: op {first.index} "
                           f"{'acknowledged a send' if first.f == 'send' else 'read a record'} there)",
                "reads": [jumped.before[k].to_dict(), jumped.after[k].to_dict()], "proof": first.to_dict()})
    return gap_count, gaps


__all__ = ["ANOMALY_TYPES", "QUEUE_VALUES", "SUBSCRIBE_ANOMALY_TYPES", "QueueChecker", "QueueValues", "check_queue", "poll_items",
           "proven_between"]
