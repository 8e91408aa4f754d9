"""Exactly-once consume-transform-produce on a 3-broker reference cluster (issue 24, must-show): a
consumer group of confluent-kafka members (tests/integration/eos_member.py), each with a transactional
producer of its own, turns every input record into one output record and commits the consumed offsets
with send_offsets_to_transaction in the same transaction, while the test SIGKILLs

  1. the group coordinator's broker (leader of the group's __consumer_offsets partition) while a third
     member's join has the group rebalancing, transactions running;
  2. a member (its open transaction left to time out) and, once its death has the group rebalancing,
     the broker leading a survivor's __transaction_state partition;

each broker started again once a new leader is elected (restart_after_election says why). A member hung
in librdkafka's send_offsets_to_transaction past the call's timeout is replaced by a new incarnation with
its transactional id (hung_in_send_offsets says why); the checks below cover both incarnations.

Then: every committed transaction is read whole by read_committed and no aborted one is read
(atomicity); every input record is in the output exactly once under read_committed; the group's
committed offsets never went backwards and end at the input's end.

Exactly once holds because the broker implements KIP-447's fencing (server.txn_commit_offsets checks the
member's generation in TxnOffsetCommit v3, so a member that lost its partitions cannot commit offsets for
them, and its transaction aborts) and KIP-447's require_stable in OffsetFetch (a partition's new owner
reads its committed offset only once the previous owner's transaction has ended)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from kafkaesque_harness.clusters.broker.group_coordinator import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    GroupCoordinator,
)
from kafkaesque_harness.clusters.broker.txn_coordinator import TXN_STATE_TOPIC, TransactionCoordinator
from tests.integration.conftest import TestCluster as Cluster
from tests.integration.conftest import start_local_cluster
from tests.integration.group_txn_helpers import (
    CommittedWatcher,
    Member,
    assert_atomic,
    assert_never_backwards,
    assert_no_acked_commit_lost,
    by_txn,
    group_dump,
    group_state,
    produce,
    read_all,
    tear_down,
)
from tests.integration.test_groups import GROUP_FLAGS

pytestmark = pytest.mark.integration

GROUP, IN, OUT = "g-eos", "eos-in", "eos-out"
PARTITIONS, PER_STAGE = 6, 100
REBALANCING = ("PreparingRebalance", "CompletingRebalance")


class EosMember(Member):
    """Member `index`; a later incarnation (a replacement of a hung one) has the same transactional id, so it
    fences the one before, its own facts file and its own transaction numbers."""

    def __init__(self, root, index: int, bootstrap: str, incarnation: int = 0):
        self.index, self.incarnation = index, incarnation
        self.txn_id = f"eos-member-{index}"
        super().__init__(root, f"member-{index}" + (f"-{incarnation}" if incarnation else ""), "confluent",
                         bootstrap, GROUP, IN, module="tests.integration.eos_member",
                         extra=["--out-topic", OUT, "--out-partitions", str(PARTITIONS), "--txn-id", self.txn_id,
                                "--txn-base", str(index * 1_000_000 + incarnation * 100_000), "--pause-s", "0.1"])


class Outcomes:
    """The transactions of every member, as one producer's facts for assert_atomic: a transaction begun
    and never ended by its member (SIGKILLed in it) has an unknown outcome."""

    def __init__(self, members: list[EosMember]):
        self.members = members

    def txns(self, event: str) -> set[int]:
        out = set().union(*(m.txns(event) for m in self.members))
        if event == "uncertain":
            out |= self.txns("begun") - self.txns("committed") - self.txns("aborted")
        return out

    def sizes(self) -> dict[int, int]:
        return {f["txn"]: f["records"] for m in self.members for f in m.facts("begun")}


def leader(cluster: Cluster, topic: str, partition: int) -> int:
    return cluster.partition(topic, partition)["leader"]


def restart_after_election(cluster: Cluster, dead: int, topic: str, partition: int, members: list[EosMember]) -> None:
    """After the kill of broker `dead`, leader of topic-partition: a new leader elected, then `dead` started
    again and back in the ISR of every internal partition the test's group and members use (min ISR 2 of
    3 brokers: the next kill must leave two)."""
    cluster.wait_for(lambda: leader(cluster, topic, partition) not in (dead, -1), timeout=30,
                     what=f"a new leader of {topic}-{partition}")
    cluster.restart(dead)
    cluster.wait_unfenced([dead])
    internal = [(OFFSETS_TOPIC, GroupCoordinator(CoordinatorConfig()).partition_for(GROUP))]
    internal += [(TXN_STATE_TOPIC, TransactionCoordinator(lambda: 0).partition_for(m.txn_id)) for m in members]
    cluster.wait_for(lambda: all(dead in cluster.partition(t, p)["isr"] for t, p in internal),
                     timeout=60, what=f"broker {dead} back in the internal partitions' ISRs")


def wait_for_progress(cluster: Cluster, watcher: CommittedWatcher, what: str) -> None:
    """The group commits at least 20 more input records from now.

    The group's, not each member's: librdkafka (2.16 here) caches a group's coordinator, and a member's
    send_offsets_to_transaction whose cached coordinator was the killed broker (gone from the metadata
    once fenced, as in Kafka) can wait past its own timeout until some broker's state changes
    (librdkafka issues 5456 and 5511), which here may be never: such a member stalls until
    max.poll.interval.ms (20 s in eos_member) takes it out of the group and the others take over."""
    before = sum(watcher.latest().values())
    cluster.wait_for(lambda: sum(watcher.latest().values()) >= before + 20, timeout=90, what=what)


def last_fact_is(m: EosMember, event: str, among: tuple[str, ...], older_than_s: float) -> bool:
    """Whether the latest of member m's facts of the events `among` is an `event` fact older than `older_than_s`."""
    last = max((f for e in among for f in m.facts(e)), key=lambda f: f["time"], default=None)
    return last is not None and last["event"] == event and time.monotonic() - last["time"] > older_than_s


