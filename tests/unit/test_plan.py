"""The one scheduler (nemesis/plan.py): every plan, random, scenario or protocol, is run by drive(): steps due
later are waited for, a step's result goes back into the plan and its error is thrown in where it was
yielded, and a set stop ends the run before the next step."""

from __future__ import annotations

import threading

import pytest

from kafkaesque_harness.history import Op
from kafkaesque_harness.nemesis.plan import PlanStep, drive, in_turn, timed


class Clock:
    """The main phase's clock, moved only by the stop event's waits (no real sleeping)."""

    def __init__(self):
        self.t = 0.0


class FakeStop(threading.Event):
    def __init__(self, clock: Clock, stop_at: float = float("inf")):
        super().__init__()
        self.clock, self.stop_at, self.waits = clock, stop_at, []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if self.clock.t + timeout >= self.stop_at:
            self.clock.t = self.stop_at
            self.set()
            return True
        self.clock.t += timeout
        return False


def test_results_are_sent_back_and_errors_thrown_in_where_the_step_was_yielded():
    seen = []

    def plan():
        got = yield PlanStep("scenario-bind", {"role": "leader"}, lambda: {"L": "broker-1"})
        seen.append(("result", got))
        try:
            yield PlanStep("scenario-wait", {}, lambda: 1 / 0)
        except ZeroDivisionError as e:
            seen.append(("error", type(e).__name__))
            return  # a scenario ends at a failed step
        seen.append("never")

    performed = []

    def perform(step):
        performed.append(step.f)
        return step.act()

    clock = Clock()
    drive(plan(), perform, FakeStop(clock), lambda: clock.t)
    assert performed == ["scenario-bind", "scenario-wait"]
    assert seen == [("result", {"L": "broker-1"}), ("error", "ZeroDivisionError")]


def test_an_error_the_plan_does_not_handle_reaches_the_caller():
    def plan():
        yield PlanStep("scenario-kill", {}, lambda: (_ for _ in ()).throw(RuntimeError("no such node")))

    clock = Clock()
    with pytest.raises(RuntimeError, match="no such node"):
        drive(plan(), lambda step: step.act(), FakeStop(clock), lambda: clock.t)


class Recorder:
    def __init__(self, fail: set[str] = frozenset()):
        self.ops, self.fail = [], fail

    def invoke(self, cluster, op: Op) -> Op:
        self.ops.append(op.f)
        if op.f in self.fail:
            raise RuntimeError(f"{op.f} failed")
        return Op("info", op.f, op.process, {"did": op.f})


class Event:
    def __init__(self, at, f):
        self.at, self.f = at, f


def test_timed_steps_wait_for_their_time_and_a_failed_one_does_not_end_the_schedule():
    nemesis = Recorder(fail={"start-kill"})
    clock = Clock()
    stop = FakeStop(clock)
    results, times = [], []

    def perform(step):
        times.append(clock.t)
        try:
            results.append(step.act())
        except RuntimeError as e:
            results.append(str(e))
            raise

    events = [Event(5.0, "start-kill"), Event(10.0, "stop-kill"), Event(12.5, "start-pause")]
    drive(timed(events, nemesis, None), perform, stop, lambda: clock.t)
    assert nemesis.ops == ["start-kill", "stop-kill", "start-pause"]  # the failed start did not end it
    assert times == [5.0, 10.0, 12.5]
    assert results == ["start-kill failed", {"did": "stop-kill"}, {"did": "start-pause"}]


def test_a_stop_during_the_wait_ends_the_plan_before_the_next_step_and_closes_it():
    nemesis = Recorder()
    clock = Clock()
    closed = []

    def plan():
        try:
            yield from timed([Event(5.0, "start-kill"), Event(10.0, "stop-kill")], nemesis, None)
        finally:
            closed.append(True)

    drive(plan(), lambda step: step.act(), FakeStop(clock, stop_at=7.0), lambda: clock.t)
    assert nemesis.ops == ["start-kill"] and closed == [True]


def test_plans_in_turn_each_get_their_own_results():
    got = []

    def part(name):
        got.append((name, (yield PlanStep(f"scenario-{name}", None, lambda: name.upper()))))

    clock = Clock()
    drive(in_turn([part("a"), part("b")]), lambda step: step.act(), FakeStop(clock), lambda: clock.t)
    assert got == [("a", "A"), ("b", "B")]
