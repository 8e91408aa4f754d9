"""The reference broker with real processes on loopback and unmodified Kafka clients (issue 2's must-show)."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError

pytestmark = pytest.mark.integration

N = 10_000


def consume_all(bootstrap: str, topic: str, partition: int, expected: int, timeout: float = 30) -> list[tuple[int, bytes]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                      consumer_timeout_ms=2000, request_timeout_ms=5000)
    tp = TopicPartition(topic, partition)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            out += [(r.offset, r.value) for r in records]
    c.close()
    return out


def assert_logs_identical_below_hwm(cluster, topic: str, partition: int = 0) -> None:
    """Log Matching (PROTOCOL.md 8): every replica holds the same records below the HWM."""

    def views_once_every_replica_knows_a_hwm():
        views = []
        for i in cluster.broker_ports:
            st = cluster.broker_state(i)
            assert st is not None
            views += [(i, p) for p in st["partitions"] if p["topic"] == topic and p["partition"] == partition]
        return views if views and min(p["hwm"] for _, p in views) > 0 else None

    # A follower learns the HWM on its next fetch, which may still be long-polling when the
    # client is done: wait until every replica has heard of a positive HWM, then compare.
    views = cluster.wait_for(views_once_every_replica_knows_a_hwm, timeout=15,
                             what=f"every replica of {topic}-{partition} to learn a positive HWM")
    hwm = min(p["hwm"] for _, p in views)
    assert hwm > 0
    reference = [tuple(r) for r in views[0][1]["log"] if r[0] < hwm]
    for i, p in views[1:]:
        assert [tuple(r) for r in p["log"] if r[0] < hwm] == reference, f"broker {i} diverges below HWM {hwm}"


def test_kafka_python_produces_and_consumes_10k_acks_all(local_cluster):
    local_cluster.create_topic("kp", partitions=1, rf=3, min_isr=2)
    p = KafkaProducer(bootstrap_servers=local_cluster.bootstrap.split(","), acks="all", linger_ms=5)
    futures = [p.send("kp", value=str(i).encode(), partition=0) for i in range(N)]
    p.flush(60)
    offsets = [f.get(timeout=30).offset for f in futures]
    p.close()
    assert offsets == list(range(N))
    got = consume_all(local_cluster.bootstrap, "kp", 0, N)
    assert [v for _, v in got] == [str(i).encode() for i in range(N)]
    local_cluster.wait_for(lambda: all(
        p["hwm"] == N for i in local_cluster.broker_ports for p in local_cluster.broker_state(i, False)["partitions"]),
        what="every replica's HWM at the end")
    assert_logs_identical_below_hwm(local_cluster, "kp")


def test_confluent_kafka_produces_and_consumes_10k_acks_all(local_cluster):
    local_cluster.create_topic("ck", partitions=1, rf=3, min_isr=2)
    p = CKProducer({"bootstrap.servers": local_cluster.bootstrap, "acks": "all", "linger.ms": 5})
    acked, errors = [], []

    def on_delivery(err, msg):
        (errors if err else acked).append(err or msg.offset())

    for i in range(N):
        p.produce("ck", value=str(i).encode(), partition=0, on_delivery=on_delivery)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors and sorted(acked) == list(range(N))
    c = CKConsumer({"bootstrap.servers": local_cluster.bootstrap, "group.id": "unused",
                    "enable.auto.commit": False})
    c.assign([CKTopicPartition("ck", 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < N and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
        elif m is not None and m.error().code() != CKError._PARTITION_EOF:
            raise AssertionError(m.error())
    c.close()
    assert values == [str(i).encode() for i in range(N)]
    assert_logs_identical_below_hwm(local_cluster, "ck")


def test_leader_kill_elects_from_isr_keeps_acked_records_and_the_old_leader_rejoins(local_cluster):
    local_cluster.create_topic("fo", partitions=1, rf=3, min_isr=2)
    before = local_cluster.partition("fo")
    leader = before["leader"]
    p = KafkaProducer(bootstrap_servers=local_cluster.bootstrap.split(","), acks="all", linger_ms=1,
                      request_timeout_ms=4000, retries=10, retry_backoff_ms=200)
    acked: dict[int, bytes] = {}
    for i in range(600):
        if i == 200:
            local_cluster.kill(leader)
        f = p.send("fo", value=f"v{i}".encode(), partition=0)
        try:
            acked[f.get(timeout=30).offset] = f"v{i}".encode()
        except Exception:  # noqa: BLE001 - an unacknowledged send may or may not be there
            pass
    p.close()
    after = local_cluster.partition("fo")
    assert after["leader"] != leader and after["leader"] in before["isr"]
    assert after["leader_epoch"] > before["leader_epoch"]
    assert len(acked) >= 500
    got = dict(consume_all(local_cluster.bootstrap, "fo", 0, max(acked) + 1))
    assert all(got.get(o) == v for o, v in acked.items()), "an acknowledged record was lost"
    # The killed leader comes back, truncates what it alone had, catches up and rejoins the ISR.
    local_cluster.rejoin(leader, "fo", timeout=40)
    assert_logs_identical_below_hwm(local_cluster, "fo")


def test_min_isr_rejects_acks_all_but_not_acks_1_when_two_replicas_are_down(local_cluster):
    local_cluster.create_topic("mi", partitions=1, rf=3, min_isr=2)
    leader = local_cluster.partition("mi")["leader"]
    for i in local_cluster.broker_ports:
        if i != leader:
            local_cluster.kill(i)
    local_cluster.wait_for(lambda: local_cluster.partition("mi")["isr"] == [leader], timeout=20,
                           what="the ISR to shrink to the leader")
    p_all = KafkaProducer(bootstrap_servers=[f"127.0.0.1:{local_cluster.broker_ports[leader]}"], acks="all",
                          retries=0, request_timeout_ms=5000)
    with pytest.raises(NotEnoughReplicasError):
        p_all.send("mi", value=b"x", partition=0).get(timeout=20)
    p_all.close()
    p_one = KafkaProducer(bootstrap_servers=[f"127.0.0.1:{local_cluster.broker_ports[leader]}"], acks=1,
                          retries=0, request_timeout_ms=5000)
    assert p_one.send("mi", value=b"y", partition=0).get(timeout=20).offset >= 0
    p_one.close()


def test_malformed_request_closes_the_connection_and_the_broker_keeps_serving(local_cluster):
    port = local_cluster.broker_ports[1]
    # A truncated request (the client dies mid-frame) must not hurt the broker either.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack(">i", 100) + b"\x00\x03")
    for junk in (struct.pack(">i", 5) + b"\x00\x03\x00\x01\x00",                  # shorter than a header
                 struct.pack(">i", 12) + b"\x00\x00\x00\x63" + b"\xff" * 8,       # Produce v99
                 struct.pack(">i", 16) + b"\x00\x03\x00\x0c" + b"\x00" * 4 + b"\xff" * 8,  # Metadata v12, garbage
                 struct.pack(">i", 9) + b"{not json"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(5)
            assert s.recv(100) == b""  # closed by the broker
    local_cluster.create_topic("alive", partitions=1, rf=3, min_isr=2)
    p = KafkaProducer(bootstrap_servers=local_cluster.bootstrap.split(","), acks="all")
    assert p.send("alive", value=b"ok", partition=0).get(timeout=20).offset == 0
    p.close()
    log = (local_cluster.root / "broker-1" / "broker.log").read_text()
    assert '"event": "bad_request"' in log


def test_sigterm_is_a_controlled_shutdown_that_hands_off_leadership_and_restarts_clean(local_cluster):
    local_cluster.create_topic("cs", partitions=1, rf=3, min_isr=2)
    before = local_cluster.partition("cs")
    leader = before["leader"]
    p = KafkaProducer(bootstrap_servers=local_cluster.bootstrap.split(","), acks="all")
    for i in range(50):
        p.send("cs", value=f"c{i}".encode(), partition=0)
    p.flush(30)
    epoch = local_cluster.broker_state(leader, include_log=False)["broker_epoch"]
    assert local_cluster.stop(leader) == 0
    after = local_cluster.partition("cs")
    assert after["leader"] not in (leader, -1) and after["leader_epoch"] > before["leader_epoch"]
    # Still writable with acks=all while it is away (two replicas left, min ISR 2).
    assert p.send("cs", value=b"after", partition=0).get(timeout=20).offset == 50
    p.close()
    local_cluster.rejoin(leader, "cs")
    events = local_cluster.log_events(leader)
    starts = [e for e in events if e.get("event") == "broker_started"]
    assert starts[0]["previous_broker_epoch"] == -1 and starts[-1]["previous_broker_epoch"] == epoch
    assert any(e.get("event") == "controlled_shutdown_done" for e in events)
    got = consume_all(local_cluster.bootstrap, "cs", 0, 51)
    assert [v for _, v in got] == [f"c{i}".encode() for i in range(50)] + [b"after"]
    assert_logs_identical_below_hwm(local_cluster, "cs")


def test_an_old_leader_truncates_its_unreplicated_acks_1_suffix_on_rejoin(local_cluster):
    """004 / PROTOCOL.md 2: the divergent suffix (never replicated, acks=1) is cut by leader-epoch
    truncation when the old leader comes back as a follower."""
    local_cluster.create_topic("dv", partitions=1, rf=3, min_isr=2)
    leader = local_cluster.partition("dv")["leader"]
    followers = [i for i in local_cluster.broker_ports if i != leader]
    p1 = KafkaProducer(bootstrap_servers=[f"127.0.0.1:{local_cluster.broker_ports[leader]}"], acks=1, retries=0)
    for i in range(5):
        p1.send("dv", value=f"base{i}".encode(), partition=0).get(timeout=20)
    local_cluster.wait_for(lambda: all(local_cluster.broker_state(i, False)["partitions"][0]["leo"] == 5
                                       for i in followers), what="followers at offset 5")
    for i in followers:
        local_cluster.pause(i)
    time.sleep(0.4)  # pending long polls (100 ms) are answered empty before the next appends
    for i in range(3):
        assert p1.send("dv", value=f"lost{i}".encode(), partition=0).get(timeout=5).offset == 5 + i
    local_cluster.kill(leader)
    for i in followers:
        local_cluster.resume(i)
    p1.close()
    local_cluster.wait_for(lambda: local_cluster.partition("dv")["leader"] in followers, timeout=20,
                           what="a new leader among the followers")
    p = KafkaProducer(bootstrap_servers=[f"127.0.0.1:{local_cluster.broker_ports[i]}" for i in followers],
                      acks="all", retries=5)
    for i in range(4):
        p.send("dv", value=f"new{i}".encode(), partition=0).get(timeout=20)
    p.close()
    local_cluster.rejoin(leader, "dv")
    events = local_cluster.log_events(leader)
    cuts = [e for e in events if e.get("event") == "truncated_on_divergence"]
    assert cuts and cuts[0]["from"] == 8 and cuts[0]["to"] == 5, cuts
    got = consume_all(local_cluster.bootstrap, "dv", 0, 9)
    assert [v for _, v in got] == [f"base{i}".encode() for i in range(5)] + [f"new{i}".encode() for i in range(4)]
    local_cluster.wait_for(lambda: local_cluster.broker_state(leader, False)["partitions"][0]["hwm"] == 9,
                           what="the rejoined broker's HWM")
    assert_logs_identical_below_hwm(local_cluster, "dv")


def test_pending_acks_all_fails_after_append_when_the_isr_drops_below_min_isr(local_cluster):
    """002 2.6: appended, then both followers stop (SIGSTOP); once the ISR is below min ISR the
    waiting request ends with NOT_ENOUGH_REPLICAS_AFTER_APPEND instead of timing out."""
    local_cluster.create_topic("aa", partitions=1, rf=3, min_isr=2)
    leader = local_cluster.partition("aa")["leader"]
    followers = [i for i in local_cluster.broker_ports if i != leader]
    p = KafkaProducer(bootstrap_servers=[f"127.0.0.1:{local_cluster.broker_ports[leader]}"], acks="all",
                      retries=0, request_timeout_ms=20000)
    assert p.send("aa", value=b"ok", partition=0).get(timeout=20).offset == 0
    for i in followers:
        local_cluster.pause(i)
    try:
        t0 = time.monotonic()
        with pytest.raises(NotEnoughReplicasAfterAppendError):
            p.send("aa", value=b"pending", partition=0).get(timeout=20)
        assert time.monotonic() - t0 < 15  # answered when the ISR shrank, not at the request timeout
    finally:
        for i in followers:
            local_cluster.resume(i)
    p.close()
    # The record stayed in the leader's log: it commits once the followers are back.
    local_cluster.wait_for(lambda: local_cluster.broker_state(leader, False)["partitions"][0]["hwm"] == 2,
                           timeout=30, what="the HWM past the pending record once the ISR regrows")


def _raw_produce(port: int, topic: str, records: bytes, cid: int) -> tuple[int, int]:
    """One Produce v9 over a plain socket (to resend the very same batch, as a retry does)."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    R = ProduceRequest
    req = R(version=9, transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[R.TopicProduceData(
        name=topic, partition_data=[R.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    req.with_header(correlation_id=cid, client_id="raw")
    payload = bytes(req.encode(header=True))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        data = s.recv(size, socket.MSG_WAITALL)
    pr = ProduceResponse[9].decode(data, header=True).responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def test_idempotent_retry_is_acknowledged_once_and_a_sequence_gap_is_rejected(local_cluster):
    from kafkaesque_harness.clusters.broker.log import build_batch

    local_cluster.create_topic("idem", partitions=1, rf=3, min_isr=2)
    port = local_cluster.broker_ports[local_cluster.partition("idem")["leader"]]
    first = build_batch([b"a", b"b"], producer_id=4242, producer_epoch=0, base_sequence=0)
    assert _raw_produce(port, "idem", first, 1) == (0, 0)
    assert _raw_produce(port, "idem", first, 2) == (0, 0)  # the retry: original offset, no second append
    assert _raw_produce(port, "idem", build_batch([b"c"], producer_id=4242, producer_epoch=0, base_sequence=2),
                        3) == (0, 2)
    gap = build_batch([b"z"], producer_id=4242, producer_epoch=0, base_sequence=9)
    assert _raw_produce(port, "idem", gap, 4)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    leader = local_cluster.partition("idem")["leader"]
    assert local_cluster.broker_state(leader, False)["partitions"][0]["leo"] == 3
    got = consume_all(local_cluster.bootstrap, "idem", 0, 3, timeout=10)
    assert [v for _, v in got] == [b"a", b"b", b"c"]