def hung_in_send_offsets(m: EosMember, after_s: float = 30.0) -> bool:
    """Alive, and its last fact is a send_offsets_to_transaction begun more than `after_s` ago: the call's own
    timeout is 30 s, which librdkafka overruns while its cached group coordinator is a dead broker
    (wait_for_progress says more)."""
    among = ("begun", "sending_offsets", "committing", "committed", "aborting", "aborted", "uncertain")
    return m.proc.poll() is None and last_fact_is(m, "sending_offsets", among, after_s)


def stalled(members: list[EosMember]) -> list[str]:
    """Members whose last fact is a transaction begun more than 30 s ago and not ended."""
    return [m.name for m in members if last_fact_is(m, "begun", ("begun", "committed", "aborted", "uncertain"), 30)]


def test_consume_transform_produce_is_exactly_once_across_coordinator_kills_and_rebalances(tmp_path):
    cluster = start_local_cluster(tmp_path, broker_flags=GROUP_FLAGS)
    members: list[EosMember] = []
    watcher = None
    try:
        cluster.create_topic(IN, partitions=PARTITIONS, rf=3, min_isr=2)
        cluster.create_topic(OUT, partitions=PARTITIONS, rf=3, min_isr=2)
        produce(cluster.bootstrap, IN, PARTITIONS, PER_STAGE)
        members = [EosMember(tmp_path, i, cluster.bootstrap) for i in range(2)]
        cluster.wait_for(lambda: all(len(m.txns("committed")) >= 2 for m in members), timeout=90,
                         what="both members committing transactions")
        watcher = CommittedWatcher(cluster.bootstrap, GROUP, IN, PARTITIONS)
        watcher.start()
        group_partition = GroupCoordinator(CoordinatorConfig()).partition_for(GROUP)

        # 1. The group coordinator dies in the middle of the third member's rebalance.
        group_coordinator = leader(cluster, OFFSETS_TOPIC, group_partition)
        members.append(EosMember(tmp_path, 2, cluster.bootstrap))
        state = cluster.wait_for(lambda: group_state(cluster, group_coordinator, GROUP) in REBALANCING
                                 and group_state(cluster, group_coordinator, GROUP), timeout=30, interval=0.02,
                                 what="the third member's rebalance to begin")
        cluster.kill(group_coordinator)
        restart_after_election(cluster, group_coordinator, OFFSETS_TOPIC, group_partition, members)
        cluster.wait_for(lambda: all(m.assignment() for m in members)
                         and set().union(*(m.assignment() for m in members)) == set(range(PARTITIONS)),
                         timeout=90, what=f"three members sharing every partition (coordinator killed in {state})")
        produce(cluster.bootstrap, IN, PARTITIONS, PER_STAGE)
        wait_for_progress(cluster, watcher, "the group committing after the group coordinator's death")

        # 2. A member dies mid-transaction; while its death has the group rebalancing, the transaction
        # coordinator of the survivors dies too (perhaps the group coordinator's broker as well).
        produce(cluster.bootstrap, IN, PARTITIONS, PER_STAGE)
        wait_for_progress(cluster, watcher, "the group committing the third stage")
        victim, survivors = members[0], members[1:]
        group_coordinator = leader(cluster, OFFSETS_TOPIC, group_partition)
        before = group_dump(cluster, group_coordinator, GROUP) or {}
        generation = before.get("generation", -1)
        victim_ids = {m for m in before.get("members", []) if m.startswith(f"{victim.name}-")}
        victim.kill()

        def rebalancing() -> bool:
            # the death noticed: the group rebalancing, or (a loaded machine can poll past the whole
            # rebalance) already in a later generation, or the victim no longer a member (a member that
            # overran max.poll.interval had already left, so its death starts no rebalance: CI run of
            # stop 32 waited 30 s for one)
            g = group_dump(cluster, group_coordinator, GROUP) or {}
            gone = bool(g) and not victim_ids & set(g.get("members", []))
            return g.get("state") in REBALANCING or g.get("generation", -1) > generation or gone

        cluster.wait_for(rebalancing, timeout=30, interval=0.02, what="the group to rebalance after the member's death")
        survivor_txn_partition = TransactionCoordinator(lambda: 0).partition_for(survivors[0].txn_id)
        txn_coordinator = leader(cluster, TXN_STATE_TOPIC, survivor_txn_partition)
        committed_before = len(Outcomes(survivors).txns("committed"))
        cluster.kill(txn_coordinator)
        restart_after_election(cluster, txn_coordinator, TXN_STATE_TOPIC, survivor_txn_partition, members)

        end = {p: 3 * PER_STAGE for p in range(PARTITIONS)}
        # Every survivor can hang in librdkafka at once (both had the dead broker as their cached coordinator;
        # 1 run in 4 here): then no member is left to go on. A member hung past its call's timeout is replaced,
        # as a supervisor would: killed, and started again with the same transactional id, which fences it.
        # Exactly-once must hold across the replacement too (its open transaction counts as uncertain).
        replaced: list[EosMember] = []

        def at_end() -> bool:
            for i, m in enumerate(survivors):
                if hung_in_send_offsets(m):
                    m.kill()
                    survivors[i] = EosMember(tmp_path, m.index, cluster.bootstrap, m.incarnation + 1)
                    members.append(survivors[i])
                    replaced.append(m)
            return watcher.latest() == end

        cluster.wait_for(at_end, timeout=240, interval=1.0,
                         what=f"the group's committed offsets at the input's end {end}")
        assert len(Outcomes(survivors + replaced).txns("committed")) > committed_before  # it went on after the kill
        stalled_members = stalled(survivors) + [f"{m.name} (hung in send_offsets_to_transaction: replaced)"
                                                for m in replaced]
        for m in survivors:
            m.stop()
        outcomes = Outcomes(members)
        values = read_all(cluster.bootstrap, OUT, PARTITIONS, "read_committed")
        assert_atomic(by_txn(values), outcomes, outcomes.sizes(), outcome_known=False)
        consumed = Counter(tuple(map(int, v.split(":")[1:])) for v in values)
        inputs = {(p, o) for p in range(PARTITIONS) for o in range(3 * PER_STAGE)}
        assert inputs - set(consumed) == set(), "input records missing from the output"
        assert {k: n for k, n in consumed.items() if n > 1} == {}, "input records in the output more than once"
        assert set(consumed) == inputs
        assert_never_backwards(watcher)
        assert_no_acked_commit_lost(members, watcher.latest())
        print(f"EOS: {len(outcomes.txns('committed'))} committed, {len(outcomes.txns('aborted'))} aborted, "
              f"{len(outcomes.txns('uncertain'))} of unknown outcome; group coordinator killed in {state}, "
              f"then broker {txn_coordinator} (transaction coordinator); stalled in the client: {stalled_members}")
    finally:
        tear_down(cluster, members, watcher)
