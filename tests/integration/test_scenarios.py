"""The seeds' worked examples replayed step by step on real broker processes (issue 4).

Each scenario runs twice: on the default broker, where the protocol's defences (leader
epochs, the ELR, Unclean Exclusion, balanced unclean recovery) must keep every acknowledged
acks=all record and leave the replicas' logs identical below the HWM; and on the broker
variant that brings the historic flaw back, where the same steps must lose an acknowledged
record or leave the logs diverged. Both outcomes are asserted, so neither the defence nor
the flaw can quietly stop working.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.integration.conftest import start_local_cluster
from tests.integration.scenario_runner import Scenario

pytestmark = pytest.mark.integration

NO_LEADER = -1


@contextmanager
def scenario_on(tmp_path, name: str, variant: str | None, brokers: int, **kw) -> Iterator[Scenario]:
    """A scenario on a local cluster of its own (the broker `variant`'s, or the default broker's), down at
    the end whatever happens."""
    root = tmp_path / (name + ("-" + variant if variant else "-default"))
    root.mkdir()
    c = start_local_cluster(root, brokers=brokers, variants=[variant] if variant else [], **kw)
    try:
        yield Scenario(c)
    finally:
        c.down()


# --- 004: "High watermark truncation followed by immediate leader election" -----------------------

def hw_truncation_then_election(tmp_path, variant: str | None) -> tuple[Scenario, dict[int, bytes]]:
    """Brokers B (1, the leader) and A (2). A fetches m2, B acknowledges it, but A has not yet
    learned the HW that covers m2 (the second round trip, 004). B fails (here: paused, so it can
    no longer answer) and A restarts; then B is gone for good and A becomes the leader.

    Fetch long polls last 3 s so A's fetch after m2 sits in B unanswered (the HW stays
    unknown to A) until B is paused: the window the document describes, held open."""
    with scenario_on(tmp_path, "hw-truncation", variant, brokers=2,
                     replica_fetch_wait_max_ms=3000) as s:
        c = s.cluster
        c.create_topic(s.topic, partitions=1, rf=2, min_isr=2)
        s.wait_partition(lambda p: p["leader"] == 1 and p["isr"] == [1, 2], "B=1 leads with ISR [1, 2]")
        s.check(s.produce(["m1", "m2"]) == ["m1", "m2"], "m1 and m2 must be acknowledged with acks=all")
        s.pause(1)                       # B stops answering: A never hears of the HW past m2
        s.stop(2)                        # A restarts: controlled shutdown ...
        a = s.cluster.root / "broker-2" / "logs"
        s.note(f"A's HW checkpoint at shutdown: {(a / 'replication-offset-checkpoint').read_text().split()}")
        s.wait_partition(lambda p: p["leader"] == NO_LEADER and p["isr"] == [] and 2 in p["elr"],
                         "B is fenced: no leader, ISR [], A waits in the ELR")
        s.restart(2)                     # ... and comes back (clean: it is still an ELR member)
        s.wait_partition(lambda p: p["leader"] == 2, "A is elected from the ELR")
        s.kill(1)                        # B is gone for good; it returns later as a follower
        s.restart(1)
        s.wait_partition(lambda p: p["isr"] == [1, 2], "B rejoins the ISR as a follower")
        s.wait_replicas_caught_up([1, 2])
        return s, s.final_reads()


def test_004_hw_truncation_then_election_default_keeps_m2(tmp_path):
    s, read = hw_truncation_then_election(tmp_path, None)
    s.check_nothing_acked_lost(read)
    s.check(read == {0: b"m1", 1: b"m2"}, f"the log below the HWM is {read}")


def test_004_hw_truncation_then_election_truncate_to_hw_variant_loses_m2(tmp_path):
    s, read = hw_truncation_then_election(tmp_path, "truncate-to-hw")
    s.check(s.lost_acked(read) == ["m2"], f"expected exactly m2 lost, got {s.lost_acked(read)}; read {read}")


# --- 004: "Replica divergence on restart after multiple hard failures" ------------------------------

def divergence_after_power_loss(tmp_path, variant: str | None) -> Scenario:
    """Leader A (1) syncs every write; follower B (2) syncs only at its controlled shutdown, so after
    a power cut B keeps m1 but loses m2, which was committed on both. Both lose power; B returns
    first, leads (a balanced unclean recovery, reported as possible loss) and writes m3 at
    offset 1 in a new epoch. Then A returns with m2 at offset 1: with leader epochs it learns
    that m2 is orphaned and truncates it; truncating to its HW (which covered m2) instead,
    it keeps m2 beside B's m3 for good."""
    with scenario_on(tmp_path, "divergence", variant, brokers=2, hwm_checkpoint_interval_ms=100,
                     per_broker_flags={1: ["--flush-policy", "every-write"]}) as s:
        c = s.cluster
        c.create_topic(s.topic, partitions=1, rf=2, min_isr=1)
        s.wait_partition(lambda p: p["leader"] == 1 and p["isr"] == [1, 2], "A=1 leads with ISR [1, 2]")
        s.check(s.produce(["m1"]) == ["m1"], "m1 must be acknowledged")
        s.wait_replicas_caught_up([1, 2])
        s.stop(2)                        # B's controlled shutdown flushes m1
        s.restart(2)
        s.wait_partition(lambda p: p["isr"] == [1, 2], "B back in the ISR")
        s.check(s.produce(["m2"]) == ["m2"], "m2 must be acknowledged")
        s.check(s.wait_replicas_caught_up([1, 2]) == 2, "both replicas hold m1, m2 below the HWM")
        time.sleep(0.5)                  # both HW checkpoints now cover m2
        s.power_cut(1)
        s.wait_partition(lambda p: p["leader"] == 2, "B takes over")
        s.check(s.power_cut(2) != {}, "B must lose its unsynced m2 in the power cut")
        s.wait_partition(lambda p: p["leader"] == NO_LEADER and p["isr"] == [], "both down")
        s.restart(2)
        s.wait_partition(lambda p: p["leader"] == 2, "B returns first and is elected by unclean recovery")
        recoveries = c.controller_state()["unclean_recoveries"]
        s.check(len(recoveries) == 1 and recoveries[0]["leader"] == 2 and recoveries[0]["strategy"] == "balanced",
                f"the controller must report the unclean recovery as possible loss: {recoveries}")
        s.check(s.produce(["m3"]) == ["m3"], "m3 must be acknowledged")
        s.check(s.acked[b"m3"] == 1, f"m3 must land at offset 1, got {s.acked[b'm3']}")
        s.restart(1)
        s.wait_partition(lambda p: p["isr"] == [1, 2], "A rejoins the ISR")
        s.wait_replicas_caught_up([1, 2])
        s.snapshot()
        return s


