"""The broker shell's transaction glue (server.py, txn_shell.py, kafka_api.py) on a real Broker object on a
temporary directory, with no sockets and one replica per partition (so the HWM follows the leader's own
appends): read_committed reads bounded by the LSO with the aborted list, markers fenced by epoch, the
KIP-890 part 1 check of a transactional produce, and a new coordinator finishing a transaction it finds
prepared in its log."""

from __future__ import annotations

import asyncio
import json

from kafkaesque_harness.clusters.broker import kafka_api, rpc
from kafkaesque_harness.clusters.broker.group_coordinator import OFFSETS_TOPIC
from kafkaesque_harness.clusters.broker.log import build_batch, iter_all_records, validate_batches
from kafkaesque_harness.clusters.broker.server import Broker
from kafkaesque_harness.clusters.broker.txn_coordinator import (
    COMPLETE_COMMIT,
    ONGOING,
    PREPARE_COMMIT,
    TXN_STATE_TOPIC,
    TxnState,
    txn_record,
)
from tests.unit.test_broker_groups import NODE, on_a_broker

PID = 7000


def lead(b, topic: str, partitions: int, partition: int, leader_epoch: int = 0) -> None:
    """This broker alone leads the partition (replicas = ISR = [NODE], min ISR 1)."""
    records = [
        {"type": "register_broker", "broker_id": NODE, "broker_epoch": 5, "incarnation_id": "a", "host": "h",
         "port": 1, "fenced": False},
        {"type": "topic", "topic": topic, "partitions": partitions, "replication_factor": 1,
         "configs": {"min.insync.replicas": "1"}},
        {"type": "partition", "topic": topic, "partition": partition, "replicas": [NODE], "isr": [NODE],
         "leader": NODE, "leader_epoch": leader_epoch, "partition_epoch": leader_epoch},
    ]
    for r in records:
        b.image.apply(b.image.offset + 1, r)
    b.apply_metadata({(topic, partition)})


def txn_batch(seq: int, value: bytes = b"v", epoch: int = 0) -> bytes:
    return build_batch([value], producer_id=PID, producer_epoch=epoch, base_sequence=seq, transactional=True)


async def produce(b, raw: bytes, topic: str = "t") -> int:
    err, _, _ = await b.produce(topic, 0, raw, validate_batches(raw), -1, 1.0)
    return err


def values(raw: bytes) -> list[bytes | None]:
    """The data records' values (control batches left out)."""
    return [rec.value for h, rec in iter_all_records(raw) if not h.is_control]


