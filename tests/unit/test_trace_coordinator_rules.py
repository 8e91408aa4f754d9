"""The trace rules of the coordinators' decisions (checkers/trace.py, issue 40): per rule a hand-written trace that
breaks it is caught with a sentence saying what happened, and a correct one passes; then the broker writes the
lines those rules read (the sans-IO coordinators driven directly, the shell through a Broker with no sockets), and
the group coordinator's mutants break the rules on the lines they write."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from kafkaesque_harness.checkers.trace import RULES, check_traces
from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.group_coordinator import CoordinatorConfig, GroupCoordinator
from kafkaesque_harness.clusters.broker.log import build_batch
from kafkaesque_harness.clusters.broker.trace import default_trace_path
from kafkaesque_harness.clusters.trace_files import read_trace
from tests.unit.test_broker_groups import (
    commit_replicated,
    make_broker,
)
from tests.unit.test_broker_txn import lead, produce, txn_batch
from tests.unit.test_coordinator_mutants import group_coordinator_of, joined, mutated, synced
from tests.unit.test_txn_coordinator import TIMEOUT, TP1, TP2, T, write
from tests.unit.test_txn_group_variants import coordinator, init

NEW_RULES = ("txn-marker-not-as-decided", "read-committed-open-txn", "offset-commit-stale-generation",
             "group-generation-reused", "offset-fetch-not-committed", "producer-epoch-regressed",
             "log-shorter-after-restart", "txn-write-unreplicated")


def at(node: str, mono: float, event: str, **facts) -> dict:
    return {"mono": mono, "event": event, "role": "broker", "node": int(node.rsplit("-", 1)[1]), **facts}


def check(*lines: tuple[str, dict]):
    """The checker's result on lines given as (trace node, line), numbered in each node's order."""
    traces: dict[str, list[dict]] = {}
    for node, e in lines:
        traces.setdefault(node, []).append(dict(e, line=len(traces.get(node, [])) + 1))
    return check_traces(traces)


def found(*lines: tuple[str, dict]) -> dict[str, list[str]]:
    """Each broken rule and its findings' sentences."""
    result = check(*lines)
    assert result.valid is (not result.anomalies)
    return {a.name: [ex["summary"] for ex in a.examples] for a in result.anomalies}


def test_every_new_rule_is_cited():
    for rule in NEW_RULES:
        assert "(" in RULES[rule] and ")" in RULES[rule], rule


# --- txn-marker-not-as-decided ---------------------------------------------------------------------------------
Q0, Q1 = ["queue", 0], ["queue", 1]


def decided(mono: float, result: str = "commit", started_ms: int = 1000, marker_epoch: int = 3,
            started_by: str = "client", txn_epoch: int = 3) -> tuple[str, dict]:
    return "broker-1", at("broker-1", mono, "txn_end_started", transactional_id="txn-0", producer_id=77,
                          txn_epoch=txn_epoch, marker_epoch=marker_epoch, result=result, started_by=started_by,
                          partitions=[Q0, Q1], txn_started_ms=started_ms, coordinator_partition=2,
                          coordinator_epoch=5)


def marker_at(node: str, mono: float, where: list, result: str = "commit", epoch: int = 3,
              offset: int = 10, leader_epoch: int = 1) -> tuple[str, dict]:
    return node, at(node, mono, "txn_marker_written", topic=where[0], partition=where[1], producer_id=77,
                    producer_epoch=epoch, coordinator_epoch=5, result=result, offset=offset, leader_epoch=leader_epoch)


def completed(mono: float, result: str = "commit") -> tuple[str, dict]:
    return "broker-1", at("broker-1", mono, "txn_completed", transactional_id="txn-0", producer_id=77,
                          producer_epoch=3, result=result, partitions=[Q0, Q1], coordinator_partition=2,
                          coordinator_epoch=5)


def alive(mono: float, *nodes: str) -> list[tuple[str, dict]]:
    """A line of each node's process at `mono`: what it wrote before then reached its trace."""
    return [(n, at(n, mono, "hwm_checkpointed", replicas=[])) for n in nodes]


def test_a_transaction_with_its_marker_at_every_partition_at_the_decided_result_passes():
    assert found(decided(1), marker_at("broker-2", 2, Q0), marker_at("broker-3", 3, Q1), completed(4),
                 *alive(6, "broker-1", "broker-2", "broker-3")) == {}


def test_a_completed_transaction_missing_a_marker_is_caught():
    result = found(decided(1), marker_at("broker-2", 2, Q0), completed(4), *alive(6, "broker-1", "broker-2"))
    assert result == {"txn-marker-not-as-decided": [
        "broker-1 completed transaction 'txn-0' (producer 77, commit at epoch 3) with no such marker written at "
        "queue-1 since broker-1 decided it"]}


