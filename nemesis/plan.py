"""The one scheduler: every nemesis's faults are plans of steps, and `drive` runs them all.

A plan is a generator of PlanSteps, Jepsen's generator in Python: each step names the op the
history records (`f`, the invoke's `value`), the act that performs it, when it is due and how long
it holds. Due: at a time into the main phase (`at`), else `after` seconds after the previous step
of its plan ended. Holds: after its act a step may hold until a condition holds (`until`, polled,
at most `timeout` seconds: a scenario's wait). A step with no `f` records nothing: a pause in its
plan (a scenario's sleep, Jepsen's gen/sleep), after which the plan decides its next step against
the cluster as it is then. The plans:

- random faults: `timed(events, nemesis, cluster)`, the start/stop events of
  nemesis/schedule.py's NemesisSchedule, each performed by the nemesis's `invoke`;
- a scenario (nemesis/scenario.py): its steps in order, each decided when the one before it
  has ended (bind a role to the node that holds it now, wait for the ISR to shrink, ...);
- the protocol nemesis (nemesis/protocol.py): role-aware moves drawn one after another.

`drive` runs several plans at once (Jepsen's gen/any): the next step is whichever is due first, so
a scenario runs with random faults underneath (a fault may land in the scenario's pauses). The
nemesis is one process of the history, as in Jepsen: its ops never overlap, so a step that holds
(a wait) holds the nemesis, and a step of another plan due meanwhile begins when it has ended.
`drive` is the only place in a run's nemesis that waits or reads the clock:
it waits for the next due step, performs it (its `recorder` writes the invoke and, when the step
has ended, the completion), and hands the outcome back to the plan: the result is sent in, the
error thrown in at the `yield` (a scenario ends there; the protocol nemesis tries another move;
the random plan goes on to its next event). So what is recorded, how a step's failure is handled
and when the nemesis stops are the same for every plan.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kafkaesque_harness.history import INVOKE, NEMESIS, Op

POLL_S = 0.2  # how often a waiting step's condition is asked


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class PlanStep:
    f: str                          # the op's name in the history ("start-kill", "scenario-wait"); "": a pause
    value: Any                      # the invoke's value (None for the random faults' start and stop)
    act: Callable[[], Any] = _nothing  # performs the step; returns the completion's value, or raises
    at: float | None = None         # due this many seconds into the main phase ...
    after: float = 0.0              # ... else this long after the previous step of its plan ended
    # A condition the step holds for after its act: () -> (reached, value). Reached: the completion's value;
    # not reached: what was seen, for the sentence if it never is. Raising Stalled ends the wait at once.
    until: Callable[[], tuple[bool, Any]] | None = None
    timeout: float = 30.0           # the longest `until` is waited for
    what: str = ""                  # what `until` waits for, in the sentence when it is not reached


def pause(seconds: float) -> PlanStep:
    """A step that records nothing: the plan's next step is decided `seconds` from now."""
    return PlanStep("", None, after=seconds)


class Stalled(RuntimeError):
    """A step's condition was not reached in time (or cannot be seen at all): the plan decides what it means."""


Plan = Generator[PlanStep, Any, None]


class Event(Protocol):
    at: float
    f: str


class Invokable(Protocol):
    def invoke(self, cluster, op: Op) -> Op: ...


class Recorder(Protocol):
    """What writes a step to the history: its invoke when it begins, its completion when it has ended."""

    def began(self, step: PlanStep) -> None: ...

    def ended(self, step: PlanStep, value: Any, error: BaseException | None) -> None: ...


def timed(events: Iterable[Event], nemesis: Invokable, cluster) -> Plan:
    """The random faults' plan: each start or stop event at its time, performed by `nemesis.invoke`.
    A step that fails is recorded with its error and the plan goes on: the next stop or the run's
    final heal undoes whatever it left."""
    for ev in events:
        try:
            yield PlanStep(ev.f, None, lambda f=ev.f: nemesis.invoke(cluster, Op(INVOKE, f, NEMESIS, None)).value,
                           at=ev.at)
        except Exception:  # noqa: BLE001 - recorded already; the schedule goes on
            continue


def in_turn(plans: Iterable[Plan]) -> Plan:
    """Several plans one after another; results and errors reach the plan whose step it was."""
    for plan in plans:
        yield from plan


@dataclass
class _Holding:
    step: PlanStep
    value: Any                      # the last thing `until` saw
    ends: float                     # when the wait gives up
    asks: float                     # when `until` is asked next


