"""The queue checker: did acknowledged sends survive, and do all reads agree? (issue 3; Jepsen's Kafka checker).

History schema (workloads/queue.py writes it):
  send        invoke [key, value]           ok [key, [offset, value]]
  poll        invoke null                   ok {"<key>": [[offset, value], ...], ...}
  final-poll  invoke [key]                  ok [key, hwm, [[offset, value], ...]]  (drained [start, hwm))

One definition of each anomaly (DESIGN.md: "one definition of each anomaly"):
  lost-write            an acknowledged send whose value is missing from the final reads of its
                        key, or that sits below the final HWM but no read ever saw at its offset
                        (a send acknowledged without an offset, a negative one, by its value alone:
                        ACK_WITHOUT_OFFSET says when a client does that)
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
stats["resent-duplicate-count"], with examples in details["resent_duplicates"] (`resent_requests` and
`resent_copies` are the rule, which the log-order checker shares).
Whose (checkers/clients.py): a nonmonotonic-poll or poll-skip whose read starts where a client event of
the same process moved its position (the completions' "client_events": a `reset` the library made on its
own, a `seek`) carries that event and its owner ("whose": client for a reset or the policy's placing, harness
for the workload's own seek, broker for the group's committed offset), counted over every instance in the
anomaly's "whose"; with no such event it stays unattributed. An attributed anomaly still counts.
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
import itertools
import operator
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from itertools import compress, islice
from typing import Any

from kafkaesque_harness.checkers.clients import Moves, cause_fields, count_whose, whose_of
from kafkaesque_harness.checkers.core import MAX_EXAMPLES, UNKNOWN, Anomaly, Result
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.checkers.stream import (
    EXTRA,
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
from kafkaesque_harness.history import CLIENT_EVENTS, INFO, NEMESIS, OK, Op, beyond_budget_time

# A send the client reported successful with offset -1: kafka-python 3.0.12 (producer/sender.py) takes a
# DUPLICATE_SEQUENCE_NUMBER answer for success with the answer's base offset, which a broker gives as -1
# (tansu 0.6.0 does, docs/analyses/tansu-0.6.0.md); an acks=0 send has no offset either. Such a send places its
# value at no offset: it survived when its value is in the final reads, and proves no offset exists.
ACK_WITHOUT_OFFSET = -1

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
    "lost-commit": "The consumer group resumed a partition below every offset it could have had committed: a "
                   "member assigned the partition first read it below each commit the coordinator could have held "
                   "as its latest when the assignment was made (acknowledged before it and not followed by a later "
                   "acknowledged commit, or failed without a definite answer), so the coordinator lost an "
                   "acknowledged commit (at-least-once allows reading again from the last committed offset, not "
                   "from before it).",
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
        return written(op.f, op.value)

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
        return drained(op.f, op.value)


def written(f: str, v: Any) -> tuple[int, Any, Any] | None:
    """QueueValues.written of an op's f and value (the checkers read rows, not Ops: checkers/stream.py)."""
    if f != "send" or not isinstance(v, list) or len(v) != 2:
        return None
    placed = v[1]
    if isinstance(placed, list) and len(placed) == 2:
        return int(v[0]), placed[0], placed[1]
    return int(v[0]), None, placed


def drained(f: str, v: Any) -> tuple[int, Any] | None:
    """QueueValues.drained of an op's f and value."""
    if f == "final-poll" and isinstance(v, list) and len(v) == 3:
        return int(v[0]), v[1]
    return None


QUEUE_VALUES = QueueValues()


def resent_requests(extra: dict[str, Any] | None) -> int | None:
    """How many produce requests the client sent a send in, when it re-sent it: the "requests" of the "resent"
    its completion carries (workloads/queue.py; two when it does not say), else None. `extra`: the completion's
    other fields (an Op's extra, a history file's line)."""
    resent = (extra or {}).get("resent")
    return int(resent.get("requests", 2)) if resent else None


def resent_copies(copies: int, requests: int) -> bool:
    """The one rule for a value found at `copies` (more than one) offsets of a partition, whose send the client
    sent in `requests` produce requests (1 unless it re-sent it: `resent_requests`): each request may append
    its own copy without idempotence, so up to `requests` copies are the client's, counted apart
    (resent-duplicate-count), and only more are a duplicate. The queue and log-order checkers both apply it."""
    return copies <= requests