def test_a_missing_marker_is_not_judged_when_a_broker_died_between_decision_and_completion():
    # broker-3's process ended at mono 3 (its unflushed tail may have held the marker), then it restarted
    dead = [("broker-3", at("broker-3", 0.5, "trace_started")), ("broker-3", at("broker-3", 3, "hwm_checkpointed")),
            ("broker-3", at("broker-3", 5, "trace_started"))]
    assert found(decided(1), marker_at("broker-2", 2, Q0), completed(4), *dead,
                 *alive(6, "broker-1", "broker-2")) == {}


def test_a_marker_of_the_other_result_is_caught():
    result = found(decided(1), marker_at("broker-2", 2, Q0, result="abort"), marker_at("broker-3", 3, Q1),
                   *alive(6, "broker-1", "broker-2", "broker-3"))
    assert result == {"txn-marker-not-as-decided": [
        "broker-2 wrote a abort marker for producer 77 (epoch 3) at queue-0 offset 10, but broker-1 had decided its "
        "transaction 'txn-0': commit"]}


def test_a_marker_after_its_coordinator_died_is_not_judged_against_an_older_decision():
    # The false finding of `kafkaesque sim --seed 7 --workload txn --nemesis kill,pause,partition`: the coordinator
    # decided an abort, then a commit of the producer's next transaction, and was killed before its trace buffer
    # reached the file: the commit decision is lost, its marker is not, and it looked like a marker against the abort
    dead = [("broker-1", at("broker-1", 0.5, "trace_started")), ("broker-1", at("broker-1", 1.5, "hwm_checkpointed")),
            ("broker-1", at("broker-1", 5, "trace_started"))]
    assert found(decided(1, result="abort"), marker_at("broker-2", 2, Q0), *dead,
                 *alive(6, "broker-1", "broker-2")) == {}
    # with the coordinator alive throughout, the same marker is caught
    assert list(found(decided(1, result="abort"), marker_at("broker-2", 2, Q0),
                      *alive(6, "broker-1", "broker-2"))) == ["txn-marker-not-as-decided"]


def test_one_transaction_decided_both_ways_is_caught_and_the_next_transaction_is_not():
    result = found(decided(1), decided(5, result="abort", marker_epoch=4, started_by="timeout"))
    assert list(result) == ["txn-marker-not-as-decided"]
    assert "decided transaction 'txn-0' (producer 77, epoch 3, begun at 1000 ms) abort (timeout) after broker-1 " \
           "had decided it commit: one transaction, two outcomes" in result["txn-marker-not-as-decided"][0]
    # the producer's next transaction at the same epoch begins later: another transaction
    assert found(decided(1), decided(5, result="abort", started_ms=2000)) == {}


# --- read-committed-open-txn -----------------------------------------------------------------------------------
def txn_produce(first: int, mono: float = 1) -> tuple[str, dict]:
    return "broker-1", at("broker-1", mono, "produce_acked", topic="queue", partition=0, leader_epoch=1, first=first,
                          last=first, acks=-1, hwm=first + 1, isr_size=2, min_isr=2, producer_id=77,
                          producer_epoch=0, base_sequence=0, transactional=True, control=False)


def rc_fetch(first: int, last: int, leo: int, hwm_: int, lso: int, mono: float = 2) -> tuple[str, dict]:
    return "broker-1", at("broker-1", mono, "consumer_fetch", topic="queue", partition=0, leader_epoch=1, offset=first,
                          first=first, last=last, isolation="read_committed", bound="lso", bound_offset=lso,
                          hwm=hwm_, leo=leo, lso=lso)


def test_a_read_committed_fetch_of_an_open_transaction_is_caught_whatever_lso_the_leader_reported():
    # the leader reported LSO 8 = its HWM: the transaction begun at 5 had no marker in its log (it came at 9)
    result = found(txn_produce(5), rc_fetch(0, 7, leo=8, hwm_=8, lso=8), marker_at("broker-1", 3, Q0, offset=9))
    assert result == {"read-committed-open-txn": [
        "broker-1 served a read_committed consumer offsets 0..7 of queue-0, with producer 77's transactional batch at "
        "offset 5 open: its marker is at offset 9, at or above the LEO 8 then (reported LSO 8, bound lso 8)"]}


def test_a_read_committed_fetch_of_decided_transactions_passes():
    # the marker at 6 was in the log when the leader served (below its LEO and HWM)
    assert found(txn_produce(5), marker_at("broker-1", 1.5, Q0, offset=6), rc_fetch(0, 7, leo=8, hwm_=8, lso=8)) == {}
    # below the LSO: served only what precedes the open transaction
    assert found(txn_produce(5), rc_fetch(0, 4, leo=8, hwm_=8, lso=5), marker_at("broker-1", 3, Q0, offset=9)) == {}
    # a marker appended but not yet replicated (offset 8 < LEO 9, HWM 8): decided, the broker lets it pass
    assert found(txn_produce(5), rc_fetch(0, 7, leo=9, hwm_=8, lso=8), marker_at("broker-1", 3, Q0, offset=8)) == {}
    # no marker in the trace at all: not judged
    assert found(txn_produce(5), rc_fetch(0, 7, leo=8, hwm_=8, lso=8)) == {}


