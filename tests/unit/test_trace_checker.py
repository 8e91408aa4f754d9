"""The trace checker (checkers/trace.py): per rule, a hand-written trace that breaks it is caught and a correct one
passes; and the input rules: a missing trace is unknown, a foreign cluster not applicable."""

from __future__ import annotations

import json

from kafkaesque_harness.checkers.clients import BROKER, CLIENT, attribute_with_trace, attribution
from kafkaesque_harness.checkers.core import UNKNOWN
from kafkaesque_harness.checkers.trace import check_trace_input, check_traces
from kafkaesque_harness.clusters.trace_files import load_traces

T = {"topic": "queue", "partition": 0}


def line(n: int, event: str, mono: float = 0.0, **facts) -> dict:
    return {"line": n, "mono": mono or float(n), "event": event, **T, **facts}


def names(traces: dict) -> list[str]:
    result = check_traces(traces)
    assert result.valid is (not result.anomalies)
    return [a.name for a in result.anomalies]


def hwm(to: int, members: dict, isr=(1, 2, 3), min_isr: int = 2, epoch: int = 1) -> dict:
    return line(5, "hwm_advanced", leader_epoch=epoch, **{"from": 0, "to": to}, isr=list(isr),
                maximal_isr=[int(m) for m in members], min_isr=min_isr, members=members)


# --- HWM advance: 002 2.7, KIP-966 ------------------------------------------------------------------
def test_hwm_at_the_smallest_member_leo_passes():
    m = {"1": {"leo": 7, "fetch_epoch": 1}, "2": {"leo": 5, "fetch_epoch": 1}, "3": {"leo": 6, "fetch_epoch": 1}}
    assert names({"broker-1": [hwm(5, m)]}) == []


def test_hwm_past_a_maximal_isr_member_leo_is_caught():
    m = {"1": {"leo": 7, "fetch_epoch": 1}, "2": {"leo": 5, "fetch_epoch": 1}, "3": {"leo": 6, "fetch_epoch": 1}}
    result = check_traces({"broker-1": [hwm(6, m)]})
    assert [a.name for a in result.anomalies] == ["hwm-past-member-leo"]
    proof = result.anomalies[0].examples[0]["trace"][0]
    assert proof["node"] == "broker-1" and proof["line"] == 5 and proof["event"] == "hwm_advanced"


def test_hwm_on_a_fetch_from_an_earlier_leader_epoch_is_caught():
    m = {"1": {"leo": 7, "fetch_epoch": 2}, "2": {"leo": 7, "fetch_epoch": 1}}
    assert names({"broker-1": [hwm(7, m, isr=(1, 2), epoch=2)]}) == ["hwm-past-member-leo"]


def test_hwm_advanced_below_min_isr_is_caught():
    m = {"1": {"leo": 7, "fetch_epoch": 1}}
    assert names({"broker-1": [hwm(7, m, isr=(1,), min_isr=2)]}) == ["hwm-advanced-below-min-isr"]
    assert names({"broker-1": [hwm(7, m, isr=(1,), min_isr=1)]}) == []


# --- ISR expansion: 002 2.9, PROTOCOL.md 4 ---------------------------------------------------------
def expansion(added: dict, hwm_: int = 10, leso: int = 8) -> dict:
    return line(3, "alter_partition_sent", leader_epoch=4, **{"from": [1, 2], "to": [1, 2, 3]}, hwm=hwm_, leso=leso,
                added=added, removed={})


def test_isr_expansion_of_a_caught_up_follower_of_this_epoch_passes():
    assert names({"broker-1": [expansion({"3": {"leo": 10, "fetch_epoch": 4, "broker_epoch": 9}})]}) == []


def test_isr_expansion_of_a_follower_below_the_hwm_is_caught():
    assert names({"broker-1": [expansion({"3": {"leo": 9, "fetch_epoch": 4, "broker_epoch": 9}})]}) == \
        ["isr-expansion-ineligible"]


def test_isr_expansion_of_a_follower_that_fetched_in_an_earlier_epoch_is_caught():
    assert names({"broker-1": [expansion({"3": {"leo": 12, "fetch_epoch": 3, "broker_epoch": 9}})]}) == \
        ["isr-expansion-ineligible"]


# --- acks=all: 002 2.5, 2.6 -------------------------------------------------------------------------------
def ack(last: int, hwm_: int, isr_size: int = 2, acks: int = -1) -> dict:
    return line(9, "produce_acked", leader_epoch=1, first=last - 1, last=last, acks=acks, hwm=hwm_, isr_size=isr_size,
                min_isr=2)


def test_ack_below_the_hwm_with_the_isr_at_min_isr_passes():
    assert names({"broker-2": [ack(4, 5)]}) == []


def test_ack_at_or_above_the_hwm_is_caught():
    assert names({"broker-2": [ack(5, 5)]}) == ["ack-above-hwm"]


def test_acks_one_is_acknowledged_before_the_hwm_by_design():
    assert names({"broker-2": [ack(5, 5, acks=1)]}) == []


def test_ack_with_the_isr_below_min_isr_is_caught():
    assert names({"broker-2": [ack(4, 5, isr_size=1)]}) == ["ack-below-min-isr"]


