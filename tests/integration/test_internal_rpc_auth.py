"""The internal RPC is closed to Kafka clients (issue 20 item 4): a frame without the cluster's secret,
sent to a broker's Kafka port or to a controller, is never served, so a forged replica fetch cannot
make the leader count stopped followers as caught up, and acks=all still waits for real followers."""

from __future__ import annotations

import json
import socket
import struct
import threading

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from kafkaesque_harness.clusters.broker import rpc

pytestmark = pytest.mark.integration


def forged_frame(api: str, body: dict, cid: int = 1) -> bytes:
    """An internal RPC request as any client can write it: the JSON frame without the cluster's secret."""
    data = json.dumps({"api": api, "id": cid, "body": body}).encode()
    return struct.pack(">i", len(data)) + data


def send_forged(port: int, frames: list[bytes]) -> None:
    """Write the frames on one fresh connection and go (an attacker need not read the answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            for frame in frames:
                s.sendall(frame)
    except OSError:
        pass  # the broker closed the connection under us: that is the point


def forge_fetches_until(stop: threading.Event, port: int, topic: str, followers: list[int], leader_epoch: int,
                        offsets: range) -> None:
    """The measured attack: replica fetches in the stopped followers' names at every offset up to the
    leader's log end, over and over (each fetch at the log end makes a follower look caught up)."""
    while not stop.is_set():
        frames = [forged_frame("replica_fetch", {
            "replica_id": f, "broker_epoch": 0, "topic": topic, "partition": 0, "fetch_offset": off,
            "last_fetched_epoch": leader_epoch, "current_leader_epoch": leader_epoch, "max_bytes": 1024,
            "max_wait_ms": 0}) for off in offsets for f in followers]
        send_forged(port, frames)
        stop.wait(0.05)


def test_a_forged_replica_fetch_on_the_kafka_port_does_not_acknowledge_acks_all_without_followers(local_cluster):
    local_cluster.create_topic("forged", partitions=1, rf=3, min_isr=2)
    part = local_cluster.wait_for(lambda: (p := local_cluster.partition("forged"))["leader"] > 0
                                  and len(p["isr"]) == 3 and p, what="all three replicas in the ISR")
    leader, epoch = part["leader"], part["leader_epoch"]  # both public: any client's Metadata shows them
    followers = [i for i in local_cluster.broker_ports if i != leader]
    port = local_cluster.broker_ports[leader]
    producer = KafkaProducer(bootstrap_servers=[f"127.0.0.1:{port}"], acks="all", retries=0,
                             request_timeout_ms=8000, linger_ms=0)
    assert producer.send("forged", value=b"before", partition=0).get(timeout=20).offset == 0
    for i in followers:
        local_cluster.pause(i)
    stop = threading.Event()
    attacker = threading.Thread(target=forge_fetches_until,
                                args=(stop, port, "forged", followers, epoch, range(1, 5)), daemon=True)
    try:
        attacker.start()
        futures = [producer.send("forged", value=f"only-on-the-leader-{i}".encode(), partition=0) for i in range(3)]
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f"acknowledged at offset {f.get(timeout=30).offset}")
            except KafkaError as e:
                outcomes.append(type(e).__name__)
        stop.set()
        attacker.join(10)
        # Not one write was acknowledged while only the leader held it (002 2.5: acks=all commits on the ISR).
        assert not [o for o in outcomes if o.startswith("acknowledged")], outcomes
        hwm = local_cluster.broker_state(leader, include_log=False)["partitions"][0]["hwm"]
        assert hwm == 1, f"the leader's HWM moved past what the stopped followers hold: {hwm}"
    finally:
        stop.set()
        for i in followers:
            local_cluster.resume(i)
    # The real followers, back, are what acks=all waits for: a write now commits.
    local_cluster.wait_for(lambda: len(local_cluster.partition("forged")["isr"]) >= 2, timeout=30,
                           what="a real follower back in the ISR")
    assert producer.send("forged", value=b"after", partition=0).get(timeout=30).offset >= 1
    producer.close()
    log = (local_cluster.root / f"broker-{leader}" / "broker.log").read_text()
    rejected = [json.loads(line) for line in log.splitlines()
                if line.startswith("{") and '"bad_request"' in line]
    assert rejected and all(r.get("reason") == "unauthenticated internal request" for r in rejected), rejected[:3]


def answer_to(port: int, frame: bytes) -> bytes:
    """What the node sends back before closing (b"": nothing; a reset counts as closed too)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(frame)
        s.settimeout(5)
        try:
            return s.recv(100)
        except ConnectionResetError:
            return b""


def refusals(log_path) -> list[dict]:
    return [e for e in (json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{"))
            if e.get("event") == "bad_request"]


def test_no_internal_api_is_served_without_the_secret_on_a_broker_or_the_controller(local_cluster):
    epoch = {b["broker_id"]: b["broker_epoch"] for b in local_cluster.controller_state()["brokers"]}[1]
    # Bodies that would change the cluster if they were served: a topic, a registration, broker 1 told to
    # shut down or forgotten, an unclean election.
    bodies = {
        "create_topic": {"topic": "forged", "partitions": 1, "replication_factor": 1, "configs": {}},
        "broker_registration": {"broker_id": 99, "incarnation_id": "x", "host": "127.0.0.1", "port": 1,
                                "previous_broker_epoch": -1},
        "broker_heartbeat": {"broker_id": 1, "broker_epoch": epoch, "want_fence": True, "want_shutdown": True,
                             "metadata_offset": 0},
        "unregister_broker": {"broker_id": 1},
        "elect_leader": {"topic": "forged", "partition": 0, "broker_id": 1},
    }
    ports = {"broker-1": local_cluster.broker_ports[1], "controller": local_cluster.controller_port}
    for node, port in ports.items():
        for api in sorted(rpc.API):
            assert answer_to(port, forged_frame(api, bodies.get(api, {}))) == b"", f"{node} answered {api}"
    state = local_cluster.controller_state()
    assert "forged" not in [t["topic"] for t in state["topics"]]
    assert {b["broker_id"]: b["fenced"] for b in state["brokers"]} == {1: False, 2: False, 3: False}
    for log in (local_cluster.root / "broker-1" / "broker.log", local_cluster.root / "controller" / "controller.log"):
        lines = refusals(log)
        assert [e["reason"] for e in lines] == ["unauthenticated internal request"] * len(rpc.API), log
