"""Consumer groups on a 3-broker reference cluster with unmodified clients (issue 24, deliverable 1):
a member SIGKILLed and its partitions taken over, and the group coordinator's broker SIGKILLed with
the group's committed offsets intact after the fail-over. Each member is a process of its own
(tests/integration/group_consumer.py); a watcher in this process reads the group's committed offsets
(OffsetFetch, without joining) all along, so that no committed offset may be lost or go backwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.broker.group_coordinator import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    GroupCoordinator,
)
from tests.integration.conftest import TestCluster as Cluster
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


@pytest.fixture(params=["kafka-python", "confluent"])
def client(request) -> str:
    """Every test here runs with the members on each client library."""
    return request.param


@dataclass
class GroupRun:
    """A consumer group on a cluster of its own: its member processes, and the watcher of its committed offsets."""

    cluster: Cluster
    root: Path
    client: str
    group: str
    topic: str
    partitions: int
    per_partition: int
    members: list[Member] = field(default_factory=list)
    watcher: CommittedWatcher | None = None

    def join(self, name: str) -> Member:
        member = Member(self.root, name, self.client, self.cluster.bootstrap, self.group, self.topic)
        self.members.append(member)
        return member

    def coordinator_partition(self) -> int:
        """The group's partition of __consumer_offsets, whose leader is its coordinator."""
        return GroupCoordinator(CoordinatorConfig()).partition_for(self.group)

    def wait_for_the_commits_acked_before(self, acked_before: list[dict[int, int]]) -> None:
        for acked in acked_before:
            self.cluster.wait_for(lambda acked=acked: all(self.watcher.latest().get(p, -1) >= o
                                                          for p, o in acked.items()),
                                  timeout=30, what="every commit acknowledged before the kill to be there after it")

    def assert_committed_to_the_end(self, what: str) -> None:
        """The group commits every partition's last offset, no committed offset ever went backwards, and none
        acknowledged to a member is lost."""
        self.cluster.wait_for(lambda: self.watcher.latest() == {p: self.per_partition for p in range(self.partitions)},
                              timeout=90, what=what)
        assert_never_backwards(self.watcher)
        assert_no_acked_commit_lost(self.members, self.watcher.latest())


@contextmanager
def committing_group(tmp_path: Path, client: str, group: str, topic: str, partitions: int, per_partition: int,
                     members: int) -> Iterator[GroupRun]:
    """A cluster (GROUP_FLAGS) whose `topic` holds `per_partition` records in each of its partitions, `members`
    member processes of `group` consuming it, each having committed, and the watcher of the group's committed
    offsets started; members, watcher and cluster are torn down afterwards, passed or not."""
    run = GroupRun(start_local_cluster(tmp_path, broker_flags=GROUP_FLAGS), tmp_path, client, group, topic,
                   partitions, per_partition)
    try:
        run.cluster.create_topic(topic, partitions=partitions, rf=3, min_isr=2)
        produce(run.cluster.bootstrap, topic, partitions, per_partition)
        for i in range(members):
            run.join(f"member-{i}")
        run.cluster.wait_for(lambda: all(m.acked_commits() for m in run.members), timeout=60,
                             what=f"the {members} members committing")
        run.watcher = CommittedWatcher(run.cluster.bootstrap, group, topic, partitions)
        run.watcher.start()
        yield run
    finally:
        tear_down(run.cluster, run.members, run.watcher)


def test_group_takes_over_a_killed_members_partitions_without_losing_a_commit(tmp_path, client):
    with committing_group(tmp_path, client, "g-kill", "orders", partitions=6, per_partition=150, members=3) as run:
        cluster, members = run.cluster, run.members
        cluster.wait_for(lambda: all(len(m.assignment()) == 2 for m in members),
                         timeout=60, what="three members with two partitions each")
        victim, survivors = members[0], members[1:]
        orphaned = victim.assignment()
        victim.kill()
        # The survivors learn of the death when the victim's session (6 s) expires, rebalance, and
        # take over its partitions, resuming each from its last committed offset.
        cluster.wait_for(lambda: set().union(*(m.assignment() for m in survivors)) == set(range(run.partitions)),
                         timeout=60, what="the survivors to take over every partition")
        assert all(any(p in m.assignment() for m in survivors) for p in orphaned)
        run.assert_committed_to_the_end("every partition consumed and committed to its end")


def test_committed_offsets_survive_the_coordinators_death(tmp_path, client):
    with committing_group(tmp_path, client, "g-failover", "events", partitions=3, per_partition=150,
                          members=2) as run:
        cluster, members, watcher = run.cluster, run.members, run.watcher
        cluster.wait_for(lambda: len(watcher.latest()) == run.partitions, timeout=30, what="the watcher's first reads")
        group_partition = run.coordinator_partition()
        coordinator = cluster.partition(OFFSETS_TOPIC, group_partition)["leader"]
        cluster.kill(coordinator)
        acked_before_kill = [m.acked_commits() for m in members]
        # A new leader of the group's partition (002 2.8: elected from the ISR) loads the offsets.
        new = cluster.wait_for(lambda: (cluster.partition(OFFSETS_TOPIC, group_partition)["leader"]
                                        not in (coordinator, -1)) and cluster.partition(OFFSETS_TOPIC, group_partition),
                               timeout=30, what="a new coordinator")
        assert new["leader"] != coordinator
        run.wait_for_the_commits_acked_before(acked_before_kill)
        run.assert_committed_to_the_end("the group to go on committing to the end after the fail-over")


def test_coordinator_killed_in_the_middle_of_a_rebalance(tmp_path, client):
    with committing_group(tmp_path, client, "g-rebalance-failover", "jobs", partitions=6, per_partition=200,
                          members=2) as run:
        cluster, members, group = run.cluster, run.members, run.group
        group_partition = run.coordinator_partition()
        coordinator = cluster.partition(OFFSETS_TOPIC, group_partition)["leader"]
        assert group_state(cluster, coordinator, group) == "Stable"
        run.join("member-2")  # a rebalance
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
                         and set().union(*(m.assignment() for m in members)) == set(range(run.partitions)),
                         timeout=60, what=f"three members sharing every partition (killed in {state})")
        run.wait_for_the_commits_acked_before(acked_before_kill)
        run.assert_committed_to_the_end("the group to go on committing to the end after the fail-over")