# --- consumer reads: 002 2.7 ------------------------------------------------------------------------------
def test_a_consumer_served_below_the_hwm_passes_and_at_it_is_caught():
    ok = line(1, "consumer_fetch", leader_epoch=1, offset=3, first=3, last=6, bound="hwm", hwm=7)
    bad = line(2, "consumer_fetch", leader_epoch=1, offset=3, first=3, last=7, bound="hwm", hwm=7)
    assert names({"broker-1": [ok]}) == []
    assert names({"broker-1": [bad]}) == ["read-above-hwm"]


# --- elections: 002 2.8, 001 5.2 ----------------------------------------------------------------------
def elected(leader: int, how: str, isr, elr, unclean: bool = False, epoch: int = 2, n: int = 1) -> dict:
    return line(n, "leader_elected", leader=leader, leader_epoch=epoch, how=how, unclean=unclean, isr=isr, elr=elr,
                last_known_elr=[], replicas=[1, 2, 3], candidates=[1, 2, 3])


def test_a_leader_from_the_isr_or_the_elr_passes():
    assert names({"controller-0": [elected(2, "isr", [2, 3], []), elected(3, "elr", [], [3], epoch=3, n=2)]}) == []


def test_a_leader_outside_isr_and_elr_without_the_unclean_flag_is_caught():
    assert names({"controller-0": [elected(1, "isr", [2, 3], [])]}) == ["leader-not-from-isr"]


def test_an_unclean_election_is_listed_not_counted():
    result = check_traces({"controller-0": [elected(1, "unclean", [], [], unclean=True)]})
    assert result.valid is True and result.stats["unclean_elections"] == 1


# --- leader completeness (TLA+ LeaderCompleteness) ------------------------------------------------------
def became_leader(node_line: int, epoch: int, leso: int, mono: float) -> dict:
    return line(node_line, "become_leader", mono=mono, leader_epoch=epoch, leso=leso, leo=leso, hwm=0, isr=[2, 3],
                epoch_cache=[[1, 0], [epoch, leso]])


def completeness_trace(new_leader_leso: int, unclean: bool = False) -> dict:
    advanced = hwm(10, {"1": {"leo": 10, "fetch_epoch": 1}, "2": {"leo": 10, "fetch_epoch": 1}}, isr=(1, 2))
    return {"broker-1": [advanced],
            "controller-0": [elected(2, "unclean" if unclean else "isr", [2, 3], [], unclean=unclean, n=8)],
            "broker-2": [became_leader(4, 2, new_leader_leso, mono=20.0)]}


def test_a_new_leader_holding_the_hwm_it_inherits_passes():
    assert names(completeness_trace(10)) == []


def test_a_new_leader_missing_committed_offsets_is_caught():
    result = check_traces(completeness_trace(8))
    assert [a.name for a in result.anomalies] == ["leader-incomplete"]
    assert {t["node"] for t in result.anomalies[0].examples[0]["trace"]} == {"broker-1", "broker-2"}


def test_an_unclean_leader_may_lack_committed_offsets():
    assert names(completeness_trace(8, unclean=True)) == []


# --- log matching (TLA+ LogMatching) -------------------------------------------------------------------
def test_replicas_agreeing_on_where_each_epoch_starts_pass():
    a = line(1, "become_follower", leader_epoch=3, epoch_cache=[[1, 0], [2, 5]])
    b = line(1, "truncated_on_divergence", leader_epoch=3, epoch_cache=[[1, 0], [2, 5], [3, 9]])
    assert names({"broker-1": [a], "broker-2": [b]}) == []


def test_one_epoch_starting_at_two_offsets_is_caught():
    a = line(1, "become_follower", leader_epoch=3, epoch_cache=[[1, 0], [2, 5]])
    b = line(1, "become_leader", leader_epoch=3, leso=9, epoch_cache=[[1, 0], [2, 6], [3, 9]])
    assert names({"broker-1": [a], "broker-2": [b]}) == ["log-matching"]


# --- epochs (PROTOCOL.md 1, 8) -------------------------------------------------------------------------------
def test_two_leaders_of_one_epoch_are_caught():
    a = line(1, "become_leader", leader_epoch=3, leso=9, epoch_cache=[[3, 9]])
    b = line(1, "become_leader", leader_epoch=3, leso=9, epoch_cache=[[3, 9]])
    assert names({"broker-1": [a], "broker-2": [b]}) == ["epoch-reuse"]
    assert names({"broker-1": [a, dict(b, line=2)]}) == []  # the same broker again (a restart): one leader


def test_an_election_not_raising_the_leader_epoch_is_caught():
    assert names({"controller-0": [elected(2, "isr", [2, 3], [], epoch=4, n=1),
                                   elected(3, "isr", [2, 3], [], epoch=4, n=2)]}) == ["epoch-reuse"]
    assert names({"controller-0": [elected(2, "isr", [2, 3], [], epoch=4, n=1),
                                   elected(3, "isr", [2, 3], [], epoch=5, n=2)]}) == []


