"""Client events (issue 38 item 2): the history records what a client library did on its own that changes
what a later poll returns (history/clients.py), and the checkers say whose an anomaly is (checkers/clients.py):
a re-read after kafka-python's reset is the client's, told with the broker answer behind it when the trace has
it; a re-read with no event stays unattributed; a transaction committed though one of its sends failed in the
client is the client's. The adapters' hooks are driven here with kafka-python's and librdkafka's own objects
and log lines (the integration test tests/integration/test_client_events_run.py drives them for real)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kafkaesque_harness.checkers.clients import BROKER, Moves, attribute_with_trace
from kafkaesque_harness.checkers.core import Anomaly, Result, run_checkers
from kafkaesque_harness.checkers.queue import QueueChecker, check_queue
from kafkaesque_harness.checkers.txn import TxnChecker, check_txn
from kafkaesque_harness.history import (
    CLIENT_EVENTS,
    INVOKE,
    OK,
    Op,
    client_events,
    client_id,
    process_of_client,
)
from kafkaesque_harness.workloads.base import ClientEventLog

# --- the schema's helpers -----------------------------------------------------------------------------------


def test_a_client_id_names_its_process_and_other_clients_name_none():
    assert client_id(12) == "kafkaesque-p12" and process_of_client("kafkaesque-p12") == 12
    for other in ("kafka-python-3.0.12", "rdkafka", "kafkaesque-p", "kafkaesque-px", None, 7):
        assert process_of_client(other) is None


def test_client_events_read_back_only_well_formed_events():
    assert client_events(None) == [] and client_events({"client_events": "x"}) == []
    assert client_events({"client_events": [{"type": "reset"}, 3, {"no": "type"}]}) == [{"type": "reset"}]


# --- queue histories ------------------------------------------------------------------------------------------

class Q:
    """A queue history, op by op."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, type_: str, f: str, process: int, value: Any, **extra: Any) -> Q:
        self.ops.append(Op(type_, f, process, value, time=(len(self.ops) + 1) * 1_000_000, index=len(self.ops),
                           extra=extra or None))
        return self

    def sends(self, key: int, values: range) -> Q:
        for i, v in enumerate(values):
            self.add(INVOKE, "send", 1, [key, v]).add(OK, "send", 1, [key, [i, v]])
        return self

    def poll(self, process: int, records: dict[int, list[tuple[int, int]]], events: list | None = None) -> Q:
        extra = {CLIENT_EVENTS: events} if events else {}
        return self.add(INVOKE, "poll", process, None).add(
            OK, "poll", process, {str(k): [list(r) for r in recs] for k, recs in records.items()}, **extra)

    def final(self, key: int, records: list[tuple[int, int]]) -> Q:
        return self.add(INVOKE, "final-poll", 99, [key]).add(OK, "final-poll", 99,
                                                             [key, len(records), [list(r) for r in records]])


RECORDS = [(i, 100 + i) for i in range(6)]
LEADER_REGRESSION = {"type": "leader", "library": "kafka-python", "mono": 100.2, "topic": "queue", "key": 0,
                     "from": 3, "to": 1, "from_epoch": 1, "leader_epoch": 0}
RESET = {"type": "reset", "library": "kafka-python", "mono": 100.5, "topic": "queue", "key": 0, "from": 4,
         "from_epoch": 1, "to": 0, "policy": "earliest", "error": "OFFSET_OUT_OF_RANGE", "broker": 1,
         "leader_epoch": 0}


def reread(events_before: list | None, events_with: list | None = None) -> Q:
    """Process 12 reads partition 0 up to offset 3, then (with `events_before` on a poll that read nothing)
    reads it again from offset 0."""
    return (Q().sends(0, range(100, 106)).poll(12, {0: RECORDS[:4]}).poll(12, {}, events_before)
            .poll(12, {0: RECORDS}, events_with).final(0, RECORDS))


