"""When the random faults start and stop (`--nemesis kill,pause --nemesis-schedule mix|sequential`).

A pure schedule, testable without a cluster: the same seed, faults, interval and time limit give
the same list of start and stop events every time. nemesis/plan.py's `timed` turns the events
into a plan that `drive` runs beside any scenario.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


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