def test_a_broker_epoch_given_twice_is_caught():
    def reg(n, broker, epoch):
        return {"line": n, "mono": float(n), "event": "broker_registered", "broker": broker, "broker_epoch": epoch}
    assert names({"controller-0": [reg(1, 1, 7), reg(2, 2, 7)]}) == ["epoch-reuse"]
    assert names({"controller-0": [reg(1, 1, 7), reg(2, 2, 8)]}) == []


# --- inputs: issue 22 -------------------------------------------------------------------------------------------
def test_a_foreign_cluster_is_not_applicable():
    result = check_trace_input({"protocol_trace": False}, None)
    assert result.valid is True and "not_applicable" in result.stats


def test_a_node_of_our_broker_without_its_trace_makes_the_verdict_unknown(tmp_path):
    (tmp_path / "nodes" / "broker-1").mkdir(parents=True)
    (tmp_path / "nodes" / "broker-1" / "trace.jsonl").write_text(
        json.dumps({"event": "trace_started", "node": 1}) + "\n" + '{"event": "hwm_adv')  # a torn last line
    doc = load_traces(tmp_path, ["broker-1", "broker-2"])
    result = check_trace_input({"protocol_trace": True, "run_dir": str(tmp_path)}, doc)
    assert result.valid == UNKNOWN
    assert len(result.unknown_reasons) == 1 and "broker-2" in result.unknown_reasons[0]
    assert result.stats["torn_lines"] == {"broker-1": 1}


def test_a_violation_stays_proven_beside_a_missing_trace():
    bad = line(2, "consumer_fetch", leader_epoch=1, offset=3, first=3, last=7, bound="hwm", hwm=7)
    doc = {"nodes": {"broker-1": {"where": "nodes/broker-1/trace.jsonl", "lines": [bad]},
                     "broker-2": {"where": "nodes/broker-2/trace.jsonl", "why": "the file is missing"}}}
    result = check_trace_input({"protocol_trace": True}, doc)
    assert result.valid is False and result.unknown_reasons


def test_our_broker_without_any_trace_handed_in_is_unknown():
    result = check_trace_input({"protocol_trace": True, "run_dir": "/x"}, None)
    assert result.valid == UNKNOWN and result.unknown_reasons


# --- truncation of committed records (PROTOCOL.md 2, 3; KIP-101) ----------------------------------------
def truncation(to: int, hwm_before: int, epoch: int = 3) -> dict:
    return line(6, "truncated_on_divergence", leader_epoch=epoch, **{"from": 12, "to": to}, hwm=min(to, hwm_before),
                hwm_before=hwm_before, reason="the leader answered a diverging epoch", epoch_cache=[[1, 0]])


def test_truncating_an_uncommitted_suffix_passes():
    assert names({"broker-3": [truncation(10, 10)]}) == []


def test_truncating_below_the_replicas_own_hwm_is_caught():
    assert names({"broker-3": [truncation(8, 10)]}) == ["truncated-below-hwm"]


def test_truncating_below_the_hwm_after_an_unclean_election_is_by_design():
    unclean = elected(1, "unclean", [], [], unclean=True, epoch=3)
    assert names({"controller-0": [unclean], "broker-3": [truncation(8, 10)]}) == []


# A replica whose own start-up recovery cut its log (001 5.1.2, 5.2 Case E; PROTOCOL.md 5.3, 6, 8): the stored run
# detection-txn-default-faults/20261126T043003. file-corruption flipped bit 3 of the byte at 7874 of broker-3's
# queue-0 segment: the high byte of the partitionLeaderEpoch of the batch at offset 112 (position 7862), outside
# the CRC-32C, so recovery kept that batch (it cut at 124, the next batch's CRC) and rebuilt its cache with the
# epoch 2^27 no leader gave; the leader answered the fetch (124, last epoch 2^27) with diverging epoch (0, 658).
def recovery_cut(n: int, mono: float, partition: str = "queue-0", offset: int = 124) -> dict:
    return {"line": n, "mono": mono, "node": 3, "role": "broker", "event": "log-recovery-truncated",
            "partition": partition, "file": f"/data/logs/{partition}/00000000000000000000.log", "offset": offset,
            "position": 8559, "reason": "CRC mismatch"}


def damaged_broker_3(*after_recovery: dict) -> list[dict]:
    started = {"line": 1, "mono": 10.0, "node": 3, "role": "broker", "event": "trace_started", "variants": []}
    follower = {**line(4, "become_follower", 11.2, leader_epoch=0, **{"from": "none@-1", "to": "follower@0"}),
                "node": 3, "leader": 1, "leo": 124, "hwm": 124, "epoch_cache": [[0, 0], [134217728, 112]]}
    cut = {**line(5, "truncated_on_divergence", 11.3, leader_epoch=0, **{"from": 124, "to": 112}), "node": 3,
           "diverging_epoch": {"epoch": 0, "end_offset": 658}, "hwm": 112, "hwm_before": 124,
           "reason": "the leader answered a diverging epoch", "epoch_cache": [[0, 0]]}
    return [started, recovery_cut(2, 10.3), *after_recovery, follower, cut]


