"""The queue client's outcome mapping: ok only when acknowledged, fail only when definitely not applied."""

import kafka.errors as kerr
import pytest

from kafkaesque_harness.history import Op
from kafkaesque_harness.workloads.kafka_python import KafkaPythonQueueClient
from kafkaesque_harness.workloads.queue_client import send_outcome


class FakeFuture:
    def __init__(self, exc=None, offset=7):
        self.exc, self.offset = exc, offset

    def get(self, timeout):
        if self.exc:
            raise self.exc
        return type("MD", (), {"offset": self.offset})()


class FakeProducer:
    """Stands in for KafkaProducer in this unit test only: it raises the library's real exceptions."""

    def __init__(self, exc=None):
        self.exc = exc

    def send(self, topic, value, partition):
        return FakeFuture(self.exc)


class FakeGroupMember:
    """A confluent-kafka consumer that once joined a group, as far as letting go of it goes: it records
    unsubscribe, assign and close in `calls`, and assignment() keeps answering `assigned`."""

    def __init__(self, assigned=()):
        self.assigned = list(assigned)
        self.calls = []

    def unsubscribe(self):
        self.calls.append("unsubscribe")

    def assignment(self):
        return self.assigned

    def assign(self, tps):
        self.calls.append(("assign", sorted(tp.partition for tp in tps)))

    def consume(self, num_messages, timeout):
        pass

    def close(self):
        self.calls.append("close")


@pytest.mark.parametrize("exc,outcome", [
    (kerr.NotEnoughReplicasError(), "fail"),               # rejected before the append (002 2.6)
    (kerr.NotLeaderForPartitionError(), "info"),          # also sent to appended acks=all requests on failover
    (kerr.UnknownTopicOrPartitionError(), "fail"),
    (kerr.NotEnoughReplicasAfterAppendError(), "info"),    # appended, not yet replicated
    (kerr.KafkaTimeoutError(), "info"),
    (kerr.RequestTimedOutError(), "info"),
    (kerr.KafkaConnectionError(), "info"),
    (RuntimeError("anything else"), "info"),
])
def test_send_errors_map_to_fail_only_when_definitely_not_applied(exc, outcome):
    c = KafkaPythonQueueClient("queue", 2, -1)
    c.producer = FakeProducer(exc)
    done = c.invoke(Op("invoke", "send", 3, [1, 42]))
    assert done.type == outcome and done.value == [1, 42] and type(exc).__name__ in done.error


def test_acknowledged_send_is_ok_with_its_offset():
    c = KafkaPythonQueueClient("queue", 2, -1)
    c.producer = FakeProducer()
    done = c.invoke(Op("invoke", "send", 3, [1, 42]))
    assert (done.type, done.value) == ("ok", [1, [7, 42]])


def test_librdkafka_error_names_map_the_same_way():
    assert send_outcome("NOT_ENOUGH_REPLICAS") == "fail"
    assert send_outcome("NOT_ENOUGH_REPLICAS_AFTER_APPEND") == "info"
    assert send_outcome("_MSG_TIMED_OUT") == "info"


def test_an_idempotent_producers_failed_send_is_never_definite():
    # With retries on, an earlier attempt of a send that finally failed may have been appended.
    c = KafkaPythonQueueClient("queue", 2, -1, idempotent=True)
    c.producer = FakeProducer(kerr.NotEnoughReplicasError())
    done = c.invoke(Op("invoke", "send", 3, [1, 42]))
    assert done.type == "info"
    plain = KafkaPythonQueueClient("queue", 2, -1)
    plain.producer = FakeProducer(kerr.NotEnoughReplicasError())
    assert plain.invoke(Op("invoke", "send", 3, [1, 42])).type == "fail"


def test_the_idempotent_option_reaches_the_real_producers_configuration():
    from kafkaesque_harness.workloads.queue import QueueWorkload

    client = QueueWorkload({"idempotent": True}).new_client({"acks": "all"})
    assert client.idempotent is True
    assert QueueWorkload({}).new_client({"acks": "all"}).idempotent is False


class BrokerThread:
    """The reference broker's Kafka listener on a free localhost port, leading one partition of `queue` alone
    (min ISR 1, so each append commits at once), its loop in a thread. `answers` replaces the answers to the
    first produce requests: each request is appended as usual, then answered with the next code in the list."""

    def __init__(self, tmp_path, answers: list[int]):
        import asyncio
        import socket
        import threading

        from tests.unit.test_broker_groups import NODE, make_broker

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        self.requests: list[tuple[int, int, int]] = []
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            b = self.broker = make_broker(tmp_path)
            for r in [{"type": "register_broker", "broker_id": NODE, "broker_epoch": 5, "incarnation_id": "a",
                       "host": "127.0.0.1", "port": self.port, "fenced": False},
                      {"type": "topic", "topic": "queue", "partitions": 1, "replication_factor": 1,
                       "configs": {"min.insync.replicas": "1"}},
                      {"type": "partition", "topic": "queue", "partition": 0, "replicas": [NODE], "isr": [NODE],
                       "leader": NODE, "leader_epoch": 0, "partition_epoch": 0}]:
                b.image.apply(b.image.offset + 1, r)
            b.apply_metadata({("queue", 0)})
            produce = b.produce

            async def answered(*args, **kwargs):
                result = await produce(*args, **kwargs)
                self.requests.append(result)
                return (answers.pop(0), -1, -1) if answers else result

            b.produce = answered

            async def serve() -> None:
                self.server = await b.listener().start("127.0.0.1", self.port)
                ready.set()
                await self.server.serve_forever()

            try:
                self.loop.run_until_complete(serve())
            except BaseException:  # noqa: BLE001 - stopped
                pass

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def values(self) -> list[tuple[int, bytes]]:
        from kafkaesque_harness.clusters.broker.log import iter_all_records

        log = self.broker.replicas[("queue", 0)].log
        return [(rec.offset, rec.value) for _, rec in iter_all_records(log.read(0, 1 << 20))]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(lambda: [t.cancel() for t in __import__("asyncio").all_tasks(self.loop)])
        self.thread.join(5)


