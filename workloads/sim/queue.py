"""The queue workload's client, simulated: one logical process's send, poll, final-poll and crash ops with the
outcome rules of workloads/queue.py (its docstring states them; send_outcome and completion are its own) and the
kafka-python adapter's choices (workloads/kafka_python.py KafkaPythonQueueClient): a producer with retries off
(idempotent: on, 5), a consumer that assigns every partition from the beginning, or in subscribe mode joins the
group and commits what each poll read, synchronously.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import kafka.errors as Errors

from kafkaesque_harness.history import CLIENT_EVENTS, FAIL, INFO, OK, Op, client_id
from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.queue_client import (
    POLL_TIMEOUT_MS,
    SEND_TIMEOUT_S,
    completion,
    send_outcome,
)
from kafkaesque_harness.workloads.sim.client import ClusterClient
from kafkaesque_harness.workloads.sim.consumer import Consumer
from kafkaesque_harness.workloads.sim.group import CommitFailedError, GroupMember
from kafkaesque_harness.workloads.sim.producer import Producer
from kafkaesque_harness.workloads.sim.wire import OpenConnection

LIBRARY = "sim-kafka-python"  # history/clients.py: the simulator's client, on kafka-python's rules
FINAL_READ_TIMEOUT_S = 30.0


class SimQueueClient:
    """One logical process of the queue workload (workloads/queue.py's ops and outcomes)."""

    def __init__(self, open_connection: OpenConnection, bootstrap: str, rng: random.Random, topic: str,
                 partitions: int, acks: int = -1, idempotent: bool = False, group: str | None = None,
                 process: int | None = None):
        self.open_connection, self.bootstrap, self.rng = open_connection, bootstrap, rng
        self.topic, self.partitions, self.acks, self.idempotent, self.group = topic, partitions, acks, idempotent, group
        self.process = process
        self.client_id = client_id(process)
        self.events = ClientEventLog(LIBRARY, asyncio.get_running_loop().time)
        self.rebalances: list[dict[str, Any]] = []
        self.cluster: ClusterClient | None = None
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.member: GroupMember | None = None

    def _cluster(self) -> ClusterClient:
        if self.cluster is None:
            self.cluster = ClusterClient(self.open_connection, self.bootstrap, self.client_id, self.rng)
        return self.cluster

    def _producer(self) -> Producer:
        if self.producer is None:
            self.producer = Producer(self._cluster(), self.acks, retries=5 if self.idempotent else 0,
                                     idempotent=self.idempotent)
        return self.producer

    def _consumer(self) -> Consumer:
        if self.consumer is None:
            # a connection of its own, as kafka-python's consumer has its own KafkaClient
            cluster = ClusterClient(self.open_connection, self.bootstrap, self.client_id, self.rng)
            self.consumer = Consumer(cluster, self.topic, self.events)
            if self.group is not None:
                self.member = GroupMember(cluster, self.group, self.topic, self.consumer, self.events, self.journal)
            else:
                self.consumer.assign(list(range(self.partitions)))
                self.consumer.seek_to_beginning()
        return self.consumer

    def journal(self, kind: str, partitions: list[int]) -> None:
        """A rebalance (group.py calls back as kafka-python's listener does): rebalance_log and the event."""
        self.rebalances.append({"keys": sorted(partitions), "type": kind})
        self.events.add("rebalance", topic=self.topic, how=kind, keys=sorted(partitions))

    async def invoke(self, op: Op) -> Op:
        comp = await self._invoke(op)
        if self.rebalances:
            comp.extra = {**(comp.extra or {}), "rebalance_log": self.rebalances}
            self.rebalances = []
        events = self.events.take()
        if events:
            comp.extra = {**(comp.extra or {}), CLIENT_EVENTS: events}
        return comp

    async def _invoke(self, op: Op) -> Op:
        if op.f == "send":
            return await self._send(op)
        if op.f == "poll":
            return await self._poll(op)
        if op.f == "final-poll":
            return await final_poll(self.open_connection, self.bootstrap, self.rng, self.topic, op,
                                    FINAL_READ_TIMEOUT_S)
        if op.f == "crash":
            self.crash()
            return completion(op, INFO, None, error="crashed")
        raise ValueError(f"unknown queue op {op.f!r}")

    def outcome(self, error_name: str) -> str:
        """workloads/queue_client.py QueueClient.outcome: with retries on (idempotent), no error is definite."""
        return INFO if self.idempotent else send_outcome(error_name)

    async def _send(self, op: Op) -> Op:
        key, value = op.value
        try:
            # fut.get(timeout=SEND_TIMEOUT_S) of the real client: the wait gives up, the send may go on
            offset = await asyncio.wait_for(self._producer().send(self.topic, key, str(value).encode()),
                                            SEND_TIMEOUT_S)
            return completion(op, OK, [key, [offset, value]])
        except TimeoutError:
            return completion(op, INFO, [key, value], error=f"KafkaTimeoutError: Timeout after waiting for "
                                                            f"{SEND_TIMEOUT_S:g} secs.")
        except Exception as e:  # noqa: BLE001 - every client error maps to fail or info
            name = type(e).__name__
            return completion(op, self.outcome(name), [key, value], error=f"{name}: {e}"[:300])

    async def _poll(self, op: Op) -> Op:
        consumer = self._consumer()
        try:
            if self.member is not None and not await self.member.ensure_active(POLL_TIMEOUT_MS / 1000):
                return completion(op, OK, {})  # still joining: kafka-python's poll returns nothing
            batches = await consumer.poll(POLL_TIMEOUT_MS / 1000)
        except Exception as e:  # noqa: BLE001
            return completion(op, FAIL, None, error=f"{type(e).__name__}: {e}"[:300])
        out: dict[str, list] = {}
        for p, records in sorted(batches.items()):
            out.setdefault(str(p), []).extend([o, int(v)] for o, v in records)
        if self.member is None or not out:
            return completion(op, OK, out)
        committed = {k: recs[-1][0] + 1 for k, recs in out.items()}
        try:
            await self.member.commit({int(k): o for k, o in committed.items()})
        except (CommitFailedError, Errors.KafkaError) as e:
            return completion(op, OK, out, extra={"commit_error": f"{type(e).__name__}: {e}"[:300],
                                                   "commit_offsets": committed})
        return completion(op, OK, out, extra={"committed": committed})

    def crash(self) -> None:
        """Drop the clients without a clean shutdown: no commit, no leave-group; the group's session times out."""
        if self.member is not None:
            self.member.stop()
        self._drop()

    async def close(self) -> None:
        """A clean close: the group member leaves (kafka-python's consumer.close())."""
        if self.member is not None:
            await self.member.leave()
        self._drop()

    def _drop(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer.cluster.close()
        if self.cluster is not None:
            self.cluster.close()
        self.cluster = self.producer = self.consumer = self.member = None


async def final_poll(open_connection: OpenConnection, bootstrap: str, rng: random.Random, topic: str, op: Op,
                     timeout_s: float) -> Op:
    """Drain one partition from its start to the HWM seen now (workloads/kafka_python.py
    final_poll_kafka_python's rule); info when it cannot finish."""
    (key,) = op.value
    loop = asyncio.get_running_loop()
    cluster = ClusterClient(open_connection, bootstrap, client_id(op.process), rng, request_timeout_s=5.0)
    consumer = Consumer(cluster, topic, ClientEventLog(LIBRARY, loop.time), max_records=5000)
    deadline = loop.time() + timeout_s
    try:
        consumer.assign([key])
        hwm = (await asyncio.wait_for(consumer.end_offsets([key]), timeout_s))[key]
        consumer.seek_to_beginning()
        records: list[list[int]] = []
        while (consumer.position(key) or 0) < hwm or consumer.position(key) is None:
            if loop.time() > deadline:
                return completion(op, INFO, None, error=f"final read reached offset {consumer.position(key)} of {hwm}")
            for recs in (await consumer.poll(0.5)).values():
                records.extend([o, int(v)] for o, v in recs if o < hwm)
        return completion(op, OK, [key, hwm, records])
    except Exception as e:  # noqa: BLE001
        return completion(op, INFO, None, error=f"{type(e).__name__}: {e}"[:300])
    finally:
        consumer.close()
        cluster.close()
