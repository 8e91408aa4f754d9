"""The rebalance plan behind `alter-cluster add/remove brokers` (003, "Incrementally add brokers
online" and "Take brokers offline"): a new replica assignment for a changed set of brokers that
keeps the load even while moving as few replicas as possible.

Pure functions, no I/O: the coordinator (clusters/broker/membership.py) reads the controller's
state, asks for a plan, and carries it out as partition reassignments (PROTOCOL.md 7).

The plan, for brokers B and each partition's current replicas R:

1. Keep every replica on a broker in B, in its position; a partition keeps its preferred
   replica (the first) unless that broker leaves.
2. Fill the places of replicas on departing brokers (and, when B has grown back to a topic's
   replication factor, the places a smaller cluster could not fill) with the least-loaded
   brokers not already in the set.
3. While the most-loaded broker holds two replicas more than the least-loaded one, move one
   replica between them (a partition on the former that the latter does not hold). Each move
   is one replica's copy, the least the balance allows: a replica is moved only when its
   broker is above the average.
4. Balance preferred replicas (leaders after a preferred-leader election) the same way, but by
   reordering replicas within a partition, which moves no data.

A partition whose topic's replication factor exceeds |B| gets |B| replicas (the cluster shrank
below it; the coordinator says so), and its full factor back when brokers are added.
"""

from __future__ import annotations

from collections import Counter

Key = tuple[str, int]


def replica_load(assignment: dict[Key, list[int]], brokers: list[int]) -> Counter:
    load = Counter({b: 0 for b in brokers})
    for replicas in assignment.values():
        load.update(r for r in replicas if r in load)
    return load


def leader_load(assignment: dict[Key, list[int]], brokers: list[int]) -> Counter:
    load = Counter({b: 0 for b in brokers})
    load.update(replicas[0] for replicas in assignment.values() if replicas and replicas[0] in load)
    return load


def plan_rebalance(assignment: dict[Key, list[int]], brokers: list[int],
                   replication_factor: dict[str, int]) -> dict[Key, list[int]]:
    """The new replica list of every partition whose replicas change (see the module docstring).

    `assignment` maps (topic, partition) to its current replicas, `brokers` is the cluster after
    the change, `replication_factor` each topic's configured factor."""
    if not brokers:
        raise ValueError("a cluster with no brokers cannot hold any partition")
    members = sorted(set(brokers))
    new = {key: [r for r in replicas if r in members] for key, replicas in sorted(assignment.items())}

    # 2. Fill: least-loaded first, lowest id on ties, never a broker the partition already has.
    load = replica_load(new, members)
    for key, replicas in new.items():
        want = min(replication_factor.get(key[0], len(assignment[key])), len(members))
        del replicas[want:]
        while len(replicas) < want:
            b = min((m for m in members if m not in replicas), key=lambda m: (load[m], m))
            replicas.append(b)
            load[b] += 1

    # 3. Even out replica counts, one replica at a time, onto the least-loaded broker from the
    # most-loaded one that has a partition it can give (one the receiver does not hold yet).
    while True:
        load = replica_load(new, members)
        lo = min(members, key=lambda m: (load[m], m))
        move = None
        for hi in sorted(members, key=lambda m: (-load[m], m)):
            if load[hi] - load[lo] <= 1:
                break
            # Prefer moving a follower (position > 0): it keeps the partition's preferred leader.
            movable = sorted((replicas.index(hi) == 0, key) for key, replicas in new.items()
                             if hi in replicas and lo not in replicas)
            if movable:
                move = hi, movable[0][1]
                break
        if move is None:
            break
        hi, key = move
        new[key][new[key].index(hi)] = lo

    # 4. Even out preferred replicas by reordering: no data moves. Not always possible (the
    # least-leading broker may share no partition with a busier leader); then it stays as is.
    while True:
        leaders = leader_load(new, members)
        swap = None
        for lo in sorted(members, key=lambda m: (leaders[m], m)):
            for key, replicas in new.items():
                if lo in replicas and leaders[replicas[0]] - leaders[lo] >= 2:
                    swap = lo, key
                    break
            if swap:
                break
        if swap is None:
            break
        lo, key = swap
        new[key].remove(lo)
        new[key].insert(0, lo)

    return {key: replicas for key, replicas in new.items() if replicas != assignment[key]}


def moved_replicas(assignment: dict[Key, list[int]], plan: dict[Key, list[int]]) -> int:
    """How many replicas the plan copies to a broker that did not hold them (its data movement)."""
    return sum(len(set(target) - set(assignment[key])) for key, target in plan.items())