def confluent_send(tmp_path, answers: list[int]) -> tuple[Op, list[tuple[int, bytes]]]:
    pytest.importorskip("confluent_kafka")
    from kafkaesque_harness.workloads.confluent import ConfluentQueueClient

    broker = BrokerThread(tmp_path, answers)
    client = ConfluentQueueClient("queue", 1, -1)
    try:
        client.open(f"127.0.0.1:{broker.port}")
        done = client.invoke(Op("invoke", "send", 3, [0, 7463]))
        client.close()
        return done, broker.values()
    finally:
        broker.stop()


def test_librdkafka_resends_a_batch_answered_not_leader_and_the_client_says_so(tmp_path):
    """retries=0 notwithstanding, librdkafka re-sends a batch answered NOT_LEADER_OR_FOLLOWER (it takes the
    answer as "not persisted"). A leader that stops leading gives that answer to a produce it has appended, so
    the value may be in the log twice: the completion records the client's requests (the checkers count the
    copies apart, not as a duplicate)."""
    from kafkaesque_harness.clusters.broker import rpc

    done, values = confluent_send(tmp_path, [rpc.NOT_LEADER_OR_FOLLOWER])
    assert values == [(0, b"7463"), (1, b"7463")]
    assert (done.type, done.value) == ("ok", [0, [1, 7463]])
    assert done.extra["resent"]["requests"] == 2
    assert "Not leader" in done.extra["resent"]["errors"][0]


def test_a_resent_send_finally_refused_is_info_not_fail(tmp_path):
    """NOT_ENOUGH_REPLICAS alone means "not appended" (fail), but here an earlier request was appended first."""
    from kafkaesque_harness.clusters.broker import rpc

    done, values = confluent_send(tmp_path, [rpc.NOT_LEADER_OR_FOLLOWER, rpc.NOT_ENOUGH_REPLICAS])
    assert values == [(0, b"7463"), (1, b"7463")]
    assert done.type == "info" and "NOT_ENOUGH_REPLICAS" in done.error
    assert done.extra["resent"]["requests"] == 2


def test_a_send_in_one_request_carries_no_resent(tmp_path):
    from kafkaesque_harness.clusters.broker import rpc

    done, values = confluent_send(tmp_path, [rpc.NOT_ENOUGH_REPLICAS])
    assert values == [(0, b"7463")]  # (the fake appends, then refuses: the real broker checks first)
    assert done.type == "fail" and not done.extra
    done, _ = confluent_send(tmp_path / "ok", [])
    assert (done.type, done.value, done.extra) == ("ok", [0, [0, 7463]], None)


def test_a_group_member_whose_revocation_never_comes_is_dropped_not_closed():
    """close() would run the rebalance callback itself, and its rd_kafka_assign() can wait forever holding the
    GIL (librdkafka issue 4041): the whole harness froze. A member still assigned after the drain is dropped
    unclosed, as a crash drops it."""
    from kafkaesque_harness.workloads.confluent import close_confluent_consumer

    member = FakeGroupMember(assigned=[0])  # the coordinator never answers: the revocation never comes
    close_confluent_consumer(member, subscribed=True, drain_s=0.05)
    assert member.calls == ["unsubscribe"]


def test_a_commit_whose_partitions_came_back_with_errors_is_a_commit_error_not_committed():
    """confluent-kafka's synchronous commit() raises for the request; a partition's own error comes back in
    its TopicPartition. Such a partition was not committed, so the op must not claim it was."""
    from confluent_kafka import KafkaError

    from kafkaesque_harness.history import Op
    from kafkaesque_harness.workloads.confluent import ConfluentQueueClient

    class Record:
        def __init__(self, offset, value):
            self._offset, self._value = offset, value

        def error(self):
            return None

        def partition(self):
            return 2

        def offset(self):
            return self._offset

        def value(self):
            return str(self._value).encode()

    class Member:
        def __init__(self, error):
            self.error = error

        def consume(self, num_messages, timeout):
            return [Record(1818, 7681), Record(1819, 7686)]

        def commit(self, offsets, asynchronous):
            # what confluent-kafka gives back: each partition with its committed offset and its own error
            return [Answered(tp.partition, tp.offset, self.error) for tp in offsets]

    class Answered:
        def __init__(self, partition, offset, error):
            self.partition, self.offset, self.error = partition, offset, error

    for error, committed in ((None, {"2": 1820}), (KafkaError(KafkaError.NOT_COORDINATOR), None)):
        client = ConfluentQueueClient("queue", 4, -1, group="g")
        client.consumer = Member(error)
        done = client.invoke(Op(type="invoke", f="poll", process=1, value=None))
        assert done.type == "ok" and done.value == {"2": [[1818, 7681], [1819, 7686]]}
        assert (done.extra or {}).get("committed") == committed
        assert committed is not None or "partition 2" in done.extra["commit_error"]
        # the checker needs what a failed commit tried (it may have been applied: NOT_COORDINATOR is not definite)
        assert committed is not None or done.extra["commit_offsets"] == {"2": 1820}