def marker(commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> dict:
    return {"topic": "t", "partition": 0, "producer_id": PID, "producer_epoch": epoch, "commit": commit,
            "coordinator_epoch": coordinator_epoch}


async def eventually(condition, tries: int = 100) -> None:
    """Wait (up to tries x 20 ms) until condition() holds; the caller asserts it after."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.02)


async def loaded_and_initialized(b, txn_id: str) -> tuple[int, int]:
    """Wait for the coordinator to have loaded txn_id's partition, then init its producer: (pid, epoch)."""
    await eventually(lambda: b.txn.coord.status(txn_id) == rpc.NONE, tries=50)
    err, pid, epoch = await b.txn.init_producer_id(txn_id, 60_000, -1, -1)
    assert err == rpc.NONE
    return pid, epoch


def test_read_committed_stops_at_the_lso_and_lists_the_aborted_transaction(tmp_path):
    async def scenario(b: Broker) -> None:
        lead(b, "t", 1, 0)
        assert await produce(b, build_batch([b"before"])) == rpc.NONE
        assert await produce(b, txn_batch(0, b"aborted")) == rpc.NONE
        assert await produce(b, build_batch([b"after"])) == rpc.NONE
        committed = b.consumer_read("t", 0, 0, -1, 1 << 20, read_committed=True)
        uncommitted = b.consumer_read("t", 0, 0, -1, 1 << 20)
        assert (committed["hwm"], committed["lso"], committed["aborted"]) == (3, 1, [])
        assert values(committed["records"]) == [b"before"]  # not a record from the LSO on
        assert values(uncommitted["records"]) == [b"before", b"aborted", b"after"] and uncommitted["aborted"] is None
        assert b.consumer_read("t", 0, 1, -1, 1 << 20, read_committed=True)["records"] == b""
        assert (await b.txn.write_marker(marker(commit=False)))["error"] == rpc.NONE
        after = b.consumer_read("t", 0, 0, -1, 1 << 20, read_committed=True)
        assert after["lso"] == after["hwm"] == 4
        assert values(after["records"]) == [b"before", b"aborted", b"after"] and after["aborted"] == [(PID, 1)]
        # a fetch from the marker on is still told of it (Kafka: last offset >= fetch offset)
        assert b.consumer_read("t", 0, 3, -1, 1 << 20, read_committed=True)["aborted"] == [(PID, 1)]

    on_a_broker(tmp_path, scenario)


def test_a_marker_of_an_older_coordinator_is_fenced_and_one_of_an_older_epoch_is_a_no_op(tmp_path):
    async def scenario(b: Broker) -> None:
        lead(b, "t", 1, 0)
        await produce(b, txn_batch(0, epoch=1))
        assert (await b.txn.write_marker(marker(True, epoch=1, coordinator_epoch=4)))["error"] == rpc.NONE
        await produce(b, txn_batch(1, epoch=1))
        leo = b.replicas[("t", 0)].leo
        assert (await b.txn.write_marker(marker(True, epoch=1, coordinator_epoch=3)))["error"] == \
            rpc.TRANSACTION_COORDINATOR_FENCED
        assert (await b.txn.write_marker(marker(True, epoch=0, coordinator_epoch=4)))["error"] == rpc.NONE
        assert b.replicas[("t", 0)].leo == leo  # neither was written

    on_a_broker(tmp_path, scenario)


def test_kip890_a_transactional_produce_to_a_partition_not_in_the_transaction_is_refused(tmp_path):
    async def scenario(b: Broker) -> None:
        txn_id = "tx"
        lead(b, TXN_STATE_TOPIC, b.txn.coord.config.txn_partitions, b.txn.coord.partition_for(txn_id))
        lead(b, "t", 1, 0)
        await asyncio.sleep(0.05)  # the coordinator loads its (empty) partition
        err, pid, epoch = await b.txn.init_producer_id(txn_id, 60_000, -1, -1)
        assert err == rpc.NONE

        async def send(seq: int) -> int:
            raw = build_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
            return (await kafka_api._produce_partition(b, "t", 0, raw, -1, 1.0, txn_id))[0]
        assert await send(0) == rpc.INVALID_TXN_STATE  # AddPartitionsToTxn never sent
        assert b.replicas[("t", 0)].leo == 0
        assert await b.txn.add_partitions(txn_id, pid, epoch, [("t", 0)]) == rpc.NONE
        assert await send(0) == rpc.NONE
        assert b.txn.coord.txns[txn_id].state == ONGOING

    on_a_broker(tmp_path, scenario)


def test_a_new_coordinator_writes_the_markers_of_a_transaction_it_finds_prepared(tmp_path):
    async def scenario(b: Broker) -> None:
        txn_id = "tx"
        p = b.txn.coord.partition_for(txn_id)
        lead(b, "t", 1, 0)
        await produce(b, txn_batch(0))
        # An earlier coordinator wrote PrepareCommit and died before the marker.
        log = b.logs.get_or_create(TXN_STATE_TOPIC, p)
        key, value = txn_record(txn_id, TxnState(PID, 0, 60_000, PREPARE_COMMIT, frozenset({("t", 0)}), 0))
        raw = build_batch([value], keys=[key])
        log.append_as_leader(raw, 0, validate_batches(raw))
        b.checkpointed_hwm[(TXN_STATE_TOPIC, p)] = 1
        lead(b, TXN_STATE_TOPIC, b.txn.coord.config.txn_partitions, p, leader_epoch=1)
        for _ in range(50):
            await asyncio.sleep(0.02)
            if b.txn.coord.txns.get(txn_id) and b.txn.coord.txns[txn_id].state == COMPLETE_COMMIT:
                break
        assert b.txn.coord.txns[txn_id].state == COMPLETE_COMMIT
        r = b.replicas[("t", 0)]
        assert r.last_stable_offset() == r.hwm == 2  # the commit marker ended the transaction

    on_a_broker(tmp_path, scenario)


def test_the_latest_offset_of_a_read_committed_consumer_is_the_lso(tmp_path):
    async def scenario(b: Broker) -> None:
        lead(b, "t", 1, 0)
        await produce(b, build_batch([b"before"]))
        await produce(b, txn_batch(0))
        await produce(b, build_batch([b"after"]))
        latest = kafka_api.LATEST_TIMESTAMP
        assert b.list_offset("t", 0, latest, -1)[1] == 3
        assert b.list_offset("t", 0, latest, -1, read_committed=True)[1] == 1

    on_a_broker(tmp_path, scenario)


def test_kip447_a_txn_offset_commit_of_an_older_generation_or_an_unknown_member_is_fenced(tmp_path):
    """TxnOffsetCommit v3 carries the member's generation (the consumer's group metadata): a member that
    lost its partitions in a rebalance may not commit offsets for them in its transaction, or a
    consume-transform-produce group would commit the same input twice."""
    async def scenario(b: Broker) -> None:
        group, protocols = "g", [("range", b"")]
        lead(b, OFFSETS_TOPIC, b.groups.config.offsets_partitions, b.groups.partition_for(group))
        await asyncio.sleep(0.05)  # the coordinator loads its (empty) partition

        def join(waiter: str, member_id: str = "") -> list:
            return b.groups.join(waiter, group, member_id, "consumer", protocols, 10_000, 30_000, False, 0)
        a = join("a1")[0][1]
        assert (a.error, a.generation_id) == (rpc.NONE, 1)
        b.groups.sync("as1", group, 1, a.member_id, None, None, {a.member_id: b"A"}, 0)
        assert join("b1") == []  # a second member: a rebalance, complete once a joins again
        replies = dict(join("a2", a.member_id))
        second = replies["b1"]
        assert replies["a2"].generation_id == second.generation_id == 2
        b.groups.sync("bs2", group, 2, second.member_id, None, None, {}, 0)
        b.groups.sync("as2", group, 2, a.member_id, None, None, {a.member_id: b"A", second.member_id: b"B"}, 0)

        async def commit(generation: int, member_id: str, offset: int) -> int:
            return await b.txn_commit_offsets(group, PID, 0, generation, member_id, [("in", 0, offset, -1, "")], 1.0)
        assert await commit(1, a.member_id, 10) == rpc.ILLEGAL_GENERATION  # a zombie of generation 1
        assert await commit(2, "consumer-gone", 10) == rpc.UNKNOWN_MEMBER_ID
        assert not b.groups.txn_pending(group, ("in", 0))  # neither was written
        assert await commit(2, second.member_id, 20) == rpc.NONE
        assert b.groups.txn_pending(group, ("in", 0))  # pending until the transaction's marker
        assert await commit(-1, "", 30) == rpc.NONE  # a client before KIP-447 (v2) sends no generation

    on_a_broker(tmp_path, scenario)


def test_a_cancelled_request_does_not_leave_its_transaction_pending(tmp_path):
    """A client's EndTxn is cancelled (its connection closed: listener.Connection.shut cancels the request)
    while the coordinator's record is still being written (the ISR cannot take it yet). The write goes on
    as the coordinator's own task and ends in written() or write_failed(): the id is not left pending, so
    the transaction still times out instead of answering CONCURRENT_TRANSACTIONS for good."""
    async def scenario(b: Broker) -> None:
        txn_id = "tx"
        lead(b, TXN_STATE_TOPIC, b.txn.coord.config.txn_partitions, b.txn.coord.partition_for(txn_id))
        await asyncio.sleep(0.05)  # the coordinator loads its (empty) partition
        err, pid, epoch = await b.txn.init_producer_id(txn_id, 60_000, -1, -1)
        assert err == rpc.NONE
        assert await b.txn.add_partitions(txn_id, pid, epoch, [("t", 0)]) == rpc.NONE
        real_produce, gate = b.produce, asyncio.Event()

        async def slow_produce(*args, **kwargs):  # the record waits for the ISR until the gate opens
            await gate.wait()
            return await real_produce(*args, **kwargs)

        b.produce = slow_produce
        request = asyncio.create_task(b.txn.end_txn(txn_id, pid, epoch, False))
        await asyncio.sleep(0.05)
        assert txn_id in b.txn.coord.pending
        request.cancel()
        await asyncio.sleep(0.05)
        gate.set()  # the record lands after its request is gone
        for _ in range(50):
            await asyncio.sleep(0.02)
            if txn_id not in b.txn.coord.pending:
                break
        assert txn_id not in b.txn.coord.pending
        assert b.txn.coord.txns[txn_id].state != ONGOING  # the abort was written and goes on to its markers
        b.produce = real_produce

    on_a_broker(tmp_path, scenario)


def test_a_complete_record_whose_write_failed_is_written_again(tmp_path):
    """The Complete record's write times out once (REQUEST_TIMED_OUT: COORDINATOR_NOT_AVAILABLE to the
    coordinator). Kafka re-queues that append (TransactionMarkerChannelManager.tryAppendToLog, retryOnError
    COORDINATOR_NOT_AVAILABLE); dropped, the transaction stayed PrepareCommit until a fail-over, and its
    producer's next AddPartitionsToTxn got CONCURRENT_TRANSACTIONS, its EndTxn(abort) INVALID_TXN_STATE."""
    async def scenario(b: Broker) -> None:
        txn_id = "tx"
        coord = b.txn.coord
        lead(b, "t", 1, 0)
        lead(b, TXN_STATE_TOPIC, coord.config.txn_partitions, coord.partition_for(txn_id))
        pid, epoch = await loaded_and_initialized(b, txn_id)
        assert await b.txn.add_partitions(txn_id, pid, epoch, [("t", 0)]) == rpc.NONE
        assert await produce(b, build_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                            transactional=True)) == rpc.NONE
        real_produce, refused = b.produce, []

        async def complete_times_out_once(topic, partition, raw, headers, acks, timeout_s):
            states = [json.loads(rec.value)["state"] for _, rec in iter_all_records(raw)] if topic == TXN_STATE_TOPIC else []
            if states == [COMPLETE_COMMIT] and not refused:
                refused.append(states)
                return rpc.REQUEST_TIMED_OUT, -1, -1
            return await real_produce(topic, partition, raw, headers, acks, timeout_s)

        b.produce = complete_times_out_once
        assert await b.txn.end_txn(txn_id, pid, epoch, True) == rpc.NONE
        await eventually(lambda: coord.txns[txn_id].state == COMPLETE_COMMIT)
        assert refused == [[COMPLETE_COMMIT]]
        assert coord.txns[txn_id].state == COMPLETE_COMMIT
        r = b.replicas[("t", 0)]
        assert r.last_stable_offset() == r.hwm == 2  # the commit marker
        # the producer's next transaction begins; an abort of it is answered
        assert await b.txn.add_partitions(txn_id, pid, epoch, [("t", 0)]) == rpc.NONE
        assert await b.txn.end_txn(txn_id, pid, epoch, False) == rpc.NONE

    on_a_broker(tmp_path, scenario)


