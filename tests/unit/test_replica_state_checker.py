"""Broker-side invariants from state dumps (checkers/replicas.py): clean dumps pass, each violation fails
with the offending partition named."""

import json

import pytest

from kafkaesque_harness.checkers.core import CheckContext
from kafkaesque_harness.checkers.queue import check_queue
from kafkaesque_harness.checkers.replicas import REPLICAS, ReplicaStateChecker, check_states
from kafkaesque_harness.harness.runner import run_data


def check_stored(test, history=(), previous=None):
    """The checker as the runner and `kafkaesque analyze` run it: handed the run's replicas.json (normalised
    again from nodes/ when the run has none, as for these hand-made runs) and the results before it."""
    return ReplicaStateChecker().check_in(test, list(history), CheckContext(previous or {}, run_data(test)))


def broker(node_id, hwm, log, topic="q", partition=0):
    return {"role": "broker", "node_id": node_id,
            "partitions": [{"topic": topic, "partition": partition, "hwm": hwm, "leo": len(log),
                            "log": [list(r) for r in log]}]}


def controller(partitions, fenced=(), min_isr=2, recoveries=()):
    return {"role": "controller", "topics": [{"topic": "q", "configs": {"min.insync.replicas": str(min_isr)}}],
            "brokers": [{"broker_id": b, "fenced": b in fenced} for b in (1, 2, 3)],
            "partitions": [{"topic": "q", "partition": 0, "replicas": [1, 2, 3], **p} for p in partitions],
            "unclean_recoveries": list(recoveries)}


LOG = [(0, 0, "a"), (1, 0, "b"), (2, 1, "c")]


def test_identical_logs_and_a_sound_controller_pass():
    r = check_states({"broker-1": broker(1, 3, LOG), "broker-2": broker(2, 3, LOG),
                      "broker-3": broker(3, 2, LOG[:2]),
                      "controller-0": controller([{"isr": [1, 2], "elr": []}])})
    assert r.valid is True and r.stats["partitions_compared"] == 1


def test_records_past_a_replicas_hwm_may_differ():
    # an old leader's unreplicated suffix above the HWM is not yet divergence (it will be truncated)
    r = check_states({"broker-1": broker(1, 2, LOG), "broker-2": broker(2, 2, LOG[:2] + [(2, 2, "z")])})
    assert r.valid is True


def test_divergence_below_both_hwms_is_found_with_both_records():
    other = [(0, 0, "a"), (1, 2, "m3"), (2, 2, "x")]
    r = check_states({"broker-1": broker(1, 3, LOG), "broker-2": broker(2, 3, other)})
    assert r.valid is False
    (a,) = r.anomalies
    assert a.name == "log-divergence" and a.count == 1
    ex = a.examples[0]
    assert ex["offset"] == 1 and ex["broker-1"]["value_digest"] == "b" and ex["broker-2"]["value_digest"] == "m3"


def test_controller_structure_violations_each_fail():
    cases = [
        {"isr": [1, 2], "elr": [3]},     # an ELR while the ISR meets min ISR
        {"isr": [1], "elr": [1]},        # in both
        {"isr": [1, 4], "elr": []},      # not a replica
    ]
    for p in cases:
        r = check_states({"controller-0": controller([p])})
        assert r.valid is False and r.anomalies[0].name == "controller-structure", p
    r = check_states({"controller-0": controller([{"isr": [1, 2], "elr": []}], fenced={2})})
    assert r.valid is False and "fenced" in r.anomalies[0].examples[0]["violation"]


def test_unclean_recoveries_are_reported_not_counted_as_anomalies():
    rec = {"topic": "q", "partition": 0, "leader": 2, "strategy": "balanced"}
    r = check_states({"controller-0": controller([{"isr": [2], "elr": []}], min_isr=2, recoveries=[rec])})
    assert r.valid is True and r.stats["unclean_recoveries"] == 1 and r.details["unclean_recoveries"] == [rec]


def write_nodes(run_dir, dumps):
    """nodes/<node>/state.json for each node: a dict is written as JSON, a str as it is, None leaves
    the node's directory without a dump (as a node whose dump was never collected)."""
    for node, dump in dumps.items():
        (run_dir / "nodes" / node).mkdir(parents=True, exist_ok=True)
        if dump is not None:
            (run_dir / "nodes" / node / "state.json").write_text(dump if isinstance(dump, str) else json.dumps(dump))
    return {"run_dir": str(run_dir), "state_dumps": True}


