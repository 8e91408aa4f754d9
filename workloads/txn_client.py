"""What a txn workload's client does whatever its library: one logical process's transactions, assigns,
subscribes, crashes and final reads, and the outcome rules (workloads/txn.py's docstring states them).
A client library is an adapter of TxnLibrary: workloads/kafka_python.py, workloads/confluent.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.history import CLIENT_EVENTS, FAIL, INFO, OK, Op
from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.stalls import ProducerStallControl, Stall, outcome_of

OP_TIMEOUT_S = 5.0        # each blocking client call (init, commit, abort, flush, send offsets)
POLL_TIMEOUT_S = 0.05     # a poll micro-op is a read, not a wait
FINAL_READ_TIMEOUT_S = 30.0
WORKLOAD_ABORT = "aborted-by-workload"
CRASHED_ON_REBALANCE = "crashed-on-rebalance"


class CommitNotSent(Exception):
    """The library knows that no commit of this transaction went out: its producer had failed fatally (was
    fenced) before commit was called. The transaction cannot have committed: the op is a definite fail."""


class CrashedOnRebalance(Exception):
    """The consumer went through a rebalance during this op and the test asks clients to crash then."""


# --- what the op mix knows of the run: offsets written and seen (Jepsen's poll-unseen) ----------------
class OffsetTracker:
    """The highest offset acknowledged in a committed send and the highest polled in a committed
    transaction, per key, over all processes: a key whose written offsets run past what anyone polled is
    unseen (Jepsen's poll-unseen), and an assign op seeks there. Shared by the workload's clients
    (thread-safe)."""

    def __init__(self) -> None:
        self._sent: dict[int, int] = {}
        self._polled: dict[int, int] = {}
        self._lock = threading.Lock()

    def sent(self, key: int, offset: int) -> None:
        with self._lock:
            self._sent[key] = max(offset, self._sent.get(key, -1))

    def polled(self, records: dict[str, list]) -> None:
        with self._lock:
            for k, recs in records.items():
                if recs:
                    self._polled[int(k)] = max(int(recs[-1][0]), self._polled.get(int(k), -1))

    def unseen(self) -> dict[int, int]:
        """key -> the first offset past what anyone polled, for the keys written beyond it."""
        with self._lock:
            return {k: self._polled.get(k, -1) + 1 for k, top in sorted(self._sent.items())
                    if top > self._polled.get(k, -1)}


# --- the client library, as the client needs it ---------------------------------------------------------
class TxnLibrary:
    """What the txn client needs of a Kafka client library: one process's transactional producer and
    consumer. The adapters (workloads/kafka_python.py, workloads/confluent.py) are thin; the outcome rules live in TxnClient."""

    producer: Any = None  # None until ensure_producer() brought one up (init_transactions returned)
    txn_id: str  # the transactional.id of its producer
    events: ClientEventLog | None = None  # what the library did on its own (history/clients.py)

    def take_events(self) -> list[dict[str, Any]]:
        """The client events since the last completion: each send that failed in the client with the
        library's own error (also when the commit returned), the consumer's resets, seeks, leader changes."""
        return self.events.take() if self.events is not None else []

    def ensure_producer(self) -> None: ...
    def producer_identity(self) -> dict[str, int] | None:
        """{"producer_id", "producer_epoch"} of the producer where the library tells them; None where not."""
    def begin(self) -> None: ...
    def send(self, key: int, value: int) -> Callable[[], int | None]:
        """Queue a record of the open transaction; returns a reader of its offset (None until delivered)."""
    def flush(self) -> None: ...
    def send_offsets(self) -> bool:
        """Put the consumer's positions into the transaction when it is a group member; False when not."""
    def commit(self) -> None:
        """commit_transaction; CommitNotSent when the library knows it sent none (a producer failed before)."""
    def abort(self) -> None: ...
    def poll(self) -> dict[str, list]: ...
    def assign(self, keys: list[int], seek: dict[int, int]) -> None: ...
    def _consumer(self) -> Any: ...

    subscribed: bool = False  # the consumer is a group member (subscribe)

    def _consumer_out_of_the_group(self) -> Any:
        """The consumer for a manual assignment: a group member first leaves its group (unsubscribe)."""
        c = self._consumer()
        if self.subscribed:
            c.unsubscribe()
            self.subscribed = False
        return c

    def subscribe(self) -> None: ...
    def final_read(self, key: int, timeout_s: float) -> tuple[int, list] | None:
        """(end offset, records) of the key read from its start to its high watermark; None when unfinished."""
    def is_fatal(self, e: BaseException) -> bool: ...
    def commit_retriable(self, e: BaseException) -> bool:
        """Whether commit may be called again after this error (librdkafka: KafkaError.retriable())."""
    def discard_producer(self) -> None: ...
    def crash(self) -> None:
        """Drop the producer and consumer without closing them (no abort, no leave-group, no commit)."""
    def close(self) -> None: ...


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


def transactional_id(slot: int) -> str:
    """The transactional.id of a worker slot (every process of the slot re-initialises it)."""
    return f"kafkaesque-txn-{slot}"


# --- what a process's library did on its own, put on the op's completion ----------------------------------
class LibraryJournal:
    """The part of a txn process that TxnClient and the simulator's SimTxnClient (workloads/sim/txn.py) share
    whatever their library's calls block or await: the rebalances the library's consumer went through and its
    client events, which go on the completion of the op they happened in, also when the op crashed the
    library. A subclass has `lib` (the library or None), `topic` and `o` (the workload's options)."""

    lib: Any
    topic: str
    o: dict[str, Any]

    def __init__(self) -> None:
        self._rebalances: list[dict[str, Any]] = []
        self._rebalanced_during_op = False
        self._dropped_events: list[dict[str, Any]] = []  # a crashed library's, for the op that crashed it
        self._lock = threading.Lock()  # a real library's consumer calls _journal from its own thread

    def _journal(self, kind: str, keys: list[int]) -> None:
        """The library's rebalance callback: the keys gained or lost (`kind`), journalled and a client event."""
        with self._lock:
            self._rebalances.append({"keys": list(keys), "type": kind})
            self._rebalanced_during_op = True
        lib = self.lib
        if lib is not None and lib.events is not None:
            lib.events.add("rebalance", topic=self.topic, how=kind, keys=list(keys))

    def _begin_op(self) -> None:
        with self._lock:
            self._rebalanced_during_op = False

    def _crash_if_rebalanced(self) -> None:
        if self.o["crash_on_rebalance"] and self._rebalanced_during_op:
            raise CrashedOnRebalance(CRASHED_ON_REBALANCE)

    def _drop_library(self) -> None:
        """Crash the library (no clean shutdown); what it did on its own goes on this op's completion."""
        if self.lib is not None:
            self._dropped_events += self.lib.take_events()
            self.lib.crash()
        self.lib = None

    def _crashed_on_rebalance(self, op: Op, done: list[list]) -> Op:
        """The library crashed as a rebalance came during the op (crash_on_rebalance): info, what it did kept."""
        self._drop_library()
        return _completion(op, INFO, done, error=CRASHED_ON_REBALANCE)

    def _finish_op(self, comp: Op) -> Op:
        """The completion with the op's rebalance log and its client events (the live library's and a crashed
        one's) in the order they happened."""
        with self._lock:
            if self._rebalances:
                comp.extra = {**(comp.extra or {}), "rebalance_log": self._rebalances}
                self._rebalances = []
        events = self.lib.take_events() if self.lib is not None else []
        events += self._dropped_events
        self._dropped_events = []
        if events:
            comp.extra = {**(comp.extra or {}), CLIENT_EVENTS: sorted(events, key=lambda e: e.get("mono", 0))}
        return comp


# --- the client: outcome rules ----------------------------------------------------------------------------


def committed_completion(tracker: OffsetTracker, op: Op, done: list[list]) -> Op:
    """A committed transaction's completion, ok; its sends and polls move the tracker. Only a committed
    transaction's count (Jepsen's poll-unseen updates on :ok alone): records an aborted transaction polled are
    unread, and an assign that seeks past them would make sure no committed read ever returns them."""
    for m in done:
        if m[0] == "send" and isinstance(m[2], list):
            tracker.sent(m[1], m[2][0])
        elif m[0] == "poll" and len(m) > 1:
            tracker.polled(m[1])
    return _completion(op, OK, done)


def final_poll_completion(op: Op, got: tuple[int, Any] | None, error: Exception | None = None) -> Op:
    """A final read's completion from what the library's final_read gave (end offset, records), None (it did not
    reach the end in time) or the error it raised: info unless it read its key to the end offset."""
    key = int(op.extra["key"])
    extra = {"final": True, "key": key}
    if error is not None:
        return _completion(op, INFO, None, error=_error_text(error), extra=extra)
    if got is None:
        return _completion(op, INFO, None, error=f"final read of key {key} did not reach its end offset in "
                                                 f"{FINAL_READ_TIMEOUT_S:g} s", extra=extra)
    end, records = got
    return _completion(op, OK, [["poll", {str(key): records}]], extra={**extra, "end_offset": end})


class TxnClient(LibraryJournal):
    """One logical process: runs txn, assign, subscribe, crash and final poll ops on a TxnLibrary and
    decides each outcome (module docstring)."""

    def __init__(self, make_library: Callable[..., TxnLibrary], topic: str, partitions: int, concurrency: int,
                 options: dict[str, Any], tracker: OffsetTracker, stalls: ProducerStallControl | None = None):
        super().__init__()
        self.make_library, self.topic, self.partitions = make_library, topic, partitions
        self.concurrency, self.o, self.tracker = max(1, concurrency), options, tracker
        self.stalls = stalls  # the run's producer stalls (workloads/stalls.py); None: never stalls
        self._stall: Stall | None = None  # the stall the current op went through
        self.lib: TxnLibrary | None = None
        self.bootstrap = ""

    def open(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _library(self, process: int) -> TxnLibrary:
        if self.lib is None:
            # per worker slot: the next process of this worker re-inits the same id, fencing this one
            self.lib = self.make_library(self.bootstrap, self.topic, self.partitions,
                                         transactional_id(process % self.concurrency), self.o, self._journal,
                                         process=process)
        return self.lib

    def invoke(self, op: Op) -> Op:
        try:
            comp = self._invoke(op)
        except BaseException as e:  # a bug in the client: the runner records the op info, the stall unknown
            self._stall_finished(INFO, _error_text(e))
            raise
        stall = self._stall_finished(comp.type, comp.error)
        if stall is not None:  # the completion says it stood still, and how long (the ledger has the rest)
            comp.extra = {**(comp.extra or {}), "stalled": {"fault": stall.fault, "seconds": stall.stalled_s}}
        return comp

    def _stall_finished(self, type_: str, error: Any) -> Stall | None:
        """Tell the stall this op went through (if any) what its transaction came to; that stall."""
        stall, self._stall = self._stall, None
        if stall is not None:
            stall.finish(outcome_of(type_, error))
        return stall

    def _invoke(self, op: Op) -> Op:
        self._begin_op()
        if op.f == "txn":
            comp = self._txn(op)
        elif op.f in ("assign", "subscribe"):
            comp = self._reassign(op)
        elif op.f == "crash":
            self._drop_library()
            comp = _completion(op, INFO, None, error="crashed")
        elif op.f == "poll" and (op.extra or {}).get("final"):
            comp = self._final_poll(op)
        else:
            raise ValueError(f"unknown txn workload op {op.f!r}")
        return self._finish_op(comp)

    def _txn(self, op: Op) -> Op:
        micro = op.value
        done: list[list] = [list(m) for m in micro]
        offsets: list[tuple[int, int, int, Callable[[], int | None]]] = []  # (index, key, value, offset reader)
        abort = bool((op.extra or {}).get("abort"))
        sent = False  # whether anything reached the transaction: before that an error is a definite fail
        committing = False  # whether the commit was called: before that an error is a definite fail too
        try:
            lib = self._library(op.process)
            lib.ensure_producer()
            lib.begin()
            polled = False
            for i, m in enumerate(micro):
                if m[0] == "send":
                    _, k, v = m
                    if offsets and k not in {o[1] for o in offsets}:  # the stall point: a send to a new partition
                        self._stall_point(op, lib, done, offsets)
                    sent = True
                    offsets.append((i, k, v, lib.send(k, v)))
                else:
                    records = lib.poll()
                    polled = True
                    done[i] = ["poll", records]
                    self._crash_if_rebalanced()
            if polled and lib.send_offsets():
                sent = True
            lib.flush()
            _fill_offsets(done, offsets)
            if abort:
                lib.abort()
                return _completion(op, FAIL, done, error=WORKLOAD_ABORT)
            committing = True
            _commit(lib)
        except CrashedOnRebalance:
            _fill_offsets(done, offsets)
            return self._crashed_on_rebalance(op, done)
        except Exception as e:  # noqa: BLE001 - every client error maps to fail or info
            _fill_offsets(done, offsets)
            return self._after_error(op, done, sent and committing, e)
        _fill_offsets(done, offsets)
        return committed_completion(self.tracker, op, done)

    def _stall_point(self, op: Op, lib: TxnLibrary, done: list[list],
                     offsets: list[tuple[int, int, int, Callable[[], int | None]]]) -> None:
        """Stop here when a stall is asked of this process (workloads/stalls.py): the transaction is open,
        a send of it delivered (flushed first), and a send to a partition it has not written yet and the
        commit are still to come. That send makes the resumed producer ask its coordinator to add the
        partition, which a coordinator that aborted the transaction without fencing the producer takes for
        a new transaction (a send to a partition it wrote is refused by the partition leader instead, KIP-890
        part 1). A transaction the workload means to abort has no stall point: what follows a stall must
        try to commit."""
        if (self.stalls is None or self._stall is not None or (op.extra or {}).get("abort")
                or not self.stalls.wanted(op.process, lib.txn_id)):
            return
        lib.flush()
        _fill_offsets(done, offsets)
        delivered = [m[2][0] for m in done if m[0] == "send" and isinstance(m[2], list)]
        if not delivered:
            return
        stall = self.stalls.claim(op.process, lib.txn_id)
        if stall is None:
            return  # another process took it
        self._stall = stall
        stall.hold({"process": op.process, "transactional_id": lib.txn_id, **(lib.producer_identity() or {}),
                    "partitions": sorted({m[1] for m in done if m[0] == "send" and isinstance(m[2], list)}),
                    "delivered_offsets": delivered, "txn_timeout_s": self.stalls.txn_timeout_s})

    def _after_error(self, op: Op, done: list[list], open_: bool, e: Exception) -> Op:
        """A transaction that raised: info when its outcome is `open_` (sends, then the commit called) unless
        the abort went through or the library knows the commit sent nothing; else fail."""
        lib = self.lib
        if lib is not None and lib.producer is None and not open_:
            # the producer never came up (init_transactions failed or timed out): no transaction to abort
            return _completion(op, FAIL, done, error=_error_text(e))
        if lib is not None and isinstance(e, CommitNotSent):
            lib.discard_producer()  # fenced or dead: the next op inits a new producer on this id
            return _completion(op, FAIL, done, error=_error_text(e))
        if lib is None or lib.is_fatal(e):
            if lib is not None:
                lib.discard_producer()  # fenced or dead: the next op inits a new producer on this id
            return _completion(op, INFO if open_ else FAIL, done, error=_error_text(e))
        try:
            lib.abort()
        except Exception as abort_error:  # noqa: BLE001 - the abort did not go through: the outcome is open
            # Even a fatal INVALID_TXN_STATE: the coordinator's last transaction of this epoch is committed,
            # and that may be this one (an EndTxn(commit) that reached it) or the one before, when librdkafka
            # sends EndTxn(abort) for an AddPartitionsToTxn that failed (a coordinator fail-over; it counts
            # a failed one as possibly received, rdkafka_txnmgr.c): Kafka answers the same to both.
            lib.discard_producer()
            return _completion(op, INFO if open_ else FAIL, done,
                               error=f"{_error_text(e)}; abort failed: {_error_text(abort_error)}"[:600])
        return _completion(op, FAIL, done, error=f"{_error_text(e)}; aborted"[:600])

    def _reassign(self, op: Op) -> Op:
        try:
            lib = self._library(op.process)
            if op.f == "subscribe":
                lib.subscribe()
            else:
                seek = {int(k): int(o) for k, o in ((op.extra or {}).get("unseen") or {}).items()}
                lib.assign(list(op.value), seek)
        except Exception as e:  # noqa: BLE001 - a consumer's assignment changes nothing in the log
            return _completion(op, FAIL, op.value, error=_error_text(e))
        return _completion(op, OK, op.value)

    def _final_poll(self, op: Op) -> Op:
        try:
            got = self._library(op.process).final_read(int(op.extra["key"]), FINAL_READ_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a read changes nothing, but an unfinished one proves nothing
            return final_poll_completion(op, None, e)
        return final_poll_completion(op, got)

    def close(self) -> None:
        if self.lib is not None:
            self.lib.close()
            self.lib = None


def _commit(lib: TxnLibrary) -> None:
    """commit_transaction, called once more after a retriable failure (the library says the same commit may
    be retried): a commit that timed out while the coordinator was moving often completes on the retry."""
    try:
        lib.commit()
    except Exception as e:  # noqa: BLE001 - re-raised unless the library allows the retry
        if not lib.commit_retriable(e):
            raise
        lib.commit()


def _fill_offsets(done: list[list], offsets: list[tuple[int, int, int, Callable[[], int | None]]]) -> None:
    """Each send whose delivery report gave an offset becomes ["send", k, [offset, v]]."""
    for i, k, v, offset_of in offsets:
        try:
            off = offset_of()
        except Exception:  # noqa: BLE001 - an undelivered record has no offset
            off = None
        if off is not None and off >= 0:
            done[i] = ["send", k, [off, v]]


def _completion(op: Op, type_: str, value: Any, error: Any = None, extra: dict | None = None) -> Op:
    return Op(type=type_, f=op.f, process=op.process, value=value, node=op.node, error=error, extra=extra)