# Broker-1, deposed (it led epoch 0), told process 12 it leads, refused its fetch at offset 4 and answered
# ListOffsets earliest with 0; the controller had elected broker-3 in epoch 1.
TRACE = {"nodes": {
    "broker-1": {"where": "nodes/broker-1/trace.jsonl", "lines": [
        {"line": 1, "mono": 1.0, "node": 1, "role": "broker", "event": "trace_started"},
        {"line": 1309, "mono": 100.1, "node": 1, "role": "broker", "event": "metadata_answered",
         "client": "kafkaesque-p12", "brokers": [1, 2, 3], "leaders": {"queue": [[0, 1, 0]]}},
        {"line": 1313, "mono": 100.3, "node": 1, "role": "leader", "event": "consumer_fetch_refused",
         "client": "kafkaesque-p12", "topic": "queue", "partition": 0, "offset": 4, "current_leader_epoch": 0,
         "last_fetched_epoch": 1, "error": 1, "leader_epoch": 0, "leo": 3, "hwm": 3},
        {"line": 1316, "mono": 100.4, "node": 1, "role": "leader", "event": "list_offsets_answered",
         "client": "kafkaesque-p12", "topic": "queue", "partition": 0, "timestamp": "earliest", "offset": 0,
         "error": 0, "leader_epoch": 0}]},
    "broker-3": {"where": "nodes/broker-3/trace.jsonl", "lines": [
        {"line": 1, "mono": 1.0, "node": 3, "role": "broker", "event": "trace_started"},
        {"line": 40, "mono": 50.0, "node": 3, "role": "broker", "event": "become_leader", "topic": "queue",
         "partition": 0, "leader_epoch": 1}]},
    "controller-0": {"where": "nodes/controller-0/trace.jsonl", "lines": [
        {"line": 9, "mono": 49.9, "node": 1000, "role": "controller", "event": "leader_elected", "topic": "queue",
         "partition": 0, "leader": 3, "leader_epoch": 1}]}}}


def queue_verdict(q: Q, trace: dict | None = None) -> dict[str, Any]:
    return run_checkers([QueueChecker()], {}, q.ops, {"trace": trace} if trace is not None else None)