DIVERGENT = broker(2, 3, [(0, 0, "a"), (1, 0, "B")])


def test_checker_reads_a_runs_dumps(tmp_path):
    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": DIVERGENT})
    r = check_stored(test, [])
    assert r.valid is False and r.stats["brokers_dumped"] == 2 and not r.unknown_reasons


def test_a_cluster_without_state_dumps_is_not_applicable_and_stays_valid(tmp_path):
    (tmp_path / "nodes" / "broker-1").mkdir(parents=True)
    (tmp_path / "nodes" / "broker-1" / "server.log").write_text("a foreign broker's log\n")
    r = check_stored({"run_dir": str(tmp_path), "state_dumps": False}, [])
    assert r.valid is True and "no state dumps" in r.stats["not_applicable"] and not r.unknown_reasons


def test_an_old_run_without_dumps_is_not_applicable(tmp_path):
    (tmp_path / "nodes" / "broker-1").mkdir(parents=True)
    r = check_stored({"run_dir": str(tmp_path)}, [])
    assert r.valid is True and r.stats["not_applicable"]


def test_an_unreadable_dump_of_the_divergent_broker_makes_the_check_unknown(tmp_path):
    text = json.dumps(DIVERGENT)
    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": text[: len(text) // 2]})
    r = check_stored(test, [])
    assert r.valid == "unknown"
    (reason,) = r.unknown_reasons
    assert reason.startswith("the state dump of broker-2 (nodes/broker-2/state.json) could not be read: ")
    assert reason.endswith("the replica invariants cannot be checked without it")


def test_every_dump_unreadable_is_unknown_with_one_reason_per_node(tmp_path):
    test = write_nodes(tmp_path, {n: "{not json" for n in ("broker-1", "broker-2", "controller-0")})
    r = check_stored(test, [])
    assert r.valid == "unknown"
    assert [s.split(" (")[0] for s in r.unknown_reasons] == [
        "the state dump of broker-1", "the state dump of broker-2", "the state dump of controller-0"]


@pytest.mark.parametrize("dump, why", [
    ('{"role": "broker", "partitions": [', "not valid JSON"),
    ("", "empty"),
    ("[1, 2]", "JSON list, not an object"),
    ("null", "JSON NoneType, not an object"),
    (b"\xff\xfe".decode("latin-1"), "not valid JSON"),
    ('{"unreachable": true}', "did not answer"),
    ('{"partitions": []}', "names no role"),
    ('{"role": "broker", "partitions": [{"topic": "q", "partition": 0, "hwm": 3}]}', "no physical log of partition(s) q-0"),
    (None, "missing"),
])
def test_a_dump_that_cannot_be_used_makes_the_check_unknown(tmp_path, dump, why):
    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": dump})
    r = check_stored(test, [])
    assert r.valid == "unknown"
    (reason,) = r.unknown_reasons
    assert "broker-2" in reason and why in reason


def test_an_anomaly_in_the_dumps_that_were_read_stays_false_beside_an_unreadable_one(tmp_path):
    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": DIVERGENT, "broker-3": "{"})
    r = check_stored(test, [])
    assert r.valid is False and [a.name for a in r.anomalies] == ["log-divergence"]
    assert len(r.unknown_reasons) == 1 and "broker-3" in r.unknown_reasons[0]


def test_a_node_test_json_names_without_a_directory_is_missing_its_dump(tmp_path):
    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG)})
    r = check_stored({**test, "nodes": ["broker-1", "broker-2"]}, [])
    assert r.valid == "unknown" and "broker-2 (nodes/broker-2/state.json)" in r.unknown_reasons[0]


def test_dumps_declared_but_none_collected_is_unknown(tmp_path):
    r = check_stored({"run_dir": str(tmp_path), "state_dumps": True}, [])
    assert r.valid == "unknown" and r.unknown_reasons


def test_dumps_declared_without_a_run_directory_is_unknown():
    r = check_stored({"state_dumps": True}, [])
    assert r.valid == "unknown" and "run directory" in r.unknown_reasons[0]