def test_004_divergence_after_power_loss_default_logs_converge(tmp_path):
    s = divergence_after_power_loss(tmp_path, None)
    a, b = s.physical_log(1), s.physical_log(2)
    s.check(a == b and len(a) == 2, f"logs must converge (m1, m3; orphaned m2 truncated): A {a}, B {b}")


def test_004_divergence_after_power_loss_truncate_to_hw_variant_diverges(tmp_path):
    s = divergence_after_power_loss(tmp_path, "truncate-to-hw")
    a, b = s.physical_log(1), s.physical_log(2)
    hwm = min(s.replica(1)["hwm"], s.replica(2)["hwm"])
    s.check(hwm == 2 and len(a) == len(b) == 2, f"both hold two records below HWM {hwm}: A {a}, B {b}")
    s.check(a[0] == b[0] and a[1][2] != b[1][2],
            f"offset 1 must hold m2 on A and m3 on B, below the HWM (permanent divergence): A {a}, B {b}")


# --- 001 5.2.2: clean ELR-based recovery -----------------------------------------------------------

def clean_elr_recovery(tmp_path, variant: str | None) -> tuple[Scenario, dict[int, bytes]]:
    """RF 3, min ISR 2, nobody fsyncs. The ISR shrinks to the leader (2, then 3 become unreachable),
    the leader and sole ISR member loses power, the complete replica 3 returns, and only then
    does the old leader restart without its unsynced data. With the ELR, 3 leads and nothing
    acknowledged is lost; without it (`no-elr`, the Last Replica Standing), the emptied old
    leader is the only candidate and the others truncate to it."""
    with scenario_on(tmp_path, "elr", variant, brokers=3) as s:
        s.three_replicas_then_2_paused()
        s.check(s.partition_state()["elr"] == [], "case F: no ELR while the ISR meets min ISR")
        s.produce([f"b{i}" for i in range(20)])
        s.pause(3)
        s.wait_partition(lambda p: p["isr"] == [1], "3 leaves the ISR")
        s.check(s.partition_state()["elr"] == ([] if variant == "no-elr" else [3]), "case A: 3 joins the ELR")
        s.check(s.produce(["c0"]) == [], "acks=all must be refused below min ISR")
        s.check(s.power_cut(1) != {}, "the leader must lose unsynced data in the power cut")
        s.wait_broker_fenced(1)
        s.resume(3)
        if variant == "no-elr":
            time.sleep(2)                # 3 is back but outside the ISR: no candidate at all
            s.check(s.partition_state()["leader"] == NO_LEADER, "without the ELR nobody can lead yet")
        else:
            s.wait_partition(lambda p: p["leader"] == 3 and p["isr"] == [3], "3 is elected from the ELR (case B)")
        s.restart(1)
        s.wait_partition(lambda p: p["leader"] != NO_LEADER and set(p["isr"]) == {1, 3},
                         "1 is back in the ISR beside 3")
        s.resume(2)
        s.wait_partition(lambda p: p["isr"] == [1, 2, 3], "everyone in sync")
        s.wait_replicas_caught_up([1, 2, 3])
        return s, s.final_reads()