def only_example(out: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    (a,) = [a for a in out["checkers"]["queue"]["anomalies"] if a["name"] == name]
    return a, a["examples"][0]


def test_a_reread_after_the_clients_reset_is_the_clients_told_with_the_broker_answer_from_the_trace():
    out = queue_verdict(reread([LEADER_REGRESSION, RESET]), TRACE)
    assert out["valid"] is False  # still the history's anomaly: the user's system, client included, did it
    a, ex = only_example(out, "nonmonotonic-poll")
    assert a["whose"] == {"client": 1} and ex["whose"] == "client"
    assert ex["client_event"]["type"] == "reset" and ex["client_event"]["process"] == 12
    assert ex["summary"] == (
        "process 12 read partition 0 at offset 0 after having read offset 3: kafka-python reset its position to the "
        "earliest offset (0) after broker-1 answered OFFSET_OUT_OF_RANGE to its fetch at offset 4 as leader of epoch 0 "
        "while broker-3 led epoch 1 (trace broker-1 line 1313); broker-1 had named itself leader of epoch 0 in its "
        "Metadata answer, which kafka-python took after knowing epoch 1 (trace broker-1 line 1309)")
    assert ex["broker_answer"]["line"] == 1313 and ex["broker_answer"]["node"] == "broker-1"
    assert [(t["node"], t["line"]) for t in ex["trace"]] == [("broker-1", 1313), ("broker-1", 1309),
                                                             ("broker-1", 1316)]
    assert out["attribution"]["client"] == 1 and out["attribution"]["libraries"] == ["kafka-python"]
    assert out["attribution"]["text"] == "The one anomaly follows the client library's own events (kafka-python)."


def test_without_a_trace_the_reset_is_told_from_the_history_alone():
    ex = only_example(queue_verdict(reread([LEADER_REGRESSION, RESET])), "nonmonotonic-poll")[1]
    assert ex["whose"] == "client" and "trace" not in ex
    assert ex["cause"] == ("kafka-python reset its position to the earliest offset (0) after an OFFSET_OUT_OF_RANGE "
                           "answer to its fetch at offset 4 from broker 1, which it took for the leader of epoch 0; it "
                           "had taken broker 1 for the leader in epoch 0 after knowing broker 3 in epoch 1 (op #15)")


def test_a_reread_with_no_client_event_stays_unattributed():
    out = queue_verdict(reread(None), TRACE)
    a, ex = only_example(out, "nonmonotonic-poll")
    assert out["valid"] is False and "whose" not in a and "whose" not in ex and "client_event" not in ex
    assert ex["summary"] == "process 12 read partition 0 at offset 0 after having read offset 3"
    assert out["attribution"]["unattributed"] == 1 and out["attribution"]["client"] == 0
    assert out["attribution"]["text"].startswith("The one anomaly is unattributed")


def test_a_reset_explains_only_a_read_that_starts_where_it_moved():
    elsewhere = {**RESET, "to": 2}  # moved to 2: a read from 0 is not its doing
    assert "whose" not in only_example(queue_verdict(reread([elsewhere])), "nonmonotonic-poll")[1]
    other_partition = {**RESET, "key": 1}
    assert "whose" not in only_example(queue_verdict(reread([other_partition])), "nonmonotonic-poll")[1]
    other_process = Q().sends(0, range(100, 106)).poll(12, {0: RECORDS[:4]}).poll(13, {}, [RESET]) \
        .poll(12, {0: RECORDS}).final(0, RECORDS)
    assert "whose" not in only_example(queue_verdict(other_process), "nonmonotonic-poll")[1]


def test_a_reset_on_the_same_completion_as_the_reread_explains_it():
    ex = only_example(queue_verdict(reread(None, [RESET]), TRACE), "nonmonotonic-poll")[1]
    assert ex["whose"] == "client" and ex["broker_answer"]["line"] == 1313


def test_a_reset_taken_by_its_read_explains_no_later_one():
    # the reset placed the read from 0 (offsets 0-3 read again, no anomaly after a read that ended before it);
    # a later re-read from 0 with no event of its own stays unattributed
    q = (Q().sends(0, range(100, 106)).poll(12, {0: RECORDS[:4]}).poll(12, {}, [RESET]).poll(12, {0: RECORDS})
         .poll(12, {0: RECORDS}).final(0, RECORDS))
    a = only_example(queue_verdict(q), "nonmonotonic-poll")[0]
    assert a["count"] == 2 and a["whose"] == {"client": 1}
    assert [ex.get("whose") for ex in a["examples"]] == ["client", None]


def test_a_skip_after_a_reset_to_the_latest_offset_is_the_clients():
    to_latest = {**RESET, "policy": "latest", "to": 5, "from": 2}
    q = (Q().sends(0, range(100, 106)).poll(12, {0: RECORDS[:2]}).poll(12, {}, [to_latest])
         .poll(12, {0: RECORDS[5:]}).final(0, RECORDS))
    a, ex = only_example(queue_verdict(q), "poll-skip")
    assert a["whose"] == {"client": 1} and ex["whose"] == "client" and "the latest offset (5)" in ex["cause"]


def test_a_workload_seek_is_the_harnesss_and_a_reset_that_breaks_nothing_passes():
    seek = {"type": "seek", "library": "kafka-python", "mono": 1.0, "topic": "queue", "key": 0, "to": 0,
            "why": "workload", "policy": "earliest"}
    a, ex = only_example(queue_verdict(reread([seek])), "nonmonotonic-poll")
    assert a["whose"] == {"harness": 1} and ex["cause"] == "the workload itself moved the consumer's position to offset 0"
    # a reset that puts the consumer where it was reading (a truncation detected, no record read again): valid
    truncation = {**RESET, "policy": "truncation", "error": "LOG_TRUNCATION", "to": 4}
    q = (Q().sends(0, range(100, 106)).poll(12, {0: RECORDS[:4]}, [seek]).poll(12, {}, [truncation])
         .poll(12, {0: RECORDS[4:]}).final(0, RECORDS))
    out = queue_verdict(q, TRACE)
    assert out["valid"] is True and "attribution" not in out


def test_a_history_file_is_attributed_as_the_history_in_memory(tmp_path: Path):
    from kafkaesque_harness.history import HistoryFile

    q = reread([LEADER_REGRESSION, RESET])
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(op.to_dict()) + "\n" for op in q.ops))
    from_file = run_checkers([QueueChecker()], {}, HistoryFile(path), {"trace": TRACE})
    assert from_file["checkers"]["queue"] == queue_verdict(q, TRACE)["checkers"]["queue"]
    assert check_queue(q.ops).anomalies[0].whose == {"client": 1}