def test_an_open_looking_transaction_is_not_judged_when_a_broker_died_after_its_batch():
    # The false finding of `kafkaesque sim --seed 7 --workload txn --nemesis kill,pause,partition`: the leader that
    # appended the batch then wrote its commit marker and was killed before that line reached its trace; the new
    # leader's log held the marker (its LSO was right), the trace showed only the producer's next one
    dead = [("broker-2", at("broker-2", 0.5, "trace_started")), ("broker-2", at("broker-2", 1.5, "hwm_checkpointed")),
            ("broker-2", at("broker-2", 5, "trace_started"))]
    assert found(txn_produce(5), rc_fetch(0, 7, leo=8, hwm_=8, lso=8), marker_at("broker-1", 3, Q0, offset=9),
                 *dead) == {}


def test_an_open_looking_transaction_is_not_judged_when_it_was_decided_before_the_fetch():
    # The false finding of the default txn sweep's seed 8: the coordinator decided the commit (29.2146 s), the leader
    # appended the marker at 902 and, its epoch changed (1 to 4) before the HWM passed it, answered the marker's
    # write with an error: no txn_marker_written. Its LSO (903) was right; the trace's first marker after the batch
    # was the next coordinator's, for the same transaction, at 907.
    decision = ("broker-1", at("broker-1", 1.5, "txn_end_started", transactional_id="txn-0", producer_id=77,
                               txn_epoch=0, marker_epoch=0, result="commit", started_by="client",
                               partitions=[["queue", 0]], txn_started_ms=1000, coordinator_partition=2,
                               coordinator_epoch=5))
    assert found(txn_produce(5), decision, rc_fetch(0, 7, leo=8, hwm_=8, lso=8),
                 marker_at("broker-1", 3, Q0, offset=9)) == {}
    # a decision after the fetch, or for another partition, does not excuse it
    late = ("broker-1", {**decision[1], "mono": 2.5})
    other = ("broker-1", {**decision[1], "partitions": [["queue", 1]]})
    for d in (late, other):
        assert set(found(txn_produce(5), d, rc_fetch(0, 7, leo=8, hwm_=8, lso=8),
                         marker_at("broker-1", 3, Q0, offset=9))) == {"read-committed-open-txn"}


def test_an_open_looking_transaction_is_not_judged_when_its_next_traced_marker_is_of_a_later_leader_epoch():
    # txn-stale-epoch-accepted's txn run (2026-11-28): the leader appended the commit marker at offset 9 (its LEO 10
    # passed it, so its LSO passed the batch at 5), lost the leadership before the marker was acknowledged, and the
    # new leader cut it; the marker was written again at 10 in leader epoch 2. Only acknowledged markers are traced.
    rewritten = marker_at("broker-1", 3, Q0, offset=10, leader_epoch=2)
    assert found(txn_produce(5), rc_fetch(0, 7, leo=10, hwm_=9, lso=8), rewritten) == {}
    # the same marker written in the fetch's own leader epoch: that leader had not appended it, the batch was open
    same_epoch = marker_at("broker-1", 3, Q0, offset=10, leader_epoch=1)
    assert list(found(txn_produce(5), rc_fetch(0, 7, leo=10, hwm_=9, lso=8), same_epoch)) == ["read-committed-open-txn"]


# --- txn-write-unreplicated ------------------------------------------------------------------------------------
def coordinator_write(acks: int, hwm_: int, control: bool = True, topic: str = "queue") -> tuple[str, dict]:
    return "broker-1", at("broker-1", 1, "produce_acked", topic=topic, partition=0, leader_epoch=1, first=7, last=7,
                          acks=acks, hwm=hwm_, isr_size=2, min_isr=2, producer_id=77 if control else -1,
                          producer_epoch=0, base_sequence=-1, transactional=control, control=control)


def test_a_marker_or_state_record_acknowledged_before_the_hwm_passed_it_is_caught_whatever_its_acks():
    # txn-marker-acks-1 and txn-state-acks-1: written with acks=1, acknowledged at the local append
    assert found(coordinator_write(1, hwm_=7)) == {"txn-write-unreplicated": [
        "broker-1 acknowledged the transaction marker at offsets 7..7 of queue-0 (acks=1) with the HWM at 7"]}
    assert list(found(coordinator_write(1, hwm_=5, control=False, topic="__transaction_state"))) == [
        "txn-write-unreplicated"]


def test_a_replicated_marker_or_state_record_and_a_client_acks_1_write_pass():
    assert found(coordinator_write(-1, hwm_=8)) == {}  # as the shipped shell writes them
    assert found(coordinator_write(-1, hwm_=8, control=False, topic="__transaction_state")) == {}
    assert found(coordinator_write(1, hwm_=8)) == {}  # acks=1 but replicated by then: nothing lost
    assert found(coordinator_write(1, hwm_=7, control=False)) == {}  # a client's own acks=1 data write


