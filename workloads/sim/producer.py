"""The simulated producer: acks=all produce with kafka-python's retry rules, the idempotent producer (KIP-98:
InitProducerId, per-partition sequences) and the transactional one (a coordinator found with FindCoordinator
key type 1, AddPartitionsToTxn, AddOffsetsToTxn + TxnOffsetCommit, EndTxn).

One record per produce request (the real workloads send with linger_ms=0 and wait for each send), and the
records of one partition go out one at a time in order, so a retry keeps its sequence. The decisions follow
kafka-python's sender (kafka/producer/sender.py):

- A partition with no known leader gets no request: the record waits for one (the metadata refreshed) and
  expires at the delivery timeout (KafkaTimeoutError, an outcome the queue workload takes as info).
- Sequences (idempotent): a record takes its partition's next sequence when it is first sent (not when it
  waits for a leader) and keeps it through its retries; a record that failed leaves its sequence used.
- `can_retry`: a failed attempt is sent again only if its error is retriable, the attempts so far are fewer
  than `retries`, the delivery timeout has not passed, and (idempotent) the producer id and epoch are the ones
  the batch was built with (a retry under another id would break idempotence).
- DUPLICATE_SEQUENCE_NUMBER is a success (the broker has the batch from an earlier attempt).
- A batch that fails for good (`failure_class`, kafka-python's TransactionManager.classify_batch_error):
  PRODUCER_FENCED, INVALID_TXN_STATE and the authorization errors make the producer fatal; a sequence or epoch
  error (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH) gives the idempotent producer
  a new id and epoch, its sequences from 0 (kafka-python bumps the epoch, KIP-360: here a new InitProducerId),
  and makes a transaction abortable (kafka-python bumps its epoch too; the simulator aborts, as the Java
  client does); a retriable error that ran out of retries or time changes nothing: the send fails and the
  transaction goes on, and its commit commits without the record (docs/FINDINGS.md kafka-python 2: the library's
  own departure from the Java client's contract, which the txn checker then attributes to the client's
  send-error event); any other error makes a transaction abortable and an idempotent producer fatal.
- `flush` waits for the sends and, as kafka-python's, raises none of their failures (each send's own result
  carries it).
- The transaction coordinator's requests (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) are
  retried until answered, as kafka-python's TransactionManager re-enqueues them (the workload bounds each call);
  a partition's first record waits for its AddPartitionsToTxn and expires if that outlasts its delivery timeout,
  and a commit waits for every add still under way before its EndTxn. A transaction that added nothing ends
  without a request (kafka-python completes it locally).
"""

from __future__ import annotations

import asyncio
from typing import Any

import kafka.errors as Errors
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
)
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkaesque_harness.workloads.sim.client import RETRY_BACKOFF_S, STALE_METADATA_ERRORS, ClusterClient
from kafkaesque_harness.workloads.sim.wire import CONNECTION_ERRORS, error_for

DELIVERY_TIMEOUT_S = 4.0  # delivery_timeout_ms=4000 of the real queue producer
TXN_KEY_TYPE = 1
NO_PRODUCER = (-1, -1)

# The producer's states (kafka-python's TransactionManager, reduced to what the workloads reach)
READY, IN_TRANSACTION, ABORTABLE, FATAL = "ready", "in-transaction", "abortable-error", "fatal-error"

# A transaction coordinator's answers that end the producer (workloads/kafka_python.py FATAL_KAFKA_PYTHON_ERRORS)
FATAL_ERRORS = (Errors.ProducerFencedError, Errors.InvalidProducerEpochError, Errors.TransactionalIdAuthorizationFailedError,
                Errors.UnsupportedVersionError, Errors.InvalidTxnStateError, Errors.InvalidProducerIdMappingError)
# A failed batch's errors that end the producer, and those that bump its epoch (classify_batch_error's sets)
BATCH_FATAL_ERRORS = (Errors.ClusterAuthorizationFailedError, Errors.TransactionalIdAuthorizationFailedError,
                      Errors.ProducerFencedError, Errors.InvalidTxnStateError)
