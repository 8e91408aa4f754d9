"""The one scheduler: every nemesis's faults are a plan of steps, and `drive` runs them all.

A plan is a generator of PlanSteps, Jepsen's generator in Python: each step names the op the
history records (`f`, the invoke's `value`), the act that performs it, and when it is due
(`at`, seconds into the main phase; None: as soon as the step before it has ended). The plans:

- random faults: `timed(events, nemesis, cluster)`, the start/stop events of
  harness/generator.py's NemesisSchedule, each performed by the nemesis's `invoke`;
- a scenario (nemesis/scenario.py): its steps in order, each decided when the one before it
  has ended (bind a role to the node that holds it now, wait for the ISR to shrink, ...);
- the protocol nemesis (nemesis/protocol.py): role-aware moves drawn one after another.

`drive` is the only loop that waits for a step, performs it (through the runner's `perform`,
which records its invoke and completion) and hands the outcome back to the plan: the step's
result is sent in, its error thrown in at the `yield` (a scenario ends there; the protocol
nemesis tries another move; the random plan goes on to its next event). So what is recorded,
how a step's failure is handled and when the nemesis stops are the same for every plan.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kafkaesque_harness.history import INVOKE, NEMESIS, Op


@dataclass(frozen=True)
class PlanStep:
    f: str                          # the op's name in the history ("start-kill", "scenario-wait")
    value: Any                      # the invoke's value (None for the random faults' start and stop)
    act: Callable[[], Any]          # performs the step; returns the completion's value, or raises
    at: float | None = None         # seconds into the main phase when it is due; None: at once


Plan = Generator[PlanStep, Any, None]


class Event(Protocol):
    at: float
    f: str


class Invokable(Protocol):
    def invoke(self, cluster, op: Op) -> Op: ...


def timed(events: Iterable[Event], nemesis: Invokable, cluster) -> Plan:
    """The random faults' plan: each start or stop event at its time, performed by `nemesis.invoke`.
    A step that fails is recorded with its error (by `drive`'s caller) and the plan goes on: the next
    stop or the run's final heal undoes whatever it left."""
    for ev in events:
        try:
            yield PlanStep(ev.f, None, lambda f=ev.f: nemesis.invoke(cluster, Op(INVOKE, f, NEMESIS, None)).value,
                           at=ev.at)
        except Exception:  # noqa: BLE001 - recorded already; the schedule goes on
            continue


def in_turn(plans: Iterable[Plan]) -> Plan:
    """Several plans one after another (a composite of self-driven parts); results and errors reach
    the plan whose step it was."""
    for plan in plans:
        yield from plan


def drive(plan: Plan, perform: Callable[[PlanStep], Any], stop: threading.Event, now: Callable[[], float]
          ) -> None:
    """Run `plan` to its end or until `stop` is set. A step due later is waited for (`now()` is the
    main phase's clock in seconds); `perform(step)` records and runs it and returns its result, or
    records its error and raises it; either goes back into the plan."""
    try:
        step = next(plan)
        while True:
            if step.at is not None:
                delay = step.at - now()
                if delay > 0 and stop.wait(delay):
                    return
            if stop.is_set():
                return
            try:
                result = perform(step)
            except Exception as e:  # noqa: BLE001 - the plan decides what a failed step means
                step = plan.throw(e)
            else:
                step = plan.send(result)
    except StopIteration:
        return
    finally:
        plan.close()