# --- offset commits and fetches ----------------------------------------------------------------------------------
def generation(mono: float, number: int, members: list[str], node: str = "broker-1") -> tuple[str, dict]:
    return node, at(node, mono, "group_generation", group="g", coordinator_partition=3, generation=number,
                    members=members, leader=members[0] if members else None, protocol="range")


def accepted(mono: float, number: int, member: str, node: str = "broker-1") -> tuple[str, dict]:
    return node, at(node, mono, "offset_commit_accepted", group="g", coordinator_partition=3, generation=number,
                    member=member, state="Stable", group_generation=None)


def test_a_commit_from_the_current_generation_and_member_passes():
    assert found(generation(1, 2, ["m1", "m2"]), accepted(2, 2, "m2")) == {}
    assert found(generation(1, 3, []), accepted(2, -1, "")) == {}  # an Empty group: a consumer assigning itself
    assert found(accepted(2, -1, "")) == {}


def test_a_commit_from_an_older_generation_or_another_member_is_caught():
    assert found(generation(1, 2, ["m1", "m2"]), accepted(2, 1, "m1")) == {"offset-commit-stale-generation": [
        "broker-1 accepted an offset commit of group 'g' from member 'm1' with generation 1; the group was in "
        "generation 2 with members ['m1', 'm2']"]}
    assert list(found(generation(1, 2, ["m1"]), accepted(2, 2, "m9"))) == ["offset-commit-stale-generation"]
    assert found(generation(1, 3, []), accepted(2, 2, "m1")) == {"offset-commit-stale-generation": [
        "broker-1 accepted an offset commit of group 'g' from member 'm1' with generation 2; the group had no members "
        "(generation 3)"]}


def test_a_coordinator_that_reloaded_the_groups_partition_knows_no_generation():
    reload = ("broker-1", at("broker-1", 1.5, "groups_loading", coordinator_partition=3))
    assert found(generation(1, 2, ["m1"]), reload, accepted(2, 2, "m1")) == {"offset-commit-stale-generation": [
        "broker-1 accepted an offset commit of group 'g' from member 'm1' with generation 2; the group had no "
        "generation on this coordinator"]}
    other = ("broker-1", at("broker-1", 1.5, "groups_loading", coordinator_partition=4))
    assert found(generation(1, 2, ["m1"]), other, accepted(2, 2, "m1")) == {}


def test_a_generation_not_above_the_previous_one_is_caught():
    assert found(generation(1, 2, ["m1"]), generation(2, 2, ["m1", "m2"])) == {"group-generation-reused": [
        "broker-1 completed generation 2 of group 'g' after generation 2: a member of the older one passes as current"]}
    restarted = ("broker-1", at("broker-1", 1.5, "trace_started"))
    assert found(generation(1, 2, ["m1"]), restarted, generation(2, 1, ["m1"])) == {}
    assert found(generation(1, 2, ["m1"]), generation(2, 3, ["m1"]), generation(3, 1, ["m1"], node="broker-2")) == {}


def acked(mono: float, first: int, offset: int, node: str = "broker-1") -> tuple[str, dict]:
    return node, at(node, mono, "offset_commit_acked", topic="__consumer_offsets", partition=3, leader_epoch=1,
                    group="g", generation=2, member="m1", offsets=[["t", 0, offset]], first=first, last=first, hwm=first + 1,
                    acks=-1)


def fetched(mono: float, offsets: list, none: list | None = None, node: str = "broker-2") -> tuple[str, dict]:
    return node, at(node, mono, "offset_fetch_answered", group="g", coordinator_partition=3, offsets=offsets,
                    none=none or [])


def test_the_group_fetches_the_offset_it_committed_or_a_newer_one():
    assert found(acked(1, 10, 42), fetched(2, [["t", 0, 42, 10]])) == {}
    assert found(acked(1, 10, 42), fetched(2, [["t", 0, 50, 12]])) == {}  # a newer commit, acknowledged or not
    assert found(fetched(0.5, [["t", 0, 40, 9]]), acked(1, 10, 42)) == {}  # answered before the commit


def test_a_fetch_of_an_older_offset_or_of_none_after_an_acknowledged_commit_is_caught():
    assert found(acked(1, 10, 42), fetched(2, [["t", 0, 40, 9]])) == {"offset-fetch-not-committed": [
        "broker-2 answered group 'g''s OffsetFetch of t-0 with offset 40 (from record 9), after broker-1 had "
        "acknowledged its commit of offset 42 (record 10 of __consumer_offsets-3)"]}
    assert found(acked(1, 10, 42), fetched(2, [], none=[["t", 0]])) == {"offset-fetch-not-committed": [
        "broker-2 answered group 'g''s OffsetFetch of t-0 with no committed offset, after broker-1 had acknowledged "
        "its commit of offset 42 (record 10 of __consumer_offsets-3)"]}


