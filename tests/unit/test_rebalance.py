"""The rebalance plan of `alter-cluster` (clusters/broker/rebalance.py): even load, fewest moves."""

from __future__ import annotations

import random

import pytest

from kafkaesque_harness.clusters.broker.controller import place_replicas
from kafkaesque_harness.clusters.broker.rebalance import (
    leader_load,
    moved_replicas,
    plan_rebalance,
    replica_load,
)


def placed(brokers: list[int], partitions: int, rf: int, topic: str = "t") -> dict:
    return {(topic, p): r for p, r in enumerate(place_replicas(brokers, partitions, rf))}


def applied(assignment: dict, plan: dict) -> dict:
    return {k: plan.get(k, v) for k, v in assignment.items()}


def assert_valid(after: dict, brokers: list[int], rf: int, leaders_even: bool = True) -> None:
    for key, replicas in after.items():
        assert len(replicas) == min(rf, len(brokers)), key
        assert len(set(replicas)) == len(replicas), f"{key} has a broker twice: {replicas}"
        assert set(replicas) <= set(brokers), f"{key} keeps a removed broker: {replicas}"
    load = replica_load(after, brokers)
    assert max(load.values()) - min(load.values()) <= 1, load
    if not leaders_even:
        return  # reordering alone cannot always even out leaders (a broker may share no partition with a busier one)
    leaders = leader_load(after, brokers)
    assert max(leaders.values()) - min(leaders.values()) <= 1, leaders


def test_a_balanced_cluster_needs_no_moves():
    assignment = placed([1, 2, 3], 12, 3)
    assert plan_rebalance(assignment, [1, 2, 3], {"t": 3}) == {}


def test_adding_a_broker_moves_only_its_share():
    assignment = placed([1, 2, 3], 12, 3)
    plan = plan_rebalance(assignment, [1, 2, 3, 4], {"t": 3})
    after = applied(assignment, plan)
    assert_valid(after, [1, 2, 3, 4], 3)
    # 36 replicas over 4 brokers: 9 each. Broker 4 must receive 9, and nothing else need move.
    assert replica_load(after, [1, 2, 3, 4])[4] == 9
    assert moved_replicas(assignment, plan) == 9


def test_removing_a_broker_moves_only_its_replicas():
    assignment = placed([1, 2, 3, 4], 8, 2)
    on_4 = {k for k, r in assignment.items() if 4 in r}
    plan = plan_rebalance(assignment, [1, 2, 3], {"t": 2})
    after = applied(assignment, plan)
    assert_valid(after, [1, 2, 3], 2)
    assert moved_replicas(assignment, plan) == len(on_4)
    # Partitions that had no replica on 4 keep their replicas (perhaps reordered for leader balance).
    for key in set(assignment) - on_4:
        assert set(after[key]) == set(assignment[key])


def test_shrinking_below_the_replication_factor_and_back():
    assignment = placed([1, 2, 3], 6, 3)
    small = applied(assignment, plan_rebalance(assignment, [1, 2], {"t": 3}))
    assert all(sorted(r) == [1, 2] for r in small.values())
    grown = applied(small, plan_rebalance(small, [1, 2, 3], {"t": 3}))
    assert_valid(grown, [1, 2, 3], 3)


def test_preferred_leaders_are_spread_by_reordering():
    assignment = {("t", p): [1, 2, 3] for p in range(6)}  # broker 1 would lead everything
    plan = plan_rebalance(assignment, [1, 2, 3], {"t": 3})
    after = applied(assignment, plan)
    assert moved_replicas(assignment, plan) == 0  # only the order changed
    assert sorted(leader_load(after, [1, 2, 3]).values()) == [2, 2, 2]


def test_no_brokers_is_refused():
    with pytest.raises(ValueError, match="no brokers"):
        plan_rebalance(placed([1, 2], 2, 2), [], {"t": 2})


@pytest.mark.parametrize("seed", range(30))
def test_random_membership_changes_stay_valid_and_balanced(seed):
    rng = random.Random(seed)
    brokers = list(range(1, rng.randint(3, 7) + 1))
    rf = rng.randint(1, 3)
    assignment = {**placed(brokers, rng.randint(1, 20), rf, "a"), **placed(brokers, rng.randint(1, 9), rf, "b")}
    for _ in range(4):
        if rng.random() < 0.5 and len(brokers) > 1:
            leaving = rng.choice(brokers)
            brokers = [b for b in brokers if b != leaving]
        else:
            brokers = brokers + [max(brokers) + 1]
        before = assignment
        plan = plan_rebalance(before, brokers, {"a": rf, "b": rf})
        assignment = applied(before, plan)
        assert_valid(assignment, brokers, rf, leaders_even=False)
        # A replica is copied only to fill a place (a departed broker's, or a factor restored) or to
        # take load off a broker above the average: never more than every replica once.
        assert moved_replicas(before, plan) <= sum(len(r) for r in assignment.values())