class Examples:
    """Each anomaly's count and its first MAX_EXAMPLES examples. An example is made only when it is kept
    (`make`, called then): its ops are read back from the history, which a stream does not hold. `whose`: the
    owner of this instance where a client event tells it (checkers/clients.py), counted over every instance."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.examples: dict[str, list] = defaultdict(list)
        self.whose: dict[str, dict[str, int]] = defaultdict(dict)

    def add(self, name: str, make: Callable[[], dict[str, Any]], whose: str | None = None) -> None:
        self.counts[name] += 1
        if whose is not None:
            count_whose(self.whose[name], whose)
        if len(self.examples[name]) < MAX_EXAMPLES:
            self.examples[name].append(make())

    def anomaly(self, name: str, explanation: str) -> Anomaly:
        return Anomaly(name, self.counts[name], self.examples[name], explanation, whose=self.whose.get(name) or None)


class QueueChecker:
    """The queue checker (the module's docstring). It reads the history once, pair by pair (`stream`), so
    `kafkaesque check` checks a history file of any length without holding it (checkers/stream.py)."""

    name = "queue"

    def __init__(self, subscribe: bool = False):
        self.subscribe = subscribe

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return check_queue(history, subscribe=self.subscribe)

    def stream(self, test: dict[str, Any], cutoff: int | None, ops: OpSource) -> QueueCheck:
        return QueueCheck(cutoff, ops, self.subscribe)


def check_queue(history: Sequence[Op], subscribe: bool = False) -> Result:
    """The queue checker on a history in memory (the same check as a stream: QueueCheck)."""
    ops = InMemory(history)
    check = QueueCheck(beyond_budget_time(history), ops, subscribe)
    for inv, comp in ops.pairs():
        check.feed(inv, comp)
    return check.result()


class _Acked:
    """One partition's acknowledged sends, in invocation order, as columns."""

    __slots__ = ("offsets", "values", "invokes", "completions", "eras")

    def __init__(self) -> None:
        # 4 bytes an entry until an offset or position needs more (widened)
        self.offsets, self.invokes, self.completions = array("i"), array("i"), array("i")
        self.values = IntColumn()
        self.eras = array("b")  # 0 or 1; -1: no time to place it by (an error once an era is asked)

    def append(self, off: int, val: Any, inv: int, comp: int, era: int) -> None:
        self.values.append(val)
        self.eras.append(era)
        try:
            self.offsets.append(off)
            self.invokes.append(inv)
            self.completions.append(comp)
        except OverflowError:
            self._append_wide(off, inv, comp)

    def _append_wide(self, off: int, inv: int, comp: int) -> None:
        """append's rest, once one of off, inv, comp needs 8 bytes: the columns that have not taken theirs yet
        take it, widened if they must be."""
        n = len(self.eras)
        for name, v in (("offsets", off), ("invokes", inv), ("completions", comp)):
            column = getattr(self, name)
            if len(column) < n:
                try:
                    column.append(v)
                except OverflowError:
                    setattr(self, name, widened(column, v))

    def __len__(self) -> int:
        return len(self.offsets)


class _Jumps:
    """One partition's jumps in one era, as columns (an array of ints costs 8 bytes an entry, a tuple 90):
    the offsets read before and after, the positions of the two reads, and the client event that moved the
    consumer there (an index into QueueCheck.causes; -1: none)."""

    __slots__ = ("starts", "ends", "before", "after", "causes")

    def __init__(self) -> None:
        self.starts, self.ends, self.before, self.after = array("q"), array("q"), array("q"), array("q")
        self.causes = array("i")


# Commit errors that say the coordinator refused the commit before writing it (Kafka's GroupCoordinator answers
# them from the group's state). Any other error (a timeout, a lost connection, NOT_COORDINATOR or
# COORDINATOR_NOT_AVAILABLE, which a coordinator also answers to a commit it appended but lost the leadership
# of before the append committed) may hide a commit that was applied.
DEFINITE_COMMIT_ERRORS = ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS",
                          "COORDINATOR_LOAD_IN_PROGRESS", "FENCED_INSTANCE_ID", "GROUP_AUTHORIZATION_FAILED",
                          "OFFSET_METADATA_TOO_LARGE", "INVALID_COMMIT_OFFSET_SIZE", "_NO_OFFSET",
                          "CommitFailedError", "IllegalGenerationError", "UnknownMemberIdError",
                          "RebalanceInProgressError", "GroupLoadInProgressError", "CoordinatorLoadInProgressError")


def commit_error_is_definite(error: str) -> bool:
    """Whether a subscribe-mode poll's commit_error (the client's text, one error per failed partition) says
    for every partition that the commit was refused, not applied."""
    parts = [p for p in str(error).split("; ") if p]
    return bool(parts) and all(any(name in p for name in DEFINITE_COMMIT_ERRORS) for p in parts)


