"""The queue client's outcome mapping: ok only when acknowledged, fail only when definitely not applied."""

import kafka.errors as kerr
import pytest

from history import Op
from workloads.queue import KafkaPythonQueueClient, send_outcome


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
    from workloads.queue import QueueWorkload

    client = QueueWorkload({"idempotent": True}).new_client({"acks": "all"})
    assert client.idempotent is True
    assert QueueWorkload({}).new_client({"acks": "all"}).idempotent is False