# --- txn histories --------------------------------------------------------------------------------------------

SEND_ERROR = {"type": "send-error", "library": "kafka-python", "mono": 14.1, "topic": "queue", "key": 3, "value": 873,
              "error": "KafkaTimeoutError: Expiring 1 record(s) for TopicPartition(topic='queue', partition=3): 4001 ms "
                       "has passed since batch creation"}


def txn_history(events: list | None, commit: str = OK) -> list[Op]:
    """Process 3 commits a transaction of two sends: 872 to key 2 (delivered at offset 0) and 873 to key 3 (no
    offset); the final reads hold 872 alone."""
    ops = [Op(INVOKE, "txn", 3, [["send", 2, 872], ["send", 3, 873]], time=1, index=0),
           Op(commit, "txn", 3, [["send", 2, [0, 872]], ["send", 3, 873]], time=2, index=1,
              extra={CLIENT_EVENTS: events} if events else None)]
    for i, (k, recs) in enumerate(((2, [[0, 872]]), (3, []))):
        ops.append(Op(INVOKE, "poll", 10 + i, [["poll"]], time=3 + 2 * i, index=len(ops), extra={"final": True, "key": k}))
        ops.append(Op(OK, "poll", 10 + i, [["poll", {str(k): recs}]], time=4 + 2 * i, index=len(ops),
                      extra={"final": True, "key": k, "end_offset": len(recs)}))
    return ops


def test_a_committed_transaction_whose_send_failed_in_the_client_is_the_clients():
    r = check_txn(txn_history([SEND_ERROR]))
    assert r.valid is False
    by_name = {a.name: a for a in r.anomalies}
    for name in ("unseen", "torn-transaction"):
        a = by_name[name]
        assert a.whose == {"client": 1}
        ex = a.examples[0]
        assert ex["whose"] == "client" and ex["client_event"]["op"] == 1 and ex["client_event"]["process"] == 3
        assert ex["cause"] == ("kafka-python failed its send of 873 to key 3 itself (KafkaTimeoutError: Expiring 1 "
                               "record(s) for TopicPartition(topic='queue', partition=3): 4001 ms has passed since "
                               "batch creation), yet its commit_transaction returned")
    assert by_name["unseen"].examples[0]["summary"].startswith(
        "873 sent to key 3 by the committed op #1 was never returned by a committed read: kafka-python failed its send")


def test_the_same_transaction_with_no_send_error_stays_unattributed():
    r = check_txn(txn_history(None))
    assert r.valid is False and all(a.whose is None and "whose" not in a.examples[0] for a in r.anomalies)
    other = {**SEND_ERROR, "value": 999}  # another send's error explains nothing here
    assert all(a.whose is None for a in check_txn(txn_history([other])).anomalies)


def test_a_send_error_of_an_aborted_transaction_breaks_nothing():
    ops = txn_history([SEND_ERROR], commit="fail")
    ops[1] = Op("fail", "txn", 3, [["send", 2, [0, 872]], ["send", 3, 873]], time=2, index=1,
                extra={CLIENT_EVENTS: [SEND_ERROR]}, error="KafkaTimeoutError; aborted")
    ops[5] = Op(OK, "poll", 11, [["poll", {"3": []}]], time=6, index=5, extra={"final": True, "key": 3, "end_offset": 0})
    ops[3] = Op(OK, "poll", 10, [["poll", {"2": []}]], time=4, index=3, extra={"final": True, "key": 2, "end_offset": 0})
    r = TxnChecker().check({}, ops)
    assert r.valid is True and not r.anomalies


def test_a_txn_nonmonotonic_poll_after_a_reset_is_the_clients():
    reset = {**RESET, "key": 0, "from": 2, "to": 0}
    ops = [Op(INVOKE, "txn", 1, [["send", 0, 1], ["send", 0, 2]], time=1, index=0),
           Op(OK, "txn", 1, [["send", 0, [0, 1]], ["send", 0, [1, 2]]], time=2, index=1),
           Op(INVOKE, "txn", 5, [["poll"]], time=3, index=2),
           Op(OK, "txn", 5, [["poll", {"0": [[0, 1], [1, 2]]}]], time=4, index=3),
           Op(INVOKE, "txn", 5, [["poll"]], time=5, index=4),
           Op(OK, "txn", 5, [["poll", {"0": [[0, 1]]}]], time=6, index=5, extra={CLIENT_EVENTS: [reset]})]
    a = {a.name: a for a in check_txn(ops).anomalies}["nonmonotonic-poll"]
    assert a.whose == {"client": 1} and a.examples[0]["client_event"]["op"] == 5
    assert {a.name: a for a in check_txn(ops[:5] + [Op(OK, "txn", 5, ops[5].value, time=6, index=5)]).anomalies}[
        "nonmonotonic-poll"].whose is None


