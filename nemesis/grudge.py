"""Network partitions as grudges (Jepsen's term): who refuses to hear from whom.

A grudge maps each node to the set of nodes whose packets it drops. Pure functions of the
node list and an rng, so every partition shape is unit-tested without a network; the
partition nemesis turns a grudge into iptables rules through each node's Remote.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

Grudge = dict[str, set[str]]

PARTITION_SHAPES = ("isolate-one", "halves", "majorities-ring", "bridge", "isolate-node", "one-way")
# Cuts between brokers and the object store they share (nemesis/storage.py); mixed draws one of the two.
STORAGE_PARTITION_TARGETS = ("one-broker", "all-brokers", "mixed")


def complete_grudge(components: Iterable[Iterable[str]]) -> Grudge:
    """Nodes in different components cannot hear each other (both directions)."""
    comps = [set(c) for c in components]
    everyone = set().union(*comps) if comps else set()
    return {n: everyone - c for c in comps for n in c}


def isolate(nodes: Sequence[str], node: str) -> Grudge:
    """`node` on one side, everyone else on the other."""
    if node not in nodes:
        raise ValueError(f"cannot isolate {node!r}: not one of {', '.join(nodes)}")
    return complete_grudge([[node], [n for n in nodes if n != node]])


def halves(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """A random split into a minority and a majority."""
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    cut = len(shuffled) // 2
    return complete_grudge([shuffled[:cut], shuffled[cut:]])


def bridge(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Two halves that cannot talk, and one node that talks to both (Jepsen's bridge)."""
    if len(nodes) < 3:
        raise ValueError("a bridge partition needs at least 3 nodes")
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    mid = len(shuffled) // 2
    bridge_node = shuffled[mid]
    left, right = set(shuffled[:mid]), set(shuffled[mid + 1:])
    g: Grudge = {n: set(right) for n in left}
    g.update({n: set(left) for n in right})
    g[bridge_node] = set()
    return g


def majorities_ring(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Every node sees a majority, but no two nodes see the same majority (Jepsen's ring)."""
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    n = len(shuffled)
    if n < 3:
        raise ValueError("a majorities ring needs at least 3 nodes")
    majority = n // 2 + 1
    g: Grudge = {}
    for i, node in enumerate(shuffled):
        # The nodes within majority//2 steps either way around the ring stay visible.
        visible = {shuffled[(i + d) % n] for d in range(-(majority // 2), majority // 2 + 1)}
        g[node] = set(shuffled) - visible  # ring distance is symmetric, so the grudge is too
    return g


def one_way(nodes: Sequence[str], node: str) -> Grudge:
    """`node` drops inbound packets from everyone; its own packets still get out."""
    if node not in nodes:
        raise ValueError(f"cannot isolate {node!r}: not one of {', '.join(nodes)}")
    return {node: {n for n in nodes if n != node}}


def storage_grudge(brokers: Sequence[str], store: str, shape: str, rng: random.Random) -> tuple[Grudge, list[str]]:
    """(who drops whom, the brokers cut off) for a cut between the store and one broker (`one-broker`,
    drawn at random) or every broker (`all-brokers`); the brokers still hear each other and the clients."""
    cut = [rng.choice(sorted(brokers))] if shape == "one-broker" else sorted(brokers)
    g: Grudge = {b: {store} for b in cut}
    g[store] = set(cut)
    return g, cut


def describe(grudge: Grudge) -> str:
    parts = [f"{n} drops {', '.join(sorted(g))}" for n, g in sorted(grudge.items()) if g]
    return "; ".join(parts) or "no grudge"