# --- producer-epoch-regressed ----------------------------------------------------------------------------------
def init_line(mono: float, before: int, after: int, node: str = "broker-1") -> tuple[str, dict]:
    return node, at(node, mono, "txn_init_producer_id", transactional_id="txn-0", producer_id_before=77 if before >= 0
                    else -1, epoch_before=before, producer_id=77, producer_epoch=after, asked_producer_id=-1,
                    asked_epoch=-1, aborted_open=False, coordinator_partition=2, coordinator_epoch=5)


def test_a_producer_epoch_that_only_grows_passes():
    assert found(init_line(1, -1, 0), init_line(2, 0, 1), decided(3, txn_epoch=1, marker_epoch=1),
                 init_line(4, 1, 2)) == {}


def test_a_producer_epoch_going_back_is_caught():
    # a new coordinator (broker-2) rebuilt the id from an old record: it answers epoch 1 again after epoch 2
    result = found(init_line(1, -1, 0), init_line(2, 0, 1), init_line(3, 1, 2), init_line(5, 0, 1, node="broker-2"))
    assert result["producer-epoch-regressed"] == [
        "broker-2 txn_init_producer_id of 'txn-0' used producer 77 at epoch 0, after broker-1 had used epoch 2 for it"]


# --- log-shorter-after-restart ---------------------------------------------------------------------------------
def restart_trace(loaded_end: int, drops: tuple, cuts: tuple = (), truncated: bool = False) -> list[tuple[str, dict]]:
    n = "broker-2"
    lines = [(n, at(n, 1, "trace_started")),
             (n, at(n, 2, "logs_loaded", clean=False, recovery_cuts=[], lossy_drops=drops[0], replicas=[])),
             (n, at(n, 3, "hwm_checkpointed", replicas=[["queue", 0, "follower", 100, 120]]))]
    if truncated:
        lines.append((n, at(n, 4, "truncated_on_divergence", topic="queue", partition=0, leader_epoch=2,
                            **{"from": 120, "to": 80}, hwm=80, hwm_before=80, reason="divergence")))
    lines += [(n, at(n, 10, "trace_started")),
              (n, at(n, 11, "logs_loaded", clean=False, recovery_cuts=list(cuts), lossy_drops=drops[1],
                     replicas=[["queue", 0, loaded_end, 100]]))]
    return lines


def test_a_log_reaching_its_checkpointed_hwm_after_a_restart_passes():
    assert found(*restart_trace(100, (None, None))) == {}


def test_a_log_shorter_than_its_checkpointed_hwm_after_a_restart_is_caught():
    assert found(*restart_trace(90, (None, None))) == {"log-shorter-after-restart": [
        "broker-2 restarted (unclean shutdown) with the log of queue-0 ending at 90, below the HWM 100 it checkpointed "
        "as follower before; no power cut explains it (lossy file system drops: None before, None now)"]}
    assert list(found(*restart_trace(90, (1, 1)))) == ["log-shorter-after-restart"]  # no drop since the last start


def test_a_power_cut_a_recovery_cut_or_a_truncation_explains_a_shorter_log():
    assert found(*restart_trace(90, (0, 1))) == {}
    assert found(*restart_trace(90, (None, None), cuts=("queue-0",))) == {}
    assert found(*restart_trace(90, (None, None), truncated=True)) == {}


# --- the broker writes these lines ---------------------------------------------------------------------------
def numbered(events: list[dict], node: int = 1) -> dict[str, list[dict]]:
    return {f"broker-{node}": [dict(e, line=i + 1, mono=float(i + 1), role="broker", node=node)
                               for i, e in enumerate(events)]}


def test_the_transaction_coordinator_traces_a_completion_with_its_partitions():
    events: list[dict] = []
    c = coordinator()
    c.event_log = events.append
    pid, epoch = init(c)
    write(c, c.add_partitions(T, pid, epoch, [TP1, TP2], 5))
    _, job = write(c, c.end_txn(T, pid, epoch, True, 6))
    c.written(c.markers_done(job))
    [ended] = [e for e in events if e["event"] == "txn_end_started"]
    [done] = [e for e in events if e["event"] == "txn_completed"]
    assert ended["txn_started_ms"] == 5
    assert (done["producer_id"], done["producer_epoch"], done["result"], done["partitions"]) == \
        (pid, epoch, "commit", [list(TP1), list(TP2)])
    markers = [{"event": "txn_marker_written", "topic": t, "partition": p, "producer_id": pid, "producer_epoch": epoch,
                "result": "commit", "offset": 3, "coordinator_epoch": 3} for t, p in (TP1, TP2)]
    i = events.index(done)
    assert check_traces(numbered(events[:i] + markers + events[i:])).valid is True
    assert [a.name for a in check_traces(numbered(events[:i] + markers[:1] + events[i:])).anomalies] == [
        "txn-marker-not-as-decided"]
    assert TIMEOUT  # the coordinator's default timeout: nothing expired here


