"""The txn workload: Jepsen's Kafka transaction test (jepsen.tests.kafka) over the Kafka API.

Each logical process has a transactional producer and a read_committed consumer of one real client
library (confluent-kafka by default: `--client confluent-kafka`; kafka-python 3 has a transactional
producer too). Keys are the partitions of one topic. The history (the schema checkers/txn.py reads):

  txn        invoke [["send", k, v], ["poll"], ...]  (1-4 micro-ops)
             ok     [["send", k, [offset, v]], ["poll", {"<k>": [[offset, v], ...]}], ...]
  assign     invoke [k, ...]   ok the same; an "unseen" extra {"<k>": offset} seeks there (poll-unseen)
  subscribe  invoke [k, ...]   ok the same (one topic: the group decides which keys the member gets)
  crash      invoke null       info: the client was dropped without a clean shutdown
A txn that a producer stall held (below) carries "stalled": {"fault": its fault record's id, "seconds": how long}
on its completion.
  poll       final: true, key: k   ok [["poll", {"<k>": [...]}]], end_offset: the key drained from its
             start up to there, read_committed
Completions carry "rebalance_log": [{"keys": [...], "type": "assigned"|"revoked"}] when the
process's consumer went through rebalances since its last op (Jepsen's :rebalance-log), and "client_events"
(history/clients.py): what the process's client libraries did on their own since its last op, as the queue
workload records them (its consumer's resets, seeks, leader changes, rebalances), and every send the producer
failed in the client, with the library's own error ("send-error": key, value, error; kafka-python's
"KafkaTimeoutError: Expiring 1 record(s) ...", librdkafka's "_MSG_TIMED_OUT: ..."), also on a txn whose
commit returned: kafka-python 3.0.12 commits such a transaction (docs/FINDINGS.md), and the txn checker
then names the client's failed send as the cause of the unseen send or torn transaction (checkers/clients.py).
Each process's producer and consumer name themselves to the brokers "kafkaesque-p<process>".

Outcomes are exact (DESIGN.md): a txn is ok only when commit_transaction returned; fail only when it
definitely did not commit: abort_transaction returned (the coordinator wrote the abort; it refuses to
abort a transaction it committed), or the error came before anything was sent, or before the commit was
called (only the producer's EndTxn commits a transaction; one whose producer never asked is aborted, by
the abort, the coordinator's timeout or the next producer's re-init), or the producer had failed
fatally (fenced) before the commit was called, so the commit sent nothing (CommitNotSent: librdkafka
answers a commit outside a transaction's open state without a request); info otherwise (a commit that
timed out or failed after sends, a crash). A txn the workload chose to abort
(`txn_abort_p`, the invoke's "abort": true) ends fail with error "aborted-by-workload", its sends
filled with the offsets their delivery reports gave. A fatal error (a fenced producer) discards the
producer; the next op makes a new one, which re-initialises the same transactional.id.

The transactional.id is per worker slot (process mod concurrency): a fresh process after an info
re-inits its slot's id, which fences the old producer and aborts its open transaction (KIP-98), as a
restarted application instance does; read_committed readers then do not wait a transaction timeout
for the crashed process's transaction.

Producer stalls (the stall-producer fault, workloads/stalls.py): the workload shares one
ProducerStallControl between its clients and the run's fault actions (`producer_stalls()`). A client
that is asked to stall does it at its next stall point: in a transaction, before a send to a partition
the transaction has not written yet that follows an earlier send, it flushes (so a send of the open
transaction is delivered), stops for the asked seconds,
then goes on with the rest of the same transaction (more sends, then the commit; a transaction the workload
means to abort is never stalled). The op's
outcome follows the rules above whatever the stall made of it; the control is told the outcome.

Options (workload_options, `--workload-option KEY=VALUE`): see TXN_OPTIONS.
"""

from __future__ import annotations

import functools
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.history import Op
from kafkaesque_harness.workloads.base import CrashSchedule
from kafkaesque_harness.workloads.confluent import ConfluentTxnLibrary, SpareMembers
from kafkaesque_harness.workloads.kafka_python import KafkaPythonTxnLibrary
from kafkaesque_harness.workloads.stalls import ProducerStallControl
from kafkaesque_harness.workloads.txn_client import OffsetTracker, TxnClient, transactional_id

PREFLIGHT_TIMEOUT_MS = 20_000  # a transactional producer's init through one bootstrap, at most