def test_an_old_run_with_some_dumps_expects_every_nodes_dump(tmp_path):
    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": None})
    r = check_stored({"run_dir": test["run_dir"]}, [])  # no state_dumps key: stored before it
    assert r.valid == "unknown" and "broker-2" in r.unknown_reasons[0] and "missing" in r.unknown_reasons[0]


def test_loss_beyond_the_budget_must_be_covered_by_a_reported_unclean_recovery_of_its_partition():
    rec = {"topic": "queue", "partition": 0, "leader": 2, "strategy": "balanced"}
    c = controller([{"isr": [2], "elr": []}], recoveries=[rec])
    assert check_states({"controller-0": c}, {"0": 5}).valid is True
    r = check_states({"controller-0": c}, {"0": 5, "1": 2, "3": 0})  # partition 1 lost 2 writes silently
    assert r.valid is False
    (a,) = r.anomalies
    assert a.name == "unreported-data-loss" and [e["partition"] for e in a.examples] == [1]
    silent = check_states({"controller-0": controller([{"isr": [2], "elr": []}])}, {"0": 5})
    assert [a.name for a in silent.anomalies] == ["unreported-data-loss"]


def test_checker_takes_the_losses_beyond_the_budget_from_the_history(tmp_path):
    from kafkaesque_harness.history import Op

    (tmp_path / "nodes" / "controller-0").mkdir(parents=True)
    (tmp_path / "nodes" / "controller-0" / "state.json").write_text(json.dumps(controller([{"isr": [2], "elr": []}])))
    ops = [Op("invoke", "send", 0, [0, 10], time=1), Op("ok", "send", 0, [0, [0, 10]], time=2),
           Op("invoke", "scenario-lossy-crash", "nemesis", {}, time=3),
           Op("info", "scenario-lossy-crash", "nemesis", {"beyond_fault_budget": True}, time=4),
           Op("invoke", "final-poll", 1, [0], time=5), Op("ok", "final-poll", 1, [0, 0, []], time=6)]
    r = check_stored({"run_dir": str(tmp_path)}, ops, {"queue": check_queue(ops)})
    assert [a.name for a in r.anomalies] == ["unreported-data-loss"]
    assert check_stored({"run_dir": str(tmp_path)}, ops[:2] + ops[4:], {"queue": check_queue(ops[:2] + ops[4:])}).valid


def test_an_unclean_recovery_must_elect_the_candidate_with_the_highest_epoch_and_end_offset():
    good = {"topic": "q", "partition": 0, "leader": 1, "candidates": {"1": [2, 264], "3": [1, 300]}}
    bad = {"topic": "q", "partition": 1, "leader": 3, "candidates": {"1": [2, 264], "3": [2, 209]}}
    assert check_states({"controller-0": controller([{"isr": [1], "elr": []}], recoveries=[good])}).valid is True
    r = check_states({"controller-0": controller([{"isr": [1], "elr": []}], recoveries=[good, bad])})
    (a,) = r.anomalies
    assert a.name == "recovery-choice" and a.examples[0]["partition"] == 1 and "broker 1" in a.examples[0]["summary"]


def test_a_controller_quorum_must_agree_on_its_metadata_log_and_have_one_leader_per_term():
    def quorum(node_id, log, role="follower", term=2):
        return {**controller([{"isr": [1, 2, 3], "elr": []}]), "node_id": node_id, "metadata_log": log,
                "raft": {"role": role, "term": term}}

    a, b, c = {"type": "register_broker", "broker_id": 1}, {"type": "topic"}, {"type": "partition"}
    good = {"c0": quorum(1000, [a, b]), "c1": quorum(1001, [a, b, c], "leader"), "c2": quorum(1002, [a])}
    assert check_states(good).valid is True
    r = check_states({**good, "c2": quorum(1002, [a, c])})
    assert [x.name for x in r.anomalies] == ["metadata-log-divergence"] and r.anomalies[0].examples[0]["offset"] == 1
    r = check_states({**good, "c0": quorum(1000, [a, b], "leader")})
    assert [x.name for x in r.anomalies] == ["controller-split-brain"]
    assert check_states({**good, "c0": quorum(1000, [a, b], "leader", term=1)}).valid is True  # an old term's leader


def _record(offset_type, **kw):
    return {"type": offset_type, **kw}


