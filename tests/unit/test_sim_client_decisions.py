"""The simulator's client decisions (workloads/sim/) on canned broker answers, no sockets: each decision is shown
going one way and the other (retry or not, reset or not, rebalance or lose the membership, fenced or aborted)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import kafka.errors as Errors
import pytest
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.producer import ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkaesque_harness.history import FAIL, INFO, INVOKE, Op
from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.sim.consumer import Consumer, Position, read_batches, should_reset_after
from kafkaesque_harness.workloads.sim.group import GroupMember, after_group_error, range_assignment
from kafkaesque_harness.workloads.sim.producer import FATAL, Producer, can_retry, failure_class
from kafkaesque_harness.workloads.sim.txn import SimTxnClient
from kafkaesque_harness.workloads.txn_client import OffsetTracker

TOPIC = "q"


class CannedCluster:
    """A ClusterClient stand-in: every request's answer is the next one queued for its api (an exception is
    raised instead of answered); one partition leader, broker 1 at epoch 3."""

    def __init__(self, answers: dict[str, list[Any]], leaderless_for: int = 0):
        self.answers = answers
        self.leaderless_for = leaderless_for  # how many leader look-ups find no leader first
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.updates = 0
        self.listeners: list = []
        self.request_timeout_s = 3.0
        self.rng = random.Random(0)
        self.brokers = {1: ("b1", 9092)}
        self.bootstrap = [("b1", 9092)]
        self.topics: set[str] = set()
        self.partitions = {TOPIC: [0, 1, 2, 3]}
        self.closed = False

    async def send(self, node: Any, request_class: Any, timeout_s: float | None = None, **fields: Any) -> Any:
        name = request_class.__name__
        self.sent.append((name, fields))
        answer = self.answers[name].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def leader_for(self, topic: str, partition: int) -> tuple[int, int]:
        if self.leaderless_for > 0:
            self.leaderless_for -= 1
            raise Errors.LeaderNotAvailableError(f"no leader for {topic}-{partition}")
        return 1, 3

    def leader(self, topic: str, partition: int) -> tuple[int, int]:
        return 1, 3

    async def ensure_metadata(self, topics: list[str]) -> None:
        return None

    async def find_coordinator(self, key: str, key_type: int) -> int:
        return 1

    def request_update(self) -> None:
        self.updates += 1

    def close(self) -> None:
        return None


def produce_answer(error: int = 0, offset: int = 0) -> Any:
    R = ProduceResponse
    return R(version=10, throttle_time_ms=0, responses=[R.TopicProduceResponse(name=TOPIC, partition_responses=[
        R.TopicProduceResponse.PartitionProduceResponse(index=0, error_code=error, base_offset=offset,
                                                        log_append_time_ms=-1, log_start_offset=0, record_errors=[],
                                                        error_message=None)])])


def run(coro):
    return asyncio.run(coro)


# --- produce: retry or not ---------------------------------------------------------------------------------
def test_a_retriable_error_is_retried_while_attempts_and_time_remain():
    assert can_retry(Errors.NotLeaderForPartitionError(), attempts=1, retries=6, delivery_expired=False,
                     same_producer=True)


def test_no_retry_when_retries_are_used_up_or_the_delivery_timeout_passed():
    error = Errors.NotLeaderForPartitionError()
    assert not can_retry(error, attempts=1, retries=1, delivery_expired=False, same_producer=True)
    assert not can_retry(error, attempts=1, retries=6, delivery_expired=True, same_producer=True)


def test_a_non_retriable_error_or_a_changed_producer_id_is_never_retried():
    assert not can_retry(Errors.CorruptRecordError(), attempts=1, retries=6, delivery_expired=False,
                         same_producer=True)
    assert not can_retry(Errors.NotLeaderForPartitionError(), attempts=1, retries=6, delivery_expired=False,
                         same_producer=False)


def test_producer_with_retries_off_reports_the_first_not_leader_answer():
    cluster = CannedCluster({"ProduceRequest": [produce_answer(Errors.NotLeaderForPartitionError.errno),
                                                produce_answer(0, 7)]})
    with pytest.raises(Errors.NotLeaderForPartitionError):
        run(Producer(cluster, retries=0).send(TOPIC, 0, b"1"))
    assert [n for n, _ in cluster.sent] == ["ProduceRequest"]
    assert cluster.updates >= 1  # the leader moved: fresh metadata is asked for


def test_idempotent_producer_retries_the_same_sequence_and_counts_it_once():
    cluster = CannedCluster({"InitProducerIdRequest": [_init_answer(5, 0)],
                             "ProduceRequest": [produce_answer(Errors.NotLeaderForPartitionError.errno),
                                                produce_answer(0, 7), produce_answer(0, 8)]})
    producer = Producer(cluster, retries=5, idempotent=True)

    async def two_sends():
        return [await producer.send(TOPIC, 0, b"1"), await producer.send(TOPIC, 0, b"2")]

    assert run(two_sends()) == [7, 8]
    sequences = [_batch_sequence(fields) for name, fields in cluster.sent if name == "ProduceRequest"]
    assert sequences == [0, 0, 1]  # the retry kept its sequence; the next record took the next one
    assert producer.sequences == {(TOPIC, 0): 2}


def test_a_retry_resends_the_batchs_bytes_and_the_next_record_is_another_batch():
    # kafka-python closes a batch once and resends its buffer: the broker tells a retry from other records under
    # a used sequence by the CRC (checkers/trace.py sequence-reused). A batch built again for each attempt (a new
    # timestamp after the retry backoff) reads to the broker as other records under the same sequence.
    cluster = CannedCluster({"InitProducerIdRequest": [_init_answer(5, 0)],
                             "ProduceRequest": [produce_answer(Errors.RequestTimedOutError.errno),
                                                produce_answer(Errors.NotLeaderForPartitionError.errno),
                                                produce_answer(0, 7), produce_answer(0, 8)]})
    producer = Producer(cluster, retries=5, idempotent=True)

    async def two_sends():
        return [await producer.send(TOPIC, 0, b"1"), await producer.send(TOPIC, 0, b"2")]

    assert run(two_sends()) == [7, 8]
    sent = [bytes(f["topic_data"][0].partition_data[0].records) for n, f in cluster.sent if n == "ProduceRequest"]
    assert len(sent) == 4 and sent[0] == sent[1] == sent[2]  # three attempts, 0.1 s apart, one batch
    assert sent[3] != sent[0] and _batch_sequence(cluster.sent[-1][1]) == 1


def test_a_record_stamps_the_producer_id_of_its_first_attempt_with_its_sequence():
    # The producer id was reset (a sequence error of another record) while this record waited for a leader: it
    # goes out under the new id from sequence 0, as kafka-python's drain stamps id, epoch and sequence together;
    # never under the old id with the sequence numbering started again (a reuse of the old id's sequence 0)
    cluster = CannedCluster({"InitProducerIdRequest": [_init_answer(5, 0), _init_answer(6, 0)],
                             "ProduceRequest": [produce_answer(0, 3), produce_answer(0, 4)]})
    producer = Producer(cluster, retries=5, idempotent=True)

    async def reset_while_waiting():
        assert await producer.send(TOPIC, 0, b"1") == 3
        cluster.leaderless_for = 10**6
        waiting = asyncio.ensure_future(producer.send(TOPIC, 0, b"2"))
        await asyncio.sleep(0.25)
        producer._failed_for_good(Errors.OutOfOrderSequenceNumberError())
        cluster.leaderless_for = 0
        return await waiting

    assert run(reset_while_waiting()) == 4
    batches = [_produced_batch(f) for n, f in cluster.sent if n == "ProduceRequest"]
    assert [(b.producer_id, b.base_sequence) for b in batches] == [(5, 0), (6, 0)]


def test_a_record_that_failed_once_sent_leaves_its_sequence_used():
    nes = Errors.NotEnoughReplicasError.errno
    cluster = CannedCluster({"InitProducerIdRequest": [_init_answer(5, 0)],
                             "ProduceRequest": [produce_answer(nes), produce_answer(nes), produce_answer(0, 9)]})
    producer = Producer(cluster, retries=1, idempotent=True)
    with pytest.raises(Errors.NotEnoughReplicasError):
        run(producer.send(TOPIC, 0, b"1"))  # sent twice with sequence 0, then given up
    assert run(producer.send(TOPIC, 0, b"2")) == 9
    sequences = [_batch_sequence(fields) for name, fields in cluster.sent if name == "ProduceRequest"]
    assert sequences == [0, 0, 1]  # never 0 again: the broker may hold the first record under it


def test_a_record_that_expired_before_it_was_sent_takes_no_sequence():
    cluster = CannedCluster({"InitProducerIdRequest": [_init_answer(5, 0)], "ProduceRequest": [produce_answer(0, 4)]},
                            leaderless_for=10**6)
    producer = Producer(cluster, retries=5, idempotent=True, delivery_timeout_s=0.3)
    with pytest.raises(Errors.KafkaTimeoutError):
        run(producer.send(TOPIC, 0, b"1"))
    cluster.leaderless_for = 0
    assert run(producer.send(TOPIC, 0, b"2")) == 4
    sequences = [_batch_sequence(fields) for name, fields in cluster.sent if name == "ProduceRequest"]
    assert sequences == [0]


def test_duplicate_sequence_answer_is_a_success_other_sequence_errors_reset_the_producer_id():
    cluster = CannedCluster({"InitProducerIdRequest": [_init_answer(5, 0)],
                             "ProduceRequest": [produce_answer(Errors.DuplicateSequenceNumberError.errno, 4),
                                                produce_answer(Errors.OutOfOrderSequenceNumberError.errno)]})
    producer = Producer(cluster, retries=5, idempotent=True)
    assert run(producer.send(TOPIC, 0, b"1")) == 4
    with pytest.raises(Errors.OutOfOrderSequenceNumberError):
        run(producer.send(TOPIC, 0, b"2"))
    assert producer.producer_id == -1 and producer.sequences == {}  # the next send inits a new id


def test_a_record_waits_for_a_leader_without_an_attempt_and_is_sent_once_one_is_known():
    cluster = CannedCluster({"ProduceRequest": [produce_answer(0, 3)]}, leaderless_for=2)
    assert run(Producer(cluster, retries=0).send(TOPIC, 0, b"1")) == 3
    assert [n for n, _ in cluster.sent] == ["ProduceRequest"]


def test_a_record_that_never_finds_a_leader_expires_at_its_delivery_timeout_unsent():
    cluster = CannedCluster({"ProduceRequest": []}, leaderless_for=10**6)
    with pytest.raises(Errors.KafkaTimeoutError, match="Expiring 1 record"):
        run(Producer(cluster, retries=0, delivery_timeout_s=0.3).send(TOPIC, 0, b"1"))
    assert cluster.sent == []


def test_failure_class_follows_kafka_pythons_classify_batch_error():
    assert failure_class(Errors.ProducerFencedError(), transactional=True) == "fatal"
    assert failure_class(Errors.OutOfOrderSequenceNumberError(), transactional=True) == "abortable"
    assert failure_class(Errors.OutOfOrderSequenceNumberError(), transactional=False) == "reset-producer-id"
    assert failure_class(Errors.MessageSizeTooLargeError(), transactional=True) == "abortable"
    assert failure_class(Errors.MessageSizeTooLargeError(), transactional=False) == "fatal"
    # a retriable error that ran out changes nothing (docs/FINDINGS.md kafka-python 2)
    assert failure_class(Errors.KafkaTimeoutError(), transactional=True) == "none"
    assert failure_class(Errors.NotEnoughReplicasError(), transactional=False) == "none"


def _transactional(cluster: CannedCluster) -> Producer:
    cluster.answers.setdefault("InitProducerIdRequest", []).append(_init_answer(5, 0))
    cluster.answers.setdefault("AddPartitionsToTxnRequest", []).append(_added_answer())
    cluster.answers.setdefault("EndTxnRequest", []).append(_end_answer())
    return Producer(cluster, retries=5, transactional_id="t", delivery_timeout_s=0.3)


async def one_send_committed(producer: Producer) -> Any:
    """A transaction of one send, committed: the future of the send."""
    await producer.init_producer_id()
    await producer.begin()
    sent = producer.send_soon(TOPIC, 0, b"1")
    await producer.end(commit=True)
    return sent


def test_a_transaction_whose_send_expired_still_commits_as_kafka_python_3_does():
    cluster = CannedCluster({}, leaderless_for=10**6)  # the send's partition never finds a leader
    producer = _transactional(cluster)

    sent = run(one_send_committed(producer))
    assert isinstance(sent.exception(), Errors.KafkaTimeoutError)
    ends = [fields for name, fields in cluster.sent if name == "EndTxnRequest"]
    assert len(ends) == 1 and ends[0]["committed"] is True


def test_a_transaction_whose_send_was_fenced_cannot_commit():
    cluster = CannedCluster({"ProduceRequest": [produce_answer(Errors.ProducerFencedError.errno)]})
    producer = _transactional(cluster)

    with pytest.raises(Errors.ProducerFencedError):
        run(one_send_committed(producer))
    assert producer.state == FATAL
    assert not [name for name, _ in cluster.sent if name == "EndTxnRequest"]


def test_a_partition_the_coordinator_keeps_busy_expires_the_record_and_the_commit_waits_for_the_add():
    busy = _added_answer(Errors.ConcurrentTransactionsError.errno)
    cluster = CannedCluster({"AddPartitionsToTxnRequest": [busy] * 5})
    producer = _transactional(cluster)  # its add succeeds after five CONCURRENT_TRANSACTIONS answers

    sent = run(one_send_committed(producer))
    assert isinstance(sent.exception(), Errors.KafkaTimeoutError)  # expired at 0.3 s, before the add went through
    names = [name for name, _ in cluster.sent]
    assert names.count("AddPartitionsToTxnRequest") == 6 and names[-1] == "EndTxnRequest"
    assert "ProduceRequest" not in names


def test_a_fenced_add_makes_the_commit_fail_without_ending_the_transaction():
    cluster = CannedCluster({"AddPartitionsToTxnRequest": [_added_answer(Errors.ProducerFencedError.errno)]})
    producer = _transactional(cluster)

    with pytest.raises(Errors.ProducerFencedError):
        run(one_send_committed(producer))
    assert "EndTxnRequest" not in [name for name, _ in cluster.sent]


def _added_answer(error: int = 0) -> Any:
    from kafka.protocol.producer.transaction import AddPartitionsToTxnResponse as R

    T = R.AddPartitionsToTxnTopicResult
    return R(version=3, throttle_time_ms=0, results_by_topic_v3_and_below=[T(name=TOPIC, results_by_partition=[
        T.AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=error)])])


def _end_answer() -> Any:
    from kafka.protocol.producer.transaction import EndTxnResponse

    return EndTxnResponse(version=3, throttle_time_ms=0, error_code=0)


def _init_answer(pid: int, epoch: int, error: int = 0) -> Any:
    from kafka.protocol.producer import InitProducerIdResponse

    return InitProducerIdResponse(version=4, throttle_time_ms=0, error_code=error, producer_id=pid,
                                  producer_epoch=epoch)


def _produced_batch(fields: dict[str, Any]) -> Any:
    from kafka.record.memory_records import MemoryRecords

    return MemoryRecords(bytes(fields["topic_data"][0].partition_data[0].records)).next_batch()


def _batch_sequence(fields: dict[str, Any]) -> int:
    return _produced_batch(fields).base_sequence


# --- fetch: reset or not -----------------------------------------------------------------------------------
def test_out_of_range_at_the_position_resets_by_policy_a_moved_position_discards_the_answer():
    assert should_reset_after(Errors.OffsetOutOfRangeError(), 10, Position(10), "earliest") == "reset"
    assert should_reset_after(Errors.OffsetOutOfRangeError(), 10, Position(12), "earliest") == "stale"
    assert should_reset_after(Errors.OffsetOutOfRangeError(), 10, None, "earliest") == "stale"
    assert should_reset_after(Errors.OffsetOutOfRangeError(), 10, Position(10), "none") == "raise"


def fetch_answer(error: int, hwm: int = 0, records: bytes | None = None, aborted=None) -> Any:
    R = FetchResponse
    PD = R.FetchableTopicResponse.PartitionData
    return R(version=12, throttle_time_ms=0, error_code=0, session_id=0, responses=[R.FetchableTopicResponse(
        topic=TOPIC, partitions=[PD(partition_index=0, error_code=error, high_watermark=hwm, last_stable_offset=hwm,
                                    log_start_offset=0, preferred_read_replica=-1, diverging_epoch=None,
                                    aborted_transactions=aborted, records=records)])])


def list_offsets_answer(offset: int) -> Any:
    R = ListOffsetsResponse
    return R(version=7, throttle_time_ms=0, topics=[R.ListOffsetsTopicResponse(name=TOPIC, partitions=[
        R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(partition_index=0, error_code=0, timestamp=-1,
                                                                offset=offset, leader_epoch=3)])])


def _consumer(cluster: CannedCluster) -> tuple[Consumer, ClientEventLog]:
    events = ClientEventLog("sim-kafka-python", lambda: 0.0)
    consumer = Consumer(cluster, TOPIC, events)
    consumer.assign([0])
    return consumer, events


def test_out_of_range_answer_resets_to_earliest_and_says_so_in_a_reset_event():
    cluster = CannedCluster({"FetchRequest": [fetch_answer(Errors.OffsetOutOfRangeError.errno)],
                             "ListOffsetsRequest": [list_offsets_answer(2)]})
    consumer, events = _consumer(cluster)
    consumer.positions[0] = Position(10, 3)

    async def two_polls():
        await consumer.poll(0.01)  # the fetch answers OFFSET_OUT_OF_RANGE
        await consumer.poll(0.01)  # the reset's ListOffsets places the position

    run(two_polls())
    assert consumer.position(0) == 2
    (reset,) = [e for e in events.take() if e["type"] == "reset"]
    assert (reset["from"], reset["to"], reset["policy"], reset["error"]) == (10, 2, "earliest", "OFFSET_OUT_OF_RANGE")
    assert (reset["broker"], reset["leader_epoch"], reset["answered_by"]) == (1, 3, 1)


def test_validation_moves_back_only_when_the_positions_epoch_ends_below_it():
    from kafkaesque_harness.workloads.sim.consumer import after_validation

    assert after_validation(Position(10, 1), end_offset=7, end_epoch=1) == "truncate"
    assert after_validation(Position(10, 1), end_offset=12, end_epoch=1) == "valid"
    assert after_validation(Position(10, 1), end_offset=-1, end_epoch=-1) == "reset"


def test_a_newer_leader_epoch_holds_the_fetch_until_validation_moves_the_position_back():
    from kafka.protocol.consumer import OffsetForLeaderEpochResponse as R

    answer = R(version=4, throttle_time_ms=0, topics=[R.OffsetForLeaderTopicResult(topic=TOPIC, partitions=[
        R.OffsetForLeaderTopicResult.EpochEndOffset(error_code=0, partition=0, leader_epoch=1, end_offset=7)])])
    cluster = CannedCluster({"OffsetForLeaderEpochRequest": [answer], "FetchRequest": [fetch_answer(0, hwm=7)]})
    consumer, events = _consumer(cluster)  # the leader is at epoch 3
    consumer.positions[0] = Position(10, 1)  # read up to 10 in epoch 1
    run(consumer.poll(0.01))
    assert [n for n, _ in cluster.sent][:2] == ["OffsetForLeaderEpochRequest", "FetchRequest"]
    assert cluster.sent[1][1]["topics"][0].partitions[0].fetch_offset == 7
    (reset,) = [e for e in events.take() if e["type"] == "reset"]
    assert (reset["from"], reset["to"], reset["policy"]) == (10, 7, "truncation")


def test_a_position_fetched_in_the_current_epoch_is_not_validated():
    cluster = CannedCluster({"FetchRequest": [fetch_answer(0, hwm=10)]})
    consumer, _ = _consumer(cluster)
    consumer.positions[0] = Position(10, 3)  # its records were read in the leader's own epoch
    run(consumer.poll(0.01))
    assert [n for n, _ in cluster.sent] == ["FetchRequest"]


def test_an_empty_fetch_forgets_the_positions_epoch_as_kafka_python_does():
    cluster = CannedCluster({"FetchRequest": [fetch_answer(0, hwm=10)]})
    consumer, _ = _consumer(cluster)
    consumer.positions[0] = Position(10, 3)
    run(consumer.poll(0.01))
    assert consumer.positions[0] == Position(10, -1)


def test_not_leader_answer_keeps_the_position_and_asks_for_metadata():
    cluster = CannedCluster({"FetchRequest": [fetch_answer(Errors.NotLeaderForPartitionError.errno)]})
    consumer, events = _consumer(cluster)
    consumer.positions[0] = Position(10, 3)
    run(consumer.poll(0.01))
    assert consumer.position(0) == 10 and cluster.updates == 1
    assert not [e for e in events.take() if e["type"] == "reset"]


def _batch(base: int, values: list[bytes], pid: int = -1, transactional: bool = False, control_abort: bool = False):
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16, offset=base,
                             transactional=transactional, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                             base_sequence=0 if pid >= 0 else -1)
    for v in values:
        b.append(0, None, v)
    b.close()
    return bytes(b.buffer())


def test_read_committed_skips_an_aborted_transactions_records_read_uncommitted_returns_them():
    import struct
    from types import SimpleNamespace

    from kafkaesque_harness.clusters.broker.log.batch import build_control_batch

    abort_marker = bytearray(build_control_batch(9, 0, commit=False, coordinator_epoch=0, timestamp_ms=0))
    struct.pack_into(">q", abort_marker, 0, 3)  # its base offset (outside the CRC)
    raw = (_batch(0, [b"1"]) + _batch(1, [b"2", b"3"], pid=9, transactional=True) + bytes(abort_marker)
           + _batch(4, [b"5"], pid=9, transactional=True) + _batch(5, [b"6"]))
    aborted = [SimpleNamespace(producer_id=9, first_offset=1)]  # the fetch answer's aborted transactions
    committed, after = read_batches(raw, Position(0), True, aborted)
    uncommitted, _ = read_batches(raw, Position(0), False, aborted)
    # the producer's next transaction, after the abort marker, is read: only the aborted one is skipped
    assert [o for o, _, _ in committed] == [0, 4, 5] and after.offset == 6
    assert [o for o, _, _ in uncommitted] == [0, 1, 2, 4, 5]


def _epoch_batch(base: int, values: list[bytes], epoch: int) -> bytes:
    import struct

    raw = bytearray(_batch(base, values))
    struct.pack_into(">i", raw, 12, epoch)  # the partition leader epoch (outside the CRC), as a leader stamps it
    return bytes(raw)


def test_a_limited_read_decodes_up_to_the_limit_and_ends_after_the_answers_last_batch_as_a_full_read():
    raw = _epoch_batch(0, [b"0", b"1"], 1) + _epoch_batch(2, [b"2", b"3"], 1) + _epoch_batch(4, [b"4"], 2)
    full, full_after = read_batches(raw, Position(1), False, [])
    limited, limited_after = read_batches(raw, Position(1), False, [], limit=2)
    assert [o for o, _, _ in full] == [1, 2, 3, 4] and full_after == Position(5, 2)
    assert [o for o, _, _ in limited] == [1, 2, 3]  # the second batch read whole, the third not decoded
    assert limited_after == full_after  # what the caller's cut keeps the epoch of (Consumer._take_fetch)
    everything, after = read_batches(raw, Position(1), False, [], limit=4)
    assert (everything, after) == (full, full_after)  # a limit the answer does not reach changes nothing
    torn, torn_after = read_batches(raw[:-3], Position(1), False, [], limit=1)  # a partial last batch is left
    assert [o for o, _, _ in torn] == [1] and torn_after == Position(4, 1)


# --- groups: rejoin or lose the membership -----------------------------------------------------------------
def test_rebalance_in_progress_rejoins_keeping_the_member_id_and_partitions_until_the_join():
    assert after_group_error(Errors.RebalanceInProgressError()) == "rejoin"
    journal: list[tuple[str, list[int]]] = []
    member = _member(journal)
    member.handle_error(Errors.RebalanceInProgressError())
    assert member.need_rejoin and member.member_id == "m-1" and member.assigned == [0, 1]
    assert journal == []


def test_unknown_member_loses_the_membership_its_partitions_are_revoked_and_it_rejoins_as_new():
    assert after_group_error(Errors.UnknownMemberIdError()) == "reset-and-rejoin"
    assert after_group_error(Errors.IllegalGenerationError()) == "reset-and-rejoin"
    journal: list[tuple[str, list[int]]] = []
    member = _member(journal)
    member.handle_error(Errors.UnknownMemberIdError())
    assert member.need_rejoin and member.member_id == "" and member.generation == -1 and member.assigned == []
    assert journal == [("revoked", [0, 1])]


def test_a_coordinator_error_only_forgets_the_coordinator():
    assert after_group_error(Errors.NotCoordinatorError()) == "find-coordinator"
    journal: list[tuple[str, list[int]]] = []
    member = _member(journal)
    member.handle_error(Errors.NotCoordinatorError())
    assert member.coordinator is None and not member.need_rejoin and member.assigned == [0, 1]


def _member(journal: list) -> GroupMember:
    cluster = CannedCluster({})
    consumer = Consumer(cluster, TOPIC, ClientEventLog("sim-kafka-python", lambda: 0.0))
    member = GroupMember(cluster, "g", TOPIC, consumer, consumer.events, lambda kind, ps: journal.append((kind, ps)))
    member.member_id, member.generation, member.coordinator = "m-1", 4, 1
    member.assigned, member.need_rejoin = [0, 1], False
    return member


def test_range_assignor_gives_the_first_members_the_extra_partitions():
    plan = range_assignment([0, 1, 2, 3], TOPIC, {"b": [TOPIC], "a": [TOPIC], "c": [TOPIC]})
    assert plan == {"a": [0, 1], "b": [2], "c": [3]}


# --- transactions: fenced or aborted -----------------------------------------------------------------------
class ScriptedTxnLibrary:
    """A SimTxnLibrary stand-in whose commit raises the error given; it records whether abort was called."""

    def __init__(self, commit_error: BaseException, fatal: bool):
        self.commit_error, self.fatal = commit_error, fatal
        self.producer = object()
        self.aborted = self.discarded = False
        self.events = ClientEventLog("sim-kafka-python", lambda: 0.0)

    async def ensure_producer(self): ...
    async def begin(self): ...
    def send(self, key, value): return lambda: 5
    async def flush(self): ...
    async def send_offsets(self): return False
    async def commit(self): raise self.commit_error
    async def abort(self): self.aborted = True
    def is_fatal(self, e): return self.fatal
    def discard_producer(self): self.discarded = True
    def take_events(self): return []


def _txn_with(library: ScriptedTxnLibrary) -> Op:
    client = SimTxnClient(None, "", random.Random(0), TOPIC, 4, 1,
                          {"crash_on_rebalance": False}, OffsetTracker())
    client.lib = library
    return run(client.invoke(Op(INVOKE, "txn", 0, [["send", 0, 1]])))


def test_a_fenced_producer_whose_commit_was_sent_ends_info_and_is_discarded():
    library = ScriptedTxnLibrary(Errors.ProducerFencedError(), fatal=True)
    comp = _txn_with(library)
    assert comp.type == INFO and library.discarded and not library.aborted


def test_a_retriable_commit_failure_is_aborted_and_ends_fail():
    library = ScriptedTxnLibrary(Errors.ConcurrentTransactionsError(), fatal=False)
    comp = _txn_with(library)
    assert comp.type == FAIL and library.aborted and comp.error.endswith("; aborted")
    assert comp.value == [["send", 0, [5, 1]]]


def test_a_fatal_producer_refuses_a_new_transaction():
    producer = Producer(CannedCluster({}), transactional_id="t")
    producer.state, producer.last_error = FATAL, Errors.ProducerFencedError()
    with pytest.raises(Errors.ProducerFencedError):
        run(producer.begin())


# --- group join: committed offset or reset policy ------------------------------------------------------------
def _join_answers(committed: dict[int, int]) -> dict[str, list[Any]]:
    from kafka.protocol.consumer.group import JoinGroupResponse, OffsetFetchResponse, SyncGroupResponse
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    J = JoinGroupResponse
    subscription = ConsumerProtocolSubscription(topics=[TOPIC], user_data=b"").encode(version=0)
    join = [J(version=9, throttle_time_ms=0, error_code=Errors.MemberIdRequiredError.errno, generation_id=-1,
              protocol_type="consumer", protocol_name="", leader="", skip_assignment=False, member_id="m-1",
              members=[]),
            J(version=9, throttle_time_ms=0, error_code=0, generation_id=1, protocol_type="consumer",
              protocol_name="range", leader="m-1", skip_assignment=False, member_id="m-1",
              members=[J.JoinGroupResponseMember(member_id="m-1", group_instance_id=None, metadata=subscription)])]
    assignment = ConsumerProtocolAssignment(assigned_partitions=[(TOPIC, [0, 1, 2, 3])], user_data=b"").encode(version=0)
    sync = [SyncGroupResponse(version=5, throttle_time_ms=0, error_code=0, protocol_type="consumer",
                              protocol_name="range", assignment=assignment)]
    G = OffsetFetchResponse.OffsetFetchResponseGroup
    T = G.OffsetFetchResponseTopics
    fetched = [OffsetFetchResponse(version=8, throttle_time_ms=0, groups=[G(group_id="g", error_code=0, topics=[
        T(name=TOPIC, partitions=[T.OffsetFetchResponsePartitions(
            partition_index=p, committed_offset=committed.get(p, -1), committed_leader_epoch=-1, metadata="",
            error_code=0) for p in range(4)])])])]
    return {"JoinGroupRequest": join, "SyncGroupRequest": sync, "OffsetFetchRequest": fetched}


class VersionedCannedCluster(CannedCluster):
    async def connection(self, node: Any) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(versions={9: 8})


def test_joining_the_group_places_committed_partitions_and_leaves_the_others_to_the_reset_policy():
    cluster = VersionedCannedCluster(_join_answers({1: 40, 3: 7}))
    journal: list[tuple[str, list[int]]] = []
    consumer = Consumer(cluster, TOPIC, ClientEventLog("sim-kafka-python", lambda: 0.0))
    member = GroupMember(cluster, "g", TOPIC, consumer, consumer.events, lambda kind, ps: journal.append((kind, ps)),
                         heartbeat_s=3600)

    async def join():
        active = await member.ensure_active(1.0)
        member.stop()
        return active

    assert run(join()) is True
    joins = [fields for name, fields in cluster.sent if name == "JoinGroupRequest"]
    assert [j["member_id"] for j in joins] == ["", "m-1"]  # KIP-394: joined again with the id it was given
    assert journal == [("revoked", []), ("assigned", [0, 1, 2, 3])]  # eager: revoked (nothing) before the join
    assert consumer.position(1) == 40 and consumer.position(3) == 7
    assert consumer.position(0) is None and consumer.position(2) is None  # the reset policy places them at a poll
    seeks = [(e["key"], e["to"], e["why"]) for e in consumer.events.take() if e["type"] == "seek"]
    assert seeks == [(1, 40, "committed"), (3, 7, "committed")]