def group_events(module=None) -> tuple[list[dict], str]:
    """A group of one member through two generations, then a commit naming the first generation, as the (mutated)
    group coordinator traces it; the member id."""
    events: list[dict] = []
    if module is None:
        g = GroupCoordinator(CoordinatorConfig(offsets_partitions=1, initial_rebalance_delay_ms=0), events.append)
        from kafkaesque_harness.clusters.broker import group_coordinator as module
    else:
        g = group_coordinator_of(module)
        g.event_log = events.append
    g.begin_loading(0)
    g.load(0, [])
    first = joined(module, g)
    synced(g, first)
    again = joined(module, g, first.member_id)
    synced(g, again)
    g.check_commit("g", first.generation_id, first.member_id, 0)
    g.check_commit("g", again.generation_id, first.member_id, 0)
    return events, first.member_id


def test_the_group_coordinator_traces_generations_and_accepted_commits():
    events, member = group_events()
    assert [e["event"] for e in events] == ["groups_loading", "group_generation", "group_generation",
                                            "offset_commit_accepted"]
    assert [(e["generation"], e["members"]) for e in events if e["event"] == "group_generation"] == \
        [(1, [member]), (2, [member])]
    [commit] = [e for e in events if e["event"] == "offset_commit_accepted"]
    assert (commit["generation"], commit["member"], commit["group_generation"]) == (2, member, 2)
    assert check_traces(numbered(events)).valid is True


def test_the_group_coordinators_mutants_break_the_rules_on_the_lines_they_write():
    with mutated("group-commit-stale-generation") as module:
        events, _ = group_events(module)
    assert [a.name for a in check_traces(numbered(events)).anomalies] == ["offset-commit-stale-generation"]
    with mutated("group-generation-not-bumped") as module:
        events, _ = group_events(module)
    assert [a.name for a in check_traces(numbered(events)).anomalies] == ["group-generation-reused"]


def node_trace(b) -> list[dict]:
    b.events.flush()
    b.logs.close_all()
    return read_trace(Path(default_trace_path(b.args.log_file)))["lines"]


def test_the_broker_traces_a_commit_with_its_member_and_offsets_and_the_fetch_that_reads_it(tmp_path):
    async def scenario() -> list[dict]:
        b = make_broker(tmp_path)
        await commit_replicated(b)
        assert b.groups.committed_offsets("g", [("t", 0), ("t", 1)])[0] == rpc.NONE
        return node_trace(b)

    trace = asyncio.run(scenario())
    [accept] = [e for e in trace if e["event"] == "offset_commit_accepted"]
    [answered] = [e for e in trace if e["event"] == "offset_commit_acked"]
    [fetch] = [e for e in trace if e["event"] == "offset_fetch_answered"]
    assert (accept["generation"], accept["member"]) == (-1, "")
    assert (answered["member"], answered["offsets"], answered["first"]) == ("", [["t", 0, 42]], 0)
    assert (fetch["offsets"], fetch["none"]) == ([["t", 0, 42, 0]], [["t", 1]])
    assert check_traces({"broker-1": trace}).valid is True


def test_a_read_committed_fetch_is_traced_with_the_offset_it_was_cut_at_and_the_leo(tmp_path):
    async def scenario() -> list[dict]:
        b = make_broker(tmp_path)
        lead(b, "t", 1, 0)
        for raw in (build_batch([b"before"]), txn_batch(0, b"open"), build_batch([b"after"])):
            assert await produce(b, raw) == rpc.NONE
        b.consumer_read("t", 0, 0, -1, 1 << 20, read_committed=True)
        return node_trace(b)

    [fetch] = [e for e in asyncio.run(scenario()) if e["event"] == "consumer_fetch"]
    assert (fetch["bound"], fetch["bound_offset"], fetch["lso"], fetch["leo"], fetch["last"]) == ("lso", 1, 1, 3, 0)


def test_a_restarted_broker_traces_its_logs_beside_the_hwm_checkpoint_and_the_lossy_drops(tmp_path, monkeypatch):
    async def first_life() -> None:
        b = make_broker(tmp_path)
        lead(b, "t", 1, 0)
        for value in (b"a", b"b"):
            assert await produce(b, build_batch([value])) == rpc.NONE
        b.write_hwm_checkpoint()
        b.events.flush()
        b.logs.close_all()

    asyncio.run(first_life())
    status = tmp_path / "lossyfs.status"
    status.write_text('{"event": "mounted"}\n{"event": "dropped", "files": 1, "bytes": 10, "seq": 1}\n')
    monkeypatch.setenv("KAFKAESQUE_LOSSYFS_STATUS", str(status))
    again = make_broker(tmp_path)
    trace = node_trace(again)
    loaded = [e for e in trace if e["event"] == "logs_loaded"]
    assert [e["lossy_drops"] for e in loaded] == [None, 1]
    assert loaded[1]["replicas"] == [["t", 0, 2, 2]] and loaded[1]["clean"] is False
    assert check_traces({"broker-1": trace}).valid is True


