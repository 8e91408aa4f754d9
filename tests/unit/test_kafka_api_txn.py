"""The transaction wire handlers (kafka_api.py) and their shell (txn_shell.py): requests encoded by
kafka-python, responses decoded by kafka-python, with the real transaction coordinator and TxnShell behind
a stub of the broker whose produce path acknowledges at once (the real replication path is exercised by
tests/integration/test_transactions.py)."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.producer import transaction as txn_api

from kafkaesque_harness.clusters.broker import kafka_api, rpc
from kafkaesque_harness.clusters.broker.group_coordinator import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    GroupCoordinator,
)
from kafkaesque_harness.clusters.broker.log import build_batch
from kafkaesque_harness.clusters.broker.metadata import MetadataImage
from kafkaesque_harness.clusters.broker.txn_coordinator import (
    COMPLETE_COMMIT,
    PREPARE_COMMIT,
    TXN_STATE_TOPIC,
)
from kafkaesque_harness.clusters.broker.txn_shell import TxnShell

T = "tx-1"


class TxnStubBroker:
    node_id = 2
    stopping = False

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.replicas: dict = {}
        self.written: list[tuple[str, int]] = []
        self.groups = GroupCoordinator(CoordinatorConfig(offsets_partitions=3))
        self.ids = iter(range(500, 600))
        self.txn = TxnShell(self)
        for p in range(self.txn.coord.config.txn_partitions):
            self.txn.coord.begin_loading(p, 1)
            self.txn.coord.load(p, [])
        self.reads: list[bool] = []

    def next_producer_id(self) -> int:
        return next(self.ids)

    def events(self, event) -> None:
        pass

    async def produce(self, topic, partition, raw, headers, acks, timeout_s):
        self.written.append((topic, partition))
        return rpc.NONE, len(self.written), 0

    async def internal_topic_leader(self, topic, partitions, partition):
        return rpc.NONE, SimpleNamespace(broker_id=3, host="h3", port=9093)

    def change_event(self, topic, partition):
        return asyncio.Event()

    def answered(self, event) -> None:
        pass

    def consumer_read(self, topic, partition, offset, current_leader_epoch, max_bytes, read_committed=False,
                      last_fetched_epoch=-1):
        self.reads.append(read_committed)
        return {"error": rpc.NONE, "hwm": 9, "log_start": 0, "lso": 4, "aborted": [(77, 1)] if read_committed else None,
                "records": build_batch([b"a"], base_offset=0)}


async def call(broker: Any, req: Any, resp_cls: Any, version: int) -> Any:
    req.with_header(correlation_id=1, client_id="test")
    out = await kafka_api.handle_kafka_request(broker, bytes(req.encode(header=True)))
    (size,) = struct.unpack_from(">i", out)
    assert size == len(out) - 4
    return resp_cls[version].decode(out[4:], header=True)


def init_req(version: int = 4, pid: int = -1, epoch: int = -1) -> Any:
    return InitProducerIdRequest(version=version, transactional_id=T, transaction_timeout_ms=60_000,
                                 producer_id=pid, producer_epoch=epoch)


def add_req(pid: int, epoch: int, version: int = 3) -> Any:
    R = txn_api.AddPartitionsToTxnRequest
    return R(version=version, v3_and_below_transactional_id=T, v3_and_below_producer_id=pid,
             v3_and_below_producer_epoch=epoch, v3_and_below_topics=[R.AddPartitionsToTxnTopic(name="t", partitions=[0, 1])])


def test_find_coordinator_of_a_transactional_id_is_the_txn_shells():
    async def go():
        return await call(TxnStubBroker(), FindCoordinatorRequest(version=2, key=T, key_type=1), FindCoordinatorResponse, 2)
    r = asyncio.run(go())
    assert (r.error_code, r.node_id, r.port) == (rpc.NONE, 3, 9093)


def test_a_whole_transaction_on_the_wire():
    b = TxnStubBroker()

    async def go():
        r = await call(b, init_req(), InitProducerIdResponse, 4)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (rpc.NONE, 500, 0)
        a = await call(b, add_req(500, 0), txn_api.AddPartitionsToTxnResponse, 3)
        [topic] = a.results_by_topic_v3_and_below
        assert [(x.partition_index, x.partition_error_code) for x in topic.results_by_partition] == [(0, 0), (1, 0)]
        o = await call(b, txn_api.AddOffsetsToTxnRequest(version=3, transactional_id=T, producer_id=500, producer_epoch=0,
                                                  group_id="g"), txn_api.AddOffsetsToTxnResponse, 3)
        assert o.error_code == rpc.NONE
        assert (OFFSETS_TOPIC, b.groups.partition_for("g")) in b.txn.coord.txns[T].partitions
        e = await call(b, txn_api.EndTxnRequest(version=3, transactional_id=T, producer_id=500, producer_epoch=0,
                                        committed=True), txn_api.EndTxnResponse, 3)
        # answered once PrepareCommit is written; the markers' job (to partitions this stub does not know,
        # so done at once) may already have written Complete by the time this coroutine resumes
        assert e.error_code == rpc.NONE and b.txn.coord.txns[T].state in (PREPARE_COMMIT, COMPLETE_COMMIT)
        await asyncio.gather(*b.txn.jobs)  # the markers (to partitions this stub does not know) and Complete
        assert b.txn.coord.txns[T].state == COMPLETE_COMMIT
    asyncio.run(go())
    # every transition went through the produce path to the id's __transaction_state partition
    assert set(b.written) == {(TXN_STATE_TOPIC, b.txn.coord.partition_for(T))} and len(b.written) == 5


def test_a_fenced_producer_is_told_producer_fenced_or_for_old_versions_invalid_producer_epoch():
    b = TxnStubBroker()

    async def go():
        await call(b, init_req(), InitProducerIdResponse, 4)
        await call(b, init_req(), InitProducerIdResponse, 4)  # a second producer: epoch 1
        new = await call(b, add_req(500, 0, version=3), txn_api.AddPartitionsToTxnResponse, 3)
        old = await call(b, add_req(500, 0, version=1), txn_api.AddPartitionsToTxnResponse, 1)
        end = await call(b, txn_api.EndTxnRequest(version=1, transactional_id=T, producer_id=500, producer_epoch=0,
                                          committed=True), txn_api.EndTxnResponse, 1)
        return new, old, end
    new, old, end = asyncio.run(go())
    assert new.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == rpc.PRODUCER_FENCED
    assert old.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == rpc.INVALID_PRODUCER_EPOCH
    assert end.error_code == rpc.INVALID_PRODUCER_EPOCH


def test_init_producer_id_without_a_transactional_id_needs_no_coordinator():
    b = TxnStubBroker()

    async def go():
        return await call(b, InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=60_000,
                                                   producer_id=-1, producer_epoch=-1), InitProducerIdResponse, 4)
    r = asyncio.run(go())
    assert (r.error_code, r.producer_id) == (rpc.NONE, 500) and b.written == []


def test_a_read_committed_fetch_returns_the_lso_and_the_aborted_transactions():
    b = TxnStubBroker()

    def fetch(isolation: int) -> Any:
        F = FetchRequest
        req = F(version=11, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation,
                session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic="t", partitions=[F.FetchTopic.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        return asyncio.run(call(b, req, FetchResponse, 11)).responses[0].partitions[0]
    committed, uncommitted = fetch(1), fetch(0)
    assert b.reads == [True, False]
    assert committed.last_stable_offset == 4
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(77, 1)]
    assert uncommitted.aborted_transactions is None