class _CommitBounds:
    """One partition's commits in one era, ordered for `lowest_candidate` (_judge_lost_commits has the rule)."""

    def __init__(self, commits: list[tuple[Any, Any, int, int, Any]]):
        acked = sorted((c for c in commits if c[1] is not None), key=lambda c: c[1])
        self.acked = acked
        self.acked_at = [c[1] for c in acked]
        self.latest_begin = list(itertools.accumulate((c[0] for c in acked), max))  # by acknowledgement order
        self.longest = max((c[1] - c[0] for c in acked), default=0)
        unknown = sorted((c for c in commits if c[1] is None), key=lambda c: c[0])
        self.unknown_begun = [c[0] for c in unknown]
        # the lowest of the indefinite commits begun so far, by beginning
        self.unknown_lowest = list(itertools.accumulate(unknown, lambda a, b: b if b[2] < a[2] else a))

    def lowest_candidate(self, a: Any) -> tuple[Any, Any, int, int, Any] | None:
        """The lowest-offset commit the coordinator could hold as its latest at time `a`, or None when it may
        hold none at all: with no commit acknowledged before `a`, every commit so far (failed without a
        definite answer, or acknowledged after `a`) may not have been applied yet, so the member may rightly
        start where the reset policy puts it."""
        before = bisect.bisect_left(self.acked_at, a)  # acknowledged before a: [0, before)
        if not before:
            return None
        followed_until = self.latest_begin[before - 1] if before else None
        lo = bisect.bisect_left(self.acked_at, followed_until) if followed_until is not None else 0
        hi = bisect.bisect_left(self.acked_at, a + self.longest + 1)  # begun before a: acknowledged by then
        best = None
        for c in islice(self.acked, lo, hi):
            if c[0] < a and (best is None or c[2] < best[2]):
                best = c
        k = bisect.bisect_left(self.unknown_begun, a)
        if k and (best is None or self.unknown_lowest[k - 1][2] < best[2]):
            best = self.unknown_lowest[k - 1]
        return best


