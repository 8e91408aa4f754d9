"""Pure schedules of operations (Jepsen's generators, in Python): testable without a cluster.

Asking a schedule for the next op never performs it: the workers and the nemesis thread
ask, then do. Every piece is deterministic given its seed and the times it is asked at,
so the unit tests drive them with a simulated clock.

- ProcessTable: logical processes with Jepsen's info rule (a process whose op ended
  "info" never issues another op; its worker continues under process id + concurrency).
- RateLimiter: an overall ops/s budget shared by all workers, with seeded jitter.
- ClientSchedule: the main phase (op mix, rate, time limit) for every worker.
- NemesisSchedule: when faults start and stop: a random overlapping mix, or one at a time.
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


@dataclass(frozen=True)
class NemesisEvent:
    at: float
    f: str


NEMESIS_SCHEDULES = ("mix", "sequential")


class NemesisSchedule:
    """When each fault starts and stops, for the faults of `--nemesis a,b,c`.

    - mix (the default): every interval (jittered by +-50%) one of the faults is picked at random
      and toggled: started if it is off, stopped if it is on. Faults of different kinds therefore
      overlap (a kill while a partition holds, a power cut while another broker is down), as in
      Jepsen's combined nemesis; the historic flaws need such pile-ups (004: a replica left behind
      and then the ISR killed), which one fault at a time never makes. Until every fault has
      started once, a toggle starts one that has not (or, with two already on, stops one), so a
      plan's every fault runs early: a run must show each planned fault took effect
      (checkers/evidence.py), and luck must not decide whether it gets the chance.
    - sequential: start a fault, wait `interval`, stop it, wait `interval`, next fault in turn.

    Every fault started is stopped before the time limit, and the runner's final heal (nemesis
    teardown) covers everything regardless.
    """

    def __init__(self, pairs: Sequence[tuple[str, str]], interval_s: float, time_limit_s: float, rng_seed: int = 0,
                 mode: str = "mix"):
        if mode not in NEMESIS_SCHEDULES:
            raise ValueError(f"unknown nemesis schedule {mode!r}; valid: {', '.join(NEMESIS_SCHEDULES)}")
        self.pairs = list(pairs)
        self.interval_s = interval_s
        self.time_limit_s = time_limit_s
        self.mode = mode
        self.seed = rng_seed

    def events(self) -> list[NemesisEvent]:
        """The whole schedule; the same list on every call (a fresh rng from the seed each time)."""
        if not self.pairs or self.interval_s <= 0:
            return []
        return self._mix(random.Random(self.seed)) if self.mode == "mix" else self._sequential()

    def _sequential(self) -> list[NemesisEvent]:
        out: list[NemesisEvent] = []
        t = self.interval_s
        i = 0
        while t + self.interval_s <= self.time_limit_s:
            start, stop = self.pairs[i % len(self.pairs)]
            out.append(NemesisEvent(t, start))
            out.append(NemesisEvent(t + self.interval_s, stop))
            t += 2 * self.interval_s
            i += 1
        return out

    def coverage_problem(self) -> str | None:
        """Why some planned fault would never start in this schedule (one sentence), or None."""
        started = {e.f for e in self.events()}
        missing = [start[len("start-"):] for start, _ in self.pairs if start not in started]
        if not missing:
            return None
        return (f"the {self.mode} schedule has room for {sum(1 for e in self.events() if e.f.startswith('start-'))} "
                f"fault start(s) in {self.time_limit_s:g} s at a {self.interval_s:g} s interval, so "
                f"{', '.join(missing)} would never run")

    def _mix(self, rng: random.Random) -> list[NemesisEvent]:
        out: list[NemesisEvent] = []
        on: set[int] = set()
        never = set(range(len(self.pairs)))  # not started yet
        half = self.interval_s / 2
        t = self.interval_s
        # The last toggle leaves half an interval for the final stops, so nothing outlives the limit.
        while t + half <= self.time_limit_s:
            if never:
                pool = sorted(on) if len(on) >= 2 else sorted(never)
                i = pool[rng.randrange(len(pool))]
                never.discard(i)
            else:
                i = rng.randrange(len(self.pairs))
            start, stop = self.pairs[i]
            out.append(NemesisEvent(t, stop if i in on else start))
            on ^= {i}
            last = t
            t += self.interval_s * rng.uniform(0.5, 1.5)
        out.extend(NemesisEvent(last + half, self.pairs[i][1]) for i in sorted(on))
        return out


def final_assignments(final_ops: Sequence[tuple], first_process: int) -> list[tuple[int, str, Any, dict | None]]:
    """The final-read phase: each final op gets a fresh process of its own. A final op is (f, value), or
    (f, value, extra) with fields its invocation carries beside the standard ones (the txn workload's
    "final": true, history/ops.py Op.extra)."""
    return [(first_process + i, op[0], op[1], op[2] if len(op) > 2 else None) for i, op in enumerate(final_ops)]
