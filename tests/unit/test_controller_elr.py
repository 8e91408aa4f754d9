"""Eligible Leader Replicas, Unclean Exclusion and unclean recovery in the controller (001 5.2, 5.3;
PROTOCOL.md 4, 6), with a controllable clock and no sockets.

Each ELR transition of 001 5.2.1 (cases A to G) has its own test (A and C, one rule for a follower
and for the leader, are the two cases of one parametrised test); the two worked examples
(5.2.2 clean ELR recovery, 5.3.3 balanced recovery) are walked through step by step.
"""

from __future__ import annotations

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER, PartitionState
from tests.unit.test_controller import TIMEOUT, alter, cluster, create, heartbeat, register


class Sim:
    """A controller with brokers 1..n and one partition ("t", 0) on replicas [1, 2, 3]; time moves
    only when a test says so, and live brokers heartbeat while it does."""

    def __init__(self, n: int = 3, min_isr: int = 2, rf: int = 3, **config):
        self.c, self.epochs = cluster(n, **config)
        create(self.c, rf=rf, min_isr=min_isr)
        self.now = 100
        self.dead: set[int] = set()

    @property
    def p(self) -> PartitionState:
        return self.c.image.partitions[("t", 0)]

    def advance(self, ms: int = TIMEOUT + 300) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += 100
            for b, e in self.epochs.items():
                if b not in self.dead:
                    heartbeat(self.c, b, e, self.now)
            self.c.tick(self.now)

    def crash(self, *bids: int) -> None:
        """The brokers go silent until their sessions time out and the controller fences them."""
        self.dead |= set(bids)
        self.advance()
        for b in bids:
            assert self.c.image.brokers[b].fenced

    def come_back(self, bid: int) -> None:
        """A fenced broker that was only cut off heartbeats again: same epoch, unfenced."""
        self.dead.discard(bid)
        assert heartbeat(self.c, bid, self.epochs[bid], self.now)["is_fenced"] is False

    def restart(self, bid: int, clean: bool) -> None:
        """A new incarnation registers with the clean-shutdown epoch on file, or without it."""
        self.dead.discard(bid)
        previous = self.epochs[bid] if clean else -1
        self.epochs[bid] = register(self.c, bid, now=self.now, previous=previous, incarnation=f"again-{self.now}")
        heartbeat(self.c, bid, self.epochs[bid], self.now)

    def shrink(self, isr: list[int]) -> None:
        """The leader's AlterPartition (a follower fell behind, 002 2.9.2)."""
        assert alter(self.c, self.epochs, isr, leader=self.p.leader)["error"] == rpc.NONE


def state(p: PartitionState) -> tuple[int, list[int], list[int], list[int]]:
    return p.leader, p.isr, p.elr, p.last_known_elr


# --- the transitions of 001 5.2.1 -----------------------------------------------------------------

@pytest.mark.parametrize("fenced, after", [
    (2, (1, [1], [2], [])),  # case A: an in-sync follower, fenced, joins the ELR when the ISR drops below min ISR
    (1, (2, [2], [1], [])),  # case C: the fenced leader joins the ELR when the new ISR is below min ISR
], ids=["case_a_fenced_in_sync_follower_joins_the_elr", "case_c_fenced_leader_joins_the_elr"])
def test_a_fenced_isr_member_joins_the_elr_when_the_isr_drops_below_min_isr(fenced, after):
    s = Sim()
    s.shrink([1, 2])
    s.crash(fenced)
    assert state(s.p) == after


def test_case_b_an_unfenced_elr_member_is_elected_and_moves_to_the_isr():
    s = Sim()
    s.shrink([1, 2])
    s.crash(2)               # ELR [2] (case A)
    s.come_back(2)           # unfenced, still an ELR member: never out of the leader's reach
    epoch = s.p.leader_epoch
    s.crash(1)
    assert s.p.leader == 2 and s.p.isr == [2] and 2 not in s.p.elr
    assert s.p.leader_epoch == epoch + 1


def test_case_d_fenced_leader_is_not_kept_when_the_new_isr_meets_min_isr():
    s = Sim()
    s.crash(1)
    assert state(s.p) == (2, [2, 3], [], [])


def test_case_e_a_caught_up_follower_is_added_back_and_leaves_elr_and_last_known_elr():
    s = Sim(min_isr=3)
    s.shrink([1, 2])          # below min ISR 3: 3 goes to the ELR
    assert s.p.elr == [3]
    s.shrink([1, 2, 3])       # 3 caught up and is added back
    assert state(s.p) == (1, [1, 2, 3], [], [])


def test_case_f_out_of_sync_follower_removed_while_the_isr_meets_min_isr_is_not_in_the_elr():
    s = Sim()
    s.shrink([1, 3])
    assert state(s.p) == (1, [1, 3], [], [])