# --- the broker's own checkers, and the moves ---------------------------------------------------------------

def test_the_trace_and_replica_checkers_anomalies_are_the_brokers():
    results = [Result("trace", False, [Anomaly("ack-above-hwm", 3, [{"summary": "x"}])]),
               Result("replicas", False, [Anomaly("log-divergence", 1, [{"summary": "y"}])]),
               Result("queue", False, [Anomaly("lost-write", 2, [{"summary": "z"}])])]
    attribute_with_trace(results, None)
    assert results[0].anomalies[0].whose == {BROKER: 3} and results[0].anomalies[0].examples[0]["whose"] == BROKER
    assert results[1].anomalies[0].whose == {BROKER: 1}
    assert results[2].anomalies[0].whose is None and "whose" not in results[2].anomalies[0].examples[0]


def test_moves_keep_a_bounded_few_and_take_the_one_a_read_starts_at():
    moves = Moves()
    for to in range(20):
        moves.note(7, {CLIENT_EVENTS: [{**RESET, "to": to}]}, to)
    assert len(moves.pending[(7, 0)]) == 8 and moves.explain(7, 0, 3) is None
    assert moves.explain(7, 0, 15)["to"] == 15 and [m["to"] for m in moves.pending[(7, 0)]] == [16, 17, 18, 19]
    unknown_target = {**RESET, "to": None, "from": 50}
    moves.note(7, {CLIENT_EVENTS: [unknown_target]}, 30)
    assert moves.explain(7, 0, 0)["op"] == 30 and moves.explain(7, 0, 60) is None


# --- the adapters' hooks ------------------------------------------------------------------------------------

class FakeCluster:
    def __init__(self) -> None:
        self.leaders = {0: (1, 0)}
        self.listeners: list = []

    def add_listener(self, fn) -> None:
        self.listeners.append(fn)

    def partitions_for_topic(self, topic):
        return set(self.leaders)

    def leader_for_partition(self, tp):
        return self.leaders[tp.partition][0]

    def leader_epoch_for_partition(self, tp):
        return self.leaders[tp.partition][1]

    def answered(self, partition: int, leader: int, epoch: int) -> None:
        self.leaders[partition] = (leader, epoch)
        for fn in self.listeners:
            fn(self)


def kafka_python_consumer():
    """A kafka-python SubscriptionState with one assigned partition, in a consumer-shaped object."""
    from kafka import TopicPartition
    from kafka.consumer.subscription_state import SubscriptionState

    class Consumer:
        pass

    c = Consumer()
    c._subscription = SubscriptionState("earliest")
    c._subscription.assign_from_user([TopicPartition("queue", 0)])

    class Client:
        cluster = FakeCluster()
    c._client = Client()
    return c, TopicPartition("queue", 0)


def test_kafka_python_watch_records_a_reset_after_out_of_range_with_its_broker_and_end():
    from kafka.structs import OffsetAndMetadata

    from kafkaesque_harness.workloads.kafka_python import KafkaPythonWatch

    c, tp = kafka_python_consumer()
    log = ClientEventLog("kafka-python")
    watch = KafkaPythonWatch(log, "queue")
    watch.watch(c)
    sub = c._subscription
    sub.seek(tp, OffsetAndMetadata(188, "", 1))  # placed with no reset asked: the group's committed offset
    c._client.cluster.answered(0, 3, 1)  # a Metadata answer: broker 3 leads epoch 1
    c._client.cluster.answered(0, 1, 0)  # then the deposed broker 1's: epoch 0, taken
    sub.request_offset_reset(tp)  # the fetcher, on OFFSET_OUT_OF_RANGE
    assert sub.is_offset_reset_needed(tp)
    sub.seek(tp, 0)  # the ListOffsets answer
    events = log.take()
    assert [e["type"] for e in events] == ["leader", "seek", "leader", "leader", "reset"]
    assert events[1]["why"] == "committed" and events[1]["to"] == 188
    assert (events[3]["from"], events[3]["to"], events[3]["from_epoch"], events[3]["leader_epoch"]) == (3, 1, 1, 0)
    reset = events[4]
    assert {k: reset[k] for k in ("from", "from_epoch", "to", "policy", "error", "broker", "leader_epoch")} == {
        "from": 188, "from_epoch": 1, "to": 0, "policy": "earliest", "error": "OFFSET_OUT_OF_RANGE", "broker": 1,
        "leader_epoch": 0}
    assert sub.assignment[tp].position.offset == 0  # the library's own methods still ran