def test_an_init_that_aborts_the_open_transaction_is_no_epoch_regression():
    # The re-init reports the fencing epoch (e+1) first, then the abort's decision of the transaction run under e.
    events: list[dict] = []
    c = coordinator()
    c.event_log = events.append
    pid, epoch = init(c)
    write(c, c.add_partitions(T, pid, epoch, [TP1], 5))
    err, abort = c.init_producer_id(T, TIMEOUT, -1, -1, 6)
    assert err == rpc.CONCURRENT_TRANSACTIONS
    job = c.written(abort)
    c.written(c.markers_done(job))
    init(c)
    reported = [(e["event"], e.get("producer_epoch", e.get("marker_epoch"))) for e in events]
    assert reported == [("txn_init_producer_id", epoch), ("txn_init_producer_id", epoch + 1),
                        ("txn_end_started", epoch + 1), ("txn_completed", epoch + 1),
                        ("txn_init_producer_id", epoch + 2)]
    marker = {"event": "txn_marker_written", "topic": TP1[0], "partition": TP1[1], "producer_id": pid,
              "producer_epoch": epoch + 1, "result": "abort", "offset": 3, "coordinator_epoch": 3}
    i = next(i for i, e in enumerate(events) if e["event"] == "txn_completed")
    assert check_traces(numbered(events[:i] + [marker] + events[i:])).valid is True


def group_walk(seed: int, exercised: dict[str, int], module=None) -> list[dict]:
    """Members joining (again), syncing, heartbeating, leaving, committing with the generation they last saw (often
    one that ended, sometimes the one before it: a delayed request) and fetching, sessions expiring, the partition reloaded, on the (mutated) group coordinator:
    the lines it writes, and an offset_commit_acked for each commit it accepted, as the shell writes it."""
    import random

    from kafkaesque_harness.clusters.broker import group_coordinator

    m = module or group_coordinator
    rng = random.Random(seed)
    events: list[dict] = []
    g = m.GroupCoordinator(m.CoordinatorConfig(offsets_partitions=1, initial_rebalance_delay_ms=0), events.append)
    g.begin_loading(0)
    g.load(0, [])
    seen: dict[str, int] = {}  # member id -> the generation its last JoinGroup answer gave it
    now, record = 0, 0
    for _ in range(120):
        now += rng.choice((0, 100, 2_000, 7_000))
        action = rng.choice(("join", "join", "sync", "heartbeat", "leave", "commit", "commit", "fetch", "tick",
                             "reload"))
        member = rng.choice([*seen, ""]) if seen else ""
        if action == "join":
            for _, r in g.join("w", "g", member, "consumer", [("range", b"")], 6_000, 10_000, False, now):
                if getattr(r, "generation_id", -1) >= 0 and r.member_id:
                    seen[r.member_id] = r.generation_id
        elif action == "sync" and member:
            g.sync("s", "g", seen[member], member, None, None, {x: b"x" for x in seen}, now)
        elif action == "heartbeat" and member:
            g.heartbeat("g", seen[member], member, now)
        elif action == "leave" and member:
            g.leave("g", [member], now)
        elif action == "commit":
            # sometimes a commit sent before the member's last rebalance arrives after it (one generation back)
            generation = seen[member] - rng.choice((0, 0, 1)) if member else -1
            if g.check_commit("g", generation, member, now) != rpc.NONE:
                exercised["refused"] += 1
            else:
                exercised["accepted_in_a_generation"] += generation >= 0
                key, value = m.offset_record("g", "t", 0, (rng.randrange(100), 0, ""))
                g.apply_record(record, key, value)
                events.append({"event": "offset_commit_acked", "topic": "__consumer_offsets", "partition": 0,
                               "group": "g", "generation": generation, "member": member,
                               "offsets": [["t", 0, json.loads(value)["offset"]]], "first": record,
                               "last": record, "hwm": record + 1, "acks": -1})
                record += 1
        elif action == "fetch":
            g.committed_offsets("g", [("t", 0)])
        elif action == "tick":
            g.tick(now)
        elif action == "reload":
            g.begin_loading(0)
            g.load(0, [(e["first"], *m.offset_record("g", "t", 0, (e["offsets"][0][2], 0, "")))
                       for e in events if e["event"] == "offset_commit_acked"])
            seen.clear()
    exercised["generations"] += sum(e["event"] == "group_generation" for e in events)
    return events


def assert_walks_break_no_rule(walk, exercised: dict[str, int]) -> None:
    """The shipped coordinator's traces of 20 seeded random walks break no rule, and each walk counter reached 20."""
    for seed in range(20):
        result = check_traces(numbered(walk(seed, exercised)))
        assert result.valid is True, (seed, [a.examples[0]["summary"] for a in result.anomalies])
    assert min(exercised.values()) >= 20, exercised


def test_the_shipped_group_coordinator_breaks_no_group_rule_on_random_walks():
    # the walks reach what the rules judge: commits accepted in a generation, stale ones refused, rebalances
    assert_walks_break_no_rule(group_walk, {"accepted_in_a_generation": 0, "refused": 0, "generations": 0})


