"""kafka-python's reset, provoked for real and read back from the history (issue 38 item 2).

docs/FINDINGS.md (kafka-python 3.0.12, finding 1): a leader paused, replaced, and then cut off one way from the
controller stays a deposed leader that still names itself leader of the old epoch in its Metadata answers;
kafka-python takes that answer, fetches from it, is answered OFFSET_OUT_OF_RANGE, resets to the earliest offset
and reads the partition again from 0. benchmarks/zombie_leader_reset_probe.py makes that deposed leader on
purpose; this test does the same under the queue workload's own clients (several processes, as a run has), so
that their completions carry the client events (history/clients.py), and then checks the history with the
queue checker and the brokers' traces: the re-read is a nonmonotonic-poll whose every example is the client's,
with the deposed leader's refused fetch as the broker answer behind it. 11-25 s here (10 of 10 runs found the
reset); root, for one iptables rule.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.checkers.queue import QueueChecker
from kafkaesque_harness.clusters.broker.local_cluster import broker_argv, controller_argv
from kafkaesque_harness.clusters.trace_files import read_trace
from kafkaesque_harness.history import CLIENT_EVENTS, INVOKE, HistoryWriter, Op, read_history
from kafkaesque_harness.workloads.kafka_python import produce_one_by_one
from kafkaesque_harness.workloads.queue import QueueWorkload
from tests.integration.conftest import TestCluster as LocalCluster

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables") is None,
                                 reason="the deposed leader is cut off from the controller with one iptables rule: root")]

TOPIC = "queue"
PROCESSES = (11, 12, 13, 14)


class EachOwnAddress(LocalCluster):
    """A local cluster whose broker i reaches the controller at 127.0.0.(10+i), so that one iptables rule cuts
    what the controller sends to one broker alone (loopback answers every 127/8 address)."""

    def start_controller(self) -> None:
        d = self.root / "controller"
        d.mkdir(exist_ok=True)
        self._spawn("controller", controller_argv("0.0.0.0", self.controller_port, str(d), self.controller_flags))

    def start_broker(self, i: int) -> None:
        d = self.root / f"broker-{i}"
        d.mkdir(exist_ok=True)
        self._spawn(f"broker-{i}", broker_argv(i, "127.0.0.1", self.broker_ports[i],
                                               f"127.0.0.{10 + i}:{self.controller_port}", str(d), self.flush_policy,
                                               self.variants, self.broker_flags))

    def traces(self) -> dict:
        """The nodes' traces as clusters/trace_files.py hands them to the checkers."""
        nodes = {f"broker-{i}": read_trace(self.root / f"broker-{i}" / "trace.jsonl") for i in self.broker_ports}
        nodes["controller-0"] = read_trace(self.root / "controller" / "trace.jsonl")
        return {"nodes": nodes}


def cut_rule(broker: int, controller_port: int) -> list[str]:
    # what the controller sends to the broker (on the connections the broker made to 127.0.0.(10+i)), beyond a
    # bare TCP segment: the broker's own requests (heartbeats) still arrive, so the controller unfences it
    return ["OUTPUT", "-o", "lo", "-p", "tcp", "-s", f"127.0.0.{10 + broker}", "--sport", str(controller_port),
            "-m", "length", "--length", "61:65535", "-j", "DROP"]


def produce(bootstrap: str, values: range) -> None:
    """acks=all, one record at a time (the writes the consumers under test read)."""
    produce_one_by_one(bootstrap, TOPIC, values)


def resets(path: Path) -> list[dict]:
    return [e for op in read_history(path) for e in (op.extra or {}).get(CLIENT_EVENTS, []) if e["type"] == "reset"]


def provoke(cluster: EachOwnAddress, threads: list[threading.Thread], reached: dict[int, int], path: Path) -> int:
    """Make the partition's leader a deposed one that still answers (docs/FINDINGS.md, kafka-python 1) while the
    consumers read; returns it once a consumer reset, or after 30 s. Its cut stays for the caller to remove
    (cut_rule), also when this raises."""
    cluster.create_topic(TOPIC, partitions=1, rf=3, min_isr=2)
    zombie = cluster.partition(TOPIC)["leader"]
    others = [i for i in cluster.broker_ports if i != zombie]
    produce(cluster.bootstrap, range(100))
    for t in threads:
        t.start()
    cluster.wait_for(lambda: min(reached.values()) >= 99, 30, what="the consumers to read 0-99")
    cluster.pause(zombie)
    subprocess.run(["iptables", "-I", *cut_rule(zombie, cluster.controller_port)], check=True)
    try:
        cluster.wait_for(lambda: cluster.partition(TOPIC)["leader_epoch"] > 0, 30, what="a new leader")
        produce(",".join(f"127.0.0.1:{cluster.broker_ports[i]}" for i in others), range(100, 200))
        cluster.wait_for(lambda: min(reached.values()) >= 199, 30, what="the consumers to read 100-199")
        cluster.resume(zombie)
        cluster.wait_for(lambda: not next(b for b in cluster.controller_state()["brokers"]
                                          if b["broker_id"] == zombie)["fenced"], 30, what="the zombie unfenced")
        # The consumers read on (at offset 200, where the deposed leader's log does not reach) until one of them
        # is led to the deposed leader and resets. kafka-python asks its least-loaded node for metadata: a connected
        # node with nothing in flight first, and their connections to the deposed leader timed out while it was
        # paused; with the third broker gone, the new leader's connection is mostly busy with fetches, so the
        # deposed leader is asked (the run of docs/FINDINGS.md got there by chance).
        new_leader = cluster.partition(TOPIC)["leader"]
        cluster.kill(next(i for i in cluster.broker_ports if i not in (zombie, new_leader)))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not resets(path):
            time.sleep(0.2)
        time.sleep(2)  # the re-read's poll, after the reset
    except BaseException:
        subprocess.run(["iptables", "-D", *cut_rule(zombie, cluster.controller_port)], check=False)
        raise
    return zombie