def test_broker_metadata_logs_must_be_prefixes_of_the_controllers_and_epochs_have_one_leader():
    from kafkaesque_harness.checkers.replicas import check_states

    part = {"topic": "q", "partition": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3]}
    log = [_record("topic", topic="q", partitions=1, replication_factor=3, configs={}),
           _record("partition", **part, leader=1, leader_epoch=0, partition_epoch=0),
           _record("partition", **part, leader=2, leader_epoch=1, partition_epoch=1)]
    ctrl = {"role": "controller", "node_id": 1000, "partitions": [], "brokers": [], "topics": []}
    ok = check_states({"controller-0": ctrl}, metadata_logs={"controller-0": log, "broker-1": log[:2],
                                                             "broker-2": log})
    assert ok.valid, ok.anomalies

    forked = log[:1] + [_record("partition", **part, leader=3, leader_epoch=0, partition_epoch=0)]
    bad = check_states({"controller-0": ctrl}, metadata_logs={"controller-0": log, "broker-3": forked})
    assert [a.name for a in bad.anomalies] == ["broker-metadata-divergence"]
    assert bad.anomalies[0].examples[0]["offset"] == 1 and bad.anomalies[0].examples[0]["broker"] == "broker-3"

    reuse = log + [_record("partition", **part, leader=3, leader_epoch=1, partition_epoch=2)]
    bad = check_states({"controller-0": ctrl}, metadata_logs={"controller-0": reuse})
    assert [a.name for a in bad.anomalies] == ["leader-epoch-reuse"]
    assert bad.anomalies[0].examples[0]["leaders"] == [2, 3]


def test_two_brokers_leading_one_partition_in_one_epoch_is_an_anomaly():
    from kafkaesque_harness.checkers.replicas import check_states

    def broker(role, epoch):
        return {"role": "broker", "partitions": [{"topic": "q", "partition": 0, "role": role, "leader_epoch": epoch,
                                                  "hwm": 0, "log": []}]}

    assert check_states({"broker-1": broker("leader", 4), "broker-2": broker("leader", 5)}).valid  # a zombie: older epoch
    bad = check_states({"broker-1": broker("leader", 5), "broker-2": broker("leader", 5)})
    assert [a.name for a in bad.anomalies] == ["two-leaders-one-epoch"]


def test_metadata_logs_with_base_offsets_are_compared_on_the_offsets_both_hold():
    from kafkaesque_harness.checkers.replicas import check_states

    def quorum(node_id, log, base, role="follower"):
        return {**controller([{"isr": [1, 2, 3], "elr": []}]), "node_id": node_id, "metadata_log": log,
                "metadata_snapshot_offset": base, "raft": {"role": role, "term": 2}}

    recs = [{"type": "topic", "topic": f"t{i}"} for i in range(10)]
    # c0 compacted up to 6, c1 up to 3, c2 never: all agree on what they share.
    good = {"c0": quorum(1000, recs[6:], 6, "leader"), "c1": quorum(1001, recs[3:8], 3), "c2": quorum(1002, recs[:5], 0)}
    brokers = {"broker-1": {"base": 8, "records": recs[8:]}, "broker-2": recs[:4], "broker-3": {"base": 9, "records": []}}
    r = check_states(good, metadata_logs=brokers)
    assert r.valid, r.anomalies

    forked = recs[3:6] + [{"type": "topic", "topic": "other"}]  # differs at absolute offset 6
    r = check_states({**good, "c1": quorum(1001, forked, 3)}, metadata_logs=brokers)
    assert [a.name for a in r.anomalies] == ["metadata-log-divergence"]
    assert r.anomalies[0].examples[0]["offset"] == 6
    r = check_states(good, metadata_logs={"broker-4": {"base": 7, "records": [recs[7], {"type": "topic", "topic": "x"}]}})
    assert [a.name for a in r.anomalies] == ["broker-metadata-divergence"]
    assert r.anomalies[0].examples[0]["offset"] == 8
    r = check_states(good, metadata_logs={"broker-5": {"base": 9, "records": [recs[9], recs[9]]}})  # longer
    assert [a.name for a in r.anomalies] == ["broker-metadata-divergence"]
    assert r.anomalies[0].examples[0]["offset"] == 10


