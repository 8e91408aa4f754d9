"""Pure schedules of operations (Jepsen's generators, in Python): testable without a cluster.

Asking a schedule for the next op never performs it: the workers and the nemesis thread
ask, then do. Every piece is deterministic given its seed and the times it is asked at,
so the unit tests drive them with a simulated clock.

- ProcessTable: logical processes with Jepsen's info rule (a process whose op ended
  "info" never issues another op; its worker continues under process id + concurrency).
- RateLimiter: an overall ops/s budget shared by all workers, with seeded jitter.
- ClientSchedule: the main phase (op mix, rate, time limit) for every worker.

When the random faults start and stop is the nemesis's own schedule (nemesis/schedule.py).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# (rng, process) -> (f, value), or (f, value, extra): extra holds the invocation's fields beside the standard
# ones (history/ops.py Op.extra; the txn workload's "abort" decision and "unseen" seek offsets).
OpMix = Callable[[random.Random, int], tuple]


class ProcessTable:
    """Which logical process each worker currently is (thread-safe)."""

    def __init__(self, concurrency: int, first_id: int = 0):
        self.concurrency = concurrency
        self._process = {w: first_id + w for w in range(concurrency)}
        self._lock = threading.Lock()

    def process_of(self, worker: int) -> int:
        with self._lock:
            return self._process[worker]

    def retire(self, worker: int) -> int:
        """Jepsen's info rule: the worker's process is done; it continues as a fresh process."""
        with self._lock:
            self._process[worker] += self.concurrency
            return self._process[worker]

    def max_process(self) -> int:
        with self._lock:
            return max(self._process.values())


class RateLimiter:
    """Hands out start times so that all workers together stay near `rate` ops/s (0: unlimited)."""

    def __init__(self, rate: float, rng: random.Random):
        self.rate = rate
        self.rng = rng
        self._next = 0.0
        self._lock = threading.Lock()

    def reserve(self, now: float) -> float:
        if self.rate <= 0:
            return now
        with self._lock:
            start = max(now, self._next)
            # Exponential gaps (a Poisson process): no lock-step bursts, same mean rate.
            self._next = start + self.rng.expovariate(self.rate)
            return start


@dataclass(frozen=True)
class Invocation:
    at: float          # seconds since the test started
    f: str
    value: Any
    extra: dict[str, Any] | None = None


class ClientSchedule:
    """The main phase: each call hands a worker its next invocation, or None when time is up."""

    def __init__(self, op_mix: OpMix, rate: float, time_limit_s: float, seed: int):
        self.op_mix = op_mix
        self.time_limit_s = time_limit_s
        self._rng = random.Random(seed)
        self._limiter = RateLimiter(rate, random.Random(seed + 1))
        self._lock = threading.Lock()

    def next(self, process: int, now: float) -> Invocation | None:
        if now >= self.time_limit_s:
            return None
        at = self._limiter.reserve(now)
        if at >= self.time_limit_s:
            return None
        with self._lock:
            f, value, *extra = self.op_mix(self._rng, process)
        return Invocation(at, f, value, extra[0] if extra else None)


def final_assignments(final_ops: Sequence[tuple], first_process: int) -> list[tuple[int, str, Any, dict | None]]:
    """The final-read phase: each final op gets a fresh process of its own. A final op is (f, value), or
    (f, value, extra) with fields its invocation carries beside the standard ones (the txn workload's
    "final": true, history/ops.py Op.extra)."""
    return [(first_process + i, op[0], op[1], op[2] if len(op) > 2 else None) for i, op in enumerate(final_ops)]
