"""Consumer groups on a 3-broker reference cluster with unmodified clients (issue 24, deliverable 1):
a member SIGKILLed and its partitions taken over, and the group coordinator's broker SIGKILLed with
the group's committed offsets intact after the fail-over. Each member is a process of its own
(tests/integration/group_consumer.py); a watcher in this process reads the group's committed offsets
(OffsetFetch, without joining) all along, so that no committed offset may be lost or go backwards."""

from __future__ import annotations

import pytest

from kafkaesque_harness.clusters.broker.group_coordinator import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    GroupCoordinator,
)
from tests.integration.conftest import start_local_cluster
from tests.integration.group_txn_helpers import (
    CommittedWatcher,
    Member,
    assert_never_backwards,
    assert_no_acked_commit_lost,
    group_state,
    produce,
    tear_down,
)

pytestmark = pytest.mark.integration

GROUP_FLAGS = ["--replica-lag-time-max-ms", "3000", "--heartbeat-interval-ms", "250",
               "--group-initial-rebalance-delay-ms", "1000"]


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_group_takes_over_a_killed_members_partitions_without_losing_a_commit(tmp_path, client):
    cluster = start_local_cluster(tmp_path, broker_flags=GROUP_FLAGS)
    members: list[Member] = []
    watcher = None
    try:
        partitions, per_partition = 6, 150
        cluster.create_topic("orders", partitions=partitions, rf=3, min_isr=2)
        produce(cluster.bootstrap, "orders", partitions, per_partition)
        members = [Member(tmp_path, f"member-{i}", client, cluster.bootstrap, "g-kill", "orders") for i in range(3)]
        cluster.wait_for(lambda: all(len(m.assignment()) == 2 and m.acked_commits() for m in members),
                         timeout=60, what="three members with two partitions each, each having committed")
        watcher = CommittedWatcher(cluster.bootstrap, "g-kill", "orders", partitions)
        watcher.start()
        victim, survivors = members[0], members[1:]
        orphaned = victim.assignment()
        victim.kill()
        # The survivors learn of the death when the victim's session (6 s) expires, rebalance, and
        # take over its partitions, resuming each from its last committed offset.
        cluster.wait_for(lambda: set().union(*(m.assignment() for m in survivors)) == set(range(partitions)),
                         timeout=60, what="the survivors to take over every partition")
        assert all(any(p in m.assignment() for m in survivors) for p in orphaned)
        cluster.wait_for(lambda: watcher.latest() == {p: per_partition for p in range(partitions)},
                         timeout=90, what="every partition consumed and committed to its end")
        assert_never_backwards(watcher)
        assert_no_acked_commit_lost(members, watcher.latest())
    finally:
        tear_down(cluster, members, watcher)


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_committed_offsets_survive_the_coordinators_death(tmp_path, client):
    cluster = start_local_cluster(tmp_path, broker_flags=GROUP_FLAGS)
    members: list[Member] = []
    watcher = None
    group = "g-failover"
    try:
        partitions, per_partition = 3, 150
        cluster.create_topic("events", partitions=partitions, rf=3, min_isr=2)
        produce(cluster.bootstrap, "events", partitions, per_partition)
        members = [Member(tmp_path, f"member-{i}", client, cluster.bootstrap, group, "events")
                   for i in range(2)]
        cluster.wait_for(lambda: all(m.acked_commits() for m in members), timeout=60,
                         what="both members committing")
        watcher = CommittedWatcher(cluster.bootstrap, group, "events", partitions)
        watcher.start()
        cluster.wait_for(lambda: len(watcher.latest()) == partitions, timeout=30, what="the watcher's first reads")
        group_partition = GroupCoordinator(CoordinatorConfig()).partition_for(group)
        coordinator = cluster.partition(OFFSETS_TOPIC, group_partition)["leader"]
        cluster.kill(coordinator)
        acked_before_kill = [m.acked_commits() for m in members]
        # A new leader of the group's partition (002 2.8: elected from the ISR) loads the offsets.
        new = cluster.wait_for(lambda: (cluster.partition(OFFSETS_TOPIC, group_partition)["leader"]
                                        not in (coordinator, -1)) and cluster.partition(OFFSETS_TOPIC, group_partition),
                               timeout=30, what="a new coordinator")
        assert new["leader"] != coordinator
        for acked in acked_before_kill:
            cluster.wait_for(lambda acked=acked: all(watcher.latest().get(p, -1) >= o for p, o in acked.items()),
                             timeout=30, what="every commit acknowledged before the kill to be there after it")
        cluster.wait_for(lambda: watcher.latest() == {p: per_partition for p in range(partitions)},
                         timeout=90, what="the group to go on committing to the end after the fail-over")
        assert_never_backwards(watcher)
        assert_no_acked_commit_lost(members, watcher.latest())
    finally:
        tear_down(cluster, members, watcher)


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_coordinator_killed_in_the_middle_of_a_rebalance(tmp_path, client):
    cluster = start_local_cluster(tmp_path, broker_flags=GROUP_FLAGS)
    members: list[Member] = []
    watcher = None
    group = "g-rebalance-failover"
    try:
        partitions, per_partition = 6, 200
        cluster.create_topic("jobs", partitions=partitions, rf=3, min_isr=2)
        produce(cluster.bootstrap, "jobs", partitions, per_partition)
        members = [Member(tmp_path, f"member-{i}", client, cluster.bootstrap, group, "jobs") for i in range(2)]
        cluster.wait_for(lambda: all(m.acked_commits() for m in members), timeout=60, what="both members committing")
        watcher = CommittedWatcher(cluster.bootstrap, group, "jobs", partitions)
        watcher.start()
        group_partition = GroupCoordinator(CoordinatorConfig()).partition_for(group)
        coordinator = cluster.partition(OFFSETS_TOPIC, group_partition)["leader"]
        assert group_state(cluster, coordinator, group) == "Stable"
        members.append(Member(tmp_path, "member-2", client, cluster.bootstrap, group, "jobs"))  # a rebalance
        state = cluster.wait_for(lambda: group_state(cluster, coordinator, group) in ("PreparingRebalance",
                                                                                     "CompletingRebalance")
                                 and group_state(cluster, coordinator, group), timeout=30, interval=0.02,
                                 what="the third member's rebalance to begin")
        cluster.kill(coordinator)
        acked_before_kill = [m.acked_commits() for m in members]
        cluster.wait_for(lambda: cluster.partition(OFFSETS_TOPIC, group_partition)["leader"] not in (coordinator, -1),
                         timeout=30, what="a new coordinator")
        # The rebalance that the kill cut short is done again by the new coordinator: three members.
        cluster.wait_for(lambda: all(m.assignment() for m in members)
                         and set().union(*(m.assignment() for m in members)) == set(range(partitions)),
                         timeout=60, what=f"three members sharing every partition (killed in {state})")
        for acked in acked_before_kill:
            cluster.wait_for(lambda acked=acked: all(watcher.latest().get(p, -1) >= o for p, o in acked.items()),
                             timeout=30, what="every commit acknowledged before the kill to be there after it")
        cluster.wait_for(lambda: watcher.latest() == {p: per_partition for p in range(partitions)},
                         timeout=90, what="the group to go on committing to the end after the fail-over")
        assert_never_backwards(watcher)
        assert_no_acked_commit_lost(members, watcher.latest())
    finally:
        tear_down(cluster, members, watcher)