def test_metadata_log_files_after_a_snapshot_come_back_with_their_base(tmp_path):
    from kafkaesque_harness.clusters.replica_dumps import read_metadata_log

    lines = [json.dumps({"offset": o, "record": {"type": "topic", "topic": str(o)}}) for o in (5, 6)]
    (tmp_path / "metadata.log").write_text("\n".join(lines) + '\n{"offset":7,"rec')
    assert read_metadata_log(tmp_path / "metadata.log") == {"base": 5, "records": [
        {"type": "topic", "topic": "5"}, {"type": "topic", "topic": "6"}]}


def test_a_follower_outside_the_isr_and_short_of_the_hwm_at_the_end_is_noted_not_counted():
    lead = broker(1, 3, LOG)
    lead["partitions"][0].update(role="leader", isr=[1, 3], leader_epoch=4)
    stuck, fine = broker(2, 1, LOG[:1]), broker(3, 3, LOG)
    stuck["partitions"][0]["role"] = fine["partitions"][0]["role"] = "follower"
    r = check_states({"broker-1": lead, "broker-2": stuck, "broker-3": fine})
    assert r.valid is True and r.stats["replicas_behind_at_end"] == 1
    assert r.details["replicas_behind_at_end"] == [{"node": "broker-2", "topic": "q", "partition": 0, "leo": 1,
                                                    "leader_hwm": 3, "leader_isr": [1, 3]}]


def _metadata_lines(records, first=0):
    return [json.dumps({"offset": first + i, "record": r}) for i, r in enumerate(records)]


METADATA = [{"type": "topic", "topic": "q"}, {"type": "register_broker", "broker_id": 1},
            {"type": "register_broker", "broker_id": 2}]
CTRL = {"role": "controller", "node_id": 1000, "partitions": [], "brokers": [], "topics": []}


def _run_with_metadata_logs(tmp_path, broker_lines):
    test = write_nodes(tmp_path, {"controller-0": CTRL, "broker-1": broker(1, 3, LOG)})
    (tmp_path / "nodes" / "controller-0" / "metadata.log").write_text("\n".join(_metadata_lines(METADATA)) + "\n")
    (tmp_path / "nodes" / "broker-1" / "metadata.log").write_text("\n".join(broker_lines) + "\n")
    return test


def test_a_metadata_log_unreadable_in_its_middle_makes_the_check_unknown(tmp_path):
    # line 2 is garbage; line 3, which the comparison would silently leave out, forks from the controller's
    forked = _metadata_lines([METADATA[0], {"type": "topic", "topic": "other"}, METADATA[2]])
    test = _run_with_metadata_logs(tmp_path, [forked[0], "\x00\x00garbage", forked[1]])
    r = check_stored(test, [])
    assert r.valid == "unknown"
    (reason,) = r.unknown_reasons
    assert reason.startswith("the metadata log of broker-1 (nodes/broker-1/metadata.log) could not be read past "
                             "offset 1: line 2")


def test_a_divergence_before_the_unreadable_part_of_a_metadata_log_stays_false(tmp_path):
    forked = _metadata_lines([{"type": "topic", "topic": "other"}, METADATA[1]])
    r = check_stored(_run_with_metadata_logs(tmp_path, [forked[0], "garbage", forked[1]]), [])
    assert r.valid is False and [a.name for a in r.anomalies] == ["broker-metadata-divergence"]
    assert r.unknown_reasons


def test_a_torn_last_line_of_a_metadata_log_is_no_reason_for_doubt(tmp_path):
    lines = _metadata_lines(METADATA[:2])
    r = check_stored(_run_with_metadata_logs(tmp_path, [*lines, lines[1][:7]]), [])
    assert r.valid is True and not r.unknown_reasons