TXN_OPTIONS = {
    "txn_abort_p": "probability that the workload aborts a transaction instead of committing it (default 0.1)",
    "subscribe_p": "probability that a (re)assignment op subscribes to the topic through the group rather than "
                   "assigning keys (default 0.5)",
    "reassign_p": "probability that an op is an assign or subscribe instead of a transaction (default 0.05)",
    "crash_clients_interval_s": "mean seconds between deliberate client crashes of each process (0: none; "
                                "default 0)",
    "crash_on_rebalance": "a consumer whose group rebalances during an op crashes (default false)",
    "poll_unseen": "assign ops that seek to offsets written but not yet polled by anyone (default true)",
    "isolation": "read_committed (default) or read_uncommitted",
    "group": "the consumer group id (default kafkaesque-txn)",
    "max_txn_len": "most micro-ops in a transaction, 1-4 (default 4)",
    "txn_timeout_ms": "transaction.timeout.ms of the producers (default 10000)",
    # Read by the checker (checkers/txn.py check_options), set on the same command line:
    "allowed": "anomaly names the txn checker reports as allowed rather than as anomalies (comma-separated)",
    "ww_deps": "the checker's dependency graph also links successive writes of a key (ww, as Jepsen's option)",
    "rw_deps": "the checker's dependency graph also has anti-dependencies (rw, as Jepsen's option)",
    "sub_via": "how consumers took keys, for the checker's allowed rules (default: from subscribe_p)",
}
ISOLATIONS = ("read_committed", "read_uncommitted")
class TxnOptionError(ValueError):
    """A workload option of the txn workload that cannot be used; the message is one sentence with the fix."""


def txn_options(options: dict[str, Any]) -> dict[str, Any]:
    """The txn workload's options with their defaults, checked (TxnOptionError names a bad one)."""
    o = {"txn_abort_p": 0.1, "subscribe_p": 0.5, "reassign_p": 0.05, "crash_clients_interval_s": 0.0,
         "crash_on_rebalance": False, "poll_unseen": True, "isolation": "read_committed",
         "group": "kafkaesque-txn", "max_txn_len": 4, "txn_timeout_ms": 10000}
    o.update({k: v for k, v in options.items() if k in TXN_OPTIONS})
    for key in ("txn_abort_p", "subscribe_p", "reassign_p"):
        if not isinstance(o[key], int | float) or not 0 <= o[key] <= 1:
            raise TxnOptionError(f"workload option {key}={o[key]!r} is not a probability; give a number from 0 to 1")
    if not isinstance(o["crash_clients_interval_s"], int | float) or o["crash_clients_interval_s"] < 0:
        raise TxnOptionError(f"workload option crash_clients_interval_s={o['crash_clients_interval_s']!r} is not "
                             "a number of seconds; give 0 (no crashes) or more")
    if o["isolation"] not in ISOLATIONS:
        raise TxnOptionError(f"workload option isolation={o['isolation']!r} is unknown; valid: {', '.join(ISOLATIONS)}")
    if o["max_txn_len"] not in (1, 2, 3, 4):
        raise TxnOptionError(f"workload option max_txn_len={o['max_txn_len']!r} is not 1 to 4 (Jepsen's "
                             "transactions have at most four micro-ops)")
    return o


# --- the op mix -----------------------------------------------------------------------------------------
class TxnOpMix:
    """(rng, process) -> (f, value[, extra]): Jepsen's mix of transactions of 1-4 sends and polls, with
    assign/subscribe ops, poll-unseen assigns and crash ops at an interval. Deterministic given the rng and
    the clock's readings; `clock` is injectable for the tests."""

    def __init__(self, options: dict[str, Any], partitions: int, concurrency: int, tracker: OffsetTracker,
                 clock: Callable[[], float] = time.monotonic):
        self.o, self.partitions, self.concurrency = options, partitions, max(1, concurrency)
        self.tracker, self.clock = tracker, clock
        self._values = itertools.count(1)
        self._crashes = CrashSchedule(options["crash_clients_interval_s"], concurrency, clock)

    def __call__(self, rng: random.Random, process: int) -> tuple:
        if self._crashes.due(rng):
            return "crash", None
        if rng.random() < self.o["reassign_p"]:
            return self._reassign(rng)
        n = rng.randint(1, self.o["max_txn_len"])
        micro: list[list] = []
        for _ in range(n):
            if rng.random() < 0.5:
                micro.append(["send", rng.randrange(self.partitions), next(self._values)])
            else:
                micro.append(["poll"])
        if rng.random() < self.o["txn_abort_p"]:
            return "txn", micro, {"abort": True}
        return "txn", micro

    def _reassign(self, rng: random.Random) -> tuple:
        keys = list(range(self.partitions))
        if rng.random() < self.o["subscribe_p"]:
            return "subscribe", keys  # one topic: subscribing takes every key; the group divides them
        unseen = self.tracker.unseen() if self.o["poll_unseen"] else {}
        if unseen and rng.random() < 0.5:
            return "assign", sorted(unseen), {"unseen": {str(k): o for k, o in unseen.items()}}
        chosen = sorted(rng.sample(keys, rng.randint(1, len(keys))))
        return "assign", chosen

class TxnValues:
    """How the txn workload's op values read, for the views that are not checkers (the report, the pipeline):
    a txn's polls give records; a final poll's completion gives (key, end offset). A txn writes several
    records, which this one-record interface cannot carry: its sends are left to checkers/txn.py."""

    op_names = frozenset({"txn", "poll"})

    @staticmethod
    def key(op: Op) -> int | None:
        extra = op.extra or {}
        return int(extra["key"]) if extra.get("final") and "key" in extra else None

    @staticmethod
    def written(op: Op) -> tuple[int, Any, Any] | None:
        return None

    @staticmethod
    def records(op: Op):
        if op.f not in TxnValues.op_names or not isinstance(op.value, list):
            return
        for m in op.value:
            if isinstance(m, list) and len(m) == 2 and m[0] == "poll" and isinstance(m[1], dict):
                for k, recs in m[1].items():
                    for rec in recs or ():
                        if isinstance(rec, list | tuple) and len(rec) == 2:
                            yield int(k), rec[0], rec[1]

    @staticmethod
    def drained(op: Op) -> tuple[int, Any] | None:
        extra = op.extra or {}
        if op.f == "poll" and extra.get("final") and "end_offset" in extra:
            return int(extra["key"]), extra["end_offset"]
        return None