def test_case_g_elr_members_lose_eligibility_once_the_isr_is_back_at_min_isr():
    s = Sim()
    s.shrink([1, 2])
    s.crash(2, 3)             # ISR [1], ELR [2] (3 was already out of sync: case F)
    assert state(s.p) == (1, [1], [2], [])
    s.restart(3, clean=True)
    s.shrink([1, 3])          # the ISR reaches min ISR again: the HWM can advance past 2
    assert state(s.p) == (1, [1, 3], [], [])
    s.come_back(2)            # alive and unfenced, but no longer a leader candidate
    s.crash(1, 3)
    assert s.p.leader == NO_LEADER and 2 not in s.p.elr


def test_isr_may_become_empty_and_the_last_members_wait_in_the_elr():
    s = Sim()
    s.crash(1, 2, 3)
    assert state(s.p) == (NO_LEADER, [], [2, 3], [])


# --- Unclean Exclusion (001 5.2) ---------------------------------------------------------------

def test_unclean_registration_moves_the_replica_from_the_elr_to_the_last_known_elr():
    s = Sim()
    s.shrink([1, 2])
    s.crash(2)
    s.restart(2, clean=False)
    assert state(s.p) == (1, [1], [], [2])
    assert s.c.image.brokers[2].clean is False


def test_clean_registration_keeps_the_elr_membership():
    s = Sim()
    s.shrink([1, 2])
    s.crash(2)
    s.restart(2, clean=True)
    assert state(s.p) == (1, [1], [2], [])


def test_uncleanly_restarted_replica_is_never_elected_while_a_clean_candidate_exists():
    s = Sim()
    s.shrink([1, 2])
    s.crash(1, 2)               # ISR [], ELR [1, 2]
    s.restart(1, clean=False)   # 1 may have lost committed records: out of the ELR
    assert state(s.p) == (NO_LEADER, [], [2], [1])
    s.come_back(2)
    assert state(s.p) == (2, [2], [], [1])


def test_an_unclean_restart_does_not_change_partitions_it_was_not_a_candidate_of():
    s = Sim()
    s.crash(3)
    before = state(s.p)
    s.restart(3, clean=False)
    assert state(s.p) == before


# --- the worked examples ------------------------------------------------------------------------

def test_001_5_2_2_clean_elr_recovery_walkthrough():
    s = Sim()
    assert state(s.p) == (1, [1, 2, 3], [], [])
    s.shrink([1, 3])
    assert state(s.p) == (1, [1, 3], [], [])
    s.shrink([1])
    assert state(s.p) == (1, [1], [3], [])
    s.crash(1)                                   # the leader and sole ISR member, lossy
    assert state(s.p) == (3, [3], [1], [])
    s.restart(1, clean=False)                    # it registers without the clean-shutdown epoch
    assert state(s.p) == (3, [3], [], [1])
    s.shrink([1, 3])                             # it caught up with leader 3
    assert state(s.p) == (3, [1, 3], [], [])


def test_001_5_3_3_balanced_recovery_walkthrough():
    s = Sim(unclean_recovery_strategy="balanced")
    s.crash(1, 2, 3)   # the controller fences 1, then 2, then 3 (steps 3 to 5)
    assert state(s.p) == (NO_LEADER, [], [2, 3], [])
    s.restart(1, clean=False)                                   # step 6
    assert state(s.p) == (NO_LEADER, [], [2, 3], [])
    s.restart(2, clean=False)                                   # step 7
    assert state(s.p) == (NO_LEADER, [], [3], [2])
    s.advance(300)
    assert s.c.log_info_requests() == []                        # ELR not empty: clean election may still come
    s.restart(3, clean=False)                                   # step 8
    assert state(s.p) == (NO_LEADER, [], [], [2, 3])
    s.advance(200)
    asked = sorted(b for _, b, _, _ in s.c.log_info_requests())
    assert asked == [2, 3]                                      # step 9: GetReplicaLogInfo to the LastKnownELR
    key = ("t", 0)
    s.c.on_replica_log_info(key, 3, {"error": rpc.NONE, "last_epoch": 2, "log_end_offset": 8,
                                     "broker_epoch": s.epochs[3]}, s.now)
    assert s.p.leader == NO_LEADER                              # balanced waits for every member
    s.c.on_replica_log_info(key, 2, {"error": rpc.NONE, "last_epoch": 2, "log_end_offset": 12,
                                     "broker_epoch": s.epochs[2]}, s.now)
    assert state(s.p) == (2, [2], [], [])                       # step 10: the longest log of the highest epoch
    (rec,) = s.c.image.unclean_recoveries
    assert rec["leader"] == 2 and rec["strategy"] == "balanced" and rec["candidates"] == {"2": [2, 12], "3": [2, 8]}
    assert s.c.dump()["unclean_recoveries"][0]["leader"] == 2