def test_kafka_python_watch_tells_the_workloads_seek_and_kip320s_truncation_apart():
    from kafka.protocol.consumer import OffsetResetStrategy
    from kafka.structs import OffsetAndMetadata

    from kafkaesque_harness.workloads.kafka_python import KafkaPythonWatch

    c, tp = kafka_python_consumer()
    log = ClientEventLog("kafka-python")
    KafkaPythonWatch(log, "queue").watch(c)
    sub = c._subscription
    sub.request_offset_reset(tp, OffsetResetStrategy.EARLIEST)  # seek_to_beginning
    sub.seek(tp, 0)
    sub.assignment[tp].position = OffsetAndMetadata(50, "", 0)
    sub.assignment[tp].request_position_validation()
    sub.seek(tp, OffsetAndMetadata(40, "", 0))  # the end of the diverging epoch
    events = [e for e in log.take() if e["type"] != "leader"]
    assert [(e["type"], e.get("why"), e.get("policy"), e["to"]) for e in events] == [
        ("seek", "workload", "earliest", 0), ("reset", None, "truncation", 40)]
    assert events[1]["from"] == 50 and events[1]["error"] == "LOG_TRUNCATION"


def test_librdkafkas_log_lines_become_resets_and_leader_changes():
    from kafkaesque_harness.workloads.confluent import ConsumerLog

    log = ClientEventLog("confluent-kafka")
    c = ConsumerLog(log, "queue", "kafkaesque-p8")
    c.log(10, "%s", "BROKER", "kafkaesque-p8#consumer-1", "[thrd:main]: queue [0]: leader -1 epoch -1 -> leader 1 epoch 0")
    c.log(10, "%s", "BROKER", "kafkaesque-p8#consumer-1", "[thrd:main]: queue [0]: leader 1 epoch 0 -> leader 1 epoch 0")
    c.log(10, "%s", "BROKER", "x", "[thrd:main]: other [0]: leader 1 epoch 0 -> leader 2 epoch 1")
    c.log(30, "%s", "OFFSET", "kafkaesque-p8#consumer-1",
          "[thrd:main]: queue [0]: offset reset (at offset 1000 (leader epoch 3), broker 1) to cached BEGINNING offset "
          "offset 0 (leader epoch -1): fetch failed due to requested offset not available on the broker: Broker: "
          "Offset out of range")
    c.log(30, "%s", "OFFSET", "kafkaesque-p8#consumer-1",
          "[thrd:main]: queue [0]: offset reset (at offset 12 (leader epoch 0), broker 2) to END: fetch failed due to "
          "requested offset not available on the broker: Broker: Offset out of range")
    c.log(30, "%s", "OFFSET", "kafkaesque-p8#consumer-1",
          "[thrd:main]: queue [1]: offset reset (at offset INVALID (leader epoch -1), broker -1) to offset BEGINNING "
          "(leader epoch -1): no previously committed offset available: Local: No offset stored")
    events = log.take()
    assert [e["type"] for e in events] == ["leader", "reset", "reset", "seek"]
    first, second = events[1], events[2]
    assert (events[3]["key"], events[3]["why"], events[3]["policy"], events[3]["to"]) == (1, "no-position", "earliest",
                                                                                         None)
    assert {k: first[k] for k in ("from", "from_epoch", "to", "policy", "error", "broker", "leader_epoch", "client")} == {
        "from": 1000, "from_epoch": 3, "to": 0, "policy": "earliest", "error": "OFFSET_OUT_OF_RANGE", "broker": 1,
        "leader_epoch": 0, "client": "kafkaesque-p8"}
    assert (second["to"], second["policy"], second["broker"], second["leader_epoch"]) == (None, "latest", 2, None)


