"""The broker's asyncio shell: sockets, timers, the controller session, replica fetchers, purgatory.

The protocol lives in replica.py (per partition) and controller.py; the storage in log/.
This module wires them to the world: one listener per broker speaks both the Kafka
protocol and the internal RPC (rpc.is_rpc_frame tells them apart; listener.py checks every
frame, its caps and the internal requests' tags before a handler sees it); a session with the
controller registers, heartbeats and pulls the metadata log (002 1.2, 2.3.2); one fetcher
task per followed partition pulls from its leader (002 2.2); acks=all produce requests wait
in a purgatory until the HWM passes them (002 2.5); SIGTERM is a controlled shutdown that
ends with the clean-shutdown marker (001 5.1). Consumer groups: the group coordinator
(group_coordinator.py) serves the groups of the __consumer_offsets partitions this broker
leads; their commits go through the same produce path and purgatory. Transactions: txn_shell.py
(the transaction coordinator of the __transaction_state partitions this broker leads, and the
partition leader's markers and KIP-890 verification) uses the same path.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv, kafka_api, rpc
from kafkaesque_harness.clusters.broker.controller_server import JsonLog
from kafkaesque_harness.clusters.broker.group_coordinator import (
    OFFSETS_TOPIC,
    TXN_ABORT,
    TXN_COMMIT,
    TXN_DATA,
    CoordinatorConfig,
    GroupCoordinator,
    Reply,
    offset_record,
)
from kafkaesque_harness.clusters.broker.listener import Limits, Listener, serve, start_serving
from kafkaesque_harness.clusters.broker.log import (
    BatchHeader,
    LogManager,
    NonContiguousAppendError,
    build_batch,
    iter_all_records,
    parse_flush_policy,
    validate_batches,
)
from kafkaesque_harness.clusters.broker.log.batch import control_key_commits
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER, MetadataImage, MetadataLogFile
from kafkaesque_harness.clusters.broker.replica import FOLLOWER, LEADER, Replica, ReplicaConfig
from kafkaesque_harness.clusters.broker.trace import default_trace_path, open_sink
from kafkaesque_harness.clusters.broker.txn_coordinator import TXN_STATE_TOPIC
from kafkaesque_harness.clusters.broker.txn_shell import TxnShell

HOUSEKEEPING_S = 0.1
MAX_FETCH_BYTES = 4 * 1024 * 1024
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"  # a consumer fetch's isolation (trace)


def now_ms() -> int:
    # Monotonic: lag and session timers must not jump when the clock nemesis skews the wall clock.
    return hostenv.monotonic_ms()


def _hostport(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {s!r} is not HOST:PORT; give it as e.g. 127.0.0.1:9092")
    return host, int(port)


# Where the node's lossy file system reports its power cuts (clusters/lossyfs.py --status-file), when the broker
# writes through one; the backend sets it (clusters/docker.py).
LOSSYFS_STATUS_ENV = "KAFKAESQUE_LOSSYFS_STATUS"


def lossy_drops_seen(status_file: str | None) -> int | None:
    """How many times the lossy file system has dropped its unsynced bytes (its "dropped" reports), or None
    when the broker writes through none (or its report cannot be read): the trace's fact that a lossy crash
    happened between two starts."""
    if not status_file:
        return None
    try:
        with open(status_file) as f:
            return sum(1 for line in f if '"dropped"' in line)
    except OSError:
        return None


METADATA_COPY_MAX = 5000  # records in a broker's metadata copy beyond its snapshot before it folds them in

class ControllerClient:
    """The broker's way to the active controller: one address (the single controller) or a
    controller quorum's. A quorum member that is not the active controller answers
    NOT_CONTROLLER with the leader's address, which is tried at once; an unreachable one makes
    the next call go to the next address. With one address this is a plain RpcClient."""

    def __init__(self, addrs: list[tuple[str, int]], log: Any, secret: str):
        self.addrs = addrs
        self.current = 0
        self.clients = {a: rpc.RpcClient(*a, secret=secret) for a in addrs}
        self.log = log
        self.unreachable_at: dict[tuple[str, int], float] = {}

    def _move_to(self, i: int, why: str) -> None:
        if i != self.current:
            self.current = i
            self.log({"event": "controller_switch", "to": f"{self.addrs[i][0]}:{self.addrs[i][1]}", "reason": why})

    async def call(self, api: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        for _ in range(len(self.addrs)):
            addr = self.addrs[self.current]
            try:
                resp = await self.clients[addr].call(api, body, timeout=timeout)
            except rpc.RpcError:
                # Dead or cut off: the next call tries the next controller.
                self.unreachable_at[addr] = hostenv.monotonic_s()
                self._move_to((self.current + 1) % len(self.addrs), f"{api}: {addr[0]}:{addr[1]} unreachable")
                raise
            if resp.get("error") != rpc.NOT_CONTROLLER:
                return resp
            hint = resp.get("leader")
            hinted = _hostport(hint) if hint else None
            # Followers name the old leader until their election timeout ends; one that just
            # failed us is not worth a round trip (it would only bounce us back here).
            recently_failed = hinted is not None and hostenv.monotonic_s() - self.unreachable_at.get(hinted, -9.0) < 1.0
            if hinted in self.clients and hinted != addr and not recently_failed:
                self._move_to(self.addrs.index(hinted), f"{api}: redirected by {addr[0]}:{addr[1]}")
                continue
            if hinted != addr and not recently_failed:
                # No leader known there (an election is on): try the next one.
                self._move_to((self.current + 1) % len(self.addrs), f"{api}: no leader known at "
                              f"{addr[0]}:{addr[1]}")
            # Else it names itself (taking over) or a controller that just failed us: stay here;
            # the caller retries after its own pause.
            raise rpc.RpcError(f"{api}: {addr[0]}:{addr[1]} is not the active controller (yet)")
        raise rpc.RpcError(f"{api}: no active controller among {len(self.addrs)} controllers")


def controller_addresses(spec: str) -> list[tuple[str, int]]:
    return [_hostport(a.strip()) for a in spec.split(",")]


# The partitions whose leader hosts a coordinator: a new leader epoch there is a new coordinator epoch.
COORDINATOR_TOPICS = frozenset({OFFSETS_TOPIC, TXN_STATE_TOPIC})


class PendingProduce:
    __slots__ = ("first_offset", "last_offset", "future", "producer")

    def __init__(self, first_offset: int, last_offset: int, future: asyncio.Future, producer: dict[str, Any]):
        self.first_offset, self.last_offset, self.future = first_offset, last_offset, future
        self.producer = producer  # the batches' producer, for the trace (_producer_facts)


def _producer_facts(headers: list[BatchHeader]) -> dict[str, Any]:
    """Who wrote a produce, for the trace: the producer id, epoch and base sequence (-1 when not idempotent),
    whether it is transactional, and whether it is a marker (a control batch). A produce request carries one
    batch per partition (Produce v3+), so the first header speaks for it."""
    h = headers[0]
    return {"producer_id": h.producer_id, "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
            "transactional": h.is_transactional, "control": h.is_control}


class Broker:
    def __init__(self, args: Any, secret: str):
        self.args = args
        self.secret = secret
        self.node_id = args.node_id
        self.listen_host, self.listen_port = _hostport(args.listen)
        self.adv_host, self.adv_port = _hostport(args.advertise or args.listen)
        self.variants = frozenset(args.variant)
        os.makedirs(args.data_dir, exist_ok=True)
        self.log = JsonLog(args.log_file, self.node_id, "broker")
        # The state machines' events: the state-change log and the protocol trace (trace.py).
        self.events = open_sink(self.log, getattr(args, "trace_file", None) or default_trace_path(args.log_file),
                                self.node_id, "broker", variants=sorted(self.variants))
        self.recovery_cuts: list[dict[str, Any]] = []  # what start-up recovery cut (_log_event)
        self.logs = LogManager(os.path.join(args.data_dir, "logs"), parse_flush_policy(args.flush_policy),
                               args.segment_bytes, logger=self._log_event)
        self.previous_broker_epoch = self.logs.take_clean_shutdown()
        self.logs.load_all()
        if self.recovery_cuts and self.previous_broker_epoch >= 0:
            # The clean-shutdown marker vouches for a log flushed whole at shutdown (001 5.1, 5.2). If
            # recovery still had to cut records, the files changed after it (a damaged disk), so this
            # restart is unclean: registering with the old epoch would keep the replica in the ELR and
            # let it lead with the records it lost (Unclean Exclusion, PROTOCOL.md).
            self.log({"event": "clean-shutdown-void", "previous_broker_epoch": self.previous_broker_epoch,
                      "partitions": sorted({c.get("partition") for c in self.recovery_cuts})})
            self.previous_broker_epoch = -1
        self.checkpointed_hwm = self.logs.read_hwm_checkpoint()
        # What this start found on disk, for the trace's log-shorter-after-restart: each log's end beside the HWM
        # checkpoint it read, whether the last shutdown was clean, and how many power cuts the lossy file system
        # has made so far (a count that grew since the previous start explains a log shorter than its checkpoint).
        self.events({"event": "logs_loaded", "clean": self.previous_broker_epoch >= 0,
                     "recovery_cuts": sorted({str(c.get("partition")) for c in self.recovery_cuts}),
                     "lossy_drops": lossy_drops_seen(hostenv.getenv(LOSSYFS_STATUS_ENV)),
                     "replicas": [[t, p, log.log_end_offset, self.checkpointed_hwm.get((t, p), -1)]
                                  for (t, p), log in sorted(self.logs.logs().items())]})
        self.metadata_file = MetadataLogFile(os.path.join(args.data_dir, "metadata.log"))
        self.image = self.metadata_file.image()
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.replica_config = ReplicaConfig(replica_lag_time_max_ms=args.replica_lag_time_max_ms,
                                            variants=self.variants)
        self.incarnation_id = hostenv.new_uuid().hex
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        self.want_shutdown = False
        # Set once shutdown stops the loops: they also check it, because in Python 3.11
        # asyncio.wait_for can swallow a cancellation that races with its result.
        self.stopping = False
        self.should_shutdown = asyncio.Event()
        self.controller = ControllerClient(controller_addresses(args.controller), self.log, secret)
        self.peers: dict[int, rpc.RpcClient] = {}
        self.purgatory: dict[tuple[str, int], deque[PendingProduce]] = {}
        self.changed: dict[tuple[str, int], asyncio.Event] = {}
        self.appended: dict[tuple[str, int], asyncio.Event] = {}
        self.fetchers: dict[tuple[str, int], asyncio.Task] = {}
        self.alter_tasks: dict[tuple[str, int], asyncio.Task] = {}
        self._producer_ids = int(hostenv.wall_s() * 1000) % (1 << 40)
        self.groups = GroupCoordinator(CoordinatorConfig(
            initial_rebalance_delay_ms=getattr(args, "group_initial_rebalance_delay_ms", 3000),
            min_session_timeout_ms=getattr(args, "group_min_session_timeout_ms", 6000)), event_log=self.events)
        self.offsets_topic_min_isr = getattr(args, "offsets_topic_min_isr", 2)
        self.group_loads: dict[tuple[str, int], asyncio.Task] = {}
        self.txn = TxnShell(self)
        self.metadata_changed = asyncio.Event()

    def _log_event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "log-recovery-truncated":
            self.recovery_cuts.append(event)
        self.events(event)

    # --- change notification (long polls) --------------------------------------------------
    def change_event(self, topic: str, partition: int) -> asyncio.Event:
        ev = self.changed.get((topic, partition))
        if ev is None:
            ev = self.changed[(topic, partition)] = asyncio.Event()
        return ev

    def append_event(self, key: tuple[str, int]) -> asyncio.Event:
        ev = self.appended.get(key)
        if ev is None:
            ev = self.appended[key] = asyncio.Event()
        return ev

    def signal_change(self, key: tuple[str, int], wake_followers: bool = False) -> None:
        """Wake consumer long polls (new data or HWM); follower long polls only on an append or
        a role change: followers learn a new HWM from their next fetch, as in Kafka, which
        saves a round trip per acks=all produce on a syscall-bound machine."""
        ev = self.changed.pop(key, None)
        if ev is not None:
            ev.set()
        if wake_followers:
            ev = self.appended.pop(key, None)
            if ev is not None:
                ev.set()

    async def wait_any(self, events: list[asyncio.Event], timeout: float) -> None:
        if not events:
            await asyncio.sleep(timeout)
            return
        waiters = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    # --- produce and the acks=all purgatory (002 2.5, 2.6) ----------------------------------
    async def produce(self, topic: str, partition: int, raw: bytes, headers: list[BatchHeader], acks: int,
                      timeout_s: float) -> tuple[int, int, int]:
        r = self.replicas.get((topic, partition))
        if r is None:
            return (rpc.UNKNOWN_TOPIC_OR_PARTITION if (topic, partition) not in self.image.partitions
                    else rpc.NOT_LEADER_OR_FOLLOWER), -1, -1
        err = r.check_produce(acks)
        if err != rpc.NONE:
            return err, -1, -1
        # Idempotent producer (KIP-98): check every batch before appending any.
        for h in headers:
            seq_err, dup = r.producers.check(h)
            if seq_err != rpc.NONE:
                return seq_err, -1, -1
            if dup is not None:
                if len(headers) == 1:  # a retry: acknowledged with the offsets the batch was first written at
                    # (as Kafka does, whatever the records; same_batch: whether they are the bytes written then)
                    return await self._await_commit(r, dup[0], dup[1], acks, timeout_s,
                                                    {**_producer_facts(headers), "duplicate": True,
                                                     "same_batch": dup[2] == h.crc})
                return rpc.INVALID_REQUEST, -1, -1
        first, last = r.append(raw, headers)
        self.signal_change(r.key, wake_followers=True)
        self._complete_produces(r)
        return await self._await_commit(r, first, last, acks, timeout_s, _producer_facts(headers))

    async def _await_commit(self, r: Replica, first: int, last: int, acks: int, timeout_s: float,
                            producer: dict[str, Any]) -> tuple[int, int, int]:
        if acks != -1 or r.hwm > last:
            self._trace_ack(r, first, last, acks, producer)
            return rpc.NONE, first, r.log.log_start_offset
        fut = asyncio.get_running_loop().create_future()
        self.purgatory.setdefault(r.key, deque()).append(PendingProduce(first, last, fut, producer))
        try:
            err = await asyncio.wait_for(fut, hostenv.buggify_stretch("purgatory-timer-stretched", timeout_s,
                                                                      hostenv.PURGATORY_STRETCH))
        except TimeoutError:
            return rpc.REQUEST_TIMED_OUT, -1, -1
        return err, (first if err == rpc.NONE else -1), r.log.log_start_offset

    def _complete_produces(self, r: Replica) -> None:
        q = self.purgatory.get(r.key)
        while q and q[0].last_offset < r.hwm:
            p = q.popleft()
            if not p.future.done():
                self._trace_ack(r, p.first_offset, p.last_offset, -1, p.producer)
                p.future.set_result(rpc.NONE)

    def _trace_ack(self, r: Replica, first: int, last: int, acks: int, producer: dict[str, Any]) -> None:
        self.events({"event": "produce_acked", "topic": r.topic, "partition": r.partition,
                     "leader_epoch": r.leader_epoch, "first": first, "last": last, "acks": acks, "hwm": r.hwm,
                     "isr_size": len(r.isr), "min_isr": r.min_isr, **producer})

    def _fail_produces(self, key: tuple[str, int], error: int) -> None:
        q = self.purgatory.pop(key, None)
        while q:
            p = q.popleft()
            if not p.future.done():
                p.future.set_result(error)

    def _hwm_may_have_moved(self, r: Replica) -> None:
        self._complete_produces(r)
        if r.below_min_isr():
            # 002 2.6: appended but the ISR shrank below min ISR, so these cannot commit now.
            # The error is indefinite (the records stay in the log and may commit later).
            self._fail_produces(r.key, rpc.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        self.signal_change(r.key)

    # --- consumer reads ---------------------------------------------------------------------
    def consumer_read(self, topic: str, partition: int, offset: int, current_leader_epoch: int,
                      max_bytes: int, read_committed: bool = False, last_fetched_epoch: int = -1) -> dict[str, Any]:
        r = self.replicas.get((topic, partition))
        out = {"error": rpc.NONE, "hwm": -1, "log_start": -1, "records": b"", "lso": -1, "aborted": None,
               "diverging": None}
        if r is None:
            out["error"] = (rpc.UNKNOWN_TOPIC_OR_PARTITION if (topic, partition) not in self.image.partitions
                            else rpc.NOT_LEADER_OR_FOLLOWER)
            self._trace_fetch_refused(topic, partition, None, offset, current_leader_epoch, last_fetched_epoch, out)
            return out
        # KIP-320: the epoch fence, the consumer's last fetched epoch, the offset range (Replica.check_consumer_fetch)
        err, out["diverging"] = r.check_consumer_fetch(current_leader_epoch, offset, last_fetched_epoch)
        if err in (rpc.FENCED_LEADER_EPOCH, rpc.UNKNOWN_LEADER_EPOCH, rpc.NOT_LEADER_OR_FOLLOWER):
            out["error"] = err
            self._trace_fetch_refused(topic, partition, r, offset, current_leader_epoch, last_fetched_epoch, out)
            return out
        out["hwm"], out["log_start"] = r.hwm, r.log.log_start_offset
        bound, out["lso"] = self._read_committed_bound(r)
        if err != rpc.NONE or out["diverging"] is not None:
            out["error"] = err
            self._trace_fetch_refused(topic, partition, r, offset, current_leader_epoch, last_fetched_epoch, out)
        elif read_committed:
            # KIP-98: read_committed consumers read below the LSO, and are told which transactions in
            # what they read were aborted, so they can drop those records.
            out["aborted"] = []
            if offset < out["lso"]:
                out["records"], first, end = r.log.read_span(offset, min(max_bytes, MAX_FETCH_BYTES),
                                                             max_offset=out["lso"])
                if out["records"]:
                    self._trace_consumer_fetch(r, offset, first, end - 1, READ_COMMITTED, bound, out["lso"])
                    out["aborted"] = r.producers.aborted_between(offset, end)
        elif offset < r.hwm:
            # 002 2.7: consumers see only records below the HWM.
            out["records"], first, end = r.log.read_span(offset, min(max_bytes, MAX_FETCH_BYTES), max_offset=r.hwm)
            if out["records"]:
                self._trace_consumer_fetch(r, offset, first, end - 1, READ_UNCOMMITTED, "hwm", r.hwm)
        return out

    def answered(self, event: dict[str, Any]) -> None:
        """A trace line about an answer to a client, naming the client (its request header's client id)."""
        self.events({**event, "client": kafka_api.CLIENT_ID.get()})

    def _trace_fetch_refused(self, topic: str, partition: int, r: Replica | None, offset: int,
                             current_leader_epoch: int, last_fetched_epoch: int, out: dict[str, Any]) -> None:
        """A consumer's Fetch answered with an error or a diverging epoch, no records: what it asked, and this
        replica's role, epoch and log when it answered."""
        facts: dict[str, Any] = {"role": "none", "leader_epoch": -1}
        if r is not None:
            facts = {"role": r.role, "leader_epoch": r.leader_epoch, "leo": r.leo, "hwm": r.hwm,
                     "log_start": r.log.log_start_offset}
        self.answered({"event": "consumer_fetch_refused", "topic": topic, "partition": partition, **facts,
                       "offset": offset, "current_leader_epoch": current_leader_epoch,
                       "last_fetched_epoch": last_fetched_epoch, "error": out["error"],
                       "diverging_epoch": out["diverging"]})

    def offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                epoch: int) -> tuple[int, int, int]:
        r = self.replicas.get((topic, partition))
        if r is None:
            answer = (rpc.UNKNOWN_TOPIC_OR_PARTITION if (topic, partition) not in self.image.partitions
                      else rpc.NOT_LEADER_OR_FOLLOWER), -1, -1
            facts: dict[str, Any] = {"role": "none", "leader_epoch": -1}
        else:
            answer = r.offset_for_leader_epoch(current_leader_epoch, epoch)
            facts = {"role": r.role, "leader_epoch": r.leader_epoch, "leo": r.leo, "hwm": r.hwm}
        self.answered({"event": "offset_for_leader_epoch_answered", "topic": topic, "partition": partition, **facts,
                       "current_leader_epoch": current_leader_epoch, "epoch": epoch, "error": answer[0],
                       "end_epoch": answer[1], "end_offset": answer[2]})
        return answer

    def _read_committed_bound(self, r: Replica) -> tuple[str, int]:
        """Where read_committed reads end, and its name: the LSO (KIP-98), below the first offset of any open
        transaction. The `read-committed-to-hwm` variant bounds them by the HWM, as read_uncommitted:
        records of open transactions are served, some of them later aborted (uncommitted and aborted
        reads, G1a; the class Jepsen found in Redpanda 2022 and Bufstream 2024)."""
        return ("hwm", r.hwm) if "read-committed-to-hwm" in self.variants else ("lso", r.last_stable_offset())

    def _trace_consumer_fetch(self, r: Replica, offset: int, first: int, last: int, isolation: str, bound: str,
                              bound_offset: int) -> None:
        """The served span (first batch's base offset, last batch's last offset) comes from the log's batch
        index (PartitionLog.read_span): no header of what was served is parsed for this line."""
        # The LSO is the partition's own (producer state), whatever bound the read used: the trace's
        # read-committed-above-lso compares what was served with it; bound_offset is the offset the read was
        # cut at (the bound reported is the bound used), and the trace's read-committed-open-txn checks the LSO
        # itself against the transactions' batches and markers.
        self.events({"event": "consumer_fetch", "topic": r.topic, "partition": r.partition,
                     "leader_epoch": r.leader_epoch, "offset": offset, "first": first, "last": last,
                     "isolation": isolation, "bound": bound, "bound_offset": bound_offset, "hwm": r.hwm,
                     "leo": r.leo, "lso": r.last_stable_offset()})

    def list_offset(self, topic: str, partition: int, timestamp: int, current_leader_epoch: int,
                    read_committed: bool = False) -> tuple[int, int, int]:
        r = self.replicas.get((topic, partition))
        answer = self._list_offset(r, timestamp, current_leader_epoch, read_committed)
        facts: dict[str, Any] = {"role": "none", "leader_epoch": -1} if r is None else {
            "role": r.role, "leader_epoch": r.leader_epoch, "hwm": r.hwm, "log_start": r.log.log_start_offset}
        self.answered({"event": "list_offsets_answered", "topic": topic, "partition": partition, **facts,
                       "timestamp": {kafka_api.EARLIEST_TIMESTAMP: "earliest",
                                     kafka_api.LATEST_TIMESTAMP: "latest"}.get(timestamp, timestamp),
                       "current_leader_epoch": current_leader_epoch, "read_committed": read_committed,
                       "error": answer[0], "offset": answer[1], "epoch": answer[2]})
        return answer

    def _list_offset(self, r: Replica | None, timestamp: int, current_leader_epoch: int,
                     read_committed: bool) -> tuple[int, int, int]:
        if r is None:
            return rpc.NOT_LEADER_OR_FOLLOWER, -1, -1
        err = r.check_fetch_epoch(current_leader_epoch)
        if err != rpc.NONE:
            return err, -1, -1
        if timestamp == kafka_api.EARLIEST_TIMESTAMP:
            return rpc.NONE, r.log.log_start_offset, r.leader_epoch
        if timestamp == kafka_api.LATEST_TIMESTAMP:
            err, off = r.list_offset_latest()
            if read_committed and err == rpc.NONE:
                off = min(off, self._read_committed_bound(r)[1])  # KIP-98: a read_committed consumer's end is the LSO
            return err, off, r.leader_epoch
        found = r.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= r.hwm:
            return rpc.NONE, -1, r.leader_epoch
        return rpc.NONE, found[0], r.leader_epoch

    async def create_topic(self, topic: str, partitions: int, rf: int, configs: dict[str, Any],
                           timeout_s: float) -> tuple[int, str | None]:
        try:
            resp = await self.controller.call("create_topic", {"topic": topic, "partitions": partitions,
                                                               "replication_factor": rf, "configs": configs})
        except rpc.RpcError as e:
            return rpc.REQUEST_TIMED_OUT, f"controller unreachable: {e}"
        if resp.get("error") != rpc.NONE:
            return resp["error"], resp.get("message")
        # Answer once this broker's metadata shows every partition with a leader.
        deadline = hostenv.monotonic_s() + timeout_s
        while hostenv.monotonic_s() < deadline:
            parts = self.image.partitions_of(topic)
            if len(parts) == partitions and all(p.leader != NO_LEADER for p in parts):
                return rpc.NONE, None
            await asyncio.sleep(0.02)
        return rpc.NONE, None

    def next_producer_id(self) -> int:
        # Unique across brokers and restarts without a coordinator: node id in the high bits.
        self._producer_ids += 1
        return (self.node_id << 44) | (self._producer_ids & ((1 << 44) - 1))

    # --- consumer groups: the shell around group_coordinator.py ------------------------------
    def deliver(self, replies: list[Reply]) -> None:
        """Answer the parked JoinGroup / SyncGroup requests the coordinator completed (their waiters
        are the futures their handlers await)."""
        for waiter, result in replies:
            if not waiter.done():
                waiter.set_result(result)

    async def group_wait(self, call: Any, timeout_s: float) -> Any:
        """Run a JoinGroup or SyncGroup on the coordinator and wait for its answer, which may come
        from a later event (another member's request, a tick). None if it never came."""
        waiter = asyncio.get_running_loop().create_future()
        self.deliver(call(waiter))
        try:
            return await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            return None

    def _group_partition_changed(self, r: Replica, old_role: str, old_epoch: int) -> None:
        """A __consumer_offsets partition's leadership moved (002 2.10's transitions): the leader of a new
        epoch loads its groups from the log; a former leader forgets them (a coordinator fail-over is a
        leader change)."""
        if r.role == LEADER and (old_role != LEADER or r.leader_epoch != old_epoch):
            self.deliver(self.groups.begin_loading(r.partition))
            self.group_loads[r.key] = asyncio.create_task(self._load_groups(r, r.leader_epoch))
        elif r.role != LEADER and old_role == LEADER:
            self.deliver(self.groups.unload(r.partition))

    async def read_to_hwm_as_leader(self, r: Replica, epoch: int) -> list[tuple[int, bytes | None, bytes | None]] | None:
        """The (offset, key, value) of every committed record of an internal partition, read by its new
        leader of `epoch` once it may trust its HWM; None if it stopped leading meanwhile."""
        def still_leading() -> bool:
            return not self.stopping and self.replicas.get(r.key) is r and r.role == LEADER and r.leader_epoch == epoch

        # PROTOCOL.md 3: a new leader's local HWM may be below the True HWM until it reaches the
        # LESO; reading before then could miss acknowledged commits (and so rewind the group).
        while still_leading() and r.hwm < r.leso:
            await self.wait_any([self.change_event(*r.key)], 0.5)
        if not still_leading():
            return None
        records, offset, end = [], r.log.log_start_offset, r.hwm
        while offset < end:
            raw = r.log.read(offset, MAX_FETCH_BYTES, max_offset=end)
            if not raw:
                break
            for h, rec in iter_all_records(raw):
                if not h.is_transactional:
                    records.append((rec.offset, rec.key, rec.value))
                else:  # transactional offsets and their markers (GroupCoordinator.load)
                    tag = TXN_DATA if not h.is_control else TXN_COMMIT if control_key_commits(rec.key) else TXN_ABORT
                    records.append((rec.offset, rec.key, rec.value, (h.producer_id, tag)))
                offset = h.next_offset
        return records

    async def _load_groups(self, r: Replica, epoch: int) -> None:
        records = await self.read_to_hwm_as_leader(r, epoch)
        if records is None:
            return
        self.groups.load(r.partition, records)
        self.events({"event": "group_partition_loaded", "topic": OFFSETS_TOPIC, "partition": r.partition,
                     "leader_epoch": epoch, "hwm": r.hwm, "records": len(records)})

    async def find_coordinator(self, group_id: str) -> tuple[int, Any]:
        """(error, BrokerInfo of the group's coordinator): the leader of its __consumer_offsets
        partition. The topic is created on first use, as Kafka does, with min(3, registered brokers)
        replicas: while fewer brokers are alive the controller refuses it and clients are told
        COORDINATOR_NOT_AVAILABLE (Kafka's offsets.topic.replication.factor rule), rather than
        getting a topic with fewer replicas for good."""
        return await self.internal_topic_leader(OFFSETS_TOPIC, self.groups.config.offsets_partitions,
                                                self.groups.partition_for(group_id))

    async def internal_topic_leader(self, topic: str, partitions: int, partition: int) -> tuple[int, Any]:
        """(error, BrokerInfo) of the leader of an internal topic's partition, creating the topic on
        first use (the rule of find_coordinator above; __transaction_state follows it too, as Kafka's
        transaction.state.log.replication.factor and min.isr do)."""
        if topic not in self.image.topics:
            rf = max(1, min(3, len(self.image.brokers)))
            await self.create_topic(topic, partitions, rf,
                                    {"min.insync.replicas": str(min(self.offsets_topic_min_isr, rf))}, 5.0)
        p = self.image.partitions.get((topic, partition))
        b = self.image.brokers.get(p.leader) if p is not None else None
        if b is None or b.fenced:
            return rpc.COORDINATOR_NOT_AVAILABLE, None
        return rpc.NONE, b

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             offsets: list[tuple[str, int, int, int, str]], timeout_s: float) -> int:
        """Write the offsets (topic, partition, offset, leader epoch, metadata) to the group's
        __consumer_offsets partition with acks=all, and answer only once the HWM has passed them
        (002 2.5), so an acknowledged commit survives a coordinator fail-over (not so under the
        `offsets-commit-acks-1` variant)."""
        err = self.groups.check_commit(group_id, generation_id, member_id, now_ms())
        if err != rpc.NONE or not offsets:
            return err
        records = [offset_record(group_id, t, p, (o, e, m)) for t, p, o, e, m in offsets]
        raw = build_batch([v for _, v in records], keys=[k for k, _ in records])
        # The `offsets-commit-acks-1` variant answers once the leader appended the commit (acks=1),
        # before the ISR has it: a coordinator fail-over to a follower without it rewinds the group.
        acks = 1 if "offsets-commit-acks-1" in self.variants else -1
        partition = self.groups.partition_for(group_id)
        err, base, _ = await self.produce(OFFSETS_TOPIC, partition, raw, validate_batches(raw), acks, timeout_s)
        if err == rpc.NONE:
            r = self.replicas.get((OFFSETS_TOPIC, partition))
            # The answer's facts (the trace's offset-commit-unreplicated): where the commit's records are, and
            # the HWM as the commit is answered, which must have passed them (002 2.5).
            self.events({"event": "offset_commit_acked", "topic": OFFSETS_TOPIC, "partition": partition,
                         "leader_epoch": r.leader_epoch if r else -1, "group": group_id, "generation": generation_id,
                         "member": member_id, "offsets": [[t, p, o] for t, p, o, _, _ in offsets],
                         "first": base, "last": base + len(records) - 1, "hwm": r.hwm if r else None, "acks": acks})
            if self.groups.status(group_id) == rpc.NONE:
                for i, (k, v) in enumerate(records):
                    self.groups.apply_record(base + i, k, v)
            return rpc.NONE
        # Kafka's mapping (GroupMetadataManager.storeOffsets): lost leadership means another
        # coordinator; anything else that kept the write from committing, try again later.
        if err in (rpc.NOT_LEADER_OR_FOLLOWER, rpc.UNKNOWN_TOPIC_OR_PARTITION):
            return rpc.NOT_COORDINATOR
        return rpc.COORDINATOR_NOT_AVAILABLE

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                                 member_id: str, offsets: list[tuple[str, int, int, int, str]], timeout_s: float) -> int:
        """TxnOffsetCommit (KIP-98): the offsets go to the group's __consumer_offsets partition as a
        transactional batch of the producer (acks=all), pending in the group coordinator until the
        transaction's marker reaches that partition. A member's generation, when the producer sends one
        (KIP-447, v3+), is checked as for a plain commit, so a zombie member cannot commit."""
        err = self.groups.status(group_id)
        if err == rpc.NONE and generation_id >= 0:
            err = self.groups.check_commit(group_id, generation_id, member_id, now_ms())
        if err != rpc.NONE or not offsets:
            return err
        records = [offset_record(group_id, t, p, (o, e, m)) for t, p, o, e, m in offsets]
        raw = build_batch([v for _, v in records], keys=[k for k, _ in records], producer_id=producer_id,
                          producer_epoch=producer_epoch, transactional=True)
        err, base, _ = await self.produce(OFFSETS_TOPIC, self.groups.partition_for(group_id), raw,
                                          validate_batches(raw), -1, timeout_s)
        if err == rpc.NONE:
            if self.groups.status(group_id) == rpc.NONE:
                for i, (k, v) in enumerate(records):
                    self.groups.apply_txn_record(producer_id, base + i, k, v)
            return rpc.NONE
        if err == rpc.INVALID_PRODUCER_EPOCH:
            return rpc.PRODUCER_FENCED  # a marker with a newer epoch reached the partition: fenced
        if err in (rpc.NOT_LEADER_OR_FOLLOWER, rpc.UNKNOWN_TOPIC_OR_PARTITION):
            return rpc.NOT_COORDINATOR
        return rpc.COORDINATOR_NOT_AVAILABLE

    # --- the controller session (PROTOCOL.md 5) ---------------------------------------------
    async def register(self) -> None:
        body = {"broker_id": self.node_id, "incarnation_id": self.incarnation_id, "host": self.adv_host,
                "port": self.adv_port, "previous_broker_epoch": self.previous_broker_epoch}
        while True:
            try:
                resp = await self.controller.call("broker_registration", body, timeout=2.0)
                if resp.get("error") == rpc.NONE:
                    self.broker_epoch = int(resp["broker_epoch"])
                    self.events({"event": "registered", "broker_epoch": self.broker_epoch,
                                 "previous_broker_epoch": self.previous_broker_epoch})
                    return
                self.log({"event": "registration_refused", "error": resp.get("error"), "message": resp.get("message")})
            except rpc.RpcError as e:
                self.log({"event": "controller_unreachable", "error": str(e)})
            await asyncio.sleep(0.5)

    async def heartbeat_loop(self) -> None:
        interval = self.args.heartbeat_interval_ms / 1000
        while not self.stopping:
            body = {"broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                    "want_fence": not self.caught_up, "want_shutdown": self.want_shutdown,
                    "metadata_offset": self.image.offset}
            try:
                await hostenv.buggify_delay("heartbeat-skipped", interval)
                resp = await self.controller.call("broker_heartbeat", body, timeout=2.0)
                err = resp.get("error")
                if err == rpc.STALE_BROKER_EPOCH or err == rpc.BROKER_ID_NOT_REGISTERED:
                    # Our registration is gone (controller lost it): register again.
                    self.log({"event": "heartbeat_rejected", "error": err})
                    await self.register()
                elif err == rpc.NONE:
                    if self.fenced != resp["is_fenced"]:
                        self.events({"event": "fenced" if resp["is_fenced"] else "unfenced",
                                     "broker_epoch": self.broker_epoch})
                    self.fenced = resp["is_fenced"]
                    if resp.get("should_shutdown"):
                        self.should_shutdown.set()
            except rpc.RpcError:
                pass
            await asyncio.sleep(interval)

    async def metadata_loop(self) -> None:
        while not self.stopping:
            body = {"broker_id": self.node_id, "offset": self.image.offset + 1, "max_records": 2000,
                    "max_wait_ms": 500}
            try:
                resp = await self.controller.call("fetch_metadata", body, timeout=5.0)
            except rpc.RpcError:
                await asyncio.sleep(0.2)
                continue
            if resp.get("error") == rpc.OFFSET_OUT_OF_RANGE:
                # Our copy is ahead of the controller's log: replay what the controller has.
                self.log({"event": "metadata_copy_truncated", "to": resp["end_offset"]})
                self.metadata_file.truncate_to(int(resp["end_offset"]))
                self.image = self.metadata_file.image()
                continue
            snapshot = resp.get("snapshot")
            if snapshot is not None:
                # We are behind the controller's snapshot: replace our image and copy with it.
                self.log({"event": "metadata_snapshot_installed", "end_offset": snapshot["end_offset"]})
                self.metadata_file.install_snapshot(snapshot["image"], int(snapshot["end_offset"]))
                self.image = MetadataImage.from_snapshot(snapshot["image"])
                if self.broker_epoch >= 0 and self.image.offset >= self.broker_epoch:
                    self.caught_up = True
                    self.apply_metadata(set(self.image.partitions))
                continue
            records = resp.get("records") or []
            if len(self.metadata_file.records) > METADATA_COPY_MAX:
                self.metadata_file.compact()  # keep the durable copy bounded
            if records:
                self.metadata_file.append([r for _, r in records], fsync=True)
                touched = set()
                for offset, record in records:
                    self.image.apply(offset, record)
                    if record["type"] == "partition":
                        touched.add((record["topic"], record["partition"]))
                    elif record["type"] in ("topic", "broker_change", "register_broker"):
                        touched.update(self.image.partitions)  # min ISR or eligibility may change
                if self.broker_epoch >= 0 and self.image.offset >= self.broker_epoch:
                    if not self.caught_up:
                        self.caught_up = True
                        touched.update(self.image.partitions)
                    self.apply_metadata(touched)
            elif self.broker_epoch >= 0 and self.image.offset >= self.broker_epoch and not self.caught_up:
                self.caught_up = True
                self.apply_metadata(set(self.image.partitions))

    def apply_metadata(self, keys: set[tuple[str, int]]) -> None:
        """Act on materialized partition state (002 2.3.2): create replicas, change roles."""
        now = now_ms()
        for key in sorted(keys):
            p = self.image.partitions.get(key)
            if p is None or self.node_id not in p.replicas:
                if key in self.replicas or self.logs.get(*key) is not None:
                    self.delete_replica(key, "not a replica any more" if p is not None else "partition gone")
                continue
            topic = self.image.topics.get(p.topic)
            min_isr = topic.min_isr if topic else 1
            r = self.replicas.get(key)
            if r is None:
                log = self.logs.get_or_create(*key)
                r = self.replicas[key] = Replica(self.node_id, key[0], key[1], log,
                                                 self.checkpointed_hwm.get(key, 0), min_isr,
                                                 self.replica_config, event_log=self.events)
            r.min_isr = min_isr
            old_role, old_epoch = r.role, r.leader_epoch
            r.apply_partition_state(p, now)
            if old_role == LEADER and (r.role != LEADER
                                       or (r.leader_epoch != old_epoch and key[0] in COORDINATOR_TOPICS)):
                # Waiting produces fail only when this broker stops leading (Kafka's DelayedProduce answers
                # NOT_LEADER_OR_FOLLOWER only then). A broker elected again in a new epoch keeps its log, and
                # its waiting produces are answered when the HWM passes them or the ISR falls below min ISR
                # (_hwm_may_have_moved, below). Failing them as NOT_LEADER_OR_FOLLOWER was wrong: librdkafka
                # re-sends a batch answered so even with retries=0, and the first copy commits as well.
                # A coordinator partition's new epoch is a new coordinator epoch: the coordinator reloads
                # from the log, so the old epoch's writes are answered as another coordinator's
                # (NOT_COORDINATOR), as Kafka's coordinators answer them.
                self._fail_produces(key, rpc.NOT_LEADER_OR_FOLLOWER)
            if (r.role == FOLLOWER and r.leader_epoch != old_epoch and key in self.fetchers
                    and "no-epoch-fencing" not in self.variants):
                # A fetch in flight to the old leader (perhaps paused or cut off) would hold
                # this partition's replication for up to its timeout: start over at once. (The
                # `no-epoch-fencing` variant lets it finish and applies what the old leader sends.)
                self.fetchers.pop(key).cancel()
            if r.role == FOLLOWER and key not in self.fetchers:
                self.fetchers[key] = asyncio.create_task(self.follower_loop(key))
            if key[0] == OFFSETS_TOPIC:
                self._group_partition_changed(r, old_role, old_epoch)
            if key[0] == TXN_STATE_TOPIC:
                self.txn.partition_changed(r, old_role, old_epoch)
            self._hwm_may_have_moved(r)
            self.signal_change(key, wake_followers=True)  # waiting follower polls see the new role

    def delete_replica(self, key: tuple[str, int], reason: str) -> None:
        """This broker was removed from the partition (a completed or cancelled reassignment,
        PROTOCOL.md 7): stop following, fail waiting produces, delete the log and forget its
        HWM. A later re-add starts from a fresh empty log and catches up from the leader."""
        r = self.replicas.pop(key, None)
        if key[0] == OFFSETS_TOPIC:
            self.deliver(self.groups.unload(key[1]))
        fetcher = self.fetchers.pop(key, None)
        if fetcher is not None:
            fetcher.cancel()
        self._fail_produces(key, rpc.NOT_LEADER_OR_FOLLOWER)
        self.signal_change(key, wake_followers=True)  # long polls on it answer at once
        leo = r.leo if r is not None else None
        existed = self.logs.delete(*key)
        self.checkpointed_hwm.pop(key, None)
        # Rewrite the checkpoint without it; keep what was read at start-up for partitions whose
        # replicas are not created yet (this may run while the first metadata is applied).
        self.logs.write_hwm_checkpoint({**self.checkpointed_hwm, **{k: r.hwm for k, r in self.replicas.items()}})
        self.log({"event": "replica_deleted", "topic": key[0], "partition": key[1], "reason": reason,
                  "leo": leo, "log_deleted": existed})

    # --- replication: followers pull (002 2.2) ------------------------------------------------
    def peer(self, broker_id: int) -> rpc.RpcClient | None:
        b = self.image.brokers.get(broker_id)
        if b is None:
            return None
        c = self.peers.get(broker_id)
        if c is None or (c.host, c.port) != (b.host, b.port):
            c = self.peers[broker_id] = rpc.RpcClient(b.host, b.port, secret=self.secret)
        return c

    async def follower_loop(self, key: tuple[str, int]) -> None:
        wait_ms = self.args.replica_fetch_wait_max_ms
        while not self.stopping:
            r = self.replicas.get(key)
            if r is None:
                return  # deleted (delete_replica also cancels this task)
            if r.role != FOLLOWER or r.leader == NO_LEADER or self.broker_epoch < 0:
                self.fetchers.pop(key, None)
                return
            client = self.peer(r.leader)
            if client is None:
                await asyncio.sleep(0.1)
                continue
            req = r.fetch_request(self.broker_epoch, self.args.replica_fetch_max_bytes)
            req["max_wait_ms"] = wait_ms
            try:
                resp = await client.call("replica_fetch", req, timeout=wait_ms / 1000 + 3.0)
            except rpc.RpcError:
                await asyncio.sleep(0.2)
                continue
            if self.replicas.get(key) is not r:
                return  # deleted or re-created while the fetch was out: its log may be closed
            try:
                err = r.on_fetch_response(req, resp)
            except NonContiguousAppendError as e:
                self.log({"event": "fetch_append_rejected", "topic": key[0], "partition": key[1], "error": str(e)})
                err = rpc.UNKNOWN_SERVER_ERROR
            if err != rpc.NONE:
                await asyncio.sleep(0.1)

    async def replica_fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        await hostenv.buggify_delay("fetch-answered-late", hostenv.FETCH_LATE_S)
        key = (body["topic"], int(body["partition"]))
        r = self.replicas.get(key)
        if r is None:
            return {"error": rpc.NOT_LEADER_OR_FOLLOWER}
        immediate = r.record_follower_fetch(body, now_ms())
        if immediate is not None:
            return immediate
        self._hwm_may_have_moved(r)
        # An ISR expansion is decided here, on the follower's own fetch, never on the housekeeping
        # tick (PROTOCOL.md 4 Expand; replica.py wanted_isr_change).
        self._maybe_alter_isr(r, fetched_by=int(body["replica_id"]))
        offset = int(body["fetch_offset"])
        if offset >= r.leo:  # long poll: wait for new data (002 2.2)
            ev = self.append_event(key)
            wait_s = min(int(body.get("max_wait_ms", 100)), 5000) / 1000
            try:
                await asyncio.wait_for(ev.wait(), wait_s)
            except TimeoutError:
                pass
            r = self.replicas.get(key)
            if r is None:
                return {"error": rpc.NOT_LEADER_OR_FOLLOWER}
            err = r.check_fetch_epoch(int(body["current_leader_epoch"]))  # the epoch may have moved
            if err != rpc.NONE:
                return {"error": err, "high_watermark": -1}
        return r.read_for_follower(offset, int(body.get("max_bytes", MAX_FETCH_BYTES)))

    # --- ISR changes (002 2.9.2) ----------------------------------------------------------------
    def _maybe_alter_isr(self, r: Replica, fetched_by: int | None = None) -> None:
        """Ask for an ISR change: the lag shrink on any call, an expansion only for `fetched_by`,
        the follower whose fetch was just recorded."""
        if self.broker_epoch < 0 or r.key in self.alter_tasks:
            return
        body = r.wanted_isr_change(now_ms(), self.image.brokers, fetched_by=fetched_by)
        if body is None:
            return
        body.update({"broker_id": self.node_id, "broker_epoch": self.broker_epoch})
        self.alter_tasks[r.key] = asyncio.create_task(self._send_alter(r, body))

    async def _send_alter(self, r: Replica, body: dict[str, Any]) -> None:
        try:
            resp = await self.controller.call("alter_partition", body, timeout=3.0)
        except rpc.RpcError as e:
            resp = {"error": rpc.REQUEST_TIMED_OUT, "message": str(e)}
        finally:
            self.alter_tasks.pop(r.key, None)
        if self.replicas.get(r.key) is r:
            r.on_alter_partition_response(resp)
            self._hwm_may_have_moved(r)

    async def housekeeping(self) -> None:
        last_checkpoint = 0.0
        while not self.stopping:
            await asyncio.sleep(HOUSEKEEPING_S)
            for r in list(self.replicas.values()):
                if r.role == LEADER:
                    self._maybe_alter_isr(r)  # the lag shrink only: expansions wait for a fetch
                    if r.maybe_advance_hwm():
                        self._hwm_may_have_moved(r)
            self.deliver(self.groups.tick(now_ms()))
            self.txn.tick()
            self.logs.maybe_flush_all(now_ms())
            self.events.flush()
            if hostenv.monotonic_s() - last_checkpoint >= self.args.hwm_checkpoint_interval_ms / 1000:
                last_checkpoint = hostenv.monotonic_s()
                self.write_hwm_checkpoint()

    def write_hwm_checkpoint(self) -> None:
        if self.replicas:
            self.logs.write_hwm_checkpoint({k: r.hwm for k, r in self.replicas.items()})
            # What a restart would start from: each replica's role, HWM and LEO (the trace's hwm-above-leo).
            self.events({"event": "hwm_checkpointed", "replicas": [
                [t, p, r.role, r.hwm, r.leo] for (t, p), r in sorted(self.replicas.items())]})

    # --- internal RPC and admin ------------------------------------------------------------------
    async def dispatch_rpc(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        if api == "replica_fetch":
            return await self.replica_fetch(body)
        if api == "write_txn_markers":
            return await self.txn.write_marker(body)
        if api == "verify_txn":
            return self.txn.verify(body)
        if api == "dump_state":
            return {"error": rpc.NONE, "state": self.dump(bool(body.get("include_log", True)))}
        if api == "get_replica_log_info":
            r = self.replicas.get((body["topic"], int(body["partition"])))
            if r is None:
                return {"error": rpc.UNKNOWN_TOPIC_OR_PARTITION}
            return {"error": rpc.NONE, "last_epoch": r.log.last_epoch, "log_end_offset": r.leo,
                    "broker_epoch": self.broker_epoch}
        return {"error": rpc.INVALID_REQUEST, "message": f"unknown api {api!r}"}

    def dump(self, include_log: bool) -> dict[str, Any]:
        return {"node_id": self.node_id, "role": "broker", "broker_epoch": self.broker_epoch, "fenced": self.fenced,
                "metadata_offset": self.image.offset, "time_ms": int(hostenv.wall_s() * 1000),
                "variants": sorted(self.variants), "flush_policy": self.args.flush_policy,
                "partitions": [r.dump(include_log) for _, r in sorted(self.replicas.items())],
                "group_coordinator": self.groups.dump(), "txn_coordinator": self.txn.dump()}

    # --- connections: listener.py -------------------------------------------------------------------
    def listener(self) -> Listener:
        return Listener(Limits.from_args(self.args), self.secret, self.log, self.dispatch_rpc,
                        kafka_decode=kafka_api.decode_request,
                        kafka_respond=lambda request: kafka_api.respond(self, request))

    # --- lifecycle ----------------------------------------------------------------------------------
    async def run(self) -> int:
        server, stop = await start_serving(self.listener(), self.listen_host, self.listen_port, self.log)
        self.log({"event": "broker_started", "listen": self.args.listen, "variants": sorted(self.variants),
                  "flush_policy": self.args.flush_policy, "previous_broker_epoch": self.previous_broker_epoch})
        await self.register()
        tasks = [asyncio.create_task(c) for c in (self.heartbeat_loop(), self.metadata_loop(), self.housekeeping())]
        await stop.wait()
        await self.controlled_shutdown(tasks)
        server.close()
        return 0

    async def controlled_shutdown(self, tasks: list[asyncio.Task]) -> None:
        """002 / PROTOCOL.md 5.5: move leaderships away, then flush, then write the marker."""
        self.want_shutdown = True
        self.log({"event": "controlled_shutdown_started"})
        try:
            await asyncio.wait_for(self.should_shutdown.wait(), 10.0)
        except TimeoutError:
            self.log({"event": "controlled_shutdown_timeout", "note": "controller did not confirm; shutting down"})
        # Stop every loop before the files they write are closed; never wait on one forever.
        self.stopping = True
        running = tasks + list(self.fetchers.values()) + list(self.alter_tasks.values())
        for t in running:
            t.cancel()
        if running:
            _, stuck = await asyncio.wait(running, timeout=3.0)
            if stuck:
                self.log({"event": "shutdown_tasks_stuck", "count": len(stuck)})
        self.logs.flush_all()
        self.write_hwm_checkpoint()
        if self.broker_epoch >= 0:
            self.logs.write_clean_shutdown(self.broker_epoch)
        self.logs.close_all()
        self.metadata_file.close()
        self.log({"event": "controlled_shutdown_done", "broker_epoch": self.broker_epoch})
        self.events.flush()


def run_broker(args: Any) -> int:
    def check() -> None:
        if args.replica_lag_time_max_ms <= 0 or args.heartbeat_interval_ms <= 0 or args.replica_fetch_wait_max_ms < 0:
            raise ValueError("timeouts must be positive milliseconds; fix --replica-lag-time-max-ms, "
                             "--heartbeat-interval-ms or --replica-fetch-wait-max-ms")
        for a in (args.listen, args.advertise or args.listen):
            _hostport(a)
        controller_addresses(args.controller)
        parse_flush_policy(args.flush_policy)

    return serve("broker", args, check, lambda secret: Broker(args, secret))