# --- replicas.json: written when the logs are collected, read by the runner, handed to the checker ---------
def test_collect_writes_replicas_json_beside_nodes_and_the_run_reads_it_rather_than_the_dumps(tmp_path):
    from kafkaesque_harness.clusters.replica_dumps import REPLICAS_FILE, collect_replicas, load_replicas

    write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": DIVERGENT, "controller-0": CTRL})
    path = collect_replicas(tmp_path / "nodes", ["controller-0", "broker-1", "broker-2", "broker-3"])
    assert path == tmp_path / REPLICAS_FILE
    doc = json.loads(path.read_text())
    assert doc["format"] == "kafkaesque-replicas/1" and doc["state_dumps"] is True
    assert doc["nodes"]["broker-3"] == {"dump": "nodes/broker-3/state.json", "state": None,
                                        "why": "the file is missing"}
    assert doc["nodes"]["broker-2"]["state"]["partitions"][0]["log"] == [[0, 0, "a"], [1, 0, "B"]]
    # The checker reads the file, not the dumps: a dump changed afterwards is not seen.
    (tmp_path / "nodes" / "broker-2" / "state.json").write_text(json.dumps(broker(2, 3, LOG)))
    assert load_replicas(tmp_path) == doc
    r = check_stored({"run_dir": str(tmp_path), "state_dumps": True})
    assert r.valid is False and [a.name for a in r.anomalies] == ["log-divergence"]
    assert len(r.unknown_reasons) == 1 and "broker-3 (nodes/broker-3/state.json)" in r.unknown_reasons[0]


def test_a_damaged_replicas_json_is_normalised_again_from_the_dumps(tmp_path):
    from kafkaesque_harness.clusters.replica_dumps import REPLICAS_FILE

    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": DIVERGENT})
    (tmp_path / REPLICAS_FILE).write_text('{"format": "kafkaesque-replicas/1", "nod')
    r = check_stored(test)
    assert r.valid is False and r.stats["dumps_read"] == 2 and not r.unknown_reasons


def test_a_cluster_that_says_it_gives_no_dumps_in_replicas_json_is_not_applicable(tmp_path):
    from kafkaesque_harness.clusters.replica_dumps import no_dumps, write_replicas

    write_replicas(tmp_path, no_dumps())
    r = check_stored({"run_dir": str(tmp_path)})
    assert r.valid is True and r.stats["not_applicable"] == "the cluster gives no state dumps (a Kafka-protocol " \
        "system we did not build), so the broker-side invariants do not apply to this run"


def test_the_checker_reads_only_what_it_is_handed(tmp_path):
    doc = {"format": "kafkaesque-replicas/1", "state_dumps": True, "nodes": {
        "broker-1": {"dump": "nodes/broker-1/state.json", "state": broker(1, 3, LOG)},
        "broker-2": {"dump": "nodes/broker-2/state.json", "state": DIVERGENT}}}
    r = ReplicaStateChecker().check_in({"run_dir": str(tmp_path / "nowhere")}, [], CheckContext(data={REPLICAS: doc}))
    assert r.valid is False and r.stats["dumps_read"] == 2
    # Without its input it says so, never valid.
    r = ReplicaStateChecker().check({"run_dir": str(tmp_path), "state_dumps": True}, [])
    assert r.valid == "unknown" and "replicas.json" in r.unknown_reasons[0]


def _beyond_budget_ops():
    from kafkaesque_harness.history import Op

    return [Op("invoke", "send", 0, [0, 10], time=1), Op("ok", "send", 0, [0, [0, 10]], time=2),
            Op("invoke", "scenario-lossy-crash", "nemesis", {}, time=3),
            Op("info", "scenario-lossy-crash", "nemesis", {"beyond_fault_budget": True}, time=4),
            Op("invoke", "final-poll", 1, [0], time=5), Op("ok", "final-poll", 1, [0, 0, []], time=6)]


def test_checkers_hand_their_results_on_so_the_queue_check_is_not_run_twice(tmp_path):
    from kafkaesque_harness.checkers.core import run_checkers
    from kafkaesque_harness.checkers.queue import QueueChecker

    test = write_nodes(tmp_path, {"controller-0": controller([{"isr": [2], "elr": []}])})
    out = run_checkers([QueueChecker(), ReplicaStateChecker()], test, _beyond_budget_ops(), run_data(test))
    assert out["checkers"]["replicas"]["anomaly_types"] == ["unreported-data-loss"]