class _Lane:
    """One plan in `drive`: its next step and when it is due, or the step it is holding."""

    def __init__(self, plan: Plan, started: float):
        self.plan = plan
        self.last_end = started
        self.step: PlanStep | None = None
        self.holding: _Holding | None = None
        self.done = False
        self._next(lambda: next(plan))

    def _next(self, resume: Callable[[], PlanStep]) -> None:
        try:
            self.step = resume()
        except StopIteration:
            self.step, self.done = None, True

    def due(self) -> float:
        if self.step is None:
            return math.inf
        return self.step.at if self.step.at is not None else self.last_end + self.step.after

    def send(self, value: Any, t: float) -> None:
        self.last_end = t
        self._next(lambda: self.plan.send(value))

    def throw(self, error: BaseException, t: float) -> None:
        self.last_end = t
        self._next(lambda: self.plan.throw(error))


def drive(plans: Sequence[Plan], recorder: Recorder, stop: threading.Event, now: Callable[[], float],
          end: float = math.inf) -> None:
    """Run `plans` together until each has ended, `stop` is set, or `end` (seconds into the main phase,
    the time limit) has come; `now()` is the main phase's clock in seconds. No step begins at or after `end`
    (one due at or after it, or one due before it but still waiting when it came); a step still holding at `end`
    ends there, as not reached."""
    start = now()
    lanes = [_Lane(p, start) for p in plans]
    try:
        while not stop.is_set():
            t = now()
            holding = next((lane for lane in lanes if lane.holding is not None), None)
            if holding is not None:
                _hold(holding, recorder, t, end)
                if holding.holding is not None:  # still holding the nemesis: nothing else begins
                    h = holding.holding
                    stop.wait(max(0.0, min(h.ends, h.asks, end) - t))
                continue
            ready = [lane for lane in lanes if not lane.done]
            if not ready:
                return
            first = min(ready, key=_Lane.due)
            if first.due() >= end or t >= end:  # the run is over: nothing begins after the limit, not even a step
                # due before it that an earlier act (a slow kill) left overdue
                first.plan.close()
                first.done, first.step = True, None
                continue
            if first.due() <= t:
                _begin(first, recorder, now)
                continue
            stop.wait(min(first.due(), end) - t)
    finally:
        for lane in lanes:
            if lane.holding is not None:  # stopped mid-wait: its completion still goes into the history
                _end(lane, recorder, None, Stalled(_not_reached(lane.holding, "the run ended")), now(), resume=False)
            lane.plan.close()


def _begin(lane: _Lane, recorder: Recorder, now: Callable[[], float]) -> None:
    step = lane.step
    assert step is not None
    if not step.f:  # a pause: nothing to record
        lane.send(None, now())
        return
    recorder.began(step)
    try:
        value = step.act()
    except Exception as e:  # noqa: BLE001 - the plan decides what a failed step means
        _end(lane, recorder, None, e, now())
        return
    t = now()  # an act takes time (a kill waits to see the process gone): what follows counts from its end
    if step.until is not None:
        lane.holding = _Holding(step, value, t + step.timeout, t)
    else:
        _end(lane, recorder, value, None, t)


def _hold(lane: _Lane, recorder: Recorder, t: float, end: float) -> None:
    """A waiting step at time `t`: ended when its condition holds or its time is up, or still holding."""
    h = lane.holding
    assert h is not None and h.step.until is not None
    if t >= h.asks:
        h.asks = t + POLL_S
        try:
            reached, seen = h.step.until()
        except Stalled as e:  # the condition cannot be seen on this cluster at all: waiting will not help
            _end(lane, recorder, None, e, t)
            return
        except Exception as e:  # noqa: BLE001 - the controller may be unreachable for a moment
            reached, seen = False, {"error": f"{type(e).__name__}: {e}"[:200]}
        if reached:
            _end(lane, recorder, seen, None, t)
            return
        h.value = seen
    if t >= h.ends or t >= end:
        within = f"{h.step.timeout:g} s" if t >= h.ends else "the time the run had left"
        _end(lane, recorder, None, Stalled(_not_reached(h, within)), t)


def _not_reached(h: _Holding, within: str) -> str:
    return f"{h.step.what or h.step.f} not reached in {within} (last seen: {h.value})"


def _end(lane: _Lane, recorder: Recorder, value: Any, error: BaseException | None, t: float,
         resume: bool = True) -> None:
    step = lane.step
    assert step is not None
    lane.holding = None
    recorder.ended(step, value, error)
    if not resume:
        return
    if error is None:
        lane.send(value, t)
    else:
        lane.throw(error, t)