def fenced_out(n: int, mono: float) -> dict:
    return {**change(n, {"isr": [1, 2, 3]}, {"isr": [1, 2]}, reason="broker 3 fenced (session timeout)"),
            "mono": mono}


def rejoined(n: int, mono: float) -> dict:
    return {**change(n, {"isr": [1, 2]}, {"isr": [1, 2, 3]}), "mono": mono}


def test_a_damaged_replica_repairing_its_log_before_it_is_back_in_the_isr_passes():
    result = check_traces({"controller-0": [fenced_out(1, 11.0)], "broker-3": damaged_broker_3()})
    assert result.valid is True and not result.anomalies
    assert result.stats["repairs_after_recovery_cut"] == 1
    repair = result.details["repairs_after_recovery_cut"][0]["trace"]
    assert [c["event"] for c in repair] == ["log-recovery-truncated", "truncated_on_divergence"]


def test_a_damaged_replica_still_in_the_isr_of_its_old_incarnation_is_not_yet_in_sync():
    # The controller's lines between the recovery and the fencing still list it (no addition): still repairing.
    still = {**change(1, {"isr": [1, 2, 3]}, {"isr": [1, 3]}), "mono": 10.5}
    assert names({"controller-0": [still, fenced_out(2, 11.0)], "broker-3": damaged_broker_3()}) == []


def test_a_damaged_replica_restarted_again_before_catching_up_is_still_repairing():
    again = {"line": 3, "mono": 10.8, "node": 3, "role": "broker", "event": "trace_started", "variants": []}
    assert names({"broker-3": damaged_broker_3(again)}) == []


def test_truncating_below_the_hwm_once_back_in_the_isr_after_the_recovery_is_caught():
    assert names({"controller-0": [fenced_out(1, 10.6), rejoined(2, 11.1)],
                  "broker-3": damaged_broker_3()}) == ["truncated-below-hwm"]
    # The broker's own view of the same addition closes the exemption too.
    own = {**line(3, "isr_updated", 11.1, leader_epoch=0, **{"from": [1, 2], "to": [1, 2, 3]}), "node": 3}
    assert names({"broker-3": damaged_broker_3(own)}) == ["truncated-below-hwm"]


def test_a_recovery_cut_exempts_only_its_own_partition_and_replica():
    other_partition = damaged_broker_3()
    other_partition[1] = recovery_cut(2, 10.3, partition="queue-1")
    assert names({"broker-3": other_partition}) == ["truncated-below-hwm"]
    # broker-2's recovery cut of queue-0 says nothing of broker-3's log.
    result = check_traces({"broker-2": [{**recovery_cut(1, 10.3), "node": 2}], "broker-3": damaged_broker_3()[2:]})
    assert [a.name for a in result.anomalies] == ["truncated-below-hwm"]


def test_a_cut_of_a_topic_with_a_dash_in_its_name_is_read_as_that_topic():
    dashed = [{**e, "topic": "my-topic"} if e.get("topic") else e for e in damaged_broker_3()]
    dashed[1] = recovery_cut(2, 10.3, partition="my-topic-0")
    assert names({"broker-3": dashed}) == []


# --- HWM monotonic and bounded by the LEO: PROTOCOL.md 2, 3 ------------------------------------------------
def test_a_leader_moving_its_hwm_back_is_caught():
    back = line(5, "hwm_advanced", leader_epoch=2, **{"from": 9, "to": 4}, isr=[1, 2], maximal_isr=[1, 2],
                min_isr=2, members={"1": {"leo": 9, "fetch_epoch": 2}, "2": {"leo": 4, "fetch_epoch": 2}})
    result = check_traces({"broker-1": [back]})
    assert [a.name for a in result.anomalies] == ["hwm-regressed"]
    assert result.anomalies[0].examples[0]["trace"][0]["from"] == 9
    forward = {**back, "from": 3}
    assert names({"broker-1": [forward]}) == []


def role(n: int, to: str, hwm_: int, leo: int) -> dict:
    return line(n, "become_leader" if to == "leader" else "become_follower", leader_epoch=3,
                **{"from": "follower@2", "to": f"{to}@3"}, hwm=hwm_, leo=leo, leso=leo, isr=[1, 2],
                replicas=[1, 2], min_isr=2, epoch_cache=[[3, leo]])


def test_a_replica_whose_hwm_exceeds_its_leo_is_caught_when_it_changes_role():
    assert names({"broker-2": [role(4, "leader", hwm_=12, leo=9)]}) == ["hwm-above-leo"]
    assert names({"broker-2": [role(4, "follower", hwm_=12, leo=9)]}) == ["hwm-above-leo"]
    assert names({"broker-2": [role(4, "leader", hwm_=9, leo=9), role(5, "follower", hwm_=3, leo=9)]}) == []


# --- the controller's structure: PROTOCOL.md 4, 8 ----------------------------------------------------------
def ctl(n: int, event: str, **facts) -> dict:
    return {"line": n, "mono": float(n), "event": event, "role": "controller", "node": 1000, **facts}