def shut_down(cluster: EachOwnAddress) -> None:
    """SIGTERM for the brokers (their traces flushed), then the cluster down, whatever is left SIGKILLed."""
    for name, p in list(cluster.procs.items()):
        if name.startswith("broker-") and p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
    deadline = time.monotonic() + 15
    for p in list(cluster.procs.values()):
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    cluster.down()


def test_kafka_pythons_reset_after_a_deposed_leaders_answer_is_in_the_history_and_attributed(tmp_path):
    cluster = EachOwnAddress(tmp_path, 3, ["--replica-lag-time-max-ms", "3000", "--heartbeat-interval-ms", "250"],
                             ["--session-timeout-ms", "2000"]).up()
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    workload = QueueWorkload({"partitions": 1, "client": "kafka-python"})
    reached = {p: -1 for p in PROCESSES}
    stop = threading.Event()
    zombie: int | None = None

    def consume(process: int) -> None:
        client = workload.new_client({"acks": "all"}, process)
        client.open(cluster.bootstrap)
        try:
            while not stop.is_set():
                inv = writer.append(Op(INVOKE, "poll", process, None))
                comp = writer.append(client.invoke(inv))
                for recs in (comp.value or {}).values():
                    reached[process] = max([reached[process], *(r[0] for r in recs)])
                time.sleep(0.05)
        finally:
            client.close()

    threads = [threading.Thread(target=consume, args=(p,), daemon=True) for p in PROCESSES]
    try:
        try:
            zombie = provoke(cluster, threads, reached, path)
        finally:
            stop.set()
            for t in threads:
                t.join(20)
            if zombie is not None:
                subprocess.run(["iptables", "-D", *cut_rule(zombie, cluster.controller_port)], check=False)
                if f"broker-{zombie}" in cluster.procs:
                    cluster.resume(zombie)  # (a no-op unless the test failed while it was paused)
        # the final read (the queue checker's), then the traces, flushed at shutdown
        reader = workload.new_client({"acks": "all"}, 99)
        reader.open(cluster.bootstrap)
        inv = writer.append(Op(INVOKE, "final-poll", 99, [0]))
        writer.append(reader.invoke(inv))
        reader.close()
    finally:
        shut_down(cluster)
        writer.close()

    found = resets(path)
    if not found:
        told = [e for e in cluster.traces()["nodes"][f"broker-{zombie}"].get("lines", [])
                if str(e.get("client", "")).startswith("kafkaesque-p")]
        leaders = [e for op in read_history(path) for e in (op.extra or {}).get(CLIENT_EVENTS, [])
                   if e["type"] == "leader"]
        pytest.fail(f"no consumer was led to the deposed broker {zombie} within 30 s: it answered them "
                    f"{[(e['event'], e.get('leaders') or e.get('offset')) for e in told][-12:]}; their leader "
                    f"events: {[(e['from'], e['to'], e['from_epoch'], e['leader_epoch']) for e in leaders]}")
    reset = found[0]
    assert (reset["library"], reset["error"], reset["policy"], reset["to"]) == (
        "kafka-python", "OFFSET_OUT_OF_RANGE", "earliest", 0)
    assert reset["broker"] == zombie and reset["leader_epoch"] == 0 and reset["from"] > 100

    out = run_checkers([QueueChecker()], {}, read_history(path), {"trace": cluster.traces()})
    queue = out["checkers"]["queue"]
    (reread,) = [a for a in queue["anomalies"] if a["name"] == "nonmonotonic-poll"]
    assert queue["valid"] is False and reread["whose"] == {"client": reread["count"]}
    for ex in reread["examples"]:
        assert ex["whose"] == "client" and ex["to"] == 0
        answer = ex["broker_answer"]
        assert (answer["node"], answer["event"], answer["error"], answer["leader_epoch"]) == (
            f"broker-{zombie}", "consumer_fetch_refused", 1, 0)
        assert f"after broker-{zombie} answered OFFSET_OUT_OF_RANGE" in ex["summary"]
        assert " while broker-" in ex["summary"] and f"(trace broker-{zombie} line {answer['line']})" in ex["summary"]
    # (the records' sends are not in this history, so the checker also finds them unexpected: unattributed)
    assert out["attribution"]["client"] == reread["count"] and out["attribution"]["libraries"] == ["kafka-python"]