def test_the_rebalances_during_a_poll_ride_on_its_completion_once():
    """The client library calls back from inside consume(); the poll's completion carries what it was told (the
    lost-commit check judges a member's first read of a partition against the time it was assigned)."""
    from kafkaesque_harness.history import Op
    from kafkaesque_harness.workloads.confluent import ConfluentQueueClient

    client = ConfluentQueueClient("queue", 4, -1, group="g")

    class Member:
        def consume(self, num_messages, timeout):
            client.journal("revoked", [3, 1])
            client.journal("assigned", [2, 0])
            return []

    client.consumer = Member()
    done = client.invoke(Op(type="invoke", f="poll", process=1, value=None))
    assert done.extra["rebalance_log"] == [{"keys": [1, 3], "type": "revoked"}, {"keys": [0, 2], "type": "assigned"}]
    client.consumer.consume = lambda num_messages, timeout: []
    assert client.invoke(Op(type="invoke", f="poll", process=1, value=None)).extra is None


def test_a_closed_clients_group_member_leaves_its_group_and_serves_the_workers_next_process():
    """A confluent-kafka member cannot be closed safely, and parking one per retired process filled a broker's
    connection limit in five minutes: the next process takes the member over and joins again as its own."""
    from kafkaesque_harness.history import Op
    from kafkaesque_harness.workloads import base
    from kafkaesque_harness.workloads.confluent import ConfluentQueueClient, SpareMembers

    class Member:
        def __init__(self):
            self.calls = []
            self.on_assign = None
            self.assigned = [0, 1]  # until the revocation is served

        def unsubscribe(self):
            self.calls.append("unsubscribe")

        def assignment(self):
            return self.assigned

        def subscribe(self, topics, on_assign, on_revoke):
            self.calls.append("subscribe")
            self.on_assign = on_assign

        def consume(self, num_messages, timeout):
            if self.on_assign is None:  # left the group: consume() serves the revocation
                self.calls.append("revoked")
                self.assigned = []
            else:
                self.on_assign(self, [])  # the rebalance goes to whoever subscribed last
            return []

    members = SpareMembers()
    first = ConfluentQueueClient("queue", 4, -1, group="g", members=members)
    member = first.consumer = Member()
    first.close()
    # it left the group and its revocation was served before it was handed on
    assert member.calls == ["unsubscribe", "revoked"] and any(c is member for c in base.PARKED_CONSUMERS)
    second = ConfluentQueueClient("queue", 4, -1, group="g", members=members)
    done = second.invoke(Op(type="invoke", f="poll", process=9, value=None))
    assert second.consumer is member and member.calls == ["unsubscribe", "revoked", "subscribe"]
    assert done.extra["rebalance_log"] == [{"keys": [], "type": "assigned"}]  # journaled by the new process
    assert members.take() is None  # one handle, one process at a time

    class Gone(Member):
        def unsubscribe(self):
            raise RuntimeError("broker gone")

    gone = Gone()
    members.put(gone)  # a member that cannot even leave is parked, never handed on
    assert members.take() is None and any(c is gone for c in base.PARKED_CONSUMERS)
    base.PARKED_CONSUMERS[:] = [c for c in base.PARKED_CONSUMERS if c is not member and c is not gone]


def test_both_libraries_rebalance_callbacks_journal_the_partitions_in_order():
    """workloads/base.py's callbacks, which the queue and txn workloads subscribe with."""
    from types import SimpleNamespace

    from kafkaesque_harness.workloads.confluent import confluent_rebalance_callbacks
    from kafkaesque_harness.workloads.kafka_python import kafka_python_rebalance_listener

    seen = []
    tps = [SimpleNamespace(partition=p) for p in (3, 0, 2)]
    callbacks = confluent_rebalance_callbacks(lambda kind, keys: seen.append((kind, keys)))
    callbacks["on_revoke"](None, tps)
    callbacks["on_assign"](None, tps[:1])
    listener = kafka_python_rebalance_listener(lambda kind, keys: seen.append((kind, keys)))
    listener.on_partitions_revoked(tps)
    listener.on_partitions_assigned([])
    assert seen == [("revoked", [0, 2, 3]), ("assigned", [3]), ("revoked", [0, 2, 3]), ("assigned", [])]