class QueueCheck:
    """The queue checker as a stream: `feed` each (invocation, completion) pair of rows in invocation order
    (checkers/stream.py), then `result`. What it keeps per record is a few columns (OffsetValues, _Acked,
    IntSet): reads of one partition in one era cost 16 bytes an offset, however many consumers read it.

    `subscribe`: the consumers are one group's members (the queue workload's subscribe mode). A rebalance
    moves a partition from one member to another, and a member resumes from the group's committed offset,
    so one consumer's reads may jump forward or go back: nonmonotonic-poll and poll-skip are not judged per
    consumer (Jepsen allows both under subscribe; counted in stats); the group as a whole must not skip
    (group-skip)."""

    def __init__(self, cutoff: int | None, ops: OpSource, subscribe: bool = False):
        self.cutoff, self.ops, self.subscribe = cutoff, ops, subscribe
        self.op_at = ops.op
        self.found = Examples()
        self.stats: dict[str, int] = defaultdict(int)
        self.outcomes: dict[tuple[str, str], int] = defaultdict(int)  # (f, type) -> how many pairs
        self.sent: dict[int, IntSet] = defaultdict(IntSet)         # key -> every value a send carried
        self.acked: dict[int, _Acked] = defaultdict(_Acked)
        self.info_sends: list[tuple[int, Any]] = []
        self.resent: dict[tuple[int, Any], int] = {}  # (key, value) -> the requests the client sent it in, if re-sent
        # Reads are compared within their era: before the last fault beyond the budget (0) or after (1).
        # Such a fault may take back offsets that were read, so a read before it and one after may see
        # different values there, and a consumer's position may point past the new end; neither breaks
        # the contract. Without such a fault everything is era 0.
        self.seen: dict[tuple[int, int], OffsetValues] = {}         # (key, era) -> what reads saw where
        self.unsent_read: dict[tuple[int, int], set[Any]] = defaultdict(set)  # read before any send carried it
        self.final_hwm: dict[int, int] = {}
        self.final_values: dict[int, IntSet] = defaultdict(IntSet)
        self.seen_in: tuple[dict[int, OffsetValues], ...] = ({}, {})  # the same, by era and key
        # era -> process -> key -> (the offset it read last, that read's position)
        self.last_offset: tuple[dict[Any, dict[int, tuple[int, int]]], ...] = ({}, {})
        # (key, era) -> jumps of consumers over offsets: a log with a transaction marker after every commit
        # has millions of them.
        self.jumps: dict[tuple[int, int], _Jumps] = {}
        self.group_read: dict[tuple[int, int], set[int]] = defaultdict(set)  # subscribe: offsets the group read
        # subscribe mode: (key, era) -> [(the poll's invocation time, its completion time if the commit was
        # acknowledged, else None (it may still have been applied), committed offset, the poll's position, its
        # process)]; the assignment each member's next read of a partition follows ((process, key) -> the
        # invocation time and position of the op whose rebalance log assigned it); and the reads that took a
        # partition up after an assignment: (assignment time, process, era, read's position, key, first offset,
        # assignment's position)
        self.commits: dict[tuple[int, int], list[tuple[Any, Any, int, int, Any]]] = defaultdict(list)
        self.assigned: dict[tuple[Any, int], tuple[Any, int]] = {}
        self.ever_assigned: set[tuple[Any, int]] = set()
        self.unassigned_takeups: set[tuple[Any, int]] = set()  # read with no assignment on record: not judged
        self.resumes: list[tuple[Any, Any, int, int, int, int, int]] = []
        # the client events (history/clients.py): each process's position moves, waiting for the read they
        # explain (checkers/clients.py), and the moves that explain a jump (_Jumps.causes)
        self.moves = Moves()
        self.causes: list[dict[str, Any]] = []

    def era(self, time: Any) -> int:
        return 1 if self.cutoff is not None and time >= self.cutoff else 0

    def feed(self, inv: Row, comp: Row | None) -> None:
        if inv[PROCESS] == NEMESIS:
            return
        f = inv[F]
        t = comp[TYPE] if comp is not None else INFO
        self.outcomes[(f, t)] += 1
        if comp is not None and comp[EXTRA] and CLIENT_EVENTS in comp[EXTRA]:
            self.moves.note(inv[PROCESS], comp[EXTRA], comp[POS])
        if self.subscribe and comp is not None and comp[EXTRA] and "rebalance_log" in comp[EXTRA]:
            self._assignments(inv, comp)
        if f == "send":
            v = inv[VALUE]
            if type(v) is list and len(v) == 2 and type(value := v[1]) is not list:  # written's common case
                key = int(v[0])
            else:
                key, _, value = written(f, v)
            self.sent[key].add(value)
            extra = comp[EXTRA] if comp is not None else None
            if extra and "resent" in extra:  # the client re-sent it (resent_requests)
                requests = resent_requests(extra)
                if requests is not None:
                    self.resent[(key, value)] = requests
            if t == OK:
                cv = comp[VALUE]
                if comp[F] == "send" and type(cv) is list and len(cv) == 2 and type(at := cv[1]) is list \
                        and len(at) == 2:
                    key, off, val = int(cv[0]), at[0], at[1]  # written's common case: [key, [offset, value]]
                else:
                    key, off, val = written(comp[F], cv)
                era = 0 if self.cutoff is None else -1 if comp[TIME] is None else self.era(comp[TIME])
                self.acked[key].append(int(off), val, inv[POS], comp[POS], era)
            elif t == INFO:
                self.info_sends.append((key, value))
        elif t == OK and (f == "poll" or f == "final-poll"):
            self._read(inv, comp)

    def _read(self, inv: Row, comp: Row) -> None:
        f, process, pos = inv[F], inv[PROCESS], comp[POS]
        e = 0 if self.cutoff is None else self.era(comp[TIME])
        group_poll = self.subscribe and f == "poll"
        if group_poll:
            self._commits(inv, comp, e)
        seq = inv[POS] << SEQ_BITS
        # this era's partitions, and where this process last read each of them
        seen_in = self.seen_in[e]
        last = self.last_offset[e].get(process)
        if last is None:
            last = self.last_offset[e][process] = {}
        for key, recs in poll_items(f, comp[VALUE]):
            prev = last.get(key)
            if group_poll and recs:
                assignment = self.assigned.pop((process, key), None)
                if assignment is not None:
                    self.resumes.append((assignment[0], process, e, pos, key, int(recs[0][0]), assignment[1]))
                elif (process, key) not in self.ever_assigned:
                    self.unassigned_takeups.add((process, key))
            if not recs:
                continue  # nothing read: no position to remember
            # the client event that placed this read (a reset, a seek), if one did
            cause = self.moves.explain(process, key, recs[0][0]) if self.moves.pending else None
            seen = seen_in.get(key)
            if seen is None:
                seen = seen_in[key] = self.seen[(key, e)] = OffsetValues()
            n = len(recs)
            # The common case: offsets that follow on from this consumer's last, each holding the value the
            # partition's reads saw there first (every consumer reads every record), or nothing yet (the first
            # read of them): the record loop below would find nothing but first sightings in them.
            if prev is None or recs[0][0] == prev[0] + 1:
                new = seen.follow(recs, n, seq)
                if new >= 0:
                    if new:
                        for val in self.sent[key].missing(map(_VALUE_OF, islice(recs, n - new, None))):
                            self._new_sighting(key, e, val)
                    if group_poll:
                        self.group_read[(key, e)].update(range(recs[0][0], recs[0][0] + n))
                    if f == "poll":
                        last[key] = (recs[0][0] + n - 1, pos)
                    seq += n
                    continue
            vals, seqs = seen.vals, seen.seqs
            prev_off, prev_pos = prev if prev is not None else (None, None)
            jumped = None
            for off, val in recs:
                if type(off) is not int:
                    off = int(off)
                if not (0 <= off < len(seqs) and seqs[off] >= 0 and vals[off] == val):
                    first = seen.observe(off, val, seq)
                    if first is True or first is not False:
                        self._new_sighting(key, e, val)
                    if first is not True and first is not False:
                        self._inconsistent(key, off, val, first, pos)
                    vals, seqs = seen.vals, seen.seqs
                if group_poll:
                    self.group_read[(key, e)].add(off)
                    if prev_off is not None and off != prev_off + 1:
                        self.stats["subscribe-rewinds" if off <= prev_off else "subscribe-jumps"] += 1
                elif prev_off is not None:
                    if off <= prev_off:
                        self._nonmonotonic(key, process, prev_off, off, prev_pos, pos, cause)
                    elif off > prev_off + 1:
                        # A skip or a legitimate gap: decided after the pass, once every read
                        # and acknowledgement that may prove the skipped offsets exist is known.
                        if jumped is None:
                            jumped = self.jumps.get((key, e)) or self.jumps.setdefault((key, e), _Jumps())
                        jumped.starts.append(prev_off)
                        jumped.ends.append(off)
                        jumped.before.append(prev_pos)
                        jumped.after.append(pos)
                        if cause is not None:
                            self.causes.append(cause)
                        jumped.causes.append(len(self.causes) - 1 if cause is not None else -1)
                cause = None  # a move places a read's first record only
                prev_off, prev_pos = off, pos
                seq += 1
            if f == "poll":
                last[key] = (prev_off, prev_pos)
        if f == "final-poll":
            for key, recs in poll_items(f, comp[VALUE]):
                hwm = int(drained(f, comp[VALUE])[1])
                self.final_hwm[key] = max(self.final_hwm.get(key, -1), hwm)
                self.final_values[key].update(val for _, val in recs)

    def _new_sighting(self, key: int, e: int, val: Any) -> None:
        """A value seen at an offset for the first time in its era: one its key's sends have not carried (so
        far) may be unexpected."""
        if val not in self.sent[key]:
            self.unsent_read[(key, e)].add(val)

    def _inconsistent(self, key: int, off: int, val: Any, first: tuple[Any, int], pos: int) -> None:
        other_val, other_seq = first
        self.found.add("inconsistent-offsets", lambda: {
            "key": key, "offset": off, "values": [other_val, val],
            "summary": f"partition {key} offset {off}: one read saw {other_val!r}, another {val!r}",
            "reads": [self._read_op(other_seq).to_dict(), self.op_at(pos).to_dict()]})

    def _nonmonotonic(self, key: int, process: Any, prev_off: int, off: int, prev_pos: int, pos: int,
                      cause: dict[str, Any] | None = None) -> None:
        self.found.add("nonmonotonic-poll", lambda: {
            "key": key, "process": process, "from": prev_off, "to": off,
            **cause_fields(f"process {process} read partition {key} at offset {off} after having read offset "
                           f"{prev_off}", self._with_op_index(cause)),
            "reads": [self.op_at(prev_pos).to_dict(), self.op_at(pos).to_dict()]},
            whose_of(cause) if cause is not None else None)

    def _with_op_index(self, m: dict[str, Any] | None) -> dict[str, Any] | None:
        """A move as an example shows it: with the index of the op whose completion carried it (and of the
        leader event before it), not its position in the history."""
        if m is None:
            return None
        out = {**m, "op": self.op_at(m["op"]).index} if isinstance(m.get("op"), int) else dict(m)
        leader = out.get("after_leader")
        if isinstance(leader, dict) and isinstance(leader.get("op"), int):
            out["after_leader"] = {**leader, "op": self.op_at(leader["op"]).index}
        return out

    def _read_op(self, seq: int) -> Op:
        return completion(self.ops, seq >> SEQ_BITS)

    def result(self) -> Result:
        found = self.found
        stats: dict[str, Any] = defaultdict(int, {f"{f}-{t}": n for (f, t), n in self.outcomes.items()
                                                  if f in QUEUE_VALUES.op_names})
        stats.update(self.stats)
        self.stats = stats
        resent_examples = self._unexpected_and_duplicates()
        gap_count, gaps = self._judge_jumps()
        if self.subscribe:
            self._judge_group_skips()
            self._judge_lost_commits()
        uncovered, beyond_budget = self._lost_writes()
        stats["info-sends-later-read"] = self._info_sends_later_read()
        acked = sum(map(len, self.acked.values()))
        stats["acked-sends"] = acked
        stats["keys-with-final-reads"] = len(self.final_hwm)
        stats["poll-gap-count"] = gap_count
        details: dict[str, Any] = {}
        if gap_count:
            details["poll_gaps"] = {"count": gap_count, "explanation": GAP_EXPLANATION, "examples": gaps}
        if resent_examples:
            details["resent_duplicates"] = {"count": stats["resent-duplicate-count"], "explanation": RESENT_EXPLANATION,
                                            "examples": resent_examples}
        if self.cutoff is not None:
            stats["lost-beyond-fault-budget"] = len(beyond_budget)
            details["lost_beyond_fault_budget"] = {
                "cutoff_ns": self.cutoff, "count": len(beyond_budget),
                "by_key": {str(k): sum(1 for b in beyond_budget if b["key"] == k)
                           for k in sorted({b["key"] for b in beyond_budget})},
                "examples": beyond_budget[:MAX_EXAMPLES]}
        anomalies = [found.anomaly(n, EXPLANATIONS[n]) for n in ANOMALY_TYPES if found.counts[n]]
        reasons = []
        if uncovered:
            stats["keys-without-final-read"] = sorted(uncovered)
            reasons.append(say("no-final-read", partitions=sorted(uncovered)))
        if not acked:
            reasons.append(NO_ACKNOWLEDGED_SEND)
        if self.subscribe and self.unassigned_takeups:
            stats["takeups-without-assignment"] = len(self.unassigned_takeups)
            reasons.append(say("no-assignment-log", count=len(self.unassigned_takeups)))
        valid: Any = False if anomalies else UNKNOWN if reasons else True
        stats = dict(stats)
        stats.update({f"{n}-count": found.counts[n] for n in ANOMALY_TYPES})
        return Result(checker="queue", valid=valid, anomalies=anomalies, stats=stats, details=details,
                      unknown_reasons=reasons)

    def _info_sends_later_read(self) -> int:
        """How many indeterminate sends some read returned the value of (in either era)."""
        by_key: dict[int, list[Any]] = defaultdict(list)
        for key, value in self.info_sends:
            by_key[key].append(value)
        count = 0
        for key, values in by_key.items():
            wanted = set(values)
            read = set()
            for e in (0, 1):
                if (key, e) in self.seen:
                    read.update(v for v in self.seen[(key, e)].values_in(wanted))
            count += sum(1 for v in values if v in read)
        return count

    def _unexpected_and_duplicates(self) -> list[dict[str, Any]]:
        """Values read but never sent (once per key and value, whatever the era); values at two offsets, a
        duplicate unless they are the copies of a send the client re-sent (`resent_copies`: counted apart).
        Both are looked for in each partition and era in the order its reads first returned each value.
        Returns the first few resent copies as examples."""
        unexpected_seen: set[tuple[int, Any]] = set()
        resent_examples: list[dict[str, Any]] = []
        for (key, e), seen in self.seen.items():
            sent = self.sent[key]
            suspects = {v for v in self.unsent_read.get((key, e), ()) if v not in sent}
            suspects |= _repeated(seen)
            if not suspects:
                continue
            by_value: dict[Any, tuple[int, list[int]]] = {}  # value -> (its first sighting, its offsets)
            for off, val, seq in seen.entries(suspects.__contains__):
                first, offsets = by_value.get(val, (seq, []))
                offsets.append(off)
                by_value[val] = (min(first, seq), offsets)
            for val, (_, offsets) in sorted(by_value.items(), key=lambda item: item[1][0]):
                offsets = sorted(offsets)
                if val not in sent and (key, val) not in unexpected_seen:
                    unexpected_seen.add((key, val))
                    self.found.add("unexpected", lambda key=key, val=val, offsets=offsets, seen=seen: {
                        "key": key, "value": val, "offsets": offsets,
                        "summary": f"partition {key} offset {offsets[0]} holds {val!r}, which was never sent",
                        "reads": [self._read_op(seen.first_seq(offsets[0])).to_dict()]})
                if len(offsets) > 1 and resent_copies(len(offsets), self.resent.get((key, val), 1)):
                    self.stats["resent-duplicate-count"] += 1
                    if len(resent_examples) < MAX_EXAMPLES:
                        resent_examples.append({"key": key, "value": val, "offsets": offsets,
                                                "requests": self.resent[(key, val)]})
                elif len(offsets) > 1:
                    self.found.add("duplicate", lambda key=key, val=val, offsets=offsets, seen=seen: {
                        "key": key, "value": val, "offsets": offsets,
                        "summary": f"value {val!r} appears at offsets {offsets} of partition {key}",
                        "reads": [self._read_op(seen.first_seq(o)).to_dict() for o in offsets[:2]]})
        return resent_examples

    def _acked_in(self, key: int, e: int) -> Iterator[tuple[int, int]]:
        """(offset, completion position) of each acknowledged send of `key` in era `e`, in invocation order."""
        acked = self.acked.get(key)
        if acked is None:
            return
        for off, comp, era in zip(acked.offsets, acked.completions, acked.eras, strict=True):
            if era < 0:
                raise TypeError("an acknowledged send has no time, so its side of the fault beyond the budget is unknown")
            if era == e and off >= 0:  # a send acknowledged without an offset proves none (ACK_WITHOUT_OFFSET)
                yield off, comp

    def _proof(self, key: int, e: int) -> tuple[list[int], Callable[[int], Op]]:
        """The offsets proven to exist in `key` and era `e` (a read returned a record there, or a send was
        acknowledged there), sorted, and the op proving one: a read first, else the acknowledgement."""
        seen = self.seen.get((key, e)) or OffsetValues()
        acked_at: dict[int, int] = {}
        for off, comp in self._acked_in(key, e):
            acked_at.setdefault(off, comp)
        offsets = sorted(set(seen.offsets()).union(acked_at))

        def proof_op(off: int) -> Op:
            seq = seen.first_seq(off)
            return self._read_op(seq) if seq is not None else self.op_at(acked_at[off])
        return offsets, proof_op

    def _judge_jumps(self) -> tuple[int, list[dict[str, Any]]]:
        """Each jump of a consumer over offsets: a poll-skip when an offset it skipped is proven to exist
        (an acknowledged send got it, or some read returned a record there, in the same era), else a gap
        (a transaction marker, a compacted or aborted record: offsets a Kafka log may legitimately lack).
        Adds the skips to `found`; returns (how many gaps, the first few as examples)."""
        gaps: list[dict[str, Any]] = []
        gap_count = 0
        for (key, e), jumped in self.jumps.items():
            offsets, proof_op = self._proof(key, e)
            for start, to, before, after, c in zip(jumped.starts, jumped.ends, jumped.before, jumped.after,
                                                   jumped.causes, strict=True):
                skipped = proven_between(offsets, start, to)
                if not skipped:
                    gap_count += 1  # the common case on a log with markers: counted, an example only for the first few
                    if len(gaps) < MAX_EXAMPLES:
                        p = self.op_at(after).process
                        gaps.append({"key": key, "process": p, "from": start, "to": to,
                                     "summary": f"process {p} read partition {key} offset {start}, then offset {to}; "
                                                f"nothing shows a record at the {to - start - 1} offset(s) between"})
                    continue

                cause = self.causes[c] if c >= 0 else None

                def skip(key=key, start=start, to=to, before=before, after=after, skipped=skipped, proof_op=proof_op,
                         cause=cause):
                    first, p = proof_op(skipped[0]), self.op_at(after).process
                    return {
                        "key": key, "process": p, "from": start, "to": to,
                        "skipped_existing": list(skipped[:MAX_EXAMPLES]),
                        **cause_fields(f"process {p} read partition {key} offset {start}, then offset {to}, skipping "
                                       f"{len(skipped)} offset(s) that exist (offset {skipped[0]}: op {first.index} "
                                       f"{'acknowledged a send' if first.f == 'send' else 'read a record'} there)",
                                       self._with_op_index(cause)),
                        "reads": [self.op_at(before).to_dict(), self.op_at(after).to_dict()], "proof": first.to_dict()}
                self.found.add("poll-skip", skip, whose_of(cause) if cause is not None else None)
        return gap_count, gaps

    def _judge_group_skips(self) -> None:
        """Subscribe mode: each offset proven to exist (some read returned a record there, or a send was
        acknowledged there, in the same era) below the highest offset the group's polls read of that partition,
        that no poll of the group read: a group-skip."""
        for (key, e), read in sorted(self.group_read.items()):
            offsets, proof_op = self._proof(key, e)
            top = max(read)
            for off in (o for o in offsets if o < top and o not in read):
                def skip(key=key, off=off, top=top, proof_op=proof_op):
                    by = proof_op(off)
                    return {
                        "key": key, "offset": off, "group_read_up_to": top,
                        "summary": f"partition {key} offset {off} holds a record (op {by.index} "
                                   f"{'acknowledged a send' if by.f == 'send' else 'read it'}); the group's consumers "
                                   f"read up to offset {top} but none read offset {off}",
                        "proof": by.to_dict()}
                self.found.add("group-skip", skip)

    def _assignments(self, inv: Row, comp: Row) -> None:
        """A rebalance log (workloads/queue.py): the partitions it assigned are taken up at the group's committed
        offsets, fetched after the assignment, so after this op's invocation."""
        for entry in comp[EXTRA]["rebalance_log"] or ():
            if isinstance(entry, dict) and entry.get("type") == "assigned":
                for k in entry.get("keys") or ():
                    self.assigned[(inv[PROCESS], int(k))] = (inv[TIME], comp[POS])
                    self.ever_assigned.add((inv[PROCESS], int(k)))

    def _commits(self, inv: Row, comp: Row, e: int) -> None:
        """The commit a subscribe-mode poll made of what it read: acknowledged ("committed"), failed for certain
        (a definite error: never applied, so not kept), or failed otherwise (it may have been applied, at any
        time after the poll began)."""
        extra = comp[EXTRA] or {}
        committed = extra.get("committed") or {}
        for k, offset in committed.items():
            self.commits[(int(k), e)].append((inv[TIME], comp[TIME], int(offset), comp[POS], inv[PROCESS]))
        error = extra.get("commit_error")
        if error is None or commit_error_is_definite(error):
            return
        # what the poll committed is the next offset of each partition it read (workloads/queue.py); older
        # histories do not say which partitions failed
        attempted = extra.get("commit_offsets") or {k: recs[-1][0] + 1 for k, recs in poll_items("poll", comp[VALUE])
                                                    if recs and k not in committed}
        for k, offset in attempted.items():
            self.commits[(int(k), e)].append((inv[TIME], None, int(offset), comp[POS], inv[PROCESS]))

    def _judge_lost_commits(self) -> None:
        """Subscribe mode: a member takes an assigned partition up at the group's committed offset, which the
        client fetches after the assignment (inside the op whose rebalance log shows it, so after that op
        began: time A). The coordinator then holds one of the commits that could be its latest at A: an
        acknowledged commit whose poll began before A and that no commit acknowledged before A followed in real
        time (began after it was acknowledged), or a commit that failed indefinitely and began before A. The
        member's first read of the partition starting below all of them is a lost-commit: the coordinator lost
        every commit it could have held. Commits and reads are compared within their era (a fault beyond the
        budget may take acknowledged commits back). Commits may go backwards (a member redelivering from an
        older committed offset commits it again), which is why the bound is the lowest candidate, not the
        highest commit."""
        bounds: dict[tuple[int, int], _CommitBounds] = {}
        for a_time, process, e, read_pos, key, first, assign_pos in self.resumes:
            commits = self.commits.get((key, e))
            if not commits:
                continue
            bound = bounds.get((key, e)) or bounds.setdefault((key, e), _CommitBounds(commits))
            lowest = bound.lowest_candidate(a_time)
            if lowest is None:
                continue
            self.stats["takeups-judged-against-commits"] += 1  # so a clean verdict says it tested something
            if first >= lowest[2]:
                continue
            self.found.add("lost-commit", lambda process=process, key=key, first=first, lowest=lowest,
                           read_pos=read_pos, assign_pos=assign_pos: {
                "key": key, "process": process, "offset": first, "committed": lowest[2],
                "summary": f"process {process} was assigned partition {key} in op {self.op_at(assign_pos).index} and "
                           f"first read it at offset {first}, though every commit the coordinator could have held "
                           f"then was at offset {lowest[2]} or above (the lowest: process {lowest[4]}'s, "
                           + ("acknowledged before the assignment)" if lowest[1] is not None
                              else "which failed without a definite answer)"),
                "reads": [self.op_at(lowest[3]).to_dict(), self.op_at(assign_pos).to_dict(),
                          self.op_at(read_pos).to_dict()]})

    def _lost_writes(self) -> tuple[set[int], list[dict[str, Any]]]:
        """Acknowledged sends that did not survive, in invocation order; the keys no final read covered, and
        the losses beyond the fault budget (counted apart)."""
        uncovered: set[int] = set()
        lost: list[tuple[int, int, int, Any, int, int]] = []  # (invocation, completion, key, offset, value, era)
        for key, acked in self.acked.items():
            if key not in self.final_hwm:
                uncovered.add(key)
                continue
            hwm, final = self.final_hwm[key], self.final_values[key]
            seen = [self.seen.get((key, 0)), self.seen.get((key, 1))]
            # The common case, decided without a call: the value is among the final read's (its bit is set)
            # and first seen at its offset by era 0's reads (the columns hold it there).
            bits, nbits = final.bits, len(final.bits) << 3
            first = seen[0] if seen[0] is not None and seen[0].generic is None else OffsetValues()
            vals, seqs = first.vals, first.seqs
            for off, val, inv, comp, era in zip(acked.offsets, acked.values, acked.invokes, acked.completions,
                                                acked.eras, strict=True):
                if (type(val) is int and 0 <= val < nbits and bits[val >> 3] >> (val & 7) & 1
                        and (off >= hwm or (0 <= off < len(seqs) and seqs[off] >= 0 and vals[off] == val))):
                    pass  # survived: what the rule below says of it
                elif val not in final or (0 <= off < hwm and not any(s is not None and val in s.values_at(off)
                                                                     for s in seen)):
                    lost.append((inv, comp, key, off, val, era))  # off < 0: by its value alone (ACK_WITHOUT_OFFSET)
                if off >= hwm:
                    self.stats["acked-beyond-final-hwm"] += 1
        beyond_budget: list[dict[str, Any]] = []
        for inv, comp, key, off, val, era in sorted(lost, key=lambda loss: loss[0]):
            if self.cutoff is not None and era == 0:  # acknowledged before the fault beyond the budget
                beyond_budget.append({"key": key, "offset": off, "value": val})
                continue

            def lost_write(inv=inv, comp=comp, key=key, off=off, val=val):
                at: dict[Any, int] = {}
                for e in (0, 1):
                    if (key, e) in self.seen:
                        at.update(self.seen[(key, e)].values_at(off))
                at_offset = sorted(map(repr, at))
                hwm = self.final_hwm[key]
                return {
                    "key": key, "offset": off, "value": val, "final_hwm": hwm,
                    "summary": (f"send of {val!r} to partition {key} was acknowledged at offset {off}; the final "
                                f"read covered offsets below {hwm} and "
                                + (f"held {', '.join(at_offset)} at {off}" if at_offset else f"nothing at {off}")),
                    "send": self.op_at(comp).to_dict(), "invoke": self.op_at(inv).to_dict()}
            self.found.add("lost-write", lost_write)
        return uncovered, beyond_budget


_VALUE_OF = operator.itemgetter(1)  # a record's value


def _repeated(seen: OffsetValues) -> set[Any]:
    """The values seen at more than one offset."""
    if seen.generic is None and not seen.others:
        values = sorted(compress(seen.vals, map((-1).__ne__, seen.seqs)))
        return set(compress(values, map(operator.eq, values, islice(values, 1, None))))
    counts: dict[Any, int] = defaultdict(int)
    for val in seen.values():
        counts[val] += 1
    return {v for v, n in counts.items() if n > 1}


def proven_between(proven: Sequence[int], start: int, to: int) -> Sequence[int]:
    """The one definition of a skip: of the offsets proven to exist (`proven`, sorted), those strictly
    between `start` and `to`. A consumer that read `start` and then `to` skipped them: a poll-skip when
    there is one, a gap (no anomaly) when there is none."""
    return proven[bisect.bisect_right(proven, start):bisect.bisect_left(proven, to)]


__all__ = ["ANOMALY_TYPES", "QUEUE_VALUES", "SUBSCRIBE_ANOMALY_TYPES", "Examples", "QueueCheck", "QueueChecker",
           "QueueValues", "check_queue", "drained", "poll_items", "proven_between", "resent_copies", "resent_requests",
           "written"]
