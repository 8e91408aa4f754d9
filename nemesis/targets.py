"""Which nodes a fault hits: pure functions of the cluster's current roles and a seeded rng.

Targets (`--nemesis-target` / options["target"]): random-node, leader (of a random partition
of the test's topic, as the cluster reports it), controller, minority, majority, all,
isr-member, last-isr-member (a broker that is alone in some partition's ISR; nothing when none is),
mixed (each fault draws one of random-node, leader, minority, majority, all; partitions draw a shape).
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def running_brokers(cluster) -> list[str]:
    """The brokers whose process is up (paused counts as up), asked of all nodes at once.

    Faults overlap under the mix schedule: a kill must not pick a broker another fault already
    has down (its restart would end that fault early), nor a power cut a killed one.
    """
    from concurrent.futures import ThreadPoolExecutor

    nodes = cluster.broker_nodes()
    with ThreadPoolExecutor(max_workers=max(len(nodes), 1)) as pool:
        up = list(pool.map(cluster.is_running, nodes))
    return [n for n, ok in zip(nodes, up, strict=True) if ok]


TARGETS = ("random-node", "leader", "controller", "minority", "majority", "all", "isr-member", "last-isr-member",
           "mixed")
# `mixed` (the default, as in Jepsen's combined nemesis): each fault draws its own target from these,
# so one run kills a lone follower, then the leader, then a majority or every broker at once.
MIXED_TARGETS = ("random-node", "leader", "minority", "majority", "all")


def choose(target: str, brokers: Sequence[str], rng: random.Random, leaders: Sequence[str] = (),
           controllers: Sequence[str] = (), isrs: Sequence[Sequence[str]] = ()) -> list[str]:
    """The nodes to hit. `leaders` are the current partition leaders and `isrs` the partitions'
    ISRs (node names), as the cluster reports them."""
    brokers = sorted(brokers)
    if target == "mixed":
        target = rng.choice(MIXED_TARGETS)
    if target == "random-node":
        return [rng.choice(brokers)]
    if target == "leader":
        return [rng.choice(sorted(leaders))] if leaders else [rng.choice(brokers)]
    if target == "controller":
        return [rng.choice(sorted(controllers))] if controllers else []
    if target == "minority":
        return rng.sample(brokers, max(1, (len(brokers) - 1) // 2))
    if target == "majority":
        return rng.sample(brokers, len(brokers) // 2 + 1)
    if target == "all":
        return list(brokers)
    if target == "isr-member":
        members = sorted({n for isr in isrs for n in isr})
        return [rng.choice(members)] if members else []
    if target == "last-isr-member":
        # The sole remaining ISR member of some partition: the replica whose loss matters most.
        last = sorted({isr[0] for isr in isrs if len(isr) == 1})
        return [rng.choice(last)] if last else []
    raise ValueError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")


def coordinator_node(cluster, internal_topic: str, key: str) -> str | None:
    """The broker that coordinates `key` (a transactional id in __transaction_state, a group id in
    __consumer_offsets): the current leader of the internal topic's partition that holds the key, as
    the cluster reports it. None while the topic does not exist yet (Kafka creates it at the first
    FindCoordinator) or that partition has no leader."""
    from kafkaesque_harness.clusters.broker import coordinator_partition

    parts = cluster.partitions(internal_topic)
    if not parts:
        return None
    wanted = coordinator_partition(key, max(p.partition for p in parts) + 1)
    p = next((q for q in parts if q.partition == wanted), None)
    return cluster.node_name(p.leader) if p is not None and p.leader >= 0 else None