def test_a_commit_writes_its_records_and_a_marker_at_every_partition_with_acks_all(tmp_path):
    """Issue 40's shell rules: every transaction state record and every marker is written acks=all (a leader
    change cannot lose a decision or a marker), and the markers reach every partition of the transaction
    before its Complete record (each partition's LSO passes the transaction)."""
    async def scenario(b: Broker) -> None:
        txn_id, coord = "tx", b.txn.coord
        for partition in (0, 1):
            lead(b, "t", 2, partition)
        lead(b, TXN_STATE_TOPIC, coord.config.txn_partitions, coord.partition_for(txn_id))
        pid, epoch = await loaded_and_initialized(b, txn_id)
        assert await b.txn.add_partitions(txn_id, pid, epoch, [("t", 0), ("t", 1)]) == rpc.NONE
        for partition in (0, 1):
            raw = build_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
            assert (await b.produce("t", partition, raw, validate_batches(raw), -1, 1.0))[0] == rpc.NONE
        real_produce, writes = b.produce, []

        async def recorded(topic, partition, raw, headers, acks, timeout_s):
            writes.append((topic, "marker" if headers[0].is_control else "record", acks))
            return await real_produce(topic, partition, raw, headers, acks, timeout_s)

        b.produce = recorded
        assert await b.txn.end_txn(txn_id, pid, epoch, True) == rpc.NONE
        await eventually(lambda: coord.txns[txn_id].state == COMPLETE_COMMIT)
        assert coord.txns[txn_id].state == COMPLETE_COMMIT
        assert sorted(set(writes)) == [(TXN_STATE_TOPIC, "record", -1), ("t", "marker", -1)]
        assert [w for w in writes if w[1] == "marker"] == [("t", "marker", -1)] * 2
        for partition in (0, 1):
            r = b.replicas[("t", partition)]
            assert r.last_stable_offset() == r.hwm == 2  # the commit marker ended the transaction here
        b.produce = real_produce

    on_a_broker(tmp_path, scenario)
