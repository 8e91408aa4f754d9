"""The transaction coordinator: Kafka's transactional producer protocol (KIP-98) as a sans-IO state
machine.

The seeds (../shared/seeds/) say nothing about transactions; this module follows Kafka's public
protocol and its TransactionCoordinator: the InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn /
EndTxn request schemas and error codes, the transaction states (Empty, Ongoing, PrepareCommit,
PrepareAbort, CompleteCommit, CompleteAbort), KIP-360 (InitProducerId with the producer's current id
and epoch, so a producer can bump its own epoch) and KIP-588 (PRODUCER_FENCED for a stale epoch).

As for groups (group_coordinator.py), the seeds govern where the state lives: in the replicated
internal topic `__transaction_state`, partition `java_hash(transactional.id) % partitions`. The
coordinator of a transactional.id is the leader of that partition; every change of a transaction's
state is one record (the whole metadata of the id) written with acks=all through the normal produce
path and applied only once acknowledged, so a coordinator fail-over is a leader change and the new
leader rebuilds its transactions from its log (load()), then finishes the ones it finds prepared.

Two-phase end of a transaction, as in Kafka: EndTxn writes PrepareCommit (or PrepareAbort) first —
from then on the outcome is decided and survives a fail-over — then the shell writes the markers to
every partition of the transaction (WriteTxnMarkers), then CompleteCommit (CompleteAbort).

No sockets and no clock. A request method returns (error, Transition | None): a Transition is the
record the shell must write before it answers; while it is in flight the id is pending and any other
request gets CONCURRENT_TRANSACTIONS (Kafka's pendingState). The shell reports the outcome with
written() or write_failed(); written() of a Prepare state returns the MarkerJob to carry out, and
markers_done() the Complete record that ends it. expired(now_ms) aborts transactions past their
timeout. Transactional-id expiration (transactional.id.expiration.ms) is not implemented.

What it decided it says through its one `event_log` callback, as replica.py does (the protocol trace,
trace.py): once a transition's record is written, the answer to an InitProducerId
(`txn_init_producer_id`), the start of a transaction's end (`txn_end_started`) and its completion once every
marker is written (`txn_completed`), each with the state it was decided on and the coordinator epoch.

Historic flaws as variants (TxnConfig.variants, off by default): `txn-markers-no-epoch-bump` writes the
markers of an abort the coordinator begins (a timeout, or InitProducerId finding the transaction
ongoing) at the producer's own epoch, so the producer is not fenced and a late produce of the aborted
transaction lands in its next one (KIP-890's hanging transaction); `zombie-not-fenced` answers
InitProducerId of a known transactional.id with the epoch it already has, so the previous producer of
the id (a zombie) keeps writing beside the new one (the fencing KIP-98 introduced).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.group_coordinator import LOADED, LOADING, coordinator_partition

TXN_STATE_TOPIC = "__transaction_state"

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"

# Kafka's producer epoch is an int16: once it would reach Short.MaxValue a producer gets a new id
# (TransactionMetadata.prepareIncrementProducerEpoch / isEpochExhausted).
MAX_EPOCH = 32767


@dataclass
class TxnConfig:
    txn_partitions: int = 5  # transaction.state.log.num.partitions (Kafka: 50)
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    variants: frozenset[str] = frozenset()  # historic flaws (the module's docstring)


@dataclass(frozen=True)
class TxnState:
    """The whole metadata of one transactional.id: one record of __transaction_state."""
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1  # when the ongoing transaction began (its timeout runs from here)


# Why a transition was made (Transition.cause): the trace tells a client's EndTxn from the aborts the
# coordinator starts itself, which must fence the producer.
INIT, REINIT_ABORT, ADD, END, TIMEOUT, COMPLETE = "init", "re-init", "add", "end", "timeout", "complete"


@dataclass(frozen=True)
class Transition:
    txn_id: str
    new: TxnState
    cause: str = ""
    old: TxnState | None = None  # the state it was decided on (None: a transactional id seen for the first time)
    coordinator_epoch: int = -1  # of the decision
    asked: tuple[int, int] = (-1, -1)  # the producer id and epoch the request named


@dataclass(frozen=True)
class MarkerJob:
    """Markers to write for a prepared transaction: one control batch per partition, carrying the
    producer id and epoch and the coordinator epoch (the leader epoch of our __transaction_state
    partition), so a partition leader can refuse markers of a deposed coordinator."""
    txn_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]
    coordinator_epoch: int


def txn_record(txn_id: str, s: TxnState) -> tuple[bytes, bytes]:
    """The (key, value) of a transaction's state in __transaction_state. JSON rather than Kafka's
    binary TransactionLogKey/Value (an internal format): the records stay legible in state dumps."""
    key = json.dumps({"txn": txn_id}, separators=(",", ":"))
    value = json.dumps({"producer_id": s.producer_id, "producer_epoch": s.producer_epoch, "timeout_ms": s.timeout_ms,
                        "state": s.state, "partitions": sorted(s.partitions), "start_ms": s.start_ms},
                       separators=(",", ":"))
    return key.encode(), value.encode()


def _parse_record(key: bytes, value: bytes) -> tuple[str, TxnState]:
    k, v = json.loads(key), json.loads(value)
    return k["txn"], TxnState(int(v["producer_id"]), int(v["producer_epoch"]), int(v["timeout_ms"]), v["state"],
                              frozenset((t, int(p)) for t, p in v["partitions"]), int(v["start_ms"]))


@dataclass
class TransactionCoordinator:
    allocate_producer_id: Callable[[], int]
    config: TxnConfig = field(default_factory=TxnConfig)
    partitions: dict[int, tuple[str, int]] = field(default_factory=dict)  # led partition -> (LOADING/LOADED, coordinator epoch)
    txns: dict[str, TxnState] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # ids with a record in flight
    event_log: Callable[[dict[str, Any]], None] = field(default=lambda event: None, repr=False)

    # --- where a transactional.id lives, and the partitions' load / unload ------------------------
    def partition_for(self, txn_id: str) -> int:
        return coordinator_partition(txn_id, self.config.txn_partitions)

    def status(self, txn_id: str) -> int:
        """NONE if this coordinator serves the id now; else the error every request for it gets."""
        state = self.partitions.get(self.partition_for(txn_id))
        if state is None:
            return rpc.NOT_COORDINATOR
        return rpc.COORDINATOR_LOAD_IN_PROGRESS if state[0] == LOADING else rpc.NONE

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """This broker leads the partition in a new epoch: its transactions are served once load() has
        read the log up to the HWM. What an older leadership of ours knew is forgotten."""
        self.unload(partition)
        self.partitions[partition] = (LOADING, coordinator_epoch)

    def load(self, partition: int, records: Iterable[tuple[bytes | None, bytes | None]]) -> list[MarkerJob]:
        """Rebuild the partition's transactions from its committed records (key, value; the last record
        of an id wins). Returns the markers of the transactions found prepared: their outcome is decided
        but their markers may not all have been written before the old coordinator died."""
        state = self.partitions.get(partition)
        if state is None or state[0] != LOADING:
            return []  # unloaded (leadership lost) while the shell was reading
        for key, value in records:
            self.apply_record(key, value)
        self.partitions[partition] = (LOADED, state[1])
        return [self._marker_job(t, s) for t, s in self.txns.items()
                if self.partition_for(t) == partition and s.state in (PREPARE_COMMIT, PREPARE_ABORT)]

    def unload(self, partition: int) -> None:
        self.partitions.pop(partition, None)
        for t in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[t]
            self.pending.discard(t)

    def apply_record(self, key: bytes | None, value: bytes | None) -> None:
        if key is None or value is None:
            return
        txn_id, s = _parse_record(key, value)
        self.txns[txn_id] = s

    # --- the shell reports its writes --------------------------------------------------------------
    def written(self, t: Transition) -> MarkerJob | None:
        """The transition's record is acknowledged (the HWM passed it): apply it. For a Prepare state,
        the markers the shell must now write."""
        self.pending.discard(t.txn_id)
        self._report(t)  # the record is in the log whoever applies it, and the shell answers from it
        if self.status(t.txn_id) != rpc.NONE:
            return None  # no longer ours: the new coordinator loads the record from the log
        self.txns[t.txn_id] = t.new
        return self._marker_job(t.txn_id, t.new) if t.new.state in (PREPARE_COMMIT, PREPARE_ABORT) else None

    def write_failed(self, t: Transition) -> None:
        """The record was not acknowledged: the state stays as it was; the client retries."""
        self.pending.discard(t.txn_id)

    def owns(self, job: MarkerJob) -> bool:
        """Is the job still this coordinator's? Not after the partition was lost, nor after a later
        leadership of ours (a new coordinator epoch) loaded it again and made a job of its own."""
        state = self.partitions.get(self.partition_for(job.txn_id))
        return state is not None and state == (LOADED, job.coordinator_epoch)

    def markers_done(self, job: MarkerJob) -> Transition | None:
        """Every marker of the job is written: the Complete record to write next (None if the
        transaction has moved on or is no longer ours)."""
        s = self.txns.get(job.txn_id)
        if (not self.owns(job) or job.txn_id in self.pending or s is None
                or s.state != (PREPARE_COMMIT if job.commit else PREPARE_ABORT) or s.producer_epoch != job.producer_epoch):
            return None
        return self._begin(job.txn_id, replace(s, state=COMPLETE_COMMIT if job.commit else COMPLETE_ABORT,
                                               partitions=frozenset(), start_ms=-1), COMPLETE)

    # --- InitProducerId ------------------------------------------------------------------------------
    def init_producer_id(self, txn_id: str, timeout_ms: int, expected_pid: int, expected_epoch: int,
                         now_ms: int) -> tuple[int, Transition | None]:
        """Kafka's handleInitProducerId. The answer (producer id and epoch) is the transition's state,
        once written. An ongoing transaction of the id is aborted with a bumped epoch, which fences the
        old producer; the caller is told CONCURRENT_TRANSACTIONS and retries once the abort completes."""
        if not txn_id:
            return rpc.INVALID_REQUEST, None
        err = self.status(txn_id)
        if err != rpc.NONE:
            return err, None
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return rpc.INVALID_TRANSACTION_TIMEOUT, None
        if txn_id in self.pending:
            return rpc.CONCURRENT_TRANSACTIONS, None
        asked = (expected_pid, expected_epoch)
        s = self.txns.get(txn_id)
        if s is None:
            return rpc.NONE, self._begin(txn_id, TxnState(self.allocate_producer_id(), 0, timeout_ms), INIT, asked)
        if expected_pid >= 0 and (expected_pid, expected_epoch) != (s.producer_id, s.producer_epoch):
            # KIP-360: a producer re-initialising names the id and epoch it holds; a retry of a bump
            # already made (its response lost) is answered with the current pair, anything else is a zombie.
            if (expected_pid, expected_epoch + 1) == (s.producer_id, s.producer_epoch) and s.state == EMPTY:
                return rpc.NONE, self._begin(txn_id, replace(s, timeout_ms=timeout_ms), INIT, asked)
            return rpc.PRODUCER_FENCED, None
        if s.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return rpc.CONCURRENT_TRANSACTIONS, None  # markers in flight: retry once complete
        if s.state == ONGOING:
            abort = replace(s, state=PREPARE_ABORT, producer_epoch=self._abort_epoch(s.producer_epoch))
            return rpc.CONCURRENT_TRANSACTIONS, self._begin(txn_id, abort, REINIT_ABORT, asked)
        if "zombie-not-fenced" in self.config.variants:
            # The flaw: the new producer gets the epoch the old one holds, so the old one's requests
            # still pass _check_producer and the partition leaders' epoch check (KIP-98 fences it).
            return rpc.NONE, self._begin(txn_id, replace(s, timeout_ms=timeout_ms), INIT, asked)
        if s.producer_epoch >= MAX_EPOCH - 1:
            new = TxnState(self.allocate_producer_id(), 0, timeout_ms)
        else:
            new = TxnState(s.producer_id, s.producer_epoch + 1, timeout_ms)
        return rpc.NONE, self._begin(txn_id, new, INIT, asked)

    # --- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------
    def add_partitions(self, txn_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int) -> tuple[int, Transition | None]:
        """Kafka's handleAddPartitionsToTransaction. AddOffsetsToTxn is this with the group's
        __consumer_offsets partition (the shell computes it), as in Kafka."""
        err, s = self._check_producer(txn_id, producer_id, producer_epoch)
        if s is None:
            return err, None
        if s.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return rpc.CONCURRENT_TRANSACTIONS, None
        wanted = frozenset(partitions)
        if s.state == ONGOING:
            if wanted <= s.partitions:
                return rpc.NONE, None  # already part of the transaction: nothing to write
            return rpc.NONE, self._begin(txn_id, replace(s, partitions=s.partitions | wanted), ADD)
        # Empty or Complete*: the first partition begins a transaction (and its timeout).
        return rpc.NONE, self._begin(txn_id, replace(s, state=ONGOING, partitions=wanted, start_ms=now_ms), ADD)

    # --- EndTxn ----------------------------------------------------------------------------------------
    def end_txn(self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int) -> tuple[int, Transition | None]:
        """Kafka's handleEndTransaction: Ongoing -> PrepareCommit/PrepareAbort (answered once written);
        a retry of an end already decided is CONCURRENT_TRANSACTIONS while its markers are in flight and
        NONE once complete; the opposite outcome, or an end without a transaction, INVALID_TXN_STATE."""
        err, s = self._check_producer(txn_id, producer_id, producer_epoch)
        if s is None:
            return err, None
        if s.state == ONGOING:
            return rpc.NONE, self._begin(txn_id, replace(s, state=PREPARE_COMMIT if commit else PREPARE_ABORT), END)
        same = {PREPARE_COMMIT: commit, COMPLETE_COMMIT: commit, PREPARE_ABORT: not commit, COMPLETE_ABORT: not commit}
        if not same.get(s.state, False):
            return rpc.INVALID_TXN_STATE, None
        return (rpc.CONCURRENT_TRANSACTIONS if s.state in (PREPARE_COMMIT, PREPARE_ABORT) else rpc.NONE), None

    # --- KIP-890 part 1 -----------------------------------------------------------------------------------
    def verify(self, txn_id: str, producer_id: int, producer_epoch: int, partition: tuple[str, int]) -> int:
        """Is the partition part of this producer's ongoing transaction? A partition leader asks before a
        transactional batch opens a transaction there (Kafka: AddPartitionsToTxn v4, verify_only)."""
        err = self.status(txn_id)
        if err != rpc.NONE:
            return err
        s = self.txns.get(txn_id)
        if s is None or s.producer_id != producer_id:
            return rpc.INVALID_PRODUCER_ID_MAPPING
        if s.producer_epoch != producer_epoch:
            return rpc.INVALID_PRODUCER_EPOCH
        return rpc.NONE if s.state == ONGOING and partition in s.partitions else rpc.INVALID_TXN_STATE

    # --- timeouts --------------------------------------------------------------------------------------
    def expired(self, now_ms: int) -> list[Transition]:
        """Abort every ongoing transaction past its timeout, bumping the epoch so that its producer,
        if still alive, is fenced rather than writing into a transaction that is gone (Kafka's
        abortTimedOutTransactions)."""
        out = []
        for txn_id, s in list(self.txns.items()):
            if (s.state == ONGOING and txn_id not in self.pending and self.status(txn_id) == rpc.NONE
                    and now_ms >= s.start_ms + s.timeout_ms):
                out.append(self._begin(txn_id, replace(s, state=PREPARE_ABORT,
                                                       producer_epoch=self._abort_epoch(s.producer_epoch)), TIMEOUT))
        return out

    # --- internals -------------------------------------------------------------------------------------
    def _check_producer(self, txn_id: str, producer_id: int, producer_epoch: int) -> tuple[int, TxnState | None]:
        """The checks every request of a producer passes first; the state if it passed."""
        if not txn_id:
            return rpc.INVALID_REQUEST, None
        err = self.status(txn_id)
        if err != rpc.NONE:
            return err, None
        s = self.txns.get(txn_id)
        if s is None or s.producer_id != producer_id:
            return rpc.INVALID_PRODUCER_ID_MAPPING, None
        if s.producer_epoch != producer_epoch:
            return rpc.PRODUCER_FENCED, None
        if txn_id in self.pending:
            return rpc.CONCURRENT_TRANSACTIONS, None
        return rpc.NONE, s

    def _abort_epoch(self, epoch: int) -> int:
        """The epoch of an abort the coordinator begins, which its markers carry: _fence's, one above the
        producer's. Under `txn-markers-no-epoch-bump` (and `zombie-not-fenced`, which never fences) the
        producer's own epoch: the markers then leave the producer's epoch valid at every partition, and
        the producer, unaware of the abort, carries on into its next transaction, which a late produce
        of the aborted one joins (KIP-890: hanging transactions and late markers)."""
        if self.config.variants & {"txn-markers-no-epoch-bump", "zombie-not-fenced"}:
            return epoch
        return _fence(epoch)

    def _begin(self, txn_id: str, new: TxnState, cause: str, asked: tuple[int, int] = (-1, -1)) -> Transition:
        """Every request method checked status() first, so the id's partition is ours and loaded here."""
        self.pending.add(txn_id)
        return Transition(txn_id, new, cause, self.txns.get(txn_id), self.partitions[self.partition_for(txn_id)][1],
                          asked)

    def _report(self, t: Transition) -> None:
        """The trace's facts of a written transition (clusters/broker/trace.py): an InitProducerId's answer, and
        the start of a transaction's end with the epoch it ran under and the epoch its markers carry."""
        common = {"transactional_id": t.txn_id, "coordinator_partition": self.partition_for(t.txn_id),
                  "coordinator_epoch": t.coordinator_epoch}
        old = t.old
        if t.cause in (INIT, REINIT_ABORT):
            self.event_log({"event": "txn_init_producer_id", **common,
                            "producer_id_before": old.producer_id if old else -1,
                            "epoch_before": old.producer_epoch if old else -1,
                            "producer_id": t.new.producer_id, "producer_epoch": t.new.producer_epoch,
                            "asked_producer_id": t.asked[0], "asked_epoch": t.asked[1],
                            # the open transaction is aborted instead, and the client told to retry
                            "aborted_open": t.cause == REINIT_ABORT})
        if t.cause in (END, TIMEOUT, REINIT_ABORT) and old is not None:
            self.event_log({"event": "txn_end_started", **common, "producer_id": t.new.producer_id,
                            "txn_epoch": old.producer_epoch, "marker_epoch": t.new.producer_epoch,
                            "result": "commit" if t.new.state == PREPARE_COMMIT else "abort",
                            # names the transaction among those of one producer epoch: when its first partition
                            # was added (the coordinator's clock, kept in its record)
                            "txn_started_ms": old.start_ms,
                            "started_by": {END: "client", TIMEOUT: "timeout", REINIT_ABORT: "re-init"}[t.cause],
                            "partitions": sorted([tp, p] for tp, p in t.new.partitions)})
        if t.cause == COMPLETE and old is not None:
            # Every marker of the decision was written (markers_done): the trace's txn-marker-not-as-decided
            # looks for one at each of these partitions, at this epoch and result.
            self.event_log({"event": "txn_completed", **common, "producer_id": t.new.producer_id,
                            "producer_epoch": t.new.producer_epoch,
                            "result": "commit" if t.new.state == COMPLETE_COMMIT else "abort",
                            "partitions": sorted([tp, p] for tp, p in old.partitions)})

    def _marker_job(self, txn_id: str, s: TxnState) -> MarkerJob:
        return MarkerJob(txn_id, s.producer_id, s.producer_epoch, s.state == PREPARE_COMMIT, s.partitions,
                         self.partitions[self.partition_for(txn_id)][1])


def _fence(epoch: int) -> int:
    """The epoch an abort by the coordinator writes: one above the producer's, so the producer's own
    requests (and its late produces, at leaders that got the marker) are refused from then on."""
    return min(epoch + 1, MAX_EPOCH)