def change(n: int, before: dict, after: dict, reason: str = "AlterPartition from leader 1") -> dict:
    base = {"leader": 1, "isr": [1, 2, 3], "elr": [], "last_known_elr": [], "leader_epoch": 4, "partition_epoch": 7}
    return ctl(n, "partition_change", **T, reason=reason, **{"from": {**base, **before}, "to": {**base, **after}})


LEADER_SEES_MIN_ISR = line(1, "become_leader", leader_epoch=4, **{"from": "follower@3", "to": "leader@4"}, hwm=0,
                           leo=0, leso=0, isr=[1, 2, 3], replicas=[1, 2, 3], min_isr=2, epoch_cache=[[4, 0]])


def ctl_names(*lines_: dict, variants: tuple[str, ...] = ()) -> list[str]:
    start = ctl(0, "trace_started", variants=list(variants))
    return names({"broker-1": [LEADER_SEES_MIN_ISR], "controller-0": [start, *lines_]})


def test_an_elr_kept_beside_an_isr_at_min_isr_is_caught():
    kept = change(2, {"isr": [1], "elr": [2, 3]}, {"isr": [1, 2], "elr": [3]})
    assert ctl_names(kept) == ["elr-at-min-isr"]
    cleared = change(2, {"isr": [1], "elr": [2, 3]}, {"isr": [1, 2], "elr": []})
    assert ctl_names(cleared) == []
    kept_last_known = change(2, {"isr": [1]}, {"isr": [1, 2, 3], "last_known_elr": [3]})
    assert ctl_names(kept_last_known) == ["elr-at-min-isr"]


def test_a_replica_dropped_below_min_isr_must_join_the_elr():
    dropped = change(2, {"isr": [1, 2]}, {"isr": [1], "elr": []}, reason="broker 2 fenced (session timeout)")
    assert ctl_names(dropped) == ["elr-dropped-removed"]
    kept = change(2, {"isr": [1, 2]}, {"isr": [1], "elr": [2]}, reason="broker 2 fenced (session timeout)")
    assert ctl_names(kept) == []
    # By design: an unclean restart moves the broker to the LastKnownELR, an unclean election empties the ELR.
    unclean_restart = change(2, {"isr": [1, 2]}, {"isr": [1], "last_known_elr": [2]},
                             reason="broker 2 restarted uncleanly (unclean exclusion)")
    unclean_recovery = change(2, {"isr": [], "elr": [2, 3], "leader": -1}, {"isr": [3], "elr": [], "leader": 3},
                              reason="unclean recovery (balanced)")
    assert ctl_names(unclean_restart) == [] and ctl_names(unclean_recovery) == []
    # Under the no-elr variant there is no ELR to join.
    assert ctl_names(dropped, variants=("no-elr",)) == []


def test_a_fenced_broker_left_in_an_isr_is_caught_at_the_controllers_next_broker_event():
    before = change(1, {"isr": [1, 2]}, {"isr": [1, 2, 3]})
    fence = ctl(2, "broker_fenced", broker=3, reason="session timeout")
    later = ctl(3, "broker_fenced", broker=2, reason="session timeout")
    assert ctl_names(before, fence, later) == ["fenced-in-isr"]
    shrunk = change(2.5, {"isr": [1, 2, 3]}, {"isr": [1, 2]}, reason="broker 3 fenced (session timeout)")
    shrunk["mono"] = 2.5
    assert ctl_names(before, fence, shrunk, later) == []
    # An unfenced broker may rejoin; a new controller's activation starts its view afresh.
    readded = change(2.9, {"isr": [1, 2]}, {"isr": [1, 2, 3]})
    assert ctl_names(before, fence, shrunk, ctl(2.7, "broker_unfenced", broker=3), readded, later) == []
    activated = ctl(2.8, "controller_activated")
    assert ctl_names(before, fence, activated, later) == []
    # no-elr: the last ISR member stays (3.5's Last Replica Standing).
    last = change(1, {"isr": [3, 1]}, {"isr": [3], "elr": [1]})
    assert ctl_names(last, fence, later, variants=("no-elr",)) == []
    assert ctl_names(last, fence, later) == ["fenced-in-isr"]


# --- AlterPartition answered against the request: PROTOCOL.md 4, 9.6, 9.8 ---------------------------------
def proposal(n: float, partition_epoch: int, added: dict) -> dict:
    return {**line(int(n), "alter_partition_sent", mono=n, leader_epoch=4, **{"from": [1, 2], "to": [1, 2, 3]},
                   hwm=5, leso=5, added=added, removed={}), "node": 1, "role": "broker",
            "partition_epoch": partition_epoch}


def leader_trace(*proposals: dict, last_mono: float = 9.0) -> list[dict]:
    """The leader's trace: its start, the proposals, and a later line (its process outlived the answer)."""
    start = {"line": 0, "mono": 0.5, "event": "trace_started", "node": 1, "role": "broker"}
    return [start, *proposals, {"line": 99, "mono": last_mono, "event": "fenced", "node": 1, "role": "broker"}]