def test_balanced_recovery_ignores_a_reply_from_an_earlier_incarnation():
    s = Sim()
    s.crash(1, 2, 3)
    for b in (1, 2, 3):
        s.restart(b, clean=False)
    s.advance(200)
    old = s.epochs[2] - 1
    s.c.on_replica_log_info(("t", 0), 2, {"error": rpc.NONE, "last_epoch": 9, "log_end_offset": 99,
                                          "broker_epoch": old}, s.now)
    s.c.on_replica_log_info(("t", 0), 3, {"error": rpc.NONE, "last_epoch": 1, "log_end_offset": 5,
                                          "broker_epoch": s.epochs[3]}, s.now)
    assert s.p.leader == NO_LEADER


def test_proactive_recovery_does_not_wait_for_fenced_elr_members():
    s = Sim(unclean_recovery_strategy="proactive", unclean_recovery_timeout_ms=3000)
    s.crash(1, 2, 3)                 # ELR [2, 3], all fenced
    s.restart(1, clean=False)        # only 1 is back: proactive inspects what answers
    s.advance(200)
    assert [b for _, b, _, _ in s.c.log_info_requests()] == [1, 2, 3]
    s.c.on_replica_log_info(("t", 0), 1, {"error": rpc.NONE, "last_epoch": 0, "log_end_offset": 3,
                                          "broker_epoch": s.epochs[1]}, s.now)
    assert s.p.leader == NO_LEADER   # within its timeout it still hopes for more replies
    s.advance(3000)
    assert state(s.p) == (1, [1], [], [])
    assert s.c.image.unclean_recoveries[0]["strategy"] == "proactive"


def test_manual_strategy_waits_for_the_operator():
    s = Sim(unclean_recovery_strategy="manual")
    s.crash(1, 2, 3)
    for b in (1, 2, 3):
        s.restart(b, clean=False)
    s.advance(1000)
    assert s.p.leader == NO_LEADER and s.c.log_info_requests() == []
    r = s.c.handle("elect_leader", {"topic": "t", "partition": 0, "broker_id": 3}, s.now)
    assert r["error"] == rpc.NONE and state(s.p) == (3, [3], [], [])
    assert s.c.image.unclean_recoveries[0]["strategy"] == "manual"


def test_operator_election_is_refused_while_a_clean_election_is_possible():
    s = Sim(unclean_recovery_strategy="manual")
    r = s.c.handle("elect_leader", {"topic": "t", "partition": 0, "broker_id": 3}, s.now)
    assert r["error"] == rpc.INVALID_REQUEST and s.p.leader == 1


def test_unclean_leader_election_elects_any_live_replica_and_reports_it():
    s = Sim(unclean_leader_election=True)
    s.shrink([1, 2])
    s.crash(1, 2)                   # ISR [], ELR [1, 2]: both fenced; 3 is alive but out of sync
    assert state(s.p) == (3, [3], [], [])
    assert s.c.image.unclean_recoveries[-1]["strategy"] == "unclean-leader-election"


def test_without_unclean_leader_election_an_out_of_sync_replica_never_leads():
    s = Sim()
    s.shrink([1, 2])
    s.crash(1, 2)
    s.advance(3000)
    assert state(s.p) == (NO_LEADER, [], [1, 2], []) and not s.c.image.unclean_recoveries


def test_structure_invariants_hold_through_a_random_walk():
    """PROTOCOL.md 8, controller structure: ISR and ELR within replicas, disjoint, ELR empty at or
    above min ISR, and ISR = ELR = {} implies |LastKnownELR| = min ISR once recovery is due."""
    import random

    rng = random.Random(7)
    for _ in range(30):
        s = Sim()
        for _ in range(12):
            b = rng.choice([1, 2, 3])
            action = rng.choice(["crash", "back", "clean", "unclean"])
            if action == "crash" and b not in s.dead:
                s.crash(b)
            elif action == "back" and b in s.dead and not s.c.image.brokers[b].fenced:
                s.come_back(b)
            elif action in ("clean", "unclean") and b in s.dead:
                s.restart(b, clean=action == "clean")
            p = s.p
            assert set(p.isr) <= set(p.replicas) and set(p.elr) <= set(p.replicas)
            assert not set(p.isr) & set(p.elr)
            if len(p.isr) >= 2:
                assert p.elr == [] and p.last_known_elr == []
            assert all(not s.c.image.brokers[r].fenced for r in p.isr), "a fenced broker stayed in the ISR"
            if not p.isr and not p.elr and p.leader == NO_LEADER and p.last_known_elr:
                assert len(p.last_known_elr) == 2