def test_a_queue_client_puts_its_events_on_the_next_completion_beside_the_rebalance_log():
    from kafkaesque_harness.workloads.queue_client import QueueClient, completion

    class Client(QueueClient):
        LIBRARY = "kafka-python"

        polls = 0

        def _poll(self, op):
            self.polls += 1
            if self.polls == 1:
                self.journal("assigned", [1, 0])
                self.events.add("reset", topic="queue", key=0, **{"from": 5}, to=0)
            return completion(op, OK, {})

    client = Client("queue", 2, -1, process=4)
    assert client.client_id == "kafkaesque-p4"
    comp = client.invoke(Op(INVOKE, "poll", 4, None))
    assert comp.extra["rebalance_log"] == [{"keys": [0, 1], "type": "assigned"}]
    assert [(e["type"], e["library"]) for e in comp.extra[CLIENT_EVENTS]] == [("rebalance", "kafka-python"),
                                                                             ("reset", "kafka-python")]
    assert CLIENT_EVENTS not in (client.invoke(Op(INVOKE, "poll", 4, None)).extra or {})  # taken: on one completion


def test_a_txn_completion_carries_the_libraries_send_errors_even_when_the_commit_returned():
    from kafkaesque_harness.workloads.txn import txn_options
    from kafkaesque_harness.workloads.txn_client import OffsetTracker, TxnClient, TxnLibrary

    class Library(TxnLibrary):
        def __init__(self, *args, process=None):
            self.events, self.producer, self.txn_id = ClientEventLog("kafka-python"), object(), "kafkaesque-txn-0"
            self.process = process

        def ensure_producer(self): ...
        def begin(self): ...
        def flush(self): ...
        def commit(self): ...

        def send(self, key, value):
            if value == 2:
                self.events.add("send-error", topic="t", key=key, value=value, error="KafkaTimeoutError: Expiring")
                return lambda: None
            return lambda: 7

    made: list = []
    client = TxnClient(lambda *a, **kw: made.append(Library(*a, **kw)) or made[-1], "t", 4, 1, txn_options({}),
                       OffsetTracker())
    client.open("b:1")
    comp = client.invoke(Op(INVOKE, "txn", 6, [["send", 0, 1], ["send", 1, 2]]))
    assert comp.type == OK and made[0].process == 6
    assert comp.value == [["send", 0, [7, 1]], ["send", 1, 2]]
    (event,) = comp.extra[CLIENT_EVENTS]
    assert (event["type"], event["key"], event["value"], event["error"]) == ("send-error", 1, 2,
                                                                             "KafkaTimeoutError: Expiring")


# --- what the terminal and the report say ---------------------------------------------------------------------

def test_the_terminal_and_the_report_say_whose_in_one_sentence(tmp_path: Path, capsys):
    from kafkaesque_harness.harness import cli
    from kafkaesque_harness.results.report import _anomaly_sections, first_screen_summary, whose_text
    from kafkaesque_harness.workloads.queue import QUEUE_VALUES

    out = queue_verdict(reread([LEADER_REGRESSION, RESET]), TRACE)
    (tmp_path / "results.json").write_text(json.dumps(out))
    cli._print_verdict(tmp_path)
    err = capsys.readouterr().err
    assert "whose: The one anomaly follows the client library's own events (kafka-python)." in err
    assert "queue: nonmonotonic-poll x1 (1 client)" in err
    assert "- [client] process 12 read partition 0 at offset 0 after having read offset 3: kafka-python reset" in err
    section = _anomaly_sections(out, [])[0]
    assert section["whose"] == "1 client" and section["examples"][0]["whose"] == "client"
    assert [t["line"] for t in section["examples"][0]["trace"]] == [1313, 1309, 1316]
    assert first_screen_summary(out, [], [], QUEUE_VALUES)["lines"][0]["whose"] == "1 client"
    assert whose_text({"count": 3, "whose": {"client": 1}}) == "1 client, 2 unattributed"