def test_an_alter_partition_accepted_with_a_stale_partition_epoch_is_caught():
    accepted = change(3, {"isr": [1, 2], "partition_epoch": 7}, {"isr": [1, 2, 3], "partition_epoch": 8})
    fresh = proposal(2, 7, {"3": {"leo": 5, "fetch_epoch": 4, "broker_epoch": 40}})
    stale = proposal(2, 6, {"3": {"leo": 5, "fetch_epoch": 4, "broker_epoch": 40}})
    assert ctl_names(accepted) == [] and names({"broker-1": leader_trace(fresh), "controller-0": [accepted]}) == []
    result = check_traces({"broker-1": leader_trace(stale), "controller-0": [accepted]})
    assert [a.name for a in result.anomalies] == ["alter-partition-stale"]
    assert "partition epoch 6" in result.anomalies[0].examples[0]["summary"]
    assert result.stats["alter_partitions_judged"] == 1
    # The leader's process died before the answer: its last request may be lost with the unflushed tail.
    cut = leader_trace(stale, last_mono=2.5)
    assert names({"broker-1": cut, "controller-0": [accepted]}) == []
    # A later proposal of another ISR is the last request: the earlier one of this ISR does not stand in.
    other = {**proposal(2.5, 7, {}), "to": [1]}
    assert names({"broker-1": leader_trace(stale, other), "controller-0": [accepted]}) == []


def test_an_alter_partition_adding_a_member_of_an_old_broker_epoch_is_caught():
    reg = ctl(1, "broker_registered", broker=3, broker_epoch=55, clean=False, previous_broker_epoch=-1)
    accepted = change(3, {"isr": [1, 2], "partition_epoch": 7}, {"isr": [1, 2, 3], "partition_epoch": 8})
    old_epoch = proposal(2, 7, {"3": {"leo": 5, "fetch_epoch": 4, "broker_epoch": 40}})
    current = proposal(2, 7, {"3": {"leo": 5, "fetch_epoch": 4, "broker_epoch": 55}})
    assert names({"broker-1": leader_trace(old_epoch), "controller-0": [reg, accepted]}) == ["alter-partition-stale"]
    assert names({"broker-1": leader_trace(current), "controller-0": [reg, accepted]}) == []


# --- epoch caches and registrations: PROTOCOL.md 2, 5 ------------------------------------------------------
def test_a_new_leader_without_its_own_epoch_entry_is_caught():
    assert names({"broker-1": [LEADER_SEES_MIN_ISR]}) == []  # epoch 4 -> 0: KAFKA-7415's entry
    stale = {**LEADER_SEES_MIN_ISR, "epoch_cache": [[3, 0]]}
    assert names({"broker-1": [stale]}) == ["leader-epoch-not-cached"]


def divergence(cache: list) -> dict:
    return line(6, "truncated_on_divergence", leader_epoch=6, diverging_epoch={"epoch": 4, "end_offset": 15},
                **{"from": 13, "to": 13}, hwm=8, hwm_before=8, reason="the leader answered a diverging epoch",
                epoch_cache=cache)


def test_a_follower_keeping_a_later_epoch_after_a_divergence_is_caught():
    # Its epoch 4 ended at 10, where its own short epoch 5 began; the leader's epoch 4 ended at 15.
    assert names({"broker-2": [divergence([[2, 0], [4, 6], [5, 10]])]}) == ["truncated-past-epoch-end"]
    assert names({"broker-2": [divergence([[2, 0], [4, 6]])]}) == []  # cut at min(10, 15): epoch 5 gone


def registration(n: int, epoch: int, clean: bool, previous: int) -> dict:
    return ctl(n, "broker_registered", broker=2, broker_epoch=epoch, clean=clean, previous_broker_epoch=previous)


def test_a_restart_called_clean_without_its_shutdown_epoch_is_caught():
    first = registration(1, 27, True, -1)
    assert ctl_names(first, registration(2, 64, False, -1)) == []  # a kill: no clean-shutdown file
    assert ctl_names(first, registration(2, 64, True, 27)) == []  # a controlled shutdown wrote 27
    assert ctl_names(first, registration(2, 64, True, -1)) == ["registration-clean"]
    assert ctl_names(first, registration(2, 64, False, 27)) == ["registration-clean"]
    assert ctl_names(registration(2, 64, True, -1)) == []  # no earlier registration in the trace: not judged
    # A decommissioned broker is forgotten (unregister_broker): it comes back as a new one, clean.
    gone = ctl(1.5, "broker_unregistered", broker=2, broker_epoch=27)
    assert ctl_names(first, gone, registration(2, 64, True, -1)) == []


def test_a_new_leader_keeping_follower_state_of_an_earlier_epoch_is_caught():
    fresh = {**LEADER_SEES_MIN_ISR, "followers": {"2": -1, "3": -1}}
    kept = {**LEADER_SEES_MIN_ISR, "followers": {"2": -1, "3": 2}}
    assert names({"broker-1": [fresh]}) == []
    assert names({"broker-1": [kept]}) == ["follower-state-not-reset"]


