"""The protocol trace: every protocol decision a broker or controller makes, with the facts it was made on.

The state machines (replica.py, controller.py, txn_coordinator.py) stay sans-IO: each says what it decided
through its one event callback, as it already did for the state-change log (000 point 7a). `EventSink` is
that callback in the servers: every event goes to the state-change log (`--log-file`) except the hot-path
ones (HOT: an HWM advance, a produce acknowledgement, a consumer fetch, an OffsetCommit's acceptance and
answer, an OffsetFetch's answer, a transaction's end, its markers and its completion, a client's Metadata, ListOffsets and OffsetForLeaderEpoch answers and its
refused fetches, one per request), and every event named in TRACED also goes to the
trace, `TraceWriter`, a JSON-lines file beside the log (`--trace-file`, default `<the log's
directory>/trace.jsonl`). The trace is buffered: it is flushed
by the servers' housekeeping every 100 ms, when its buffer fills, and at shutdown, never fsynced (it
is for the checker, not for recovery). A SIGKILL loses at most the last flush interval, and may
leave the last line torn; readers skip a torn line (checkers/trace.py reads "as far as the trace
shows").

Format "kafkaesque-trace/1". Every line is one JSON object with
  mono, ts       the host's monotonic clock and the node's wall clock, seconds (JsonLog's pair)
  node, role     node id (a controller's id is 1000 + j), "broker" | "controller"
  event          the name (below)
  topic, partition, leader_epoch, partition_epoch   where the event is about one partition (the
                 replica's own view of the epochs when it decided)

Events and their facts (a broker's unless marked controller):
  trace_started        the process started: pid, variants, previous_broker_epoch (broker)
  registered           broker_epoch, previous_broker_epoch: the controller accepted this broker
  fenced, unfenced     broker_epoch: what the heartbeat answered
  become_leader        from, to, isr, replicas, leso (= its LEO), leo, hwm, min_isr, epoch_cache
                       ([[epoch, start offset], ...], after KAFKA-7415's entry for the new epoch),
                       followers ({id: the leader epoch of the follower state it starts with, -1: none})
  become_follower      from, to, leader, leo, hwm, epoch_cache
  follower_epoch_appended  leo, epoch_cache: a follower appended the first records of a new leader epoch
  hwm_advanced         from, to (the new HWM), isr, maximal_isr, min_isr, members:
                       {id: {"leo", "fetch_epoch"}} for every Maximal ISR member (the leader's own LEO,
                       a follower's fetch offset and the leader epoch it was recorded in, -1: none)
  alter_partition_sent from (ISR), to (proposed), hwm, leso, added: {id: {"leo", "fetch_epoch",
                       "broker_epoch" (its fetch's), "registered_broker_epoch" (the leader's metadata)}},
                       removed: {id: {"leo", "lag_ms", "reason"}}
  hwm_checkpointed     replicas: [[topic, partition, role, hwm, leo], ...] at each HWM checkpoint
  isr_committed, isr_updated        from, to: the ISR the controller's answer / metadata gave
  alter_partition_failed            proposed, error
  truncated_on_divergence, truncate_to_hw_variant, truncated_to_leader_leo_variant
                       a truncation: reason (why, in words), from, to (the LEO before and after), hwm,
                       hwm_before (the replica's HWM when it decided), epoch_cache (after), diverging_epoch
                       (the leader's answer, on divergence)
  log-recovery-truncated  start-up recovery cut a damaged or torn tail: partition ("topic-p"), offset
  produce_acked        first, last (offsets), acks, hwm (at the ack), isr_size, min_isr; producer_id,
                       producer_epoch, base_sequence (-1: not idempotent), transactional, control (a transaction
                       marker); duplicate: true when the batch was a retry of one written before (its offsets),
                       with same_batch: whether its CRC is that batch's (false: other records under a used
                       sequence, which the leader answers as a retry, as Kafka does, and never writes)
  consumer_fetch       offset (asked), first, last (offsets served), isolation ("read_committed" |
                       "read_uncommitted"), bound (what the read was cut at: "lso" | "hwm"), bound_offset (the
                       offset it was cut at: the bound reported is the bound used), hwm, leo, lso (the partition's last
                       stable offset, KIP-98: min(HWM, first offset of any open transaction))
  consumer_fetch_refused  a consumer's Fetch answered with an error or a diverging epoch and no records:
                       offset, current_leader_epoch, last_fetched_epoch (what the request carried, -1: none),
                       error, diverging_epoch ({"epoch", "end_offset"} or null); role, leader_epoch, leo, hwm,
                       log_start (this replica when it answered; role "none": it holds no replica); client
  list_offsets_answered   a ListOffsets partition answered: timestamp ("earliest" | "latest" | ms),
                       current_leader_epoch, read_committed, error, offset, epoch (the answer); role, leader_epoch,
                       hwm, log_start; client
  offset_for_leader_epoch_answered  a consumer's OffsetForLeaderEpoch (KIP-320) answered: current_leader_epoch,
                       epoch (asked), error, end_epoch, end_offset (the answer, -1: unknown); role, leader_epoch,
                       leo, hwm; client
  metadata_answered    a Metadata request answered (no topic/partition): brokers (the ids listed), leaders
                       ({topic: [[partition, leader, leader_epoch], ...]}: what this broker told the client); client
                       The four lines above name the client by its request header's client id ("client").
  txn_marker_written   a partition leader wrote a transaction marker, acknowledged (acks=all): producer_id,
                       producer_epoch (the marker's), coordinator_epoch, result ("commit" | "abort"), offset
  offset_commit_acked  an OffsetCommit answered: group, generation, member, offsets ([[topic, partition, offset],
                       ...] committed), topic/partition (its __consumer_offsets partition), first, last (the commit
                       records' offsets, in the order of `offsets`), hwm (as answered), acks
  offset_commit_accepted  the group coordinator accepted a commit (before its records are written): group,
                       generation, member (as the request named them), state, group_generation (the group's),
                       coordinator_partition
  offset_fetch_answered   the group coordinator answered an OffsetFetch: group, offsets ([[topic, partition, offset,
                       record_offset], ...]: each committed offset and the __consumer_offsets record it came from),
                       none ([[topic, partition], ...] asked with no committed offset), coordinator_partition
  group_generation     a rebalance completed a generation: group, generation, members (ids; [] when the group
                       is left Empty), leader, protocol, coordinator_partition
  groups_loading       the broker began (re)loading a __consumer_offsets partition: coordinator_partition (the
                       groups of that partition are forgotten and rebuilt from the log)
  logs_loaded          the broker started and loaded its logs: replicas ([[topic, partition, log end offset,
                       checkpointed HWM (-1: none)], ...]), clean (the last shutdown was controlled), recovery_cuts
                       (the partitions start-up recovery cut, "topic-p"), lossy_drops (how many power cuts the
                       node's lossy file system has reported so far; null: no lossy file system)
  txn_init_producer_id the transaction coordinator answered an InitProducerId (its record written):
                       transactional_id, producer_id_before, epoch_before (-1: the id had no producer),
                       producer_id, producer_epoch (the answer), asked_producer_id, asked_epoch (KIP-360: what
                       the request named), aborted_open (an open transaction was aborted instead, and the
                       client told to retry), coordinator_partition, coordinator_epoch (its leader epoch)
  txn_end_started      the coordinator decided a transaction's outcome (PrepareCommit/PrepareAbort written):
                       transactional_id, producer_id, txn_epoch (the producer epoch it ran under),
                       marker_epoch (the epoch its markers carry), result, started_by ("client": EndTxn |
                       "timeout" | "re-init": an InitProducerId found it open), partitions, txn_started_ms (when
                       its first partition was added, the coordinator's clock: with the producer id and txn_epoch
                       it names the transaction), coordinator_partition, coordinator_epoch
  txn_completed        every marker of a decided transaction was written (CompleteCommit/CompleteAbort written):
                       transactional_id, producer_id, producer_epoch (the markers'), result, partitions,
                       coordinator_partition, coordinator_epoch
  controller: broker_registered (broker, broker_epoch, clean, previous_broker_epoch), broker_unregistered
  (broker, broker_epoch: a decommissioned broker forgotten),
  broker_fenced (broker, reason), broker_unfenced (broker), partition_change (reason, from, to:
  {leader, isr, elr, last_known_elr, leader_epoch, partition_epoch}),
  leader_elected (leader, how: "isr" | "elr" | "unclean" | "recovery:<strategy>" | "preferred" |
  "reassignment" | "none", unclean, isr, elr, last_known_elr, replicas: before the election;
  candidates: the eligible brokers; leader_epoch: the new one), unclean_recovery,
  controller_activated (a quorum member became the active controller).
Lines other events write are kept (a reader ignores names it does not know).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv

FORMAT = "kafkaesque-trace/1"
TRACE_FILE = "trace.jsonl"
HOT = frozenset({"hwm_advanced", "produce_acked", "consumer_fetch", "hwm_checkpointed", "offset_commit_acked",
                 "txn_end_started", "txn_marker_written", "consumer_fetch_refused", "list_offsets_answered",
                 "offset_for_leader_epoch_answered", "metadata_answered", "txn_completed", "offset_commit_accepted",
                 "offset_fetch_answered"})
TRACED = HOT | frozenset({
    "trace_started", "registered", "fenced", "unfenced", "become_leader", "become_follower", "follower_epoch_appended",
    "alter_partition_sent", "isr_committed", "isr_updated", "alter_partition_failed",
    "truncated_on_divergence", "truncate_to_hw_variant", "truncated_to_leader_leo_variant", "log-recovery-truncated",
    "broker_registered", "broker_unregistered", "broker_fenced", "broker_unfenced", "partition_change",
    "leader_elected",
    "unclean_recovery", "controller_activated", "controller_deactivated", "txn_init_producer_id",
    "group_generation", "groups_loading", "logs_loaded",
})
BUFFER_LINES = 512


def default_trace_path(log_file: str | None) -> str | None:
    """Beside the state-change log; no log file (stderr), no trace."""
    return os.path.join(os.path.dirname(os.path.abspath(log_file)), TRACE_FILE) if log_file else None


class TraceWriter:
    """Buffered JSON lines; `flush` is called by the server's housekeeping and at shutdown."""

    def __init__(self, path: str, node: int, role: str):
        self.node, self.role = node, role
        self._fh = open(path, "a", buffering=1 << 16)  # noqa: SIM115 - open for the process's life
        self._pending = 0

    def write(self, event: dict[str, Any]) -> None:
        line = {"mono": round(hostenv.monotonic_s(), 6), "ts": round(hostenv.wall_s(), 6), "node": self.node,
                "role": self.role, **event}
        self._fh.write(json.dumps(line, default=str, separators=(",", ":")) + "\n")
        self._pending += 1
        if self._pending >= BUFFER_LINES:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._pending = 0
            self._fh.flush()


class EventSink:
    """The state machines' one event callback: the state-change log gets every event but the hot-path
    ones, the trace (when there is one) every event named in TRACED."""

    def __init__(self, log: Callable[[dict[str, Any]], None], trace: TraceWriter | None):
        self.log, self.trace = log, trace

    def __call__(self, event: dict[str, Any]) -> None:
        name = event.get("event")
        if name not in HOT:
            self.log(event)
        if self.trace is not None and name in TRACED:
            self.trace.write(event)

    def flush(self) -> None:
        if self.trace is not None:
            self.trace.flush()


def open_sink(log: Callable[[dict[str, Any]], None], trace_file: str | None, node: int, role: str,
              **started: Any) -> EventSink:
    """The sink of one node: its trace opened (and its first line written and flushed) when it has one."""
    writer = TraceWriter(trace_file, node, role) if trace_file else None
    sink = EventSink(log, writer)
    if writer is not None:
        writer.write({"event": "trace_started", "format": FORMAT, "pid": hostenv.pid(), **started})
        writer.flush()
    return sink
