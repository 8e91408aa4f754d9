"""An independent probe of kafka-python's re-read from offset 0 (docs/FINDINGS.md, kafka-python 3.0.12,
finding 1), with no harness code: the reference broker as processes on loopback, a pause and a one-way cut,
and unmodified consumers of kafka-python and of librdkafka (confluent-kafka).

The fault is the one of issue 38's runs, made on purpose. Broker 1 leads partition 0 of `probe` (three
replicas, min ISR 2) in leader epoch 0; both consumers (assign, from offset 0, never seek) read its first
records from it. Broker 1 is paused (SIGSTOP), and one iptables rule drops what the controller sends to
broker 1 (broker 1 reaches the controller at 127.0.0.2; the rule keeps TCP's handshakes and bare
acknowledgements, so broker 1's own requests still arrive). The controller fences broker 1 and elects
another leader in epoch 1, which takes more records; the consumers read them (epoch 1). Then broker 1
resumes: its heartbeats reach the controller, which unfences it, so the other brokers list it again, but it
never hears of epoch 1. It is a deposed leader that still answers Metadata (leader: itself, epoch 0) and
Fetch (its log ends where epoch 0 ended). For --seconds both consumers keep polling while a producer adds
records to the real leader. Client settings are the queue workload's where they matter (request timeout 3 s,
kafka-python's metadata refresh); librdkafka's metadata refresh and socket timeout are shortened alike, or it
would sit on the paused broker for its 60 s socket timeout.

KIP-320 has the client keep the newest leader epoch it knows and ignore metadata that names an older one
(Java's Metadata.updateLatestMetadata, librdkafka's rd_kafka_toppar_leader_update). A client that takes the
deposed leader's word fetches from it with current_leader_epoch 0, which passes the epoch fence, at an offset
its log cannot place: OFFSET_OUT_OF_RANGE, which Kafka answers too (its leader epoch cache does not know
epoch 1), and the consumer resets to auto.offset.reset=earliest: it reads the partition again from 0.

    sudo .venv/bin/python benchmarks/zombie_leader_reset_probe.py --seconds 15     (root: iptables)

It prints each re-read, the client's own log lines about it, and what broker 1 answered that consumer (its
protocol trace: metadata_answered, consumer_fetch_refused, list_offsets_answered). Exit 1 when a consumer
re-read (the finding), 0 when not.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from probe_cluster import ProbeCluster, ask  # a sibling script: benchmarks/ is on the path

from kafkaesque_harness.workloads.kafka_python import produce_one_by_one

TOPIC = "probe"
ZOMBIE = 1
T0 = time.monotonic()


def say(*parts: Any) -> None:
    print(f"{time.monotonic() - T0:7.3f}", *parts, flush=True)


class ClientLog(logging.Handler):
    """The lines of a client library's log that say what it did with the deposed leader's answers."""

    def __init__(self, who: str, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.who, self.keys = who, keys

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if any(k in msg for k in self.keys):
            say(f"   [{self.who}] {msg[:220]}")


def cut_rule(controller_port: int) -> list[str]:
    # what the controller sends to broker 1 (which reaches it at 127.0.0.2), longer than a bare TCP segment
    return ["OUTPUT", "-o", "lo", "-p", "tcp", "-s", "127.0.0.2", "--sport", str(controller_port),
            "-m", "length", "--length", "61:65535", "-j", "DROP"]


def produce(bootstrap: str, values: range) -> None:
    """acks=all, one record at a time (the writes the consumers under test read)."""
    produce_one_by_one(bootstrap, TOPIC, values)


def consume(client: str, bootstrap: str, stop: threading.Event, rereads: dict[str, list], reached: dict[str, int],
            client_ids: dict[str, str]) -> None:
    previous = -1

    def got(offset: int) -> None:
        nonlocal previous
        if offset <= previous:  # the position went back: one line per jump
            rereads[client].append((previous, offset))
            say(f"{client}: RE-READ from offset {offset} after having read offset {previous}")
        previous = offset
        reached[client] = max(reached[client], offset)

    if client == "kafka-python":
        c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                          auto_offset_reset="earliest", request_timeout_ms=3000, fetch_max_wait_ms=100,
                          metadata_max_age_ms=2000, reconnect_backoff_max_ms=500, client_id="probe-kafka-python")
        tp = TopicPartition(TOPIC, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        client_ids[client] = "probe-kafka-python"
        while not stop.is_set():
            for recs in c.poll(timeout_ms=100).values():
                for r in recs:
                    got(r.offset)
    else:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as CTopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 2000,
                      "socket.timeout.ms": 3000, "fetch.wait.max.ms": 100, "client.id": "probe-librdkafka",
                      "debug": "topic,metadata,fetch",
                      "logger": logging.getLogger("librdkafka")})
        c.assign([CTopicPartition(TOPIC, 0, 0)])
        client_ids[client] = "probe-librdkafka"
        while not stop.is_set():
            for m in c.consume(num_messages=500, timeout=0.1):
                if m.error() is None:
                    got(m.offset())
    c.close()


def zombie_answers(cluster: ProbeCluster) -> None:
    """Broker 1's own answers, asked directly: what a client that reaches it is told."""
    port = cluster.ports[ZOMBIE]
    md = ask(port, MetadataRequest(version=12, topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name=TOPIC)],
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=False),
             MetadataResponse)
    p = md.topics[0].partitions[0]
    say(f"broker {ZOMBIE} answers Metadata: leader {p.leader_id}, leader epoch {p.leader_epoch}, brokers "
        f"{sorted(b.node_id for b in md.brokers)}")
    R = FetchRequest
    for current, last in ((1, 1), (0, 1), (0, -1)):
        req = R(version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                topics=[R.FetchTopic(topic=TOPIC, partitions=[R.FetchTopic.FetchPartition(
                    partition=0, current_leader_epoch=current, fetch_offset=200, last_fetched_epoch=last,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])])
        part = ask(port, req, FetchResponse).responses[0].partitions[0]
        say(f"broker {ZOMBIE} answers Fetch(offset 200, current_leader_epoch {current}, last_fetched_epoch {last}): "
            f"error {part.error_code}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--clients", default="kafka-python,confluent-kafka")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("the probe cuts broker 1 off from the controller with iptables: run it as root")
    logging.getLogger("kafka.consumer.fetcher").addHandler(ClientLog("kafka-python", ("out of range", "Resetting offset")))
    logging.getLogger("kafka.consumer.fetcher").setLevel(logging.INFO)
    rdk = logging.getLogger("librdkafka")
    rdk.addHandler(ClientLog("librdkafka", ("outdated", "out of range", "reset")))
    rdk.setLevel(logging.DEBUG)
    rdk.propagate = False
    clients = args.clients.split(",")
    with ProbeCluster(3, controller_address={ZOMBIE: "127.0.0.2"}) as cluster:
        rule = cut_rule(cluster.controller_port)
        stop = threading.Event()
        try:
            cluster.create_topic(TOPIC, 1, 3, 2)
            if cluster.partition(TOPIC)["leader"] != ZOMBIE:
                sys.exit(f"broker {ZOMBIE} does not lead {TOPIC}-0 ({cluster.partition(TOPIC)}): the probe needs it to")
            produce(cluster.bootstrap, range(100))
            rereads: dict[str, list] = {c: [] for c in clients}
            reached = {c: -1 for c in clients}
            client_ids: dict[str, str] = {}
            threads = [threading.Thread(target=consume, args=(c, cluster.bootstrap, stop, rereads, reached,
                                                              client_ids), daemon=True) for c in clients]
            for t in threads:
                t.start()
            cluster.wait_for(lambda: min(reached.values()) >= 99, 30, "the consumers to read offsets 0-99")
            say(f"broker {ZOMBIE} leads {TOPIC}-0 in epoch 0; the consumers read 0-99 from it. Pausing it and "
                "dropping what the controller sends it")
            cluster.signal(f"broker-{ZOMBIE}", signal.SIGSTOP)
            subprocess.run(["iptables", "-I", *rule], check=True)
            cluster.wait_for(lambda: cluster.partition(TOPIC)["leader_epoch"] > 0, 30, "a new leader")
            new = cluster.partition(TOPIC)
            others = [b for b in cluster.ports if b != ZOMBIE]
            produce(cluster.address(*others), range(100, 200))
            say(f"broker {new['leader']} leads in epoch {new['leader_epoch']}, offsets 100-199 added")
            cluster.wait_for(lambda: min(reached.values()) >= 199, 60, "the consumers to read offsets 100-199")
            say(f"the consumers read 100-199 (epoch 1); resuming broker {ZOMBIE}")
            cluster.signal(f"broker-{ZOMBIE}", signal.SIGCONT)
            cluster.wait_for(lambda: not cluster.fenced()[ZOMBIE], 30, f"the controller to unfence broker {ZOMBIE}")
            say(f"the controller unfenced broker {ZOMBIE} (its heartbeats arrive); its own view is still epoch 0")
            zombie_answers(cluster)
            producer = KafkaProducer(bootstrap_servers=cluster.address(*others).split(","), acks="all", linger_ms=0,
                                     retries=20, request_timeout_ms=3000)
            n, end = 200, time.monotonic() + args.seconds
            while time.monotonic() < end:
                producer.send(TOPIC, value=str(n).encode(), partition=0).get(timeout=30)
                n += 1
                time.sleep(0.1)
            producer.close()
            stop.set()
            for t in threads:
                t.join(20)
            time.sleep(0.3)  # the trace is flushed every 100 ms
        finally:
            stop.set()
            subprocess.run(["iptables", "-D", *rule], check=False)
        trace = cluster.trace(ZOMBIE)
        say(f"the nodes' logs and traces: {cluster.root}")
    for c in clients:
        cid = client_ids.get(c)
        told = [e for e in trace if e.get("client") == cid and e["event"] in (
            "metadata_answered", "consumer_fetch_refused", "list_offsets_answered") and e.get("leaders") != {}]
        for e in told[:8]:
            facts = {k: e[k] for k in ("leaders", "offset", "current_leader_epoch", "last_fetched_epoch", "error",
                                       "timestamp", "leader_epoch", "leo", "hwm") if k in e}
            say(f"broker {ZOMBIE} -> {cid}: {e['event']} {facts}")
        say(f"{c}: {len(rereads[c])} re-reads; broker {ZOMBIE} answered it {len(told)} times "
            f"({sum(e['event'] == 'consumer_fetch_refused' for e in told)} refused fetches)")
    return 1 if any(rereads.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