def test_the_group_coordinators_mutants_are_caught_on_the_same_walks():
    for name, rule in (("group-commit-stale-generation", "offset-commit-stale-generation"),
                       ("group-commit-to-empty-group", "offset-commit-stale-generation"),
                       ("group-oldest-commit-wins", "offset-fetch-not-committed"),
                       ("group-generation-not-bumped", "group-generation-reused")):
        exercised = {"accepted_in_a_generation": 0, "refused": 0, "generations": 0}
        with mutated(name) as module:
            broken = {a.name for seed in range(20)
                      for a in check_traces(numbered(group_walk(seed, exercised, module))).anomalies}
        assert rule in broken, (name, broken)


def txn_walk(seed: int, exercised: dict[str, int], module=None) -> list[dict]:
    """Producers of two transactional ids initialising (again, naming the pair they hold or not), adding partitions,
    ending transactions both ways, their transactions timing out, and the coordinator failing over (a new one loads
    the records written so far and finishes what it finds prepared), on the (mutated) transaction coordinator: the
    lines it writes, and a txn_marker_written at each partition of each marker job, as the shell writes them."""
    import itertools
    import random

    from kafkaesque_harness.clusters.broker import txn_coordinator

    m = module or txn_coordinator
    rng = random.Random(seed)
    events: list[dict] = []
    records: list[tuple[bytes, bytes]] = []
    ids = itertools.count(1000)
    offsets = itertools.count(1)

    def coordinator(epoch: int):
        c = m.TransactionCoordinator(lambda: next(ids), m.TxnConfig(txn_partitions=1), event_log=events.append)
        c.begin_loading(0, epoch)
        return c, c.load(0, list(records))

    def write(c, t):
        records.append(m.txn_record(t.txn_id, t.new))
        return c.written(t)

    def finish(c, job) -> None:
        for topic, partition in sorted(job.partitions):
            events.append({"event": "txn_marker_written", "topic": topic, "partition": partition,
                           "producer_id": job.producer_id, "producer_epoch": job.producer_epoch,
                           "coordinator_epoch": job.coordinator_epoch, "result": "commit" if job.commit else "abort",
                           "offset": next(offsets)})
        t = c.markers_done(job)
        if t is not None:
            write(c, t)
            exercised["completed"] += 1

    epoch = 1
    c, _ = coordinator(epoch)
    held: dict[str, tuple[int, int]] = {}  # transactional id -> the (producer id, epoch) its producer holds
    now = 0
    for _ in range(150):
        now += rng.choice((10, 1_000, 30_000))
        tid = rng.choice(("a", "b"))
        pid, pe = held.get(tid, (-1, -1))
        action = rng.choice(("init", "add", "add", "end", "end", "expire", "failover"))
        if action == "init":
            asked = (pid, pe) if rng.random() < 0.5 else (-1, -1)
            err, t = c.init_producer_id(tid, 60_000, *asked, now)
            if t is not None:
                job = write(c, t)
                if err == rpc.NONE:
                    held[tid] = (t.new.producer_id, t.new.producer_epoch)
                    exercised["inits"] += 1
                elif job is not None:
                    finish(c, job)
        elif action == "add" and pid >= 0:
            err, t = c.add_partitions(tid, pid, pe, [rng.choice((TP1, TP2))], now)
            if t is not None:
                write(c, t)
        elif action == "end" and pid >= 0:
            err, t = c.end_txn(tid, pid, pe, rng.random() < 0.7, now)
            if t is not None:
                job = write(c, t)
                if job is not None and rng.random() < 0.8:  # else: the coordinator dies before its markers
                    finish(c, job)
        elif action == "expire":
            for t in c.expired(now):
                job = write(c, t)
                exercised["timeouts"] += 1
                if job is not None:
                    finish(c, job)
        elif action == "failover":
            epoch += 1
            c, jobs = coordinator(epoch)
            exercised["failovers"] += 1
            for job in jobs:
                finish(c, job)
    return events


def test_the_shipped_transaction_coordinator_breaks_no_transaction_rule_on_random_walks():
    assert_walks_break_no_rule(txn_walk, {"inits": 0, "completed": 0, "timeouts": 0, "failovers": 0})


def test_the_transaction_coordinators_mutants_are_caught_on_the_same_walks():
    for name, rule in (("txn-init-no-epoch-bump", "init-not-fenced"),
                       ("txn-abort-not-fenced", "txn-abort-not-fenced"),
                       ("txn-load-first-record-wins", "producer-epoch-regressed")):
        exercised = {"inits": 0, "completed": 0, "timeouts": 0, "failovers": 0}
        with mutated(name) as module:
            broken = {a.name for seed in range(20)
                      for a in check_traces(numbered(txn_walk(seed, exercised, module))).anomalies}
        assert rule in broken, (name, broken)