SEQUENCE_ERRORS = (Errors.OutOfOrderSequenceNumberError, Errors.UnknownProducerIdError,
                   Errors.InvalidProducerEpochError)


def can_retry(error: BaseException, attempts: int, retries: int, delivery_expired: bool,
              same_producer: bool) -> bool:
    """kafka-python's Sender._can_retry: whether a failed produce attempt is sent again."""
    if delivery_expired or attempts >= retries:
        return False
    if not getattr(error, "retriable", False):
        return False
    return same_producer


def failure_class(error: BaseException, transactional: bool) -> str:
    """What a batch that failed for good does to the producer (module docstring): "fatal" (unusable),
    "reset-producer-id" (a new id and epoch next time), "abortable" (the transaction must abort), or "none"."""
    if isinstance(error, BATCH_FATAL_ERRORS):
        return "fatal"
    if isinstance(error, SEQUENCE_ERRORS):
        return "abortable" if transactional else "reset-producer-id"
    if getattr(error, "retriable", False):
        return "none"
    return "abortable" if transactional else "fatal"


class Producer:
    """acks=all (or 1/0) producer of one process; idempotent when asked, transactional with a transactional id."""

    def __init__(self, cluster: ClusterClient, acks: int = -1, retries: int = 0, idempotent: bool = False,
                 transactional_id: str | None = None, txn_timeout_ms: int = 10000,
                 delivery_timeout_s: float = DELIVERY_TIMEOUT_S):
        self.cluster, self.acks = cluster, acks
        self.idempotent = idempotent or transactional_id is not None
        self.retries = retries if not self.idempotent else max(retries, 1)
        self.transactional_id, self.txn_timeout_ms = transactional_id, txn_timeout_ms
        self.delivery_timeout_s = delivery_timeout_s
        self.producer_id, self.producer_epoch = NO_PRODUCER
        self.sequences: dict[tuple[str, int], int] = {}
        self.state = READY
        self.last_error: BaseException | None = None
        self.txn_partitions: set[tuple[str, int]] = set()
        self.offsets_added = False  # the transaction holds the group's offsets (AddOffsetsToTxn answered)
        self.coordinator: int | None = None
        self._partition_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._adding: dict[tuple[str, int], asyncio.Task] = {}  # AddPartitionsToTxn under way, by partition
        self._in_flight: list[asyncio.Task] = []

    # --- producer id ---------------------------------------------------------------------------------------
    async def init_producer_id(self) -> None:
        """InitProducerId: an idempotent producer asks any broker; a transactional one its coordinator (which
        fences the id's earlier producer and aborts its open transaction). Retries retriable answers until the
        delivery timeout, as kafka-python's init_transactions does until max_block_ms."""
        deadline = asyncio.get_running_loop().time() + self.delivery_timeout_s
        while True:
            try:
                if self.transactional_id is None:
                    await self.cluster.ensure_metadata(sorted(self.cluster.topics))
                    node = sorted(self.cluster.brokers)[self.cluster.rng.randrange(len(self.cluster.brokers))] \
                        if self.cluster.brokers else self.cluster.bootstrap[0]
                else:
                    node = await self._coordinator()
                answer = await self.cluster.send(node, InitProducerIdRequest, transactional_id=self.transactional_id,
                                                 transaction_timeout_ms=self.txn_timeout_ms)
                if answer.error_code != 0:
                    raise error_for(answer.error_code, "InitProducerId")
                self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
                self.sequences.clear()
                self.state = READY
                return
            except Errors.KafkaError as e:
                self._coordinator_error(e)
                if not e.retriable or asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _coordinator(self) -> int:
        if self.coordinator is None:
            self.coordinator = await self.cluster.find_coordinator(self.transactional_id, TXN_KEY_TYPE)
        return self.coordinator

    def _coordinator_error(self, e: BaseException) -> None:
        if isinstance(e, (Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError, *CONNECTION_ERRORS)):
            self.coordinator = None

    # --- sending -------------------------------------------------------------------------------------------
    async def send(self, topic: str, partition: int, value: bytes) -> int:
        """Produce one record; its offset. Raises the error of the last attempt (kafka-python's exception)."""
        if self.state == FATAL:
            raise self.last_error or Errors.IllegalStateError("the producer failed fatally")
        if self.state == ABORTABLE:
            raise Errors.IllegalStateError(f"the transaction must be aborted: {self.last_error!r}")
        if self.idempotent and self.producer_id < 0:
            await self.init_producer_id()
        tp = (topic, partition)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.delivery_timeout_s  # the batch is created now
        timestamp_ms = int(loop.time() * 1000)  # kafka-python's send() stamps the record as it appends it
        lock = self._partition_locks.setdefault(tp, asyncio.Lock())
        async with lock:
            if self.transactional_id is not None and tp not in self.txn_partitions:
                await self._partition_added(tp, deadline)
            return await self._send_batch(tp, value, timestamp_ms, deadline)

    async def _partition_added(self, tp: tuple[str, int], deadline: float) -> None:
        """The partition in the transaction before its first record goes out (kafka-python sends no batch of a
        partition still pending in AddPartitionsToTxn). The add goes on past this record's delivery timeout,
        which expires the record; the commit waits for the add (`end`)."""
        task = self._adding.get(tp)
        if task is None:
            task = self._adding[tp] = asyncio.ensure_future(self.add_partitions([tp]))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            await asyncio.wait_for(asyncio.shield(task), max(0.0, deadline - asyncio.get_running_loop().time()))
        except TimeoutError:
            raise self._expired(tp, deadline) from None

    def _expired(self, tp: tuple[str, int], deadline: float) -> Errors.KafkaTimeoutError:
        """kafka-python's answer to a batch whose delivery timeout passed before it could be sent."""
        waited_ms = int((asyncio.get_running_loop().time() - deadline + self.delivery_timeout_s) * 1000)
        return Errors.KafkaTimeoutError(f"Expiring 1 record(s) for {tp[0]}-{tp[1]}: {waited_ms} ms has passed since "
                                        "batch creation")

    def send_soon(self, topic: str, partition: int, value: bytes) -> asyncio.Task:
        """send() as a task (the transaction's sends, awaited by flush); in order per partition."""
        task = asyncio.ensure_future(self.send(topic, partition, value))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: flush reports it
        self._in_flight.append(task)
        return task

    async def flush(self) -> None:
        """Wait for every send_soon(); their failures are theirs (kafka-python's flush raises none of them)."""
        tasks, self._in_flight = self._in_flight, []
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _send_batch(self, tp: tuple[str, int], value: bytes, timestamp_ms: int, deadline: float) -> int:
        loop = asyncio.get_running_loop()
        pid, epoch = self.producer_id, self.producer_epoch
        records: bytes | None = None
        attempts = 0
        while True:
            leader = await self._await_leader(tp, deadline)
            if records is None:
                if self.idempotent and self.producer_id < 0:
                    # reset while the record waited for a leader: kafka-python's sender drains nothing before it
                    # has a producer id again (Sender._maybe_wait_for_producer_id)
                    await self.init_producer_id()
                # kafka-python's RecordAccumulator.drain: the batch is stamped with the producer id, epoch and
                # sequence of that moment, together, and closed; it keeps all three and its bytes through its
                # retries (a retry resends the same buffer: the broker tells a retry from other records by its
                # CRC, checkers/trace.py sequence-reused). The partition's next batch takes the next sequence,
                # whatever this one comes to (a failed batch leaves a gap the broker answers
                # OUT_OF_ORDER_SEQUENCE_NUMBER to, never a reuse it would take for a duplicate).
                pid, epoch = self.producer_id, self.producer_epoch
                sequence = -1
                if self.idempotent:
                    sequence = self.sequences.get(tp, 0)
                    self.sequences[tp] = sequence + 1
                records = self._batch(value, timestamp_ms, pid, epoch, sequence)
            attempts += 1
            try:
                offset = await self._produce_once(tp, leader, records, deadline)
            except Errors.KafkaError as e:
                if isinstance(e, STALE_METADATA_ERRORS):
                    self.cluster.request_update()
                if can_retry(e, attempts, self.retries + 1, loop.time() >= deadline,
                             (pid, epoch) == (self.producer_id, self.producer_epoch)):
                    await asyncio.sleep(RETRY_BACKOFF_S)
                    continue
                self._failed_for_good(e)
                raise
            return offset

    async def _await_leader(self, tp: tuple[str, int], deadline: float) -> int:
        """The partition's leader. kafka-python sends nothing to a partition with no known leader: the batch
        waits in its accumulator while the metadata is refreshed, and expires at its delivery timeout
        (KafkaTimeoutError "Expiring 1 record(s) ..."), an attempt it never made."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                leader, _ = await self.cluster.leader_for(*tp)
                return leader
            except (Errors.LeaderNotAvailableError, *CONNECTION_ERRORS):
                if loop.time() >= deadline:
                    raise self._expired(tp, deadline) from None
                await asyncio.sleep(RETRY_BACKOFF_S)

    def _batch(self, value: bytes, timestamp_ms: int, pid: int, epoch: int, sequence: int) -> bytes:
        """One record's batch as kafka-python closes it: built once, its bytes sent by every attempt."""
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20,
                                       transactional=self.transactional_id is not None,
                                       producer_id=pid if self.idempotent else -1,
                                       producer_epoch=epoch if self.idempotent else -1,
                                       base_sequence=sequence if self.idempotent else -1)
        builder.append(timestamp_ms, None, value)
        builder.close()
        return bytes(builder.buffer())

    async def _produce_once(self, tp: tuple[str, int], leader: int, records: bytes, deadline: float) -> int:
        loop = asyncio.get_running_loop()
        timeout_s = max(0.001, min(self.cluster.request_timeout_s, deadline - loop.time()))
        answer = await self.cluster.send(leader, ProduceRequest, timeout_s=timeout_s,
                                         transactional_id=self.transactional_id, acks=self.acks,
                                         timeout_ms=int(self.cluster.request_timeout_s * 1000),
                                         topic_data=[ProduceRequest.TopicProduceData(
                                             name=tp[0], partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(
                                                 index=tp[1], records=records)])])
        if answer is None:  # acks=0
            return -1
        p = answer.responses[0].partition_responses[0]
        if p.error_code == Errors.DuplicateSequenceNumberError.errno:
            return p.base_offset  # the broker has it from an earlier attempt: a success (sender.py)
        if p.error_code != 0:
            raise error_for(p.error_code, p.error_message or f"produce to {tp[0]}-{tp[1]}")
        return p.base_offset

    def _failed_for_good(self, e: BaseException) -> None:
        what = failure_class(e, self.transactional_id is not None)
        if what == "reset-producer-id":
            self.producer_id, self.producer_epoch = NO_PRODUCER
            self.sequences.clear()
        elif what == "fatal":
            self.state, self.last_error = FATAL, e
        elif what == "abortable" and self.state == IN_TRANSACTION:
            self.state, self.last_error = ABORTABLE, e

    # --- transactions --------------------------------------------------------------------------------------
    async def begin(self) -> None:
        if self.state == FATAL:
            raise self.last_error or Errors.IllegalStateError("the producer failed fatally")
        if self.state != READY:
            raise Errors.IllegalStateError(f"begin_transaction in state {self.state}")
        self.state = IN_TRANSACTION
        self._forget_adds()
        self.txn_partitions = set()
        self.offsets_added = False

    def _forget_adds(self) -> None:
        for task in self._adding.values():
            task.cancel()
        self._adding = {}

    async def _txn_request(self, request_class: Any, check: Any, **fields: Any) -> None:
        """A request to the transaction coordinator, retried on retriable errors (a moved coordinator is found
        again) until it is answered or the caller gives up: kafka-python's TransactionManager re-enqueues such
        requests with no deadline of its own (the workload bounds each call). A fatal answer makes the producer
        fatal."""
        while True:
            if self.cluster.closed:
                raise Errors.KafkaConnectionError("the producer was closed")
            try:
                node = await self._coordinator()
                answer = await self.cluster.send(node, request_class, **fields)
                code = check(answer)
                if code != 0:
                    raise error_for(code, request_class.__name__)
                return
            except Errors.KafkaError as e:
                self._coordinator_error(e)
                if isinstance(e, FATAL_ERRORS):
                    self.state, self.last_error = FATAL, e
                    raise
                if not e.retriable:
                    raise
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def add_partitions(self, partitions: list[tuple[str, int]]) -> None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        R = AddPartitionsToTxnRequest
        try:
            await self._txn_request(R, _first_partition_error, v3_and_below_transactional_id=self.transactional_id,
                                    v3_and_below_producer_id=self.producer_id,
                                    v3_and_below_producer_epoch=self.producer_epoch,
                                    v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                                         for t, ps in sorted(by_topic.items())])
        except Errors.KafkaError as e:
            if not isinstance(e, FATAL_ERRORS) and self.state == IN_TRANSACTION:
                self.state, self.last_error = ABORTABLE, e  # AddPartitionsToTxnHandler's abortable_error
            raise
        self.txn_partitions |= set(partitions)

    async def send_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], generation_id: int,
                           member_id: str) -> None:
        """AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group's coordinator."""
        await self._txn_request(AddOffsetsToTxnRequest, lambda a: a.error_code, transactional_id=self.transactional_id,
                                producer_id=self.producer_id, producer_epoch=self.producer_epoch, group_id=group_id)
        self.offsets_added = True
        R = TxnOffsetCommitRequest
        by_topic: dict[str, list] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_metadata=""))
        while True:  # retried as the coordinator requests are (_txn_request), at the group's coordinator
            if self.cluster.closed:
                raise Errors.KafkaConnectionError("the producer was closed")
            try:
                node = await self.cluster.find_coordinator(group_id, 0)
                answer = await self.cluster.send(node, R, transactional_id=self.transactional_id, group_id=group_id,
                                                 producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                                 generation_id=generation_id, member_id=member_id,
                                                 topics=[R.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                                                         for t, ps in by_topic.items()])
                codes = [p.error_code for t in answer.topics for p in t.partitions if p.error_code]
                if codes:
                    raise error_for(codes[0], "TxnOffsetCommit")
                return
            except Errors.KafkaError as e:
                if isinstance(e, FATAL_ERRORS):
                    self.state, self.last_error = FATAL, e
                    raise
                if not e.retriable:
                    if self.state == IN_TRANSACTION:
                        self.state, self.last_error = ABORTABLE, e
                    raise
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def end(self, commit: bool) -> None:
        """EndTxn(commit or abort) after flushing the transaction's sends. A transaction that added no
        partition sends nothing (kafka-python completes it locally)."""
        if self.state == FATAL:
            raise self.last_error or Errors.IllegalStateError("the producer failed fatally")
        if commit and self.state == ABORTABLE:
            raise Errors.IllegalStateError(f"cannot commit: the transaction must abort ({self.last_error!r})")
        await self.flush()
        # EndTxn goes after the transaction's AddPartitionsToTxn still being retried (kafka-python's request
        # priorities): a commit waits for them, however long the coordinator keeps answering
        # CONCURRENT_TRANSACTIONS (the workload bounds the wait)
        await asyncio.gather(*self._adding.values(), return_exceptions=True)
        if self.state == FATAL:  # a send of the transaction was fenced meanwhile
            raise self.last_error or Errors.IllegalStateError("the producer failed fatally")
        if commit and self.state == ABORTABLE:
            raise Errors.IllegalStateError(f"cannot commit: the transaction must abort ({self.last_error!r})")
        if self.txn_partitions or self.offsets_added:
            await self._txn_request(EndTxnRequest, lambda a: a.error_code, transactional_id=self.transactional_id,
                                    producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                    committed=commit)
        self.state = READY
        self._forget_adds()
        self.txn_partitions = set()
        self.offsets_added = False


def _first_partition_error(answer: Any) -> int:
    for t in answer.results_by_topic_v3_and_below:
        for p in t.results_by_partition:
            if p.partition_error_code:
                return p.partition_error_code
    return 0