def test_001_5_2_2_clean_elr_recovery_default_loses_nothing(tmp_path):
    s, read = clean_elr_recovery(tmp_path, None)
    s.check_nothing_acked_lost(read)
    s.check(len(s.acked) == 40, f"all 40 acks=all sends acknowledged, got {len(s.acked)}")
    hwm = s.replica(1)["hwm"]
    s.check(s.logs_below(1, hwm) == s.logs_below(2, hwm) == s.logs_below(3, hwm), "logs identical below the HWM")


def test_001_5_2_2_without_elr_the_last_replica_standing_loses_acked_records(tmp_path):
    s, read = clean_elr_recovery(tmp_path, "no-elr")
    lost = s.lost_acked(read)
    s.check(len(lost) > 0, f"the no-elr variant must lose acknowledged records; read {len(read)} records")
    s.note(f"lost {len(lost)} acknowledged records")


# --- 001 5.3.3: balanced unclean recovery ------------------------------------------------------------

def balanced_recovery(tmp_path, variant: str | None) -> tuple[Scenario, dict[int, bytes]]:
    """RF 3, min ISR 2, balanced strategy. Only broker 2 fsyncs every write. A power outage takes
    down all three; the controller fences 1 (2 leads), then 2 (3 leads, 2 in the ELR), then 3
    (no leader, ELR [2, 3]). All restart without the clean-shutdown epoch, 1 first: under
    balanced recovery the LastKnownELR {2, 3} is asked for its logs and 2 wins; with
    unclean.leader.election.enable the first live replica (1, which lost everything) leads."""
    with scenario_on(tmp_path, "balanced", variant, brokers=3,
                     per_broker_flags={2: ["--flush-policy", "every-write"]}) as s:
        c = s.cluster
        c.create_topic(s.topic, partitions=1, rf=3, min_isr=2)
        s.wait_partition(lambda p: p["leader"] == 1 and p["isr"] == [1, 2, 3], "Leader=1, ISR=[1,2,3]")
        s.check(len(s.produce([f"r{i}" for i in range(30)])) == 30, "all 30 records acknowledged")
        s.wait_replicas_caught_up([1, 2, 3])
        s.power_cut(1)
        s.wait_partition(lambda p: p["leader"] == 2 and p["isr"] == [2, 3], "fence 1: Leader=2, ISR=[2,3]")
        s.power_cut(2)
        s.wait_partition(lambda p: p["leader"] == 3 and p["isr"] == [3] and p["elr"] == [2],
                         "fence 2: Leader=3, ISR=[3], ELR=[2]")
        s.power_cut(3)
        s.wait_partition(lambda p: p["leader"] == NO_LEADER and p["isr"] == [] and p["elr"] == [2, 3],
                         "fence 3: NoLeader, ISR=[], ELR=[2,3]")
        s.restart(1)
        s.wait_broker_fenced(1, fenced=False)
        if variant == "unclean-election":
            s.wait_partition(lambda p: p["leader"] == 1, "1 is elected uncleanly")
        s.restart(2)
        s.restart(3)
        if variant is None:
            s.wait_partition(lambda p: p["leader"] == 2, "balanced recovery elects 2")
            rec = c.controller_state()["unclean_recoveries"]
            s.check(len(rec) == 1 and rec[0]["strategy"] == "balanced" and set(rec[0]["candidates"]) == {"2", "3"},
                    f"one balanced recovery over the LastKnownELR {{2, 3}} reported: {rec}")
        s.wait_partition(lambda p: p["isr"] == [1, 2, 3], "everyone in sync", timeout=40)
        s.wait_replicas_caught_up([1, 2, 3])
        s.recoveries = c.controller_state()["unclean_recoveries"]
        return s, s.final_reads()


def test_001_5_3_3_balanced_recovery_default_chooses_broker_2_and_loses_nothing(tmp_path):
    s, read = balanced_recovery(tmp_path, None)
    s.check_nothing_acked_lost(read)
    hwm = s.replica(2)["hwm"]
    s.check(s.logs_below(1, hwm) == s.logs_below(2, hwm) == s.logs_below(3, hwm), "logs identical below the HWM")


def test_001_5_3_3_unclean_election_variant_loses_acked_records(tmp_path):
    s, read = balanced_recovery(tmp_path, "unclean-election")
    s.check(len(s.lost_acked(read)) == 30, f"all 30 acknowledged records lost, got {len(s.lost_acked(read))}")
    s.check([r["strategy"] for r in s.recoveries] == ["unclean-leader-election"] and s.recoveries[0]["leader"] == 1,
            f"the unclean election must be reported as possible loss: {s.recoveries}")
