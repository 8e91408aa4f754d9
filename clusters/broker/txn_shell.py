"""The asyncio shell around txn_coordinator.py, and the partition leader's side of transactions.

Coordinator side (this broker leads a __transaction_state partition): every transition the state
machine asks for is written to that partition with acks=all through the broker's normal produce
path and applied only once the HWM passed it, exactly as committed offsets are (server.py,
commit_offsets); a leader change of the partition unloads or reloads its transactions. A prepared
transaction's markers go to the leader of each of its partitions (internal RPC write_txn_markers;
Kafka's WriteTxnMarkers), retried until every one is written, then the Complete record is written.

Partition-leader side: write_marker appends a control batch (acks=all, so an acknowledged commit
cannot be lost with a leader change), after Kafka's producer-epoch and coordinator-epoch checks;
verify_produce is KIP-890 part 1 (a transactional batch may open a transaction at a partition only
if the producer's coordinator lists the partition in its ongoing transaction).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv, rpc
from kafkaesque_harness.clusters.broker.group_coordinator import OFFSETS_TOPIC
from kafkaesque_harness.clusters.broker.log import BatchHeader, build_batch, validate_batches
from kafkaesque_harness.clusters.broker.log.batch import build_control_batch
from kafkaesque_harness.clusters.broker.replica import LEADER, Replica
from kafkaesque_harness.clusters.broker.txn_coordinator import (
    TXN_STATE_TOPIC,
    MarkerJob,
    TransactionCoordinator,
    Transition,
    TxnConfig,
    txn_record,
)

WRITE_TIMEOUT_S = 5.0
MARKER_RETRY_S = 0.2


def _now_ms() -> int:
    return int(hostenv.wall_s() * 1000)


class TxnShell:
    def __init__(self, broker: Any):
        self.b = broker  # server.Broker
        self.coord = TransactionCoordinator(broker.next_producer_id,
                                            TxnConfig(variants=frozenset(getattr(broker, "variants", ()))),
                                            event_log=broker.events)
        self.loads: dict[tuple[str, int], asyncio.Task] = {}
        self.jobs: set[asyncio.Task] = set()  # record writes, marker writers and timeout aborts in flight

    # --- fail-over: a leader change of a __transaction_state partition -------------------------------
    def partition_changed(self, r: Replica, old_role: str, old_epoch: int) -> None:
        if r.role == LEADER and (old_role != LEADER or r.leader_epoch != old_epoch):
            self.coord.begin_loading(r.partition, r.leader_epoch)
            self.loads[r.key] = asyncio.create_task(self._load(r, r.leader_epoch))
        elif r.role != LEADER and old_role == LEADER:
            self.coord.unload(r.partition)

    async def _load(self, r: Replica, epoch: int) -> None:
        records = await self.b.read_to_hwm_as_leader(r, epoch)
        if records is None:
            return
        jobs = self.coord.load(r.partition, [(k, v) for _, k, v, *_ in records])
        self.b.events({"event": "txn_partition_loaded", "topic": TXN_STATE_TOPIC, "partition": r.partition,
                       "leader_epoch": epoch, "records": len(records), "prepared": len(jobs)})
        for job in jobs:  # decided before the fail-over: finish them
            self._spawn(self._complete(job))

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self.jobs.add(task)
        task.add_done_callback(self.jobs.discard)
        return task

    # --- FindCoordinator (key type 1) ------------------------------------------------------------------
    async def find_coordinator(self, txn_id: str) -> tuple[int, Any]:
        """The leader of the id's __transaction_state partition; the topic is created on first use as
        __consumer_offsets is (server.find_coordinator)."""
        return await self.b.internal_topic_leader(TXN_STATE_TOPIC, self.coord.config.txn_partitions,
                                                  self.coord.partition_for(txn_id))

    # --- writes of the state machine's transitions -----------------------------------------------------
    async def _write(self, t: Transition) -> tuple[int, MarkerJob | None]:
        """Write a transition's record as the coordinator's own task. The client request that asked for it
        may be cancelled (its connection closed: listener.Connection.shut) while the record is in flight;
        the write must still end in written() or write_failed(), or the transactional id stays pending
        for good: every later request answered CONCURRENT_TRANSACTIONS, never timed out, and the LSO of
        its partitions stuck (a real run's default broker showed it under late-txn-markers)."""
        return await asyncio.shield(self._spawn(self._write_record(t)))

    async def _write_record(self, t: Transition) -> tuple[int, MarkerJob | None]:
        key, value = txn_record(t.txn_id, t.new)
        raw = build_batch([value], keys=[key])
        err, _, _ = await self.b.produce(TXN_STATE_TOPIC, self.coord.partition_for(t.txn_id), raw,
                                         validate_batches(raw), -1, WRITE_TIMEOUT_S)
        if err != rpc.NONE:
            self.coord.write_failed(t)
            # Kafka's mapping (TransactionStateManager.appendTransactionToLog): lost leadership is
            # another coordinator; anything else, try again later.
            if err in (rpc.NOT_LEADER_OR_FOLLOWER, rpc.UNKNOWN_TOPIC_OR_PARTITION):
                return rpc.NOT_COORDINATOR, None
            return rpc.COORDINATOR_NOT_AVAILABLE, None
        job = self.coord.written(t)
        if job is not None:
            self._spawn(self._complete(job))
        return rpc.NONE, job

    async def _run(self, outcome: tuple[int, Transition | None]) -> int:
        err, t = outcome
        if t is None:
            return err
        write_err, _ = await self._write(t)
        return err if write_err == rpc.NONE else write_err

    # --- the producer's requests ---------------------------------------------------------------------------
    async def init_producer_id(self, txn_id: str, timeout_ms: int, pid: int, epoch: int) -> tuple[int, int, int]:
        err, t = self.coord.init_producer_id(txn_id, timeout_ms, pid, epoch, _now_ms())
        if t is None:
            return err, -1, -1
        write_err, _ = await self._write(t)
        if write_err != rpc.NONE:
            return write_err, -1, -1
        if err != rpc.NONE:
            return err, -1, -1  # an ongoing transaction is being aborted: the client retries
        return rpc.NONE, t.new.producer_id, t.new.producer_epoch

    async def add_partitions(self, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> int:
        return await self._run(self.coord.add_partitions(txn_id, pid, epoch, partitions, _now_ms()))

    async def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        return await self._run(self.coord.end_txn(txn_id, pid, epoch, commit, _now_ms()))

    def tick(self) -> None:
        for t in self.coord.expired(_now_ms()):
            self.b.events({"event": "txn_timed_out", "txn": t.txn_id, "producer_id": t.new.producer_id})
            self._spawn(self._write(t))

    # --- markers -----------------------------------------------------------------------------------------
    async def _complete(self, job: MarkerJob) -> None:
        """Write the markers at every partition (retrying: the outcome is decided and must reach all of
        them), then the Complete record, retried too while the write fails but the id is still ours
        (Kafka: TransactionMarkerChannelManager.tryAppendToLog re-queues an append that failed with
        COORDINATOR_NOT_AVAILABLE, i.e. a timeout or too few in-sync replicas). Dropped, the
        transaction would stay prepared until a fail-over: its producer's AddPartitionsToTxn and
        InitProducerId refused with CONCURRENT_TRANSACTIONS, its EndTxn(abort) with INVALID_TXN_STATE.
        Gives up if this broker stops coordinating the id: the new coordinator finds the transaction
        prepared and does the same."""
        left = set(job.partitions)
        while left and self.coord.owns(job) and not self.b.stopping:
            for topic, partition in sorted(left):
                if await self._send_marker(job, topic, partition) in (rpc.NONE, rpc.UNKNOWN_TOPIC_OR_PARTITION):
                    left.discard((topic, partition))
            if left:
                await asyncio.sleep(MARKER_RETRY_S)
        if left:
            return
        while (t := self.coord.markers_done(job)) is not None:
            if (await self._write(t))[0] != rpc.COORDINATOR_NOT_AVAILABLE or self.b.stopping:
                return
            await asyncio.sleep(MARKER_RETRY_S)

    async def _send_marker(self, job: MarkerJob, topic: str, partition: int) -> int:
        body = {"topic": topic, "partition": partition, "producer_id": job.producer_id,
                "producer_epoch": job.producer_epoch, "commit": job.commit,
                "coordinator_epoch": job.coordinator_epoch}
        p = self.b.image.partitions.get((topic, partition))
        if p is None:
            return rpc.UNKNOWN_TOPIC_OR_PARTITION
        if p.leader == self.b.node_id:
            return (await self.write_marker(body))["error"]
        client = self.b.peer(p.leader)
        if client is None:
            return rpc.NOT_LEADER_OR_FOLLOWER
        try:
            return int((await client.call("write_txn_markers", body, timeout=WRITE_TIMEOUT_S + 1))["error"])
        except rpc.RpcError:
            return rpc.REQUEST_TIMED_OUT

    # --- partition-leader side ---------------------------------------------------------------------------
    async def write_marker(self, body: dict[str, Any]) -> dict[str, Any]:
        """Append one marker (Kafka's WriteTxnMarkers at a partition leader), acks=all."""
        key = (body["topic"], int(body["partition"]))
        r = self.b.replicas.get(key)
        if r is None or r.role != LEADER:
            return {"error": rpc.NOT_LEADER_OR_FOLLOWER}
        pid, epoch = int(body["producer_id"]), int(body["producer_epoch"])
        err = r.producers.check_marker(pid, epoch, int(body["coordinator_epoch"]))
        if err == rpc.INVALID_PRODUCER_EPOCH:
            # A marker older than the producer's epoch here belongs to a transaction already ended
            # at this partition by a later (fencing) marker: nothing to write (Kafka answers the
            # same error and the coordinator drops it).
            return {"error": rpc.NONE}
        if err != rpc.NONE:
            return {"error": err}
        commit, coordinator_epoch = bool(body["commit"]), int(body["coordinator_epoch"])
        raw = build_control_batch(pid, epoch, commit, coordinator_epoch, _now_ms())
        err, offset, _ = await self.b.produce(key[0], key[1], raw, validate_batches(raw), -1, WRITE_TIMEOUT_S)
        if err != rpc.NONE:
            return {"error": err}
        # Committed (acks=all): every later leader of a clean epoch has it at this offset, and with it the
        # producer epoch below which this partition refuses the producer (the trace's produce-after-fence).
        self.b.events({"event": "txn_marker_written", "topic": key[0], "partition": key[1],
                       "leader_epoch": r.leader_epoch, "producer_id": pid, "producer_epoch": epoch,
                       "coordinator_epoch": coordinator_epoch, "result": "commit" if commit else "abort",
                       "offset": offset})
        if key[0] == OFFSETS_TOPIC:
            # the transaction's offsets (TxnOffsetCommit) become visible, or are dropped
            self.b.groups.end_txn(key[1], pid, commit)
        return {"error": err}

    async def verify_produce(self, txn_id: str | None, topic: str, partition: int, headers: list[BatchHeader]) -> int:
        """KIP-890 part 1 at the partition leader: NONE unless a batch would open a transaction here that
        the producer's coordinator does not know of (INVALID_TXN_STATE, as Kafka answers)."""
        r = self.b.replicas.get((topic, partition))
        h = next((h for h in headers if r is not None and r.producers.needs_verification(h)), None)
        if h is None:
            return rpc.NONE
        if not txn_id:
            return rpc.INVALID_TXN_STATE
        body = {"txn_id": txn_id, "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                "topic": topic, "partition": partition}
        err, b = await self.find_coordinator(txn_id)
        if err != rpc.NONE:
            return err
        if b.broker_id == self.b.node_id:
            return self.verify(body)["error"]
        client = self.b.peer(b.broker_id)
        if client is None:
            return rpc.COORDINATOR_NOT_AVAILABLE
        try:
            return int((await client.call("verify_txn", body, timeout=WRITE_TIMEOUT_S))["error"])
        except rpc.RpcError:
            return rpc.REQUEST_TIMED_OUT

    def verify(self, body: dict[str, Any]) -> dict[str, Any]:
        """Coordinator side of the verification (Kafka: AddPartitionsToTxn v4 with verify_only)."""
        return {"error": self.coord.verify(body["txn_id"], int(body["producer_id"]), int(body["producer_epoch"]),
                                           (body["topic"], int(body["partition"])))}

    def dump(self) -> dict[str, Any]:
        return {"partitions": {str(p): list(s) for p, s in sorted(self.coord.partitions.items())},
                "transactions": [{"txn": t, "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                                  "state": s.state, "partitions": sorted(s.partitions)}
                                 for t, s in sorted(self.coord.txns.items())]}