def test_losses_beyond_the_budget_without_the_queue_checkers_count_are_unknown(tmp_path):
    from kafkaesque_harness.checkers.core import Result

    test = write_nodes(tmp_path, {"controller-0": controller([{"isr": [2], "elr": []}])})
    r = check_stored(test, _beyond_budget_ops())
    assert r.valid == "unknown" and r.unknown_reasons[0].startswith(
        "a fault went beyond the fault budget, but the acknowledged writes lost after it are not known (the queue "
        "checker did not run before this one)")
    crashed = Result("queue", "unknown", error="MemoryError: ")
    r = check_stored(test, _beyond_budget_ops(), {"queue": crashed})
    assert r.valid == "unknown" and "(the queue checker could not finish (MemoryError: ))" in r.unknown_reasons[0]
    assert check_stored(test, _beyond_budget_ops()[:2]).valid is True  # no such fault: nothing to count


def _corrupt(node_id):
    b = broker(node_id, 3, LOG)
    b["partitions"][0]["corrupt_batches"] = [[2, 2]]
    return b


def test_a_batch_failing_its_crc_after_the_start_up_recovery_is_an_anomaly_unless_damaged_since():
    r = check_states({"broker-1": broker(1, 3, LOG), "broker-2": _corrupt(2)})
    assert r.valid is False
    (a,) = r.anomalies
    assert a.name == "corrupt-batch-kept" and a.examples == [{"node": "broker-2", "topic": "q", "partition": 0,
                                                              "batches": [[2, 2]]}]
    # damaged after its last start (file_restart=none, or the run ended first): the damage may still be there
    assert check_states({"broker-2": _corrupt(2)}, damaged_since_start={"broker-2"}).valid is True
    clean = broker(2, 3, LOG)
    clean["partitions"][0]["corrupt_batches"] = []
    assert check_states({"broker-1": broker(1, 3, LOG), "broker-2": clean}).valid is True


def test_damage_counts_from_the_file_corruption_ops_until_a_stop_restarted_the_node(tmp_path):
    from kafkaesque_harness.checkers.replicas import damaged_since_start
    from kafkaesque_harness.history import Op

    damage = [Op("invoke", "start-file-corruption", "nemesis", None, time=1),
              Op("info", "start-file-corruption", "nemesis", {"file-corruption": ["broker-2"], "mode": "bitflip"},
                 time=2)]
    restarted = [Op("info", "stop-file-corruption", "nemesis",
                    {"rolled-back": [], "restarted": {"broker-2": {"process": "running"}}}, time=3)]
    not_running = [Op("info", "stop-file-corruption", "nemesis",
                      {"rolled-back": [], "restarted": {"broker-2": {"process": "down"}}}, time=3)]
    rollback = [Op("info", "start-file-corruption", "nemesis", {"file-corruption": [], "snapshot": {
        "node": "broker-3", "file": "f", "offset": 0, "size": 9}}, time=4)]
    assert damaged_since_start(damage) == {"broker-2"}
    assert damaged_since_start(damage + restarted) == set()
    assert damaged_since_start(damage + not_running) == {"broker-2"}
    assert damaged_since_start(damage + restarted + rollback) == {"broker-3"}
    assert damaged_since_start(damage + restarted + damage) == {"broker-2"}
    test = write_nodes(tmp_path, {"broker-1": broker(1, 3, LOG), "broker-2": _corrupt(2)})
    assert check_stored(test, damage).valid is True
    assert [a.name for a in check_stored(test, damage + restarted).anomalies] == ["corrupt-batch-kept"]


def test_beside_a_checker_that_excuses_no_loss_the_replicas_are_still_judged_and_losses_not_asked(tmp_path):
    """The txn workload's replica checker (excused_by=None): its checker counts every loss as lost-write, so
    there is no excused loss for unreported-data-loss to ask about; the replicas' own states still count."""
    from kafkaesque_harness.checkers.core import run_checkers

    test = write_nodes(tmp_path, {"controller-0": controller([{"isr": [2], "elr": []}])})
    out = run_checkers([ReplicaStateChecker(excused_by=None)], test, _beyond_budget_ops(), run_data(test))
    assert out["checkers"]["replicas"]["valid"] is True
    diverged = write_nodes(tmp_path / "diverged", {"broker-1": broker(1, 3, LOG), "broker-2": _corrupt(2)})
    out = run_checkers([ReplicaStateChecker(excused_by=None)], diverged, _beyond_budget_ops(), run_data(diverged))
    assert out["checkers"]["replicas"]["anomaly_types"] == ["corrupt-batch-kept"]
