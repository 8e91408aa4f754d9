"""The txn workload's client, simulated: one logical process's txn, assign, subscribe, crash and final poll ops
with the outcome rules of workloads/txn.py (its docstring states them; TxnClient in workloads/txn_client.py
applies them to a blocking library: SimTxnClient applies the same rules to this asyncio one, with txn_client's
own helpers) and the kafka-python adapter's choices (workloads/kafka_python.py KafkaPythonTxnLibrary): a
transactional producer whose transactional.id is its worker slot's, a read_committed consumer of the group,
assigning keys or subscribing; its sends' own failures are `send-error` client events.

Not simulated: producer stalls (the stall-producer fault holds a real client's thread; workloads/stalls.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import kafka.errors as Errors

from kafkaesque_harness.history import FAIL, INFO, OK, Op, client_id
from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.kafka_python import _error_text as kafka_python_error_text
from kafkaesque_harness.workloads.sim.client import ClusterClient
from kafkaesque_harness.workloads.sim.consumer import Consumer
from kafkaesque_harness.workloads.sim.group import GroupMember
from kafkaesque_harness.workloads.sim.producer import FATAL, FATAL_ERRORS, Producer
from kafkaesque_harness.workloads.sim.queue import LIBRARY
from kafkaesque_harness.workloads.sim.wire import OpenConnection
from kafkaesque_harness.workloads.txn_client import (
    FINAL_READ_TIMEOUT_S,
    OP_TIMEOUT_S,
    POLL_TIMEOUT_S,
    WORKLOAD_ABORT,
    CrashedOnRebalance,
    LibraryJournal,
    OffsetTracker,
    _completion,
    _error_text,
    _fill_offsets,
    committed_completion,
    final_poll_completion,
    transactional_id,
)


class SimTxnLibrary:
    """What TxnClient needs of a library (workloads/txn_client.py TxnLibrary), on asyncio."""

    def __init__(self, open_connection: OpenConnection, bootstrap: str, rng: random.Random, topic: str,
                 partitions: int, txn_id: str, o: dict[str, Any], on_rebalance: Callable[[str, list[int]], None],
                 process: int | None):
        self.open_connection, self.bootstrap, self.rng = open_connection, bootstrap, rng
        self.topic, self.partitions, self.txn_id, self.o = topic, partitions, txn_id, o
        self.on_rebalance, self.client_id = on_rebalance, client_id(process)
        self.events = ClientEventLog(LIBRARY, asyncio.get_running_loop().time)
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.member: GroupMember | None = None
        self.subscribed = False
        self._producer_cluster: ClusterClient | None = None

    def _new_cluster(self) -> ClusterClient:
        return ClusterClient(self.open_connection, self.bootstrap, self.client_id, self.rng)

    async def ensure_producer(self) -> None:
        if self.producer is None:
            self._producer_cluster = self._new_cluster()
            p = Producer(self._producer_cluster, acks=-1, retries=5, transactional_id=self.txn_id,
                         txn_timeout_ms=self.o["txn_timeout_ms"],
                         delivery_timeout_s=min(4000, self.o["txn_timeout_ms"]) / 1000)
            self.producer = p
            try:
                await asyncio.wait_for(p.init_producer_id(), OP_TIMEOUT_S)
            except BaseException:
                self.discard_producer()  # never initialised: the next op starts a new one
                raise

    def producer_identity(self) -> dict[str, int] | None:
        p = self.producer
        return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch} if p is not None else None

    async def begin(self) -> None:
        await self.producer.begin()

    def send(self, key: int, value: int) -> Callable[[], int | None]:
        task = self.producer.send_soon(self.topic, key, str(value).encode())

        def failed(t: asyncio.Task) -> None:  # the library's own answer to a send it gave up on
            if not t.cancelled() and t.exception() is not None:
                self.events.add("send-error", topic=self.topic, key=key, value=value,
                                error=kafka_python_error_text(t.exception()))
        task.add_done_callback(failed)
        return lambda: task.result() if task.done() and not task.cancelled() and task.exception() is None else None

    async def flush(self) -> None:
        await asyncio.wait_for(self.producer.flush(), OP_TIMEOUT_S)

    async def send_offsets(self) -> bool:
        member = self.member
        if not self.subscribed or member is None or self.consumer is None or member.generation < 0:
            return False
        offsets = {(self.topic, p): self.consumer.position(p) for p in self.consumer.assignment
                   if self.consumer.position(p) is not None}
        if not offsets:
            return False
        await asyncio.wait_for(self.producer.send_offsets(self.o["group"], offsets, member.generation,
                                                          member.member_id), OP_TIMEOUT_S)
        return True

    async def commit(self) -> None:
        await asyncio.wait_for(self.producer.end(commit=True), OP_TIMEOUT_S)

    async def abort(self) -> None:
        await asyncio.wait_for(self.producer.end(commit=False), OP_TIMEOUT_S)

    def _consumer(self) -> Consumer:
        if self.consumer is None:
            cluster = self._new_cluster()
            self.consumer = Consumer(cluster, self.topic, self.events,
                                     read_committed=self.o["isolation"] == "read_committed")
            self.member = GroupMember(cluster, self.o["group"], self.topic, self.consumer, self.events,
                                      self.on_rebalance)
            self.consumer.assign(list(range(self.partitions)))
        return self.consumer

    async def poll(self) -> dict[str, list]:
        consumer = self._consumer()
        if self.subscribed:
            if not await self.member.ensure_active(POLL_TIMEOUT_S):
                return {}
        else:
            # kafka-python with a group id places a manually assigned partition at the group's committed
            # offset before the reset policy (Fetcher._update_fetch_positions)
            unplaced = [p for p in consumer.assignment if consumer.position(p) is None]
            if unplaced:
                try:
                    await self.member.place_committed(unplaced)
                except Errors.KafkaError as e:
                    self.member.handle_error(e)
                    return {}  # not placed yet: nothing is fetched (nor reset by the policy) until they are
        out: dict[str, list] = {}
        for p, records in sorted((await consumer.poll(POLL_TIMEOUT_S)).items()):
            out.setdefault(str(p), []).extend([o, int(v)] for o, v in records)
        return out

    async def assign(self, keys: list[int], seek: dict[int, int]) -> None:
        consumer = self._consumer()
        if self.subscribed:  # unsubscribe: the member leaves the group; the modes exclude each other
            await self.member.leave()
            self.member = GroupMember(consumer.cluster, self.o["group"], self.topic, consumer, self.events,
                                      self.on_rebalance)
            self.subscribed = False
        consumer.assign(keys)
        for k, offset in sorted(seek.items()):
            consumer.seek(k, offset)

    async def subscribe(self) -> None:
        consumer = self._consumer()
        if not self.subscribed:
            consumer.assign([])  # the group decides the assignment
            self.subscribed = True

    async def final_read(self, key: int, timeout_s: float) -> tuple[int, list] | None:
        loop = asyncio.get_running_loop()
        cluster = ClusterClient(self.open_connection, self.bootstrap, self.client_id, self.rng, request_timeout_s=5.0)
        c = Consumer(cluster, self.topic, ClientEventLog(LIBRARY, loop.time),
                     read_committed=self.o["isolation"] == "read_committed", max_records=5000)
        try:
            c.assign([key])
            c.seek_to_beginning()
            records: list[list[int]] = []
            deadline = loop.time() + timeout_s
            while loop.time() < deadline:
                for recs in (await c.poll(0.5)).values():
                    records.extend([o, int(v)] for o, v in recs)
                # read_committed stops at the LSO: reaching the HWM means no transaction is left open below it
                end = c.highwater.get(key)
                if end is not None and (c.position(key) or 0) >= end:
                    return end, [r for r in records if r[0] < end]
            return None
        finally:
            c.close()
            cluster.close()

    def take_events(self) -> list[dict[str, Any]]:
        return self.events.take()

    def commit_retriable(self, e: BaseException) -> bool:
        return False  # as kafka-python's adapter: the library retries inside its commit

    def is_fatal(self, e: BaseException) -> bool:
        return isinstance(e, (asyncio.TimeoutError, TimeoutError) + FATAL_ERRORS) or (
            self.producer is not None and self.producer.state == FATAL)

    def discard_producer(self) -> None:
        if self._producer_cluster is not None:
            self._producer_cluster.close()
        self.producer = self._producer_cluster = None

    def crash(self) -> None:
        if self.member is not None:
            self.member.stop()
        if self.consumer is not None:
            self.consumer.close()
            self.consumer.cluster.close()
        self.discard_producer()
        self.consumer = self.member = None
        self.subscribed = False

    async def close(self) -> None:
        if self.member is not None and self.subscribed:
            await self.member.leave()
        self.crash()


class SimTxnClient(LibraryJournal):
    """One logical process of the txn workload: TxnClient's rules (workloads/txn_client.py) on SimTxnLibrary."""

    def __init__(self, open_connection: OpenConnection, bootstrap: str, rng: random.Random, topic: str,
                 partitions: int, concurrency: int, options: dict[str, Any], tracker: OffsetTracker,
                 process: int | None = None):
        super().__init__()
        self.open_connection, self.bootstrap, self.rng = open_connection, bootstrap, rng
        self.topic, self.partitions, self.concurrency = topic, partitions, max(1, concurrency)
        self.o, self.tracker = options, tracker
        self.lib: SimTxnLibrary | None = None

    def _library(self, process: int) -> SimTxnLibrary:
        if self.lib is None:
            # per worker slot: the next process of this worker re-inits the same id, fencing this one
            self.lib = SimTxnLibrary(self.open_connection, self.bootstrap, self.rng, self.topic, self.partitions,
                                     transactional_id(process % self.concurrency), self.o, self._journal, process)
        return self.lib

    async def invoke(self, op: Op) -> Op:
        self._begin_op()
        if op.f == "txn":
            comp = await self._txn(op)
        elif op.f in ("assign", "subscribe"):
            comp = await self._reassign(op)
        elif op.f == "crash":
            self._drop_library()
            comp = _completion(op, INFO, None, error="crashed")
        elif op.f == "poll" and (op.extra or {}).get("final"):
            comp = await self._final_poll(op)
        else:
            raise ValueError(f"unknown txn workload op {op.f!r}")
        return self._finish_op(comp)

    async def _txn(self, op: Op) -> Op:
        micro = op.value
        done: list[list] = [list(m) for m in micro]
        offsets: list[tuple[int, int, int, Callable[[], int | None]]] = []
        abort = bool((op.extra or {}).get("abort"))
        sent = committing = False  # TxnClient._txn's: before either, an error is a definite fail
        try:
            lib = self._library(op.process)
            await lib.ensure_producer()
            await lib.begin()
            polled = False
            for i, m in enumerate(micro):
                if m[0] == "send":
                    _, k, v = m
                    sent = True
                    offsets.append((i, k, v, lib.send(k, v)))
                else:
                    done[i] = ["poll", await lib.poll()]
                    polled = True
                    self._crash_if_rebalanced()
            if polled and await lib.send_offsets():
                sent = True
            await lib.flush()
            _fill_offsets(done, offsets)
            if abort:
                await lib.abort()
                return _completion(op, FAIL, done, error=WORKLOAD_ABORT)
            committing = True
            await lib.commit()
        except CrashedOnRebalance:
            _fill_offsets(done, offsets)
            return self._crashed_on_rebalance(op, done)
        except Exception as e:  # noqa: BLE001 - every client error maps to fail or info
            _fill_offsets(done, offsets)
            return await self._after_error(op, done, sent and committing, e)
        _fill_offsets(done, offsets)
        return committed_completion(self.tracker, op, done)

    async def _after_error(self, op: Op, done: list[list], open_: bool, e: Exception) -> Op:
        """TxnClient._after_error's rule: info when the outcome is open (sends, then the commit called) unless
        the abort went through; fail otherwise."""
        lib = self.lib
        if lib is not None and lib.producer is None and not open_:
            return _completion(op, FAIL, done, error=_error_text(e))  # the producer never came up
        if lib is None or lib.is_fatal(e):
            if lib is not None:
                lib.discard_producer()  # fenced or dead: the next op inits a new producer on this id
            return _completion(op, INFO if open_ else FAIL, done, error=_error_text(e))
        try:
            await lib.abort()
        except Exception as abort_error:  # noqa: BLE001 - the abort did not go through: the outcome is open
            lib.discard_producer()
            return _completion(op, INFO if open_ else FAIL, done,
                               error=f"{_error_text(e)}; abort failed: {_error_text(abort_error)}"[:600])
        return _completion(op, FAIL, done, error=f"{_error_text(e)}; aborted"[:600])

    async def _reassign(self, op: Op) -> Op:
        try:
            lib = self._library(op.process)
            if op.f == "subscribe":
                await lib.subscribe()
            else:
                seek = {int(k): int(o) for k, o in ((op.extra or {}).get("unseen") or {}).items()}
                await lib.assign(list(op.value), seek)
        except Exception as e:  # noqa: BLE001 - a consumer's assignment changes nothing in the log
            return _completion(op, FAIL, op.value, error=_error_text(e))
        return _completion(op, OK, op.value)

    async def _final_poll(self, op: Op) -> Op:
        try:
            got = await self._library(op.process).final_read(int(op.extra["key"]), FINAL_READ_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a read changes nothing, but an unfinished one proves nothing
            return final_poll_completion(op, None, e)
        return final_poll_completion(op, got)

    def crash(self) -> None:
        self._drop_library()

    async def close(self) -> None:
        if self.lib is not None:
            await self.lib.close()
            self.lib = None

