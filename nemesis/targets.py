"""Which nodes a fault hits: pure functions of the cluster's current roles and a seeded rng.

Targets (`--nemesis-target` / options["target"]): random-node, leader (of a random partition
of the test's topic, as the cluster reports it), controller, minority, majority, all.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

TARGETS = ("random-node", "leader", "controller", "minority", "majority", "all")


def choose(target: str, brokers: Sequence[str], rng: random.Random, leaders: Sequence[str] = (),
           controllers: Sequence[str] = ()) -> list[str]:
    """The nodes to hit. `leaders` are the current partition leaders (node names)."""
    brokers = sorted(brokers)
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
    raise ValueError(f"unknown target {target!r}; valid: {', '.join(TARGETS)}")