def test_an_hwm_checkpoint_above_the_leo_is_caught():
    ok = line(7, "hwm_checkpointed", replicas=[["queue", 0, "follower", 5, 9], ["queue", 1, "leader", 9, 9]])
    bad = line(8, "hwm_checkpointed", replicas=[["queue", 0, "follower", 12, 9]])
    assert names({"broker-2": [ok]}) == []
    result = check_traces({"broker-2": [ok, bad]})
    assert [a.name for a in result.anomalies] == ["hwm-above-leo"]
    assert result.anomalies[0].examples[0]["trace"][0]["replica"] == ["queue", 0, "follower", 12, 9]


def test_an_expansion_with_a_broker_epoch_the_leader_does_not_register_is_caught():
    current = {"3": {"leo": 12, "fetch_epoch": 4, "broker_epoch": 55, "registered_broker_epoch": 55}}
    stale = {"3": {"leo": 12, "fetch_epoch": 4, "broker_epoch": 40, "registered_broker_epoch": 55}}
    assert names({"broker-1": [expansion(current)]}) == []
    assert names({"broker-1": [expansion(stale)]}) == ["isr-expansion-ineligible"]


# --- transactions and groups: KIP-98, KIP-360, KIP-890; 002 2.2.2, 2.5 ----------------------------------------
def txn_line(n: int, event: str, **facts) -> dict:
    return {"line": n, "mono": float(n), "event": event, "role": "broker", "transactional_id": "txn-0",
            "coordinator_partition": 2, "coordinator_epoch": 5, **facts}


def abort(started_by: str, marker_epoch: int, txn_epoch: int = 3, result: str = "abort") -> dict:
    return txn_line(4, "txn_end_started", producer_id=77, txn_epoch=txn_epoch, marker_epoch=marker_epoch,
                    result=result, started_by=started_by, partitions=[["queue", 0]])


def test_an_abort_the_coordinator_starts_must_bump_the_producer_epoch():
    assert names({"broker-2": [abort("timeout", 3)]}) == ["txn-abort-not-fenced"]
    assert names({"broker-2": [abort("re-init", 3)]}) == ["txn-abort-not-fenced"]
    assert names({"broker-2": [abort("timeout", 4), abort("re-init", 4)]}) == []
    # A client's own EndTxn ends the transaction at its epoch; an epoch at Short.MaxValue cannot be bumped.
    assert names({"broker-2": [abort("client", 3), abort("client", 3, result="commit")]}) == []
    assert names({"broker-2": [abort("timeout", 32767, txn_epoch=32767)]}) == []


def init_answer(n: int, before: tuple[int, int], after: tuple[int, int], asked=(-1, -1), aborted=False) -> dict:
    return txn_line(n, "txn_init_producer_id", producer_id_before=before[0], epoch_before=before[1],
                    producer_id=after[0], producer_epoch=after[1], asked_producer_id=asked[0], asked_epoch=asked[1],
                    aborted_open=aborted)


def test_init_producer_id_of_a_known_transactional_id_must_fence_its_producer():
    first = init_answer(1, (-1, -1), (77, 0))
    bumped = init_answer(2, (77, 0), (77, 1))
    assert names({"broker-1": [first, bumped]}) == []
    kept = init_answer(2, (77, 0), (77, 0))
    result = check_traces({"broker-1": [first, kept]})
    assert [a.name for a in result.anomalies] == ["init-not-fenced"]
    assert [t["line"] for t in result.anomalies[0].examples[0]["trace"]] == [1, 2]
    assert names({"broker-1": [init_answer(2, (77, 4), (77, 3))]}) == ["init-not-fenced"]
    # An exhausted epoch gives a new producer id (Kafka); an open transaction's abort is judged as an abort.
    assert names({"broker-1": [init_answer(2, (77, 32766), (78, 0))]}) == []
    assert names({"broker-1": [init_answer(2, (77, 0), (77, 1), aborted=True)]}) == []


def test_a_kip_360_retry_is_answered_its_epoch_again_only_after_its_own_bump():
    bump = init_answer(1, (77, 0), (77, 1), asked=(77, 0))
    retry = init_answer(2, (77, 1), (77, 1), asked=(77, 0))
    assert names({"broker-1": [bump], "broker-3": [{**retry, "mono": 9.0}]}) == []  # across a fail-over too
    # The epoch went to a new instance (a fresh init): the producer still naming the old epoch is a zombie.
    fresh = init_answer(1, (77, 0), (77, 1))
    assert names({"broker-1": [fresh, retry]}) == ["init-not-fenced"]
    assert names({"broker-1": [retry]}) == []  # the bump it would repeat is not in the trace: not judged


def test_a_read_committed_consumer_is_served_only_below_the_lso():
    def fetch(last: int, isolation: str = "read_committed", bound: str = "lso") -> dict:
        return line(3, "consumer_fetch", leader_epoch=1, offset=2, first=2, last=last, isolation=isolation,
                    bound=bound, hwm=9, lso=6)
    assert names({"broker-1": [fetch(5)]}) == []
    assert names({"broker-1": [fetch(6, bound="hwm")]}) == ["read-committed-above-lso"]
    assert names({"broker-1": [fetch(8, isolation="read_uncommitted", bound="hwm")]}) == []  # the HWM bounds these