TXN_VALUES = TxnValues()


class TxnWorkload:
    name = "txn"
    values = TXN_VALUES
    OPTIONS = TXN_OPTIONS

    @staticmethod
    def options_problem(options: dict[str, Any]) -> str | None:
        """Why these options cannot run (one sentence), or None."""
        try:
            txn_options(options)
        except TxnOptionError as e:
            return f"{e}."
        return None

    def __init__(self, options: dict[str, Any]):
        self.topic = options.get("topic", "queue")
        self.partitions = int(options.get("partitions", 4))
        self.client = options.get("client", "kafka-python")
        self.o = txn_options(options)
        self.tracker = OffsetTracker()
        self.stalls = ProducerStallControl(self.o["txn_timeout_ms"] / 1000)
        self.members = SpareMembers()  # confluent-kafka group members closed processes left
        self._mix: TxnOpMix | None = None

    def topics(self, test: dict[str, Any]) -> list[tuple[str, int]]:
        return [(self.topic, self.partitions)]

    def coordinated_keys(self, concurrency: int) -> dict[str, list[str]]:
        """The keys whose coordinators a nemesis may aim at (nemesis/scenario.py COORDINATOR_ROLES)."""
        return {"transactional_ids": [transactional_id(s) for s in range(max(1, concurrency))],
                "groups": [self.o["group"]] if self.o["subscribe_p"] > 0 else []}

    def new_client(self, test: dict[str, Any], process: int | None = None) -> TxnClient:
        # the client's library is made on its first op, named by that op's process (TxnClient._library)
        library = (functools.partial(ConfluentTxnLibrary, members=self.members) if self.client == "confluent-kafka"
                   else KafkaPythonTxnLibrary)
        return TxnClient(library, self.topic, self.partitions, int(test.get("concurrency", 1)), self.o, self.tracker,
                         self.stalls)

    def preflight(self, bootstraps: list[str]) -> str | None:
        """PreflightCheck (workloads/base.py): a transactional producer's init through each bootstrap the clients
        use (InitProducerId, and FindCoordinator before it); the broker's answer where it fails. A system that
        does not do transactions is refused by name rather than run into a history of failed txns."""
        from kafka import KafkaProducer

        for bootstrap in dict.fromkeys(bootstraps):
            try:
                producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), transactional_id="kafkaesque-preflight",
                                         max_block_ms=PREFLIGHT_TIMEOUT_MS, client_id="kafkaesque-preflight")
                try:
                    producer.init_transactions()
                finally:
                    producer.close(timeout=5)
            except Exception as e:  # noqa: BLE001 - the broker's answer (an error code's name), or no answer
                return (f"the txn workload needs transactions, and the cluster did not answer InitProducerId for a "
                        f"transactional id through {bootstrap} ({type(e).__name__}: {str(e)[:200]}); run the queue "
                        "workload on it instead")
        return None

    def producer_stalls(self) -> ProducerStallControl:
        """Its clients' stall control (workloads/base.py StallableProducers; the stall-producer fault)."""
        return self.stalls

    def op_mix(self, test: dict[str, Any], clock: Callable[[], float] = time.monotonic) -> TxnOpMix:
        """The op mix; `clock` times the crashes (the simulator's clients give their loop's)."""
        self._mix = TxnOpMix(self.o, self.partitions, int(test.get("concurrency", 1)), self.tracker, clock)
        return self._mix

    def final_ops(self, test: dict[str, Any]) -> list[tuple]:
        return [("poll", [["poll"]], {"final": True, "key": k}) for k in range(self.partitions)]

    def checkers(self, test: dict[str, Any]):
        # checkers/txn.py: the transaction analyses (issue 25, deliverable 2)
        from kafkaesque_harness.checkers.evidence import ProgressChecker
        from kafkaesque_harness.checkers.replicas import ReplicaStateChecker
        from kafkaesque_harness.checkers.trace import TraceChecker
        from kafkaesque_harness.checkers.txn import TxnChecker

        # The replicas' own states (log matching below the HWMs, the controller's ISR and ELR, corrupt batches
        # kept), over every partition, __consumer_offsets and __transaction_state among them; the txn checker
        # excuses no loss beyond the fault budget, so there is no excused loss to ask the cluster about. Every
        # protocol decision the nodes traced, the coordinators' and the partition leaders' transaction facts
        # among them (checkers/trace.py). Both not applicable on a cluster that gives neither.
        return [ProgressChecker(self.partitions), TxnChecker(), ReplicaStateChecker(excused_by=None), TraceChecker()]
