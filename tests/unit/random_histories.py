"""What the random-history generators of the linearizability tests share: when a random process runs its
next op, and the ops of timed events put in time order and numbered."""

from __future__ import annotations

import random

from kafkaesque_harness.history import Op


def next_interval(rng: random.Random, free: list[float], after: float,
                  effect_scale: float = 1.0) -> tuple[int, float, float, float]:
    """A random process's next op: (process, start, effect, end). It starts a random time (under 1) after both
    `after` and the end of that process's previous op (`free`, per process), takes effect a random time under
    `effect_scale` later, and ends a random time under 1 after its effect. The caller keeps `free`."""
    p = rng.randrange(len(free))
    start = max(after, free[p]) + rng.random()
    effect = start + rng.random() * effect_scale
    end = effect + rng.random()
    return p, start, effect, end


def numbered(ops: list[Op]) -> list[Op]:
    """The ops, each with its position as its index and its time."""
    for i, o in enumerate(ops):
        o.index = o.time = i
    return ops


def in_time_order(events: list[tuple[float, Op]]) -> list[Op]:
    """The ops of (time, op) events in time order (equal times as they came), numbered."""
    return numbered([o for _, o in sorted(events, key=lambda e: e[0])])