def test_an_offset_commit_is_answered_only_once_the_hwm_passed_it():
    def commit(hwm_: int, acks: int = -1) -> dict:
        return {"line": 2, "mono": 2.0, "event": "offset_commit_acked", "topic": "__consumer_offsets", "partition": 1,
                "leader_epoch": 3, "group": "g", "generation": 4, "first": 10, "last": 11, "hwm": hwm_, "acks": acks}
    assert names({"broker-1": [commit(12)]}) == []
    assert names({"broker-1": [commit(11, acks=1)]}) == ["offset-commit-unreplicated"]


def marker(n: int, offset: int, epoch: int, leader_epoch: int = 2) -> dict:
    return line(n, "txn_marker_written", leader_epoch=leader_epoch, producer_id=77, producer_epoch=epoch,
                coordinator_epoch=5, result="abort", offset=offset)


def produced(n: int, first: int, epoch: int, leader_epoch: int = 2, producer_id: int = 77) -> dict:
    return line(n, "produce_acked", leader_epoch=leader_epoch, first=first, last=first, acks=-1, hwm=first + 1,
                isr_size=2, min_isr=2, producer_id=producer_id, producer_epoch=epoch, transactional=True,
                control=False)


def test_a_produce_below_the_epoch_of_an_earlier_marker_is_caught():
    assert names({"broker-1": [produced(1, 3, 3), marker(2, 5, 4), produced(3, 6, 4)]}) == []
    result = check_traces({"broker-1": [marker(2, 5, 4), produced(3, 6, 3)]})
    assert [a.name for a in result.anomalies] == ["produce-after-fence"]
    assert [t["event"] for t in result.anomalies[0].examples[0]["trace"]] == ["txn_marker_written", "produce_acked"]
    # A new leader of a clean epoch has the committed marker below what it appends: caught there too.
    assert names({"broker-1": [marker(2, 5, 4)], "broker-2": [produced(3, 6, 3, leader_epoch=3)]}) == \
        ["produce-after-fence"]


def test_a_produce_below_a_marker_epoch_is_not_judged_where_the_log_may_not_hold_the_marker():
    # Another producer id; a produce at a lower offset (appended before the marker); an earlier leader
    # epoch (a suffix the marker's leader replaced); an unclean election since the marker.
    assert names({"broker-1": [marker(2, 5, 4), produced(3, 6, 3, producer_id=78)]}) == []
    assert names({"broker-1": [marker(2, 5, 4), produced(3, 4, 3)]}) == []
    assert names({"broker-1": [marker(2, 5, 4), produced(3, 6, 3, leader_epoch=1)]}) == []
    unclean = elected(2, "unclean", [], [], unclean=True, epoch=3, n=4)
    assert names({"broker-1": [marker(2, 5, 4)], "controller-0": [unclean],
                  "broker-2": [produced(5, 6, 3, leader_epoch=3)]}) == []


def test_other_records_answered_as_a_retry_of_a_used_sequence_are_caught():
    # A default txn run under the protocol nemesis: librdkafka aborted a transaction whose send (sequence 3) the
    # leader had written but not acknowledged, then sent a record of its next transaction under the same
    # (producer id, epoch, sequence 3); the leader answered it with the aborted record's offset.
    def dup(same: bool | None) -> dict:
        facts = {"duplicate": True} if same is None else {"duplicate": True, "same_batch": same}
        return {**produced(4, 1239, 7), "base_sequence": 3, "hwm": 1275, **facts}
    assert names({"broker-3": [dup(True)]}) == []  # a retry of the same bytes
    assert names({"broker-3": [dup(None)]}) == []  # a trace from before the CRC was compared: not judged
    result = check_traces({"broker-3": [dup(False)]})
    assert [a.name for a in result.anomalies] == ["sequence-reused"]
    assert result.anomalies[0].examples[0]["trace"][0]["same_batch"] is False


def test_a_reused_sequence_is_the_clients_and_the_other_trace_rules_the_brokers():
    # sequence-reused is proven by the broker's trace but breaks the client's contract (the broker answers as
    # Kafka's does): the client's, and the attribution after the checks leaves it so; a broken broker rule in the
    # same traces stays the broker's
    reused = {**produced(4, 1239, 7), "base_sequence": 3, "hwm": 1275, "duplicate": True, "same_batch": False}
    regressed = line(5, "hwm_advanced", leader_epoch=1, **{"from": 9, "to": 8}, members={}, maximal_isr=[],
                     isr=[1, 2], min_isr=2)
    result = check_traces({"broker-3": [reused, regressed]})
    attribute_with_trace([result], None)
    by_name = {a.name: a for a in result.anomalies}
    assert set(by_name) == {"sequence-reused", "hwm-regressed"}
    assert by_name["sequence-reused"].whose == {CLIENT: 1}
    assert [ex["whose"] for ex in by_name["sequence-reused"].examples] == [CLIENT]
    assert by_name["hwm-regressed"].whose == {BROKER: 1}
    assert [ex["whose"] for ex in by_name["hwm-regressed"].examples] == [BROKER]
    assert attribution([result])["client"] == 1 and attribution([result])["broker"] == 1
